"""``palace``: the command line client of palaced.

Every command takes ``--json`` (one JSON document on stdout) and exits with a code scripts
can branch on:

====  =====================================================================
code  meaning
====  =====================================================================
0     success
1     other error
2     usage error (bad flags)
3     daemon unreachable (not running and could not be started)
4     not found (palace, drawer, fact)
5     invalid input (bad arguments, bad palace name, text too large)
6     already exists
7     busy / timed out / shutting down (retry)
8     embedder mismatch (run ``palace reembed``)
====  =====================================================================
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import typer

from palaced import errors as E

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_INVALID = 5
EXIT_EXISTS = 6
EXIT_RETRY = 7
EXIT_MISMATCH = 8

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="palace: local, private memory for AI agents (client of the palaced daemon).",
    pretty_exceptions_enable=False,
)
daemon_app = typer.Typer(no_args_is_help=True, help="Start or stop the palaced daemon.")
app.add_typer(daemon_app, name="daemon")

PalaceOpt = typer.Option(None, "--palace", "-p", envvar="PALACE",
                         help="Palace name (or set PALACE).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def exit_code_for(exc: E.PalaceError) -> int:
    """Map a PalaceError to the CLI's exit code."""
    if isinstance(exc, E.DaemonUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, E.PalaceNotFound | E.MemoryNotFound | E.FactNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, E.PalaceExists):
        return EXIT_EXISTS
    if isinstance(exc, E.EmbedderMismatch):
        return EXIT_MISMATCH
    if isinstance(exc, E.LoadError):
        return EXIT_RETRY
    if isinstance(exc, E.ProtocolError | E.ContentError | E.InvalidPalaceName):
        return EXIT_INVALID
    return EXIT_ERROR


def _emit(data: Any, as_json: bool, human: Callable[[Any], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    else:
        human(data)


def _fail(exc: E.PalaceError, as_json: bool) -> NoReturn:
    if as_json:
        sys.stdout.write(json.dumps({"ok": False, "error": exc.to_wire()}, default=str) + "\n")
    typer.echo(f"palace: error: {exc.message} [{exc.name}]", err=True)
    raise typer.Exit(exit_code_for(exc))


@contextmanager
def _client(as_json: bool) -> Iterator[Any]:
    from palace_client.client import Client

    client = Client(client_name="palace-cli")
    try:
        yield client
    except E.PalaceError as exc:
        _fail(exc, as_json)
    finally:
        client.close()


def _need_palace(palace: str | None, as_json: bool) -> str:
    if not palace:
        _fail(E.InvalidArgs("no palace given: pass --palace NAME or set PALACE"), as_json)
    return palace


def _ms_to_iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M")


def _print_drawer_line(d: dict[str, Any], *, score: bool = False) -> None:
    head = f"[{d['id']}] {d.get('wing', '')}/{d.get('room', '')}"
    if score and d.get("score") is not None:
        head += f"  score={d['score']:.3f}"
    typer.echo(head)
    text = str(d.get("text", ""))
    for line in text.splitlines() or [""]:
        typer.echo(f"    {line}")


# -- palaces ------------------------------------------------------------------------------------
@app.command()
def create(name: str = typer.Argument(..., help="Palace name (lowercase kebab-case)."),
           exist_ok: bool = typer.Option(False, "--exist-ok", help="No error if it exists."),
           as_json: bool = JsonOpt) -> None:
    """Create a palace."""
    with _client(as_json) as c:
        info = c.create_palace(name, exist_ok=exist_ok)
    _emit(info, as_json, lambda i: typer.echo(f"palace {i['name']} ready at {i['path']}"))


@app.command("list")
def list_(as_json: bool = JsonOpt) -> None:
    """List palaces."""
    with _client(as_json) as c:
        palaces = c.list_palaces()

    def human(ps: list[dict[str, Any]]) -> None:
        if not ps:
            typer.echo("no palaces yet: create one with `palace create NAME`")
        for p in ps:
            typer.echo(f"{p['name']}{'  (open)' if p.get('open') else ''}")

    _emit({"palaces": palaces} if as_json else palaces, as_json, human)


@app.command()
def info(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Show a palace's counts, embedder and rooms."""
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        data = c.palace_info(name)

    def human(i: dict[str, Any]) -> None:
        typer.echo(f"palace {i['name']}  ({i['path']})")
        typer.echo(f"  drawers {i['drawers']}  vectors {i['vectors']}  index {i['index']}  "
                   f"pending embeddings {i['pending_embeddings']}")
        typer.echo(f"  embedder {i.get('embedder') or '-'}")
        if i.get("mismatch"):
            typer.echo(f"  ! {i['mismatch']}")
        for r in i.get("rooms", []):
            typer.echo(f"  {r['wing']}/{r['room']}: {r['drawers']}")

    _emit(data, as_json, human)


@app.command()
def delete(name: str = typer.Argument(...),
           yes: bool = typer.Option(False, "--yes", help="Really delete (required)."),
           as_json: bool = JsonOpt) -> None:
    """Delete a palace and every drawer in it (needs --yes)."""
    if not yes:
        _fail(E.InvalidArgs(f"refusing to delete palace {name!r} without --yes"), as_json)
    with _client(as_json) as c:
        c.delete_palace(name)
    _emit({"deleted": name}, as_json, lambda d: typer.echo(f"deleted palace {name}"))


@app.command()
def reembed(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Re-embed every drawer of a palace with the daemon's current model."""
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        data = c.reembed(name)
    _emit(data, as_json, lambda d: typer.echo(
        f"re-embedded {d['reembedded']} drawers with {d['embedder']}"))


# -- drawers ------------------------------------------------------------------------------------
@app.command()
def remember(
    text: str = typer.Argument(..., help="The memory text, or - to read stdin."),
    palace: str | None = PalaceOpt,
    wing: str | None = typer.Option(None, "--wing"),
    room: str | None = typer.Option(None, "--room"),
    tag: list[str] = typer.Option([], "--tag", help="Tag (repeatable)."),  # noqa: B008
    importance: str = typer.Option("0.5", "--importance",
                                   help="0-1 or critical/high/medium/low."),
    source: str | None = typer.Option(None, "--source"),
    when: str | None = typer.Option(None, "--when", help="When it happened (ISO 8601)."),
    supersedes: int | None = typer.Option(None, "--supersedes",
                                          help="Drawer id this memory replaces."),
    ttl: str | None = typer.Option(None, "--ttl", help="Expire after 90s/15m/12h/7d/2w."),
    dedup: bool | None = typer.Option(
        None, "--dedup/--no-dedup",
        help="Refresh a near-duplicate in the same room instead (default: on, off with "
             "--supersedes)."),
    as_json: bool = JsonOpt,
) -> None:
    """Store a memory (idempotent: the same text in the same room is stored once)."""
    name = _need_palace(palace, as_json)
    if text == "-":
        text = sys.stdin.read()
    imp: Any = importance
    try:
        imp = float(importance)
    except ValueError:
        pass
    with _client(as_json) as c:
        extra: dict[str, Any] = {} if dedup is None else {"dedup": dedup}
        if supersedes is not None:
            extra["supersedes"] = supersedes
        if ttl is not None:
            extra["ttl"] = ttl
        res = c.remember_ex(name, text, wing=wing, room=room, tags=tag, importance=imp,
                            source=source, occurred_at=when, **extra)
    out = {"id": res["id"], "created": res["created"],
           "deduplicated": bool(res.get("deduplicated"))}

    def human(r: dict[str, Any]) -> None:
        if r["deduplicated"]:
            typer.echo(f"refreshed near-duplicate drawer {r['id']} (not stored twice)")
        else:
            typer.echo(f"{'stored' if r['created'] else 'already stored'} drawer {r['id']}")

    _emit(out, as_json, human)


@app.command("remember-many")
def remember_many(palace: str | None = PalaceOpt,
                  dedup: bool = typer.Option(False, "--dedup/--no-dedup",
                                             help="Merge near-duplicates (off for imports)."),
                  as_json: bool = JsonOpt) -> None:
    """Bulk-store drawers from JSONL on stdin (one object per line: text, wing, room, ...)."""
    name = _need_palace(palace, as_json)
    items: list[dict[str, Any]] = []
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            _fail(E.InvalidArgs(f"line {lineno}: not JSON: {exc}"), as_json)
        if not isinstance(obj, dict):
            _fail(E.InvalidArgs(f"line {lineno}: expected a JSON object"), as_json)
        items.append(obj)
    ids: list[int] = []
    with _client(as_json) as c:
        for start in range(0, len(items), 2000):
            ids.extend(c.remember_many(name, items[start:start + 2000], dedup=dedup))
    _emit({"ids": ids, "count": len(ids)}, as_json,
          lambda r: typer.echo(f"stored {r['count']} drawers"))


def _parse_levels(value: str) -> list[int]:
    """``"0,1,3"`` as ``[0, 1, 3]`` (the daemon checks the range).

    Raises:
        InvalidArgs: a part is not an integer, or nothing is given.
    """
    parts = [part.strip() for part in value.split(",") if part.strip()]
    try:
        levels = [int(part) for part in parts]
    except ValueError:
        raise E.InvalidArgs(f"--levels takes a comma list of 0-3, got {value!r}",
                            details={"arg": "levels"}) from None
    if not levels:
        raise E.InvalidArgs("--levels needs at least one level", details={"arg": "levels"})
    return levels


def _print_entry(head: str, text: str, indent: str) -> None:
    """``head`` + the first line of ``text``; further lines indented by ``indent``."""
    first, *rest = text.splitlines() or [""]
    typer.echo(f"{head}{first}")
    for line in rest:
        typer.echo(f"{indent}{line}")


def _print_sections(sections: list[dict[str, Any]]) -> None:
    """Packed recall sections: ``## L{level} {title}``, then one entry per item."""
    for section in sections:
        typer.echo(f"## L{section['level']} {section['title']}")
        for item in section.get("items") or []:
            text = str(item.get("text", ""))
            if item.get("kind") == "fact" or not isinstance(item.get("id"), int):
                typer.echo(text)  # facts and the L0 identity: their text only
            else:
                head = f"[{item['id']}] {item.get('wing', '')}/{item.get('room', '')}  "
                _print_entry(head, text, "    ")


def _print_footer(r: dict[str, Any]) -> None:
    tok = r.get("tokenizer") or {}
    typer.echo(f"tokens used {r.get('tokens_used', 0)}/{r.get('budget', '?')} "
               f"(tokenizer {tok.get('name', '?')}; {len(r.get('cut') or [])} cut)")


@app.command()
def recall(
    query: str = typer.Argument(...),
    palace: str | None = PalaceOpt,
    top_k: int = typer.Option(10, "--top-k", "-k"),
    wing: str | None = typer.Option(None, "--wing"),
    room: str | None = typer.Option(None, "--room"),
    tag: list[str] = typer.Option([], "--tag"),  # noqa: B008
    budget: int | None = typer.Option(
        None, "--budget", help="Token budget of the packed context (daemon default 1500)."),
    levels: str | None = typer.Option(
        None, "--levels", help="Context levels, comma list of 0-3: 0 identity, 1 essential, "
        "2 where the query points, 3 deep search (default all)."),
    deep: bool = typer.Option(False, "--deep", help="Always include L3 deep search."),
    include_superseded: bool = typer.Option(
        False, "--include-superseded", help="Also return drawers replaced by newer ones."),
    as_json: bool = JsonOpt,
) -> None:
    """Search a palace (hybrid keyword + semantic).

    Prints the ranked drawers; with --budget, --levels or --deep prints the packed L0-L3
    context sections and the tokens they use instead.
    """
    name = _need_palace(palace, as_json)
    extra: dict[str, Any] = {}
    if budget is not None:
        extra["budget"] = budget
    if levels is not None:
        try:
            extra["levels"] = _parse_levels(levels)
        except E.InvalidArgs as exc:
            _fail(exc, as_json)
    if deep:
        extra["deep"] = True
    if include_superseded:
        extra["include_superseded"] = True
    packed = budget is not None or levels is not None or deep
    with _client(as_json) as c:
        res = c.recall_ex(name, query, top_k=top_k, wing=wing, room=room, tags=tag, **extra)

    def human(r: dict[str, Any]) -> None:
        if r.get("notice"):
            typer.echo(f"({r['notice']})", err=True)
        if packed:
            _print_sections(list(r.get("sections") or []))
            _print_footer(r)
            return
        if not r["results"]:
            typer.echo("nothing found")
        for d in r["results"]:
            _print_drawer_line(d, score=True)

    _emit(res, as_json, human)


@app.command("wake-up")
def wake_up(
    palace: str | None = PalaceOpt,
    budget: int = typer.Option(800, "--budget", help="Token budget of the context."),
    as_json: bool = JsonOpt,
) -> None:
    """Print a palace's L0 identity and L1 essential drawers (for session-start hooks).

    Creates the palace when it does not exist yet, like the MCP wake_up tool, so a hook
    installed by `palace init --hooks` works in a brand-new project.
    """
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        c.create_palace(name, exist_ok=True)
        res = c.wake_up(name, budget=budget)

    def human(r: dict[str, Any]) -> None:
        for n, section in enumerate(r.get("sections") or []):
            if n:
                typer.echo("")  # a blank line between sections, none at the end
            typer.echo(f"## L{section['level']} {section['title']}")
            for item in section.get("items") or []:
                text = str(item.get("text", ""))
                if isinstance(item.get("id"), int):
                    _print_entry("- ", text, "  ")
                else:
                    typer.echo(text)

    _emit(res, as_json, human)


@app.command()
def get(drawer_id: int = typer.Argument(...), palace: str | None = PalaceOpt,
        as_json: bool = JsonOpt) -> None:
    """Show one drawer."""
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        d = c.get(name, drawer_id)

    def human(d: dict[str, Any]) -> None:
        _print_drawer_line(d)
        typer.echo(f"    importance {d['importance']}  tags {', '.join(d['tags']) or '-'}  "
                   f"happened {_ms_to_iso(d['occurred_ms'])}  stored {_ms_to_iso(d['created_ms'])}"
                   f"  recalled {d['access_count']}x")

    _emit(d, as_json, human)


@app.command()
def forget(drawer_id: int = typer.Argument(...), palace: str | None = PalaceOpt,
           as_json: bool = JsonOpt) -> None:
    """Delete one drawer."""
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        c.forget(name, drawer_id)
    _emit({"id": drawer_id, "forgotten": True}, as_json,
          lambda r: typer.echo(f"forgot drawer {drawer_id}"))


@app.command()
def drawers(
    palace: str | None = PalaceOpt,
    wing: str | None = typer.Option(None, "--wing"),
    room: str | None = typer.Option(None, "--room"),
    limit: int = typer.Option(20, "--limit"),
    offset: int = typer.Option(0, "--offset"),
    as_json: bool = JsonOpt,
) -> None:
    """List drawers, newest first (paginated with --limit/--offset)."""
    name = _need_palace(palace, as_json)
    with _client(as_json) as c:
        res = c.drawers(name, wing=wing, room=room, limit=limit, offset=offset)

    def human(r: dict[str, Any]) -> None:
        for d in r["drawers"]:
            _print_drawer_line(d)
        shown = offset + len(r["drawers"])
        more = f"; next: --offset {r['next_offset']}" if r.get("next_offset") is not None else ""
        typer.echo(f"({shown} of {r['total']}{more})")

    _emit(res, as_json, human)


# -- daemon -------------------------------------------------------------------------------------
@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Show the daemon, its model and every palace."""
    with _client(as_json) as c:
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
            if "error" in p:
                typer.echo(f"  {p['name']}: ERROR {p['error']}")
                continue
            if not p.get("open", True):
                index = "closed (its index loads on first use)"
            elif p["index"] is None:
                index = "no vector index yet"
            else:
                agree = "agrees" if p["consistent"] else "DISAGREES"
                index = f"index {p['index']} ({agree})"
            typer.echo(f"  {p['name']}: {p['drawers']} drawers, {p['vectors']} vectors, "
                       f"{index}, {p['pending_embeddings']} pending embeddings")

    _emit(s, as_json, human)


@daemon_app.command("start")
def daemon_start(as_json: bool = JsonOpt) -> None:
    """Start palaced in the background if it is not running."""
    with _client(as_json) as c:
        s = c.status()
    _emit({"running": True, "pid": s["pid"], "socket": s["socket"]}, as_json,
          lambda r: typer.echo(f"palaced running (pid {r['pid']}, socket {r['socket']})"))


STOP_TIMEOUT_S = 30.0


@daemon_app.command("stop")
def daemon_stop(as_json: bool = JsonOpt) -> None:
    """Stop palaced gracefully (saves indexes, closes databases)."""
    import time

    from palace_client.client import Client

    c = Client(client_name="palace-cli", autostart=False)
    try:
        pid = c.status()["pid"]
        c.stop_daemon()
    except E.DaemonUnreachable:
        _emit({"running": False, "stopped": False}, as_json,
              lambda r: typer.echo("palaced is not running"))
        return
    except E.PalaceError as exc:
        _fail(exc, as_json)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not _daemon_gone(pid, c.paths.lock_file):
        if time.monotonic() >= deadline:
            _fail(E.ClientError(f"palaced (pid {pid}) was asked to stop but is still running "
                                f"after {STOP_TIMEOUT_S:.0f}s", details={"pid": pid}), as_json)
        time.sleep(0.05)
    _emit({"running": False, "stopped": True, "pid": pid}, as_json,
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
    import fcntl

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


def _register_optional() -> None:
    """Commands that live in their own modules (MCP bridge, agent setup)."""
    from palace_client.cli_knowledge import register as register_knowledge

    register_knowledge(app)
    from palace_client.mcp_cli import init_command, mcp_command

    app.command("mcp", help="Run the MCP stdio bridge (spawned by agents).")(mcp_command)
    app.command("init", help="Register the palace MCP bridge with installed agents.")(
        init_command)


_register_optional()


def main() -> None:
    """Console-script entry point."""
    app(prog_name="palace")
