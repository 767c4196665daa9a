"""``palace``: the command line client of palaced.

Every command takes ``--json`` (one JSON document on stdout) and exits with a code scripts
can branch on:

====  =====================================================================
code  meaning
====  =====================================================================
0     success
1     other error
2     usage error (bad flags, or a value outside the option's range)
3     daemon unreachable (not running and could not be started)
4     not found (palace, drawer, fact)
5     invalid input (bad arguments, bad palace name, text too large)
6     already exists
7     busy / timed out / shutting down (retry)
8     embedder mismatch (run ``palace reembed``)
====  =====================================================================

The commands live by concern in ``palaces``, ``memory``, ``knowledge`` (``palace kg``),
``upkeep`` and ``daemon``; ``common`` holds what they share. ``palace mcp`` and ``palace init``
come from ``palace_client.mcp.command`` and ``palace_client.agents.command``.
"""

from __future__ import annotations

import typer

from palace_client.agents.command import init_command
from palace_client.mcp.command import mcp_command

from . import daemon, knowledge, memory, palaces, upkeep

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="palace: local, private memory for AI agents (client of the palaced daemon).",
    pretty_exceptions_enable=False,
)
agents = typer.Typer()
agents.command("mcp", help="Run the MCP stdio bridge (spawned by agents).")(mcp_command)
agents.command("init", help="Register the palace MCP bridge with installed agents.")(
    init_command)
for _commands in (palaces.app, memory.app, daemon.app, upkeep.app, agents):
    app.add_typer(_commands)  # no name: their commands are top-level commands
app.add_typer(knowledge.app, name="kg")


def main() -> None:
    """Console-script entry point."""
    app(prog_name="palace")


__all__ = ["app", "main"]
