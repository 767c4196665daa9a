"""``palace import claude-code [PATH]``: every Claude Code session transcript into a palace.

Finds the transcripts (``<projects>/*/*.jsonl`` under ``$CLAUDE_CONFIG_DIR/projects``, else
``~/.claude/projects``; or PATH: one transcript, a project directory, or a projects
directory) and has the daemon capture each with ``capture.transcript`` and ``wait``: the op
the hooks use, so the drawers are the same (one per exchange, secrets redacted, tool output
left out) and a session the hooks already captured into the palace is not stored twice.
Each transcript is filed under a wing named after its project (the last component of the
session's working directory, else the project directory's name). Resumable and idempotent:
a second run stores nothing, an interrupted run goes on where it stopped.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaced.errors import PalaceError, SourceUnreadable

OP = "capture.transcript"
REQUEST_TIMEOUT_MS = 3_600_000  # one transcript may be long; the daemon caps it (1 hour)
LISTED_FILES = 100  # files whose skipped lines the JSON report lists


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


@dataclass
class Totals:
    """What an import did, summed over its transcripts."""

    files: int = 0
    exchanges: int = 0
    drawers: int = 0
    replaced: int = 0
    redactions: int = 0
    skipped: int = 0
    pending: int = 0
    tags: Counter[str] = field(default_factory=Counter)
    skipped_lines: dict[str, list[int]] = field(default_factory=dict)
    failed: list[dict[str, str]] = field(default_factory=list)
    wings: Counter[str] = field(default_factory=Counter)

    def add(self, path: Path, result: Mapping[str, Any]) -> None:
        self.files += 1
        for key in ("exchanges", "drawers", "replaced", "redactions", "skipped"):
            setattr(self, key, getattr(self, key) + int(result.get(key) or 0))
        self.pending += bool(result.get("pending"))
        self.tags.update(result.get("tags") or {})
        if result.get("wing") and result.get("exchanges"):
            self.wings[str(result["wing"])] += int(result["exchanges"])
        if result.get("skipped") and len(self.skipped_lines) < LISTED_FILES:
            self.skipped_lines[str(path)] = list(result.get("skipped_lines") or [])

    def to_json(self, palace: str, dry_run: bool) -> dict[str, Any]:
        return {"palace": palace, "dry_run": dry_run, "files": self.files,
                "exchanges": self.exchanges, "drawers": self.drawers,
                "replaced": self.replaced, "redactions": self.redactions,
                "skipped": self.skipped, "skipped_lines": self.skipped_lines,
                "pending": self.pending, "tags": dict(self.tags), "wings": dict(self.wings),
                "failed": self.failed}

    def summary(self, palace: str, dry_run: bool) -> str:
        verb = "would import" if dry_run else "imported"
        line = (f"{verb} {self.exchanges} exchange(s) from {self.files} transcript(s) into "
                f"palace {palace} ({self.drawers} new drawer(s), {self.replaced} replaced, "
                f"{self.redactions} secret(s) redacted")
        if self.skipped:
            line += (f", {self.skipped} malformed line(s) skipped in "
                     f"{len(self.skipped_lines)} file(s)")
        if self.failed:
            line += f", {len(self.failed)} transcript(s) failed"
        return line + ")"


Call = Callable[[str, str, dict[str, Any]], dict[str, Any]]


def import_transcripts(call: Call, palace: str, paths: list[Path], *, dry_run: bool = False,
                       progress: Callable[[Totals, int], None] | None = None) -> Totals:
    """Capture every transcript of ``paths`` into ``palace`` through ``call(op, palace,
    args)``; a transcript that fails (unreadable, say) is listed in ``failed``, the others go
    on.

    Raises:
        PalaceError: an error that is not about one transcript (the daemon unreachable, the
            palace name invalid...): the import stops there, what it stored stays stored.
    """
    totals = Totals()
    for done, path in enumerate(paths):
        args: dict[str, Any] = {"path": str(path), "session_id": path.stem, "wait": True,
                                "project_wing": True, "wing": fallback_wing(path),
                                "create": not dry_run, "dry_run": dry_run}
        try:
            totals.add(path, call(OP, palace, args))
        except SourceUnreadable as exc:
            totals.failed.append({"path": str(path), "error": exc.name, "message": exc.message})
        except PalaceError as exc:
            if exc.code // 100 in (1, 2, 4, 6):
                raise  # about the request, the palace or the daemon: every file would fail
            totals.failed.append({"path": str(path), "error": exc.name, "message": exc.message})
        if progress is not None:
            progress(totals, done + 1)
    return totals
