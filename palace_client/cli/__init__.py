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
4     not found (palace, drawer, fact, memoir, concept)
5     invalid input (bad arguments, bad palace name, text too large)
6     already exists
7     busy / timed out / shutting down (retry)
8     embedder mismatch (run ``palace reembed``)
9     no service manager (``palace service``: systemctl --user or launchctl unusable here)
10    an import finished but skipped malformed records (listed on stderr, or in ``--json``)
11    ``palace doctor``: a check failed (after ``--repair``: one it could not fix)
12    forbidden by the palace's policy (``palace policy show``)
====  =====================================================================

The commands live by concern in ``palaces``, ``memory``, ``knowledge`` (``palace kg``),
``model`` (``palace model``), ``memoirs`` (``palace memoir``), ``upkeep``, ``doctor``,
``backups``, ``transfer`` (``palace export``, ``palace import``), ``governance`` (trash, audit,
policy) and ``daemon``; ``common`` holds what they share. ``palace mcp``, ``palace serve``
(and ``ui``) and ``palace init`` come from ``palace_client.mcp.command``,
``palace_client.http.command`` and ``palace_client.agents.command``, ``palace service`` and
``palace uninstall`` from ``palace_client.cli.service``. ``palace --agent NAME`` (or
``PALACE_AGENT``) names who the requests come from.

``-h`` is ``--help`` everywhere, ``palace --version`` prints the client's version (offline),
and typer's shell completion is on (``palace --install-completion``/``--show-completion``).

Every failure, usage errors included, prints ``palace: error: MESSAGE [NAME]`` on stderr and,
with ``--json``, one error document on stdout (``failures``); Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys

import typer

from palace_client.agents.command import init_command
from palace_client.cli import (
    backups,
    conflicts,
    daemon,
    doctor,
    governance,
    hooks,
    imports,
    knowledge,
    memoirs,
    memory,
    model,
    palaces,
    transfer,
    upkeep,
)
from palace_client.cli.service import service_app, uninstall_command
from palace_client.http.command import serve_command, ui_command
from palace_client.mcp.command import mcp_command
from palaced.wire.helptext import plain_help

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="palace: local, private memory for AI agents (client of the palaced daemon). "
         "Every command takes --json and -h; on/off flags are off unless given.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """``--version``: print this client's version and exit (talks to no daemon)."""
    if value:
        from palaced import __version__

        typer.echo(f"palace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version,
                                       is_eager=True,
                                       help="Print the client's version and exit."),
          agent: str | None = typer.Option(
              None, "--agent", envvar="PALACE_AGENT", show_default="user:<login>",
              help="Who the requests come from (recorded on writes and in the audit log, "
                   "checked against the palace's policy).")) -> None:
    """palace: local, private memory for AI agents (client of the palaced daemon)."""
    if agent is not None:
        # Every client of this command (``palace mcp``'s too) resolves its agent from there.
        os.environ["PALACE_AGENT"] = agent
agents = typer.Typer()
agents.command("mcp", help="Run the MCP stdio bridge (spawned by agents).")(mcp_command)
agents.command("init", help="Register the palace MCP bridge with installed agents.")(
    init_command)
agents.command("serve", help="Serve the ops as a local HTTP API (loopback, secret-protected).")(
    serve_command)
agents.command("ui", help="Open the local web app in your browser (palace serve + pages).")(
    ui_command)
for _commands in (palaces.app, memory.app, daemon.app, upkeep.app, doctor.app, backups.app,
                  transfer.app, agents):
    app.add_typer(_commands)  # no name: their commands are top-level commands
app.add_typer(governance.app)
app.add_typer(governance.trash_app, name="trash")
app.add_typer(governance.policy_app, name="policy")
app.add_typer(knowledge.app, name="kg")
app.add_typer(model.app, name="model")
app.add_typer(memoirs.app, name="memoir")
app.add_typer(conflicts.app, name="conflicts")
app.add_typer(service_app, name="service")
app.command("uninstall")(uninstall_command)
app.add_typer(transfer.imports, name="import")
transfer.imports.command("claude-code")(imports.claude_code)
transfer.imports.command("codex")(imports.codex)
transfer.imports.command("gemini")(imports.gemini)
transfer.imports.command("copilot")(imports.copilot)
app.add_typer(hooks.app, name="hook")


plain_help(app)


def main() -> None:
    """Console-script entry point: runs the command, reports any failure (see
    ``failures``) and exits with its code."""
    from palace_client.cli.failures import run

    sys.exit(run(app, "palace"))


__all__ = ["app", "main"]
