"""``palace import claude-code``: Claude Code sessions into a palace (registered in the
``palace import`` group of ``transfer``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

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


def claude_code(
    location: Annotated[Path | None, typer.Argument(
        metavar="[PATH]", show_default=False,
        help="A transcript (.jsonl), a project directory or a projects directory "
             "(default: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects).")] = None,
    palace: str | None = PalaceOpt,
    dry_run: bool = op_option("capture.transcript", "dry_run", "--dry-run",
                              help="Count what would be imported; store nothing."),
    as_json: bool = JsonOpt,
) -> None:
    """Import Claude Code session transcripts: one drawer per exchange, one wing per project.

    The daemon reads the transcripts, as the capture hooks have it do (secrets redacted, tool
    output left out), so sessions the hooks captured into the palace are not stored twice.
    Resumable and idempotent: a second run stores nothing. Exits 10 when malformed lines (or
    unreadable transcripts) were skipped.
    """
    from palace_client.importers.claude_code import (
        REQUEST_TIMEOUT_MS,
        find_transcripts,
        import_transcripts,
        projects_dir,
    )
    from palace_client.importers.progress import Progress
    from palace_client.importers.runner import Tally, report

    name = need_palace(palace, as_json)
    source = location if location is not None else projects_dir()
    with client(as_json) as c:
        paths = find_transcripts(source)
        tally = Tally("claude-code", "transcript", str(source), name, dry_run)
        with Progress(not as_json and sys.stderr.isatty(), f"claude-code {source}",
                      "transcript", len(paths)) as bar:
            import_transcripts(
                lambda op, p, args: c.call(op, p, args, timeout_ms=REQUEST_TIMEOUT_MS),
                name, paths, tally, dry_run=dry_run, progress=bar)
    report(tally, as_json)
    raise typer.Exit(EXIT_SKIPPED if tally.skipped else EXIT_OK)
