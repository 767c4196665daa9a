"""The ``palace mcp`` command (a typer command function, registered by ``palace_client.cli``)."""

from __future__ import annotations

import typer

from palaced.wire.specs import TOOLSETS_HELP


def mcp_command(
    palace: str | None = typer.Option(
        None, "--palace",
        help="Palace to use (default: the project's, from CLAUDE_PROJECT_DIR, else the "
             "client's first root, else the current directory)."),
    compact: bool = typer.Option(False, "--compact", help="Render one line per drawer."),
    tools: str | None = typer.Option(
        None, "--tools", help=f"{TOOLSETS_HELP} (default: [mcp] tools of config.toml, else "
        "core alone)."),
) -> None:
    """Serve the palace tools over MCP on stdin/stdout (started by an agent, not by hand)."""
    # Imported here so that the other commands do not load the bridge (cold start).
    from palace_client.mcp.stdio import run

    raise typer.Exit(run(palace, compact, tools=tools))
