"""``palace import claude-code``: bringing memories recorded elsewhere into a palace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from palace_client.importers.progress import Progress

from .common import (
    EXIT_ERROR,
    EXIT_SKIPPED,
    JsonOpt,
    PalaceOpt,
    client,
    emit,
    need_palace,
    op_option,
)

app = typer.Typer(help="Import memories recorded elsewhere (Claude Code sessions).",
                  no_args_is_help=True)


@app.command("claude-code")
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

    Secrets are redacted and tool output is left out, as the capture hooks do (the same daemon
    op, so sessions the hooks captured into the palace are not stored twice). Resumable and
    idempotent: a second run stores nothing. Progress on a terminal, then one summary line
    (or --json).
    Exits 9 when malformed transcript lines were skipped (everything else was imported), 1
    when a transcript could not be read.
    """
    from palace_client.importers.claude_code import (
        find_transcripts,
        import_transcripts,
        projects_dir,
    )

    name = need_palace(palace, as_json)
    progress = Progress()
    with client(as_json) as c:
        paths = find_transcripts(location if location is not None else projects_dir())
        progress.update(f"0/{len(paths)} transcripts", force=True)

        def call(op: str, palace_name: str, args: dict[str, object]) -> dict[str, object]:
            return c.call(op, palace_name, args, timeout_ms=3_600_000)

        try:
            totals = import_transcripts(
                call, name, paths, dry_run=dry_run,
                progress=lambda t, done: progress.update(
                    f"{done}/{len(paths)} transcripts, {t.exchanges} exchanges, "
                    f"{t.skipped} malformed lines skipped", force=done == len(paths)))
        finally:
            progress.close()
    emit(totals.to_json(name, dry_run), as_json,
         lambda _: typer.echo(totals.summary(name, dry_run)))
    if totals.failed:
        raise typer.Exit(EXIT_ERROR)
    if totals.skipped:
        raise typer.Exit(EXIT_SKIPPED)
