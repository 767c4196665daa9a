"""The ``palace service install|uninstall|status`` and ``palace uninstall`` commands.

Registered by ``palace_client.cli``; the work is in ``manager`` (the service files and the
service manager) and ``uninstall`` (everything palace put on the machine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from palace_client.cli.common import (
    EXIT_ERROR,
    EXIT_NO_SERVICE_MANAGER,
    EXIT_USAGE,
    JsonOpt,
)

service_app = typer.Typer(no_args_is_help=True, help=(
    "Run palaced as a systemd user service (Linux) or a launchd LaunchAgent (macOS): started "
    "at login and on the first connection to its socket, restarted after a crash."))

DryRunOpt = typer.Option(False, "--dry-run", help="Print what would be done; change nothing.")


def _host(as_json: bool) -> Any:
    from palace_client.cli.daemon import stop_daemon
    from palace_client.service.manager import Host

    return Host.current(lambda: stop_daemon(as_json))


def _step_lines(steps: list[dict[str, str]], *, show_text: bool) -> list[str]:
    lines = []
    for step in steps:
        lines.append(f"  {step['outcome']:<10} {step['action']:<12} {step['target']}")
        detail = step["detail"]
        if detail and (step["outcome"] in ("failed", "skipped") or step["action"] != "write"):
            lines.append("      " + detail.replace("\n", "\n      "))
        elif detail and show_text:
            lines.append("      | " + detail.rstrip("\n").replace("\n", "\n      | "))
    return lines


def report(result: Any, as_json: bool) -> None:
    """Print a service command's result and exit with its code: 0, 1 (a step failed) or 9
    (the service manager cannot be used here)."""
    data = result.to_json()
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        head = f"palace service {data['command']} ({data['manager']})"
        typer.echo(head + (" - dry run, nothing changed" if data["dry_run"] else ""))
        for line in _step_lines(data["steps"], show_text=data["dry_run"]):
            typer.echo(line)
    if result.failed:
        typer.echo(f"palace: error: palace service {data['command']} failed (see above)",
                   err=True)
        raise typer.Exit(EXIT_ERROR)
    if result.manager_unavailable and data["steps"]:
        done = ("nothing was changed" if result.dry_run else
                "the files are written, but the service manager was not asked to enable them"
                if result.command == "install" else
                "the files are removed, but the service manager was not asked to stop the "
                "service")
        typer.echo(f"palace: {result.manager_unavailable}; {done} (see "
                   "docs/operations.md#service)", err=True)
        raise typer.Exit(EXIT_NO_SERVICE_MANAGER)


@service_app.command("install")
def service_install(dry_run: bool = DryRunOpt, as_json: bool = JsonOpt) -> None:
    """Install and start palaced as a service of the current user.

    Linux: writes palaced.socket and palaced.service into ~/.config/systemd/user and runs
    `systemctl --user daemon-reload` and `systemctl --user enable --now palaced.socket
    palaced.service`. macOS: writes ~/Library/LaunchAgents/dev.palace.palaced.plist and runs
    `launchctl bootstrap gui/UID`. A daemon started on demand is stopped first (the service
    manager then owns the socket). Exits 9 when systemctl --user or launchctl cannot be used
    here (the files are written all the same).
    """
    from palace_client.service.manager import install

    report(install(_host(as_json), dry_run=dry_run), as_json)


@service_app.command("uninstall")
def service_uninstall(dry_run: bool = DryRunOpt, as_json: bool = JsonOpt) -> None:
    """Stop and disable the service and remove its files (the daemon then starts on demand
    again). Exits 9 when the service manager cannot be asked (the files are removed)."""
    from palace_client.service.manager import uninstall

    report(uninstall(_host(as_json), dry_run=dry_run), as_json)


@service_app.command("status")
def service_status(as_json: bool = JsonOpt) -> None:
    """Show the service files (current, outdated or missing) and the units' state; never
    starts anything. Exits 9 when the service manager cannot be asked."""
    from palace_client.service.manager import status

    result = status(_host(as_json))
    data = result.to_json()
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        typer.echo(f"palace service ({data['manager']}): "
                   + ("installed" if data["installed"] else "not installed")
                   + f", socket {data['socket']}")
        for path, state in data["files"].items():
            typer.echo(f"  {state:<10} {path}")
        for unit, state in data["units"].items():
            typer.echo(f"  {unit}: {state}")
        if result.manager_unavailable:
            typer.echo(f"  {result.manager_unavailable}")
    if result.manager_unavailable:
        raise typer.Exit(EXIT_NO_SERVICE_MANAGER)


def uninstall_command(
    purge: Annotated[bool, typer.Option(
        "--purge", help="Also delete every palace, the model cache, logs and the config file "
        "(asks first unless --yes).")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before --purge deletes."
                                      )] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be done; "
                                          "change nothing.")] = False,
    as_json: bool = JsonOpt,
) -> None:
    """Remove palace from this machine, for this user, except the package itself.

    In order: stops and removes the service (palace service uninstall), stops the daemon,
    removes palace's entries from the agent configs `palace init` wrote (user scope, and the
    projects it was run in), then lists the data it keeps (palaces, model cache, logs,
    config), or deletes it with --purge. Finish with `pip uninstall palace`. Exits 9 when
    the service manager could not be asked to stop the service (its files are removed).
    """
    from palace_client.service.uninstall import format_report, purge_allowed, run_uninstall

    host = _host(as_json)
    if purge and not dry_run:
        refusal = purge_allowed(host)
        if refusal:
            typer.echo(f"palace uninstall: {refusal}", err=True)
            raise typer.Exit(EXIT_USAGE)
        if not yes:
            if not sys.stdin.isatty():
                typer.echo("palace uninstall: --purge deletes every palace; confirm with --yes "
                           "when not running in a terminal", err=True)
                raise typer.Exit(EXIT_USAGE)
            typer.confirm(f"Delete every palace in {host.paths.palaces_dir}, the model cache, "
                          "the logs and the config file?", abort=True)
    result = run_uninstall(host, Path.cwd(), purge=purge, dry_run=dry_run)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        typer.echo(format_report(result))
    if result["failed"]:
        raise typer.Exit(EXIT_ERROR)
    if result["service"]["manager_unavailable"] and result["service"]["steps"]:
        raise typer.Exit(EXIT_NO_SERVICE_MANAGER)
