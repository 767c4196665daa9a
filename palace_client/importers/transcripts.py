"""``palace import claude-code|codex|gemini|copilot [PATH...]``: agents' sessions into a palace.

One loop for every agent: :data:`AGENTS` says, per agent, the transcript format the daemon
reads (``capture.transcript``'s ``format``), where the sessions are by default and which
files under a directory are sessions:

* ``claude-code``: ``<projects>/*/*.jsonl`` under ``$CLAUDE_CONFIG_DIR/projects``, else
  ``~/.claude/projects`` (PATH: one transcript, a project directory or a projects directory);
* ``codex``: ``rollout-*.jsonl`` at any depth under ``$CODEX_HOME/sessions``, else
  ``~/.codex/sessions`` (``YYYY/MM/DD/`` folders);
* ``gemini``: ``session-*.jsonl`` of ``~/.gemini/tmp/*/chats`` (``$GEMINI_CLI_HOME/.gemini``
  when that is set; PATH: a chats directory, a project directory or the ``tmp`` directory),
  and the ``session-*.json`` documents of older releases but those Gemini CLI converted to a
  ``.jsonl`` beside them (on resuming the session);
* ``copilot``: ``*/events.jsonl`` under ``$COPILOT_HOME/session-state``, else
  ``~/.copilot/session-state`` (PATH: an ``events.jsonl``, a session directory or the
  ``session-state`` directory).

Each transcript goes to the daemon with ``capture.transcript`` and ``wait``: the op the hooks
use, so the drawers are the same (one per exchange, secrets redacted, tool output left out)
and a session the hooks already captured into the palace is not stored twice (the session id
sent is the one the agent's hook names: the file name's for Claude Code and Codex, the chat's
metadata line's for Gemini CLI, the session directory's for Copilot CLI). Each transcript is
filed under a wing named after its project (the last component of the session's working
directory, else the project directory's name). Resumable and idempotent: a second run stores
nothing, an interrupted run goes on where it stopped. Unlike the other formats (which parse on
this side and feed ``runner.run``), the daemon reads the transcripts, so this has its own
loop; it counts into the runner's ``Tally`` and reports with the runner's ``report``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palace_client.importers.progress import Progress
from palace_client.importers.runner import Problem, Tally
from palaced.wire.errors import PalaceError, SourceUnreadable

OP = "capture.transcript"
REQUEST_TIMEOUT_MS = 3_600_000  # one transcript may be long; the daemon caps it (1 hour)
MAX_HEAD = 1 << 20  # bytes of a Gemini chat's first line read for its session id
_SESSION_ID = re.compile(rb'"sessionId"\s*:\s*"([^"\\]+)"')
_UUID_TAIL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z",
                        re.I)

Environ = Mapping[str, str]


def _home(base: str | None, default: str) -> Path:
    """``base`` (an agent's home variable) when set, else ``~/<default>``."""
    return Path(base).expanduser() if base else Path.home() / default


def _slug(name: str) -> str:
    """``-home-me-src-shop-api`` -> ``home-me-src-shop-api`` (a wing), or ""."""
    name = "".join(c if c.isalnum() else "-" for c in name.lower())
    return "-".join(p for p in name.split("-") if p)[:64].strip("-")


def _stem_session(path: Path) -> str:
    return path.stem


def _codex_session(path: Path) -> str:
    """``rollout-2025-09-14T08-00-00-<uuid>.jsonl`` -> the uuid (Codex's session id)."""
    m = _UUID_TAIL.search(path.stem)
    return m.group(0) if m else path.stem


def _gemini_session(path: Path) -> str:
    """The ``sessionId`` a Gemini CLI chat opens with (its metadata line, or the top of an
    older chat document), else the file's stem."""
    try:
        with path.open("rb") as fh:
            head = fh.read(MAX_HEAD)
    except OSError:
        return path.stem
    m = _SESSION_ID.search(head)
    sid = m.group(1).decode("utf-8", "replace") if m else ""
    return sid if 0 < len(sid) <= 200 else path.stem


@dataclass(frozen=True)
class Agent:
    """How to import one agent's sessions (see the module docstring)."""

    name: str  # the command: ``palace import <name>``
    label: str  # the agent, for messages
    format: str  # capture.transcript's format
    default: Callable[[Environ], Path]  # where its sessions are
    patterns: tuple[str, ...]  # globs of transcripts under a directory given or found
    recursive: bool  # the patterns apply at any depth (Codex's YYYY/MM/DD folders)
    session_id: Callable[[Path], str]
    wing_dir: int  # which parent directory names the project (1: the file's own; 0: none)


AGENTS: dict[str, Agent] = {a.name: a for a in (
    Agent("claude-code", "Claude Code", "claude",
          lambda env: _home(env.get("CLAUDE_CONFIG_DIR"), ".claude") / "projects",
          ("*.jsonl", "*/*.jsonl"), False, _stem_session, 1),
    Agent("codex", "Codex CLI", "codex",
          lambda env: _home(env.get("CODEX_HOME"), ".codex") / "sessions",
          ("rollout-*.jsonl",), True, _codex_session, 1),
    Agent("gemini", "Gemini CLI", "gemini",
          lambda env: _home(env.get("GEMINI_CLI_HOME"), "") / ".gemini" / "tmp",
          tuple(f"{where}session-*.{ext}" for where in ("", "chats/", "*/chats/")
                for ext in ("jsonl", "json")), False, _gemini_session, 2),
    Agent("copilot", "Copilot CLI", "copilot",
          lambda env: _home(env.get("COPILOT_HOME"), ".copilot") / "session-state",
          ("events.jsonl", "*/events.jsonl"), False, lambda path: path.parent.name, 0),
)}


def default_location(agent: Agent, environ: Environ | None = None) -> Path:
    """Where ``agent`` keeps its sessions (its environment variable, else its default)."""
    return agent.default(os.environ if environ is None else environ)


def find_transcripts(location: Path, agent: Agent) -> list[Path]:
    """The transcripts of ``agent`` at ``location``: the file itself,
    or the files its patterns match under a directory; sorted, absolute.

    Raises:
        SourceUnreadable: ``location`` does not exist or is neither a file nor a directory.
    """
    location = location.expanduser().absolute()
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise SourceUnreadable(f"no {agent.label} transcripts at {location}: not a file or "
                               "directory", details={"path": str(location)})
    globber = location.rglob if agent.recursive else location.glob
    found = {p for pattern in agent.patterns for p in globber(pattern) if p.is_file()}
    # A document converted to JSON lines beside it (Gemini CLI, on resuming it) is that copy.
    return sorted(p for p in found if not (p.suffix == ".json" and p.with_suffix(".jsonl")
                                           in found))


def fallback_wing(path: Path, agent: Agent) -> str:
    """A wing from the project directory's name (``-home-me-src-shop-api`` ->
    ``home-me-src-shop-api``), for sessions whose records name no working directory."""
    if agent.wing_dir == 0:
        return "sessions"  # the session's directory is named after the session, not a project
    parents = path.parents
    folder = parents[agent.wing_dir - 1] if len(parents) >= agent.wing_dir else path.parent
    return _slug(folder.name) or "sessions"


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
                       agent: Agent, dry_run: bool = False,
                       progress: Progress | None = None) -> Tally:
    """Capture every transcript of ``paths`` (``agent``'s) into
    ``palace`` through ``call(op, palace, args)``, counting into ``tally``; a transcript that
    cannot be read is a problem of its own (``line`` None) and the others go on.

    Raises:
        PalaceError: an error that is not about one transcript (the daemon unreachable, the
            palace name invalid...): the import stops there, what it stored stays stored.
    """
    started = time.monotonic()
    for path in paths:
        args: dict[str, Any] = {"path": str(path), "session_id": agent.session_id(path),
                                "format": agent.format, "wait": True, "project_wing": True,
                                "wing": fallback_wing(path, agent), "create": not dry_run,
                                "dry_run": dry_run}
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
