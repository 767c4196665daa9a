"""The ``palace init`` command (a typer command function, registered by ``palace_client.cli``)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from palaced.wire.errors import UsageError
from palaced.wire.specs import TOOLSETS_HELP


class Scope(StrEnum):
    """Where ``palace init`` registers the bridge."""

    project = "project"
    local = "local"
    user = "user"


def init_command(
    palace: Annotated[str | None, typer.Option(
        "--palace", help="Pin this palace everywhere (default: the project's palace in project "
        "and local scope; derived per session in user scope and in the hook).")] = None,
    scope: Annotated[Scope, typer.Option(
        "--scope", help="project: the project's shared files (palace from PATH); local: this "
        "project on this machine only (Claude Code); user: every project.")] = Scope.project,
    agent: Annotated[list[str] | None, typer.Option(
        "--agent", help="Agent to configure (repeatable): claude, cursor, vscode, codex, "
        "gemini, windsurf, copilot. Default: every detected agent.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show the edits as diffs; write nothing.")] = False,
    uninstall: Annotated[bool, typer.Option(
        "--uninstall", help="Remove palace's entries instead of adding them.")] = False,
    hooks: Annotated[bool, typer.Option(
        "--hooks", help="Also add each agent's hooks. Claude Code: SessionStart runs `palace "
        "wake-up`; UserPromptSubmit runs `palace hook prompt` (memories relevant to the "
        "prompt); PreCompact, Stop and SessionEnd run `palace hook capture` (the session is "
        "captured as drawers). Codex CLI, Gemini CLI and Copilot CLI: the same three, Cursor: "
        "the wake-up (`palace hook ... --agent NAME`).")
    ] = False,
    tools: Annotated[str | None, typer.Option(
        "--tools", help=f"{TOOLSETS_HELP}: the bridge serves them (written into its "
        "entries as `palace mcp --tools`; default: none written, so [mcp] tools of "
        "config.toml, else core alone).")] = None,
    project_dir: Annotated[Path | None, typer.Option(
        "--project-dir", help="A directory of the project; its git root is the project "
        "(default: the cwd).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")
                           ] = False,
) -> None:
    """Register the palace MCP server with the coding agents on this machine."""
    # Imported here so that the other commands do not load the config writers (cold start).
    from palace_client.agents.setup import InitOptions, format_changes, init_agents

    try:
        options = InitOptions(
            project_dir=(project_dir or Path.cwd()).absolute(),
            scope=scope.value,
            agents=tuple(agent or ()),
            palace=palace,
            hooks=hooks,
            uninstall=uninstall,
            dry_run=dry_run,
            tools=tools,
        )
        changes = init_agents(options)
    except ValueError as exc:
        # As palace_client.cli.common.report words it (not imported: cli imports this).
        error = UsageError(f"palace init: {exc}", details={"command": "palace init"})
        if json_output:
            typer.echo(json.dumps({"ok": False, "error": error.to_wire()}))
        typer.echo(f"palace: error: {error.message} [{error.name}]", err=True)
        raise typer.Exit(2) from None
    if not dry_run and not uninstall and scope is not Scope.user and any(
            c.action in ("created", "updated") for c in changes):
        _record(options.project_dir)
    if json_output:
        typer.echo(json.dumps([c.to_json() for c in changes], indent=2))
    else:
        typer.echo(format_changes(changes, dry_run=dry_run))
    if not changes or any(c.action == "error" for c in changes) or all(
            c.action == "skipped" for c in changes):
        raise typer.Exit(1)


def _record(project_dir: Path) -> None:
    """Note the project in the record ``palace uninstall`` undoes; a failure only warns."""
    from palace_client.agents.record import record_project
    from palace_client.api.slug import find_project_root
    from palaced.wire.paths import resolve

    try:
        record_project(resolve().state_dir, find_project_root(project_dir) or project_dir)
    except OSError as exc:
        typer.echo(f"palace init: could not record the project for `palace uninstall`: {exc}",
                   err=True)
