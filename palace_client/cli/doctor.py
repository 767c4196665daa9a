"""``palace doctor``: the daemon's checks of itself and every palace, or (when no daemon can
be reached or started) what the client can check on its own.

Exit codes: 0 when no check failed (warnings allowed), ``EXIT_UNHEALTHY`` (11) when a check
failed (after ``--repair``: one it could not fix), ``EXIT_UNREACHABLE`` (3) when no daemon could
be reached (the client's own checks are printed first). The help text is made from the same
constants.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from palace_client.cli.common import (
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    JsonOpt,
    client,
    emit,
    op_option,
)
from palace_client.render.results import counted
from palace_client.transport.autostart import daemon_env
from palaced.wire import errors as E
from palaced.wire.paths import Paths
from palaced.wire.private import check_runtime_dir

app = typer.Typer()

_NAME_WIDTH = 24
_SHOWN = {"ok": "ok", "warn": "warn", "fail": "FAIL"}


def _check(name: str, status: str, detail: str, advice: str | None = None) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, "palace": None,
            "fixable": False, "advice": advice, "repaired": False}


def _mode_line(name: str, path: Path) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _check(name, "warn", f"{path} does not exist")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return _check(name, "warn", f"{path} is mode {mode:04o}: other users may read it",
                      "the daemon makes it private when it starts")
    return _check(name, "ok", f"{path} ({mode:04o})")


def _config_check(paths: Paths) -> dict[str, Any]:
    """The daemon's own verdict on its config file: ``palaced check-config`` (the check that
    stops ``palaced run``, in the environment the client starts the daemon with), not a
    second check of the client's that only knows whether the file is TOML."""
    try:
        res = subprocess.run([sys.executable, "-m", "palaced", "check-config"],
                             env=daemon_env(), cwd="/", stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return _check("config", "warn", f"`palaced check-config` could not run: {exc}")
    if res.returncode == 0:
        return _check("config", "ok", f"{paths.config_file} is valid"
                      if paths.config_file.exists() else f"no {paths.config_file}: defaults")
    said = " ".join(res.stderr.strip().removeprefix("palaced:").split()) or (
        f"`palaced check-config` exited {res.returncode}")
    return _check("config", "fail", said, "fix the file (`palaced check-config` checks it "
                  "again): the daemon refuses to start with it")


def local_checks(paths: Paths, error: E.PalaceError) -> list[dict[str, Any]]:
    """What the client checks without a daemon: why it is unreachable, the runtime directory
    and socket, the config file the daemon would read, and the data directory."""
    config = _config_check(paths)
    advice = ("fix the config file (see the config check below), then run `palace doctor` "
              "again" if config["status"] == "fail" else
              f"see the daemon log {paths.log_file}, or run `palaced run` to see it fail")
    out = [_check("daemon", "fail", error.message, advice)]
    try:
        check_runtime_dir(paths.runtime_dir)
        out.append(_mode_line("runtime_dir", paths.runtime_dir) if paths.private_runtime
                   else _check("runtime_dir", "ok", f"{paths.runtime_dir} (yours)"))
    except E.UnsafePath as exc:
        out.append(_check("runtime_dir", "fail", exc.message))
    try:
        st = os.lstat(paths.socket)
        kind = "a socket" if stat.S_ISSOCK(st.st_mode) else "not a socket"
        out.append(_check("socket", "warn", f"{paths.socket} is {kind} nobody answers on",
                          "a starting daemon removes a stale socket of yours"))
    except FileNotFoundError:
        out.append(_check("socket", "ok", f"no socket at {paths.socket} (no daemon running)"))
    out.append(config)
    out.append(_mode_line("data_dir", paths.data_dir))
    try:
        names = sorted(p.name for p in paths.palaces_dir.iterdir()
                       if (p / "palace.db").exists())
    except OSError:
        names = []
    if names:
        out.append(_check("palaces", "warn", f"{counted(len(names), 'palace')} not checked "
                          f"without the daemon: {', '.join(names[:10])}"))
    return out


def _line(c: dict[str, Any]) -> list[str]:
    name = f"{c['palace']}: {c['name']}" if c.get("palace") else c["name"]
    shown = "fixed" if c.get("repaired") else _SHOWN.get(c["status"], c["status"])
    extra = " (--repair fixes this)" if c.get("fixable") and c["status"] != "ok" else ""
    lines = [f"{shown:<6}{name:<{_NAME_WIDTH}} {c['detail']}{extra}"]
    if c.get("advice") and c["status"] != "ok":
        lines.append(f"{'':<6}{'':<{_NAME_WIDTH}} -> {c['advice']}")
    return lines


def render(report: dict[str, Any]) -> None:
    """Print a doctor report: one line per check, the repairs, then the counts."""
    for c in report["checks"]:
        for line in _line(c):
            typer.echo(line)
    if report.get("repairs"):
        typer.echo("repairs:")
        for done in report["repairs"]:
            typer.echo(f"  {done}")
    s = report["summary"]
    typer.echo(f"{s['ok']} ok, {counted(s['warn'], 'warning')}, {counted(s['fail'], 'failure')}"
               + ("" if report.get("daemon_reachable", True) else " (daemon unreachable)"))


@app.command("doctor", help=(
    "Check the daemon and every palace: permissions, SQLite integrity, full-text and vector "
    "indexes, embeddings, schema, model, disk.\n\n"
    f"Exits 0 when nothing failed (warnings allowed), {EXIT_UNHEALTHY} when a check failed "
    "(after --repair: one it could not fix; the advice says what to do, e.g. which backup to "
    f"restore), {EXIT_UNREACHABLE} when no daemon could be reached (the client's own checks "
    "are shown)."))
def doctor(
    palace: str | None = typer.Option(None, "--palace", "-p",
                                      help="Check only this palace (default: every palace; "
                                           "PALACE is not read)."),
    repair: bool = op_option("palace.doctor", "repair", "--repair",
                             help="Fix what can be derived again (indexes, topics, pending "
                                  "vectors, permissions), then check again."),
    full: bool = op_option("palace.doctor", "full", "--full",
                           help="Run SQLite's integrity_check instead of quick_check, and "
                                "compare every vector index key and every drawer's topics "
                                "(slower)."),
    as_json: bool = JsonOpt,
) -> None:
    """``palace doctor`` (its help text is the decorator's, made from the exit codes)."""
    with client(as_json) as c:
        try:
            report = c.doctor(palace, repair=repair, full=full)
        except (E.ClientError, E.UnsafePath) as exc:
            checks = local_checks(c.paths, exc)
            summary = {s: sum(1 for x in checks if x["status"] == s)
                       for s in ("ok", "warn", "fail")}
            report = {"healthy": False, "daemon_reachable": False, "summary": summary,
                      "palaces": [], "repair": repair, "full": full, "repairs": [],
                      "checks": checks}
    emit(report, as_json, render)
    if not report.get("daemon_reachable", True):
        raise typer.Exit(EXIT_UNREACHABLE)
    if report["summary"]["fail"]:
        raise typer.Exit(EXIT_UNHEALTHY)
