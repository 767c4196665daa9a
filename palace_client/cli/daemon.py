"""``palace status`` and ``palace daemon status|start|stop|restart``: the daemon itself.

``palace daemon status`` never starts a daemon: it exits 3 (unreachable) when none runs, so a
script can test for one; every other command starts the daemon when it is not running.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import typer

from palace_client.api.client import Client
from palace_client.cli.common import EXIT_UNREACHABLE, JsonOpt, client, emit, fail
from palace_client.render.results import counted, pending_chunks, progress
from palaced.wire import errors as E

app = typer.Typer()
daemon_app = typer.Typer(no_args_is_help=True,
                         help="Start, stop, restart or check the palaced daemon.")
app.add_typer(daemon_app, name="daemon")

STOP_TIMEOUT_S = 30.0
# What `palace status` says whenever recall is keyword-only for want of a model.
GET_MODEL = ("get the model: `palace model fetch` (from the model hub) or `palace model import "
             "PATH` (a copy), see docs/operations.md#models")

# How `palace status` words a team palace's read replica state.
REPLICA_STATES = {"unused": "not used yet", "serving": "serving reads",
                  "behind": "behind: the primary serves reads",
                  "down": "DOWN: the primary serves reads"}


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Show the daemon, its model and every palace."""
    with client(as_json) as c:
        s = c.status()
        s["current"] = _current(c)

    def human(s: dict[str, Any]) -> None:
        model = s["model"]
        typer.echo(f"palaced {s['version']}  pid {s['pid']}  up {format_uptime(s['uptime_s'])}")
        if not s["current"]:
            typer.echo(f"  {STALE}")
        typer.echo(f"  socket   {s['socket']}")
        typer.echo(f"  data     {s['data_dir']}")
        if model["state"] == "ready":
            typer.echo(f"  model    ready: {model['identity']} (hybrid recall)")
        elif model["state"] == "loading":
            typer.echo("  model    loading... (keyword-only recall until it is ready)")
        else:
            typer.echo(f"  model    UNAVAILABLE - keyword-only recall: {model['reason']}")
            if not model.get("disabled"):
                typer.echo(f"           {GET_MODEL}")
        tok = s["tokenizer"]
        typer.echo(f"  tokens   {tok['name']}" + ("" if tok["exact"] else f" ({tok['reason']})"))
        tightened = s.get("tightened") or {}
        if tightened.get("count"):
            shown = tightened.get("paths") or ["?"]
            typer.echo(f"  security made {counted(tightened['count'], 'path')} private at start "
                       f"(other users could read them before), e.g. {shown[0]}; see the daemon "
                       "log")
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
    line = (f"{p['name']}: {counted(p['drawers'], 'drawer')}, "
            f"{counted(p['vectors'], 'vector')}, {index}, "
            f"{counted(p['pending_embeddings'], 'pending embedding')}{pending_chunks(p)}")
    keywords = p.get("keywords") or {}
    if keywords.get("state") == "built":
        line += (f", keyword engine over {counted(keywords['covered'], 'drawer')}"
                 f" ({keywords['changed']} changed since)"
                 + (", rebuilding" if keywords.get("building") else ""))
    elif keywords.get("state") == "building":
        line += ", keyword engine building (FTS5 meanwhile)"
    moving = p.get("reembedding")
    if moving:
        line += (f", re-embedding {progress(moving)} for {moving['model']} "
                 + ("(paused until that model is loaded)" if moving.get("paused") else
                    "(keyword-only recall until done)"))
    replica = p.get("replica")  # a team palace's read replica (docs/teams.md)
    if replica:
        line += f", read replica {replica['server']} " + REPLICA_STATES.get(
            replica["state"], replica["state"]) + (f" ({replica['error']})"
                                                    if replica.get("error") else "")
    return line


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
    pid = stop_daemon(as_json)
    if pid is None:
        emit({"running": False, "stopped": False}, as_json,
             lambda r: typer.echo("palaced is not running"))
        return
    emit({"running": False, "stopped": True, "pid": pid}, as_json,
         lambda r: typer.echo(f"palaced (pid {pid}) stopped"))


@daemon_app.command("restart")
def daemon_restart(as_json: bool = JsonOpt) -> None:
    """Stop palaced if it runs, start it again and wait until it answers.

    The new daemon reads the configuration again; its model may still be loading when this
    returns (recall is keyword-only until it is ready: see `palace daemon status`).
    """
    old = stop_daemon(as_json)
    with client(as_json) as c:
        s = c.status()
    res = {"running": True, "restarted": old is not None, "old_pid": old, "pid": s["pid"],
           "socket": s["socket"], "model": s["model"]}

    def human(r: dict[str, Any]) -> None:
        was = f"restarted (pid {old} -> {r['pid']}" if old is not None else (
            f"was not running; started (pid {r['pid']}")
        typer.echo(f"palaced {was}, socket {r['socket']}); model {_model(r['model'])}")

    emit(res, as_json, human)


@daemon_app.command("status")
def daemon_status(as_json: bool = JsonOpt) -> None:
    """Say whether palaced runs (pid, socket, uptime, model); never starts it.

    Exits 0 when it runs and 3 when it does not, so scripts can test `palace daemon status`.
    """
    with client(as_json, autostart=False) as c:
        try:
            s = c.status()
        except E.DaemonUnreachable:
            socket = str(c.paths.socket)
            emit({"running": False, "socket": socket}, as_json,
                 lambda r: typer.echo(f"palaced is not running (socket {socket})"))
            raise typer.Exit(EXIT_UNREACHABLE) from None
        current = _current(c)
    res = {"running": True, "version": s["version"], "pid": s["pid"], "socket": s["socket"],
           "uptime_s": s["uptime_s"], "model": s["model"], "current": current}

    def human(r: dict[str, Any]) -> None:
        typer.echo(f"palaced {r['version']} running")
        if not r["current"]:
            typer.echo(f"  {STALE}")
        typer.echo(f"  pid      {r['pid']}")
        typer.echo(f"  socket   {r['socket']}")
        typer.echo(f"  uptime   {format_uptime(r['uptime_s'])}")
        typer.echo(f"  model    {_model(r['model'])}")

    emit(res, as_json, human)


STALE = ("STALE    started from another version of palace than this one: "
         "`palace daemon restart` runs this one")


def _current(c: Client) -> bool:
    """Whether the daemon accepts what this client sends (its hello's ``spec`` digest is
    this palace's): one started before an upgrade runs the older code until it restarts."""
    from palaced.wire.specs import SPEC_DIGEST

    return bool(c.server_info.get("spec") == SPEC_DIGEST)


def _model(model: dict[str, Any]) -> str:
    """The model state in a few words: ``ready (NAME)``, ``loading``, ``unavailable: WHY``."""
    if model.get("state") == "ready":
        return f"ready ({model.get('identity')})"
    if model.get("state") == "loading":
        return "loading (keyword-only recall until it is ready)"
    return f"unavailable, keyword-only recall: {model.get('reason')}"


def format_uptime(seconds: float) -> str:
    """``42s``, ``5m 3s``, ``2h 5m``, ``3d 4h``: an uptime to the two largest units."""
    s = int(seconds)
    days, hours, minutes = s // 86400, s // 3600 % 24, s // 60 % 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {s % 60}s"
    return f"{s}s"


def stop_daemon(as_json: bool) -> int | None:
    """Stop the running daemon and wait until it has exited; its pid, or ``None`` when no
    daemon was running. Never starts one.

    Raises:
        typer.Exit: it could not be asked, or still runs after ``STOP_TIMEOUT_S``
            (reported by ``fail``).
    """
    with client(as_json, autostart=False) as c:
        try:
            pid = int(c.status()["pid"])
            c.stop_daemon()
        except E.DaemonUnreachable:
            return None
        lock_file = c.paths.lock_file
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not _daemon_gone(pid, lock_file):
        if time.monotonic() >= deadline:
            fail(E.ClientError(f"palaced (pid {pid}) was asked to stop but is still running "
                               f"after {STOP_TIMEOUT_S:.0f}s", details={"pid": pid}), as_json)
        time.sleep(0.05)
    return pid


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
    from palace_client.transport.autostart import lock_holder

    return lock_holder(lock_file) is None
