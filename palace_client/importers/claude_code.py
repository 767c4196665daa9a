"""``palace import claude-code [PATH]``: every Claude Code session transcript into a palace.

Finds the transcripts (``<projects>/*/*.jsonl`` under ``$CLAUDE_CONFIG_DIR/projects``, else
``~/.claude/projects``; or PATH: one transcript, a project directory, or a projects
directory) and has the daemon capture each with ``capture.transcript`` and ``wait``: the op
the hooks use, so the drawers are the same (one per exchange, secrets redacted, tool output
left out) and a session the hooks already captured into the palace is not stored twice.
Each transcript is filed under a wing named after its project (the last component of the
session's working directory, else the project directory's name). Resumable and idempotent:
a second run stores nothing, an interrupted run goes on where it stopped. Unlike the other
formats (which parse on this side and feed ``runner.run``), the daemon reads the transcripts,
so this has its own loop; it counts into the runner's ``Tally`` and reports with the
runner's ``report``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from palace_client.importers.progress import Progress
from palace_client.importers.runner import Problem, Tally
from palaced.wire.errors import PalaceError, SourceUnreadable

OP = "capture.transcript"
REQUEST_TIMEOUT_MS = 3_600_000  # one transcript may be long; the daemon caps it (1 hour)


def projects_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where Claude Code keeps its transcripts: ``$CLAUDE_CONFIG_DIR/projects`` or
    ``~/.claude/projects``."""
    env = os.environ if environ is None else environ
    base = env.get("CLAUDE_CONFIG_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".claude") / "projects"


def find_transcripts(location: Path) -> list[Path]:
    """The transcripts at ``location``: the file itself, the ``*.jsonl`` of a project directory,
    or those of every project of a projects directory; sorted, absolute.

    Raises:
        SourceUnreadable: ``location`` does not exist or is neither a file nor a directory.
    """
    location = location.expanduser().absolute()
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise SourceUnreadable(f"no Claude Code transcripts at {location}: not a file or "
                               "directory", details={"path": str(location)})
    found = [p for p in location.glob("*.jsonl") if p.is_file()]
    found += [p for p in location.glob("*/*.jsonl") if p.is_file()]
    return sorted(set(found))


def fallback_wing(path: Path) -> str:
    """A wing from the project directory's name (``-home-me-src-shop-api`` ->
    ``home-me-src-shop-api``), for sessions whose records name no working directory."""
    name = "".join(c if c.isalnum() else "-" for c in path.parent.name.lower())
    name = "-".join(p for p in name.split("-") if p)[:64].strip("-")
    return name or "sessions"


def _tally_one(tally: Tally, path: Path, result: Mapping[str, Any]) -> None:
    """Count one transcript's ``capture.transcript`` answer into ``tally``.

    ``records`` counts the exchanges written (new or replacing one stored while still open),
    ``stored`` the new drawers among them, ``removed`` the open ones replaced; each malformed
    line is a problem (the answer lists the first 100 line numbers, and counts them all).
    """
    tally.read += 1
    tally.records += int(result.get("exchanges") or 0)
    tally.stored += int(result.get("drawers") or 0)
    tally.removed += int(result.get("replaced") or 0)
    tally.redacted += int(result.get("redactions") or 0)
    lines = [int(n) for n in result.get("skipped_lines") or []]
    for line in lines:
        tally.problem(Problem(str(path), line, "malformed transcript line: skipped"))
    tally.skipped += max(int(result.get("skipped") or 0) - len(lines), 0)


Call = Callable[[str, str, dict[str, Any]], dict[str, Any]]


def import_transcripts(call: Call, palace: str, paths: list[Path], tally: Tally, *,
                       dry_run: bool = False, progress: Progress | None = None) -> Tally:
    """Capture every transcript of ``paths`` into ``palace`` through ``call(op, palace,
    args)``, counting into ``tally``; a transcript that cannot be read is a problem of its own
    (``line`` None) and the others go on.

    Raises:
        PalaceError: an error that is not about one transcript (the daemon unreachable, the
            palace name invalid...): the import stops there, what it stored stays stored.
    """
    started = time.monotonic()
    for path in paths:
        args: dict[str, Any] = {"path": str(path), "session_id": path.stem, "wait": True,
                                "project_wing": True, "wing": fallback_wing(path),
                                "create": not dry_run, "dry_run": dry_run}
        try:
            _tally_one(tally, path, call(OP, palace, args))
        except PalaceError as exc:
            if exc.code // 100 in (1, 2, 4, 6) and not isinstance(exc, SourceUnreadable):
                raise  # about the request, the palace or the daemon: every file would fail
            tally.problem(Problem(str(path), None, f"{exc.message} [{exc.name}]"))
        if progress is not None:
            progress.advance(stored=tally.stored, exchanges=tally.records,
                             skipped=tally.skipped)
    tally.elapsed_s = time.monotonic() - started
    return tally
