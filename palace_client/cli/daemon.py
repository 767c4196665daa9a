"""``palace status`` and ``palace daemon start|stop``: the daemon itself."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

import typer

from palaced import errors as E

from .common import JsonOpt, client, emit, fail

app = typer.Typer()
daemon_app = typer.Typer(no_args_is_help=True, help="Start or stop the palaced daemon.")
app.add_typer(daemon_app, name="daemon")

STOP_TIMEOUT_S = 30.0


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Show the daemon, its model and every palace."""
    with client(as_json) as c:
        s = c.status()

    def human(s: dict[str, Any]) -> None:
        model = s["model"]
        typer.echo(f"palaced {s['version']}  pid {s['pid']}  up {s['uptime_s']:.0f}s")
        typer.echo(f"  socket   {s['socket']}")
        typer.echo(f"  data     {s['data_dir']}")
        if model["state"] == "ready":
            typer.echo(f"  model    ready: {model['identity']} (hybrid recall)")
        elif model["state"] == "loading":
            typer.echo("  model    loading... (keyword-only recall until it is ready)")
        else:
            typer.echo(f"  model    UNAVAILABLE - keyword-only recall: {model['reason']}")
        tok = s["tokenizer"]
        typer.echo(f"  tokens   {tok['name']}" + ("" if tok["exact"] else f" ({tok['reason']})"))
        tightened = s.get("tightened") or {}
        if tightened.get("count"):
            shown = tightened.get("paths") or ["?"]
            typer.echo(f"  security made {tightened['count']} path(s) private at start (other "
                       f"users could read them before), e.g. {shown[0]}; see the daemon log")
        for p in s["palaces"]:
            typer.echo(f"  {_palace_line(p)}")

    emit(s, as_json, human)


def _palace_line(p: dict[str, Any]) -> str:
    """One palace of ``palace status``: its counts and index state."""
    if "error" in p:
        return f"{p['name']}: ERROR {p['error']}"
    if not p.get("open", True):
        index = "closed (its index loads on first use)"
    elif p["index"] is None:
        index = "no vector index yet"
    else:
        agree = "agrees" if p["consistent"] else "DISAGREES"
        index = f"index {p['index']} ({agree})"
    return (f"{p['name']}: {p['drawers']} drawers, {p['vectors']} vectors, {index}, "
            f"{p['pending_embeddings']} pending embeddings")


@daemon_app.command("start")
def daemon_start(as_json: bool = JsonOpt) -> None:
    """Start palaced in the background if it is not running."""
    with client(as_json) as c:
        s = c.status()
    emit({"running": True, "pid": s["pid"], "socket": s["socket"]}, as_json,
         lambda r: typer.echo(f"palaced running (pid {r['pid']}, socket {r['socket']})"))


@daemon_app.command("stop")
def daemon_stop(as_json: bool = JsonOpt) -> None:
    """Stop palaced gracefully (saves indexes, closes databases)."""
    with client(as_json, autostart=False) as c:
        try:
            pid = c.status()["pid"]
            c.stop_daemon()
        except E.DaemonUnreachable:
            emit({"running": False, "stopped": False}, as_json,
                 lambda r: typer.echo("palaced is not running"))
            return
        lock_file = c.paths.lock_file
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not _daemon_gone(pid, lock_file):
        if time.monotonic() >= deadline:
            fail(E.ClientError(f"palaced (pid {pid}) was asked to stop but is still running "
                               f"after {STOP_TIMEOUT_S:.0f}s", details={"pid": pid}), as_json)
        time.sleep(0.05)
    emit({"running": False, "stopped": True, "pid": pid}, as_json,
         lambda r: typer.echo(f"palaced (pid {pid}) stopped"))


def _daemon_gone(pid: int, lock_file: Path) -> bool:
    """True once the daemon ``pid`` has exited.

    A zombie counts as gone: a daemon auto-started by an older client may be that client's
    child, and stays a zombie until it is reaped, which ``kill(pid, 0)`` cannot tell apart
    from running. Linux shows the state in ``/proc``; elsewhere the daemon's lock tells,
    because an exited process holds no flock.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user now has that pid: look at the lock below
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return True  # exited between the two checks
    except OSError:
        pass
    else:
        # Field 3, after the parenthesised command name (which may contain spaces).
        return stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"])
    return _lock_free(lock_file)


def _lock_free(lock_file: Path) -> bool:
    """True when nobody holds the daemon's lock (probed without blocking, released at once)."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock, if it got one
    return True
