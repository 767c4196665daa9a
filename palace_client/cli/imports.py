"""``palace import claude-code|codex|gemini|copilot``: coding agents' sessions into a palace
(registered in the ``palace import`` group of ``transfer``; one command per agent of
``importers.transcripts.AGENTS``, all running :func:`import_agent`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from palace_client.cli.common import (
    EXIT_OK,
    EXIT_SKIPPED,
    JsonOpt,
    PalaceOpt,
    client,
    need_palace,
    op_option,
)


def import_agent(agent_name: str, locations: list[Path] | None, palace: str | None,
                 dry_run: bool, as_json: bool) -> None:
    """Import the sessions of agent ``agent_name`` found at ``locations`` (default: where the
    agent keeps them) into the palace; exits 10 when lines or transcripts were skipped."""
    from palace_client.importers.progress import Progress
    from palace_client.importers.runner import Tally, report
    from palace_client.importers.transcripts import (
        AGENTS,
        REQUEST_TIMEOUT_MS,
        default_location,
        find_transcripts,
        import_transcripts,
    )

    agent = AGENTS[agent_name]
    name = need_palace(palace, as_json)
    sources = locations or [default_location(agent)]
    source = " ".join(str(s) for s in sources)
    with client(as_json) as c:
        paths = sorted({p for s in sources for p in find_transcripts(s, agent)})
        tally = Tally(agent.name, "transcript", source, name, dry_run)
        with Progress(not as_json and sys.stderr.isatty(), f"{agent.name} {source}",
                      "transcript", len(paths)) as bar:
            import_transcripts(
                lambda op, p, args: c.call(op, p, args, timeout_ms=REQUEST_TIMEOUT_MS),
                name, paths, tally, agent=agent, dry_run=dry_run, progress=bar)
    report(tally, as_json)
    raise typer.Exit(EXIT_SKIPPED if tally.skipped else EXIT_OK)


def _command(agent_name: str, label: str, where: str, what: str) -> Callable[..., None]:
    # A default, not an annotation: annotations are strings here, read in the module's scope.
    locations: list[Path] | None = typer.Argument(None, metavar="[PATH]...",
                                                  show_default=False, help=where)

    def command(
        location: list[Path] | None = locations,
        palace: str | None = PalaceOpt,
        dry_run: bool = op_option("capture.transcript", "dry_run", "--dry-run",
                                  help="Count what would be imported; store nothing."),
        as_json: bool = JsonOpt,
    ) -> None:
        import_agent(agent_name, location, palace, dry_run, as_json)

    command.__doc__ = (
        f"Import {label} session {what}: one drawer per exchange, one wing per project.\n\n"
        "The daemon reads them, as the capture hooks have it do (secrets redacted, tool "
        "output left out), so sessions the hooks captured into the palace are not stored "
        "twice. Resumable and idempotent: a second run stores nothing. Exits 10 when "
        "malformed lines (or unreadable transcripts) were skipped.")
    command.__name__ = agent_name.replace("-", "_")
    return command


claude_code = _command(
    "claude-code", "Claude Code", "Transcripts (.jsonl), project directories or projects "
    "directories (default: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects).",
    "transcripts")
codex = _command(
    "codex", "Codex CLI", "Rollout files (rollout-*.jsonl) or directories holding them at any "
    "depth (default: $CODEX_HOME/sessions, else ~/.codex/sessions).", "rollouts")
gemini = _command(
    "gemini", "Gemini CLI", "Chat files (session-*.jsonl, and older releases' session-*.json), "
    "chats directories, project directories or the tmp directory (default: "
    "~/.gemini/tmp/*/chats; $GEMINI_CLI_HOME/.gemini/tmp when that is set).", "chats")
copilot = _command(
    "copilot", "GitHub Copilot CLI", "Session logs (events.jsonl), session directories or the "
    "session-state directory (default: $COPILOT_HOME/session-state, else "
    "~/.copilot/session-state).", "logs")
