"""``palace remember``, ``remember-many``, ``recall``, ``wake-up``, ``get``, ``forget``,
``drawers``: storing and finding drawers."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from palace_client import render
from palaced import errors as E
from palaced.vocab import DEFAULT_IMPORTANCE, IMPORTANCE_PRESETS

from .common import (
    JsonOpt,
    PalaceOpt,
    client,
    echo_lines,
    emit,
    fail,
    need_palace,
    op_arg,
    op_argument,
    op_option,
)

app = typer.Typer()

BATCH = 2000  # drawers per memory.remember_many request
DRAWERS_PAGE = 20  # `palace drawers` shows a terminal page, not the daemon's 50


@app.command()
def remember(
    text: str = typer.Argument(..., help="The memory text, or - to read stdin."),
    palace: str | None = PalaceOpt,
    wing: str | None = op_option("memory.remember", "wing", "--wing"),
    room: str | None = op_option("memory.remember", "room", "--room"),
    tag: list[str] = op_option("memory.remember", "tags", "--tag",  # noqa: B008
                               help="Tag (repeatable)."),
    importance: str = op_option("memory.remember", "importance", "--importance",
                                default=str(DEFAULT_IMPORTANCE),
                                help=f"0-1 or {'/'.join(IMPORTANCE_PRESETS)}."),
    source: str | None = op_option("memory.remember", "source", "--source"),
    when: str | None = op_option("memory.remember", "occurred_at", "--when",
                                 help="When it happened (ISO 8601)."),
    supersedes: int | None = op_option("memory.remember", "supersedes", "--supersedes",
                                       help="Drawer id this memory replaces."),
    ttl: str | None = op_option("memory.remember", "ttl", "--ttl",
                                help="Expire after 90s/15m/12h/7d/2w."),
    dedup: bool | None = op_option(
        "memory.remember", "dedup", "--dedup/--no-dedup",
        help="Refresh a near-duplicate in the same room instead (default: on, off with "
             "--supersedes)."),
    as_json: bool = JsonOpt,
) -> None:
    """Store a memory (idempotent: the same text in the same room is stored once)."""
    name = need_palace(palace, as_json)
    if text == "-":
        text = sys.stdin.read()
    imp: Any = importance
    try:
        imp = float(importance)
    except ValueError:
        pass
    with client(as_json) as c:
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

    emit(out, as_json, human)


@app.command("remember-many")
def remember_many(palace: str | None = PalaceOpt,
                  dedup: bool = op_option("memory.remember_many", "dedup", "--dedup/--no-dedup",
                                          help="Merge near-duplicates (off for imports)."),
                  as_json: bool = JsonOpt) -> None:
    """Bulk-store drawers from JSONL on stdin (one object per line: text, wing, room, ...)."""
    name = need_palace(palace, as_json)
    items: list[dict[str, Any]] = []
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(E.InvalidArgs(f"line {lineno}: not JSON: {exc}"), as_json)
        if not isinstance(obj, dict):
            fail(E.InvalidArgs(f"line {lineno}: expected a JSON object"), as_json)
        items.append(obj)
    ids: list[int] = []
    with client(as_json) as c:
        for start in range(0, len(items), BATCH):
            ids.extend(c.remember_many(name, items[start:start + BATCH], dedup=dedup))
    emit({"ids": ids, "count": len(ids)}, as_json,
         lambda r: typer.echo(f"stored {r['count']} drawers"))


def parse_levels(value: str) -> list[int]:
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


@app.command()
def recall(
    query: str = typer.Argument(...),
    palace: str | None = PalaceOpt,
    top_k: int = op_option("memory.recall", "top_k", "--top-k", "-k"),
    wing: str | None = op_option("memory.recall", "wing", "--wing"),
    room: str | None = op_option("memory.recall", "room", "--room"),
    tag: list[str] = op_option("memory.recall", "tags", "--tag"),  # noqa: B008
    budget: int | None = op_option(
        "memory.recall", "budget", "--budget", default=None,
        help="Token budget of the packed context (daemon default "
             f"{op_arg('memory.recall', 'budget').default})."),
    levels: str | None = typer.Option(
        None, "--levels", help="Context levels, comma list of 0-3: 0 identity, 1 essential, "
        "2 where the query points, 3 deep search (default all)."),
    deep: bool = op_option("memory.recall", "deep", "--deep",
                           help="Always include L3 deep search."),
    include_superseded: bool = op_option(
        "memory.recall", "include_superseded", "--include-superseded",
        help="Also return drawers replaced by newer ones."),
    as_json: bool = JsonOpt,
) -> None:
    """Search a palace (hybrid keyword + semantic).

    Prints the ranked drawers; with --budget, --levels or --deep prints the packed L0-L3
    context sections and the tokens they use instead.
    """
    name = need_palace(palace, as_json)
    extra: dict[str, Any] = {}
    if budget is not None:
        extra["budget"] = budget
    if levels is not None:
        try:
            extra["levels"] = parse_levels(levels)
        except E.InvalidArgs as exc:
            fail(exc, as_json)
    if deep:
        extra["deep"] = True
    if include_superseded:
        extra["include_superseded"] = True
    packed = budget is not None or levels is not None or deep
    with client(as_json) as c:
        res = c.recall_ex(name, query, top_k=top_k, wing=wing, room=room, tags=tag, **extra)

    def human(r: dict[str, Any]) -> None:
        if r.get("notice"):
            typer.echo(f"({r['notice']})", err=True)
        if packed:
            echo_lines(render.cli_sections(list(r.get("sections") or [])))
            typer.echo(render.cli_footer(r))
            return
        if not r["results"]:
            typer.echo("nothing found")
        for d in r["results"]:
            echo_lines(render.cli_drawer(d, score=True))

    emit(res, as_json, human)


@app.command("wake-up")
def wake_up(
    palace: str | None = PalaceOpt,
    budget: int = op_option("memory.wake_up", "budget", "--budget",
                            help="Token budget of the context."),
    as_json: bool = JsonOpt,
) -> None:
    """Print a palace's L0 identity and L1 essential drawers (for session-start hooks).

    Creates the palace when it does not exist yet, like the MCP wake_up tool, so a hook
    installed by `palace init --hooks` works in a brand-new project.
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        c.create_palace(name, exist_ok=True)
        res = c.wake_up(name, budget=budget)
    emit(res, as_json, lambda r: echo_lines(render.cli_wake_up(r.get("sections") or [])))


@app.command()
def get(drawer_id: int = op_argument("memory.get", "id"), palace: str | None = PalaceOpt,
        as_json: bool = JsonOpt) -> None:
    """Show one drawer."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        d = c.get(name, drawer_id)

    def human(d: dict[str, Any]) -> None:
        echo_lines(render.cli_drawer(d))
        typer.echo(render.cli_drawer_details(d))

    emit(d, as_json, human)


@app.command()
def forget(drawer_id: int = op_argument("memory.forget", "id"), palace: str | None = PalaceOpt,
           as_json: bool = JsonOpt) -> None:
    """Delete one drawer."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        c.forget(name, drawer_id)
    emit({"id": drawer_id, "forgotten": True}, as_json,
         lambda r: typer.echo(f"forgot drawer {drawer_id}"))


@app.command()
def drawers(
    palace: str | None = PalaceOpt,
    wing: str | None = op_option("memory.list", "wing", "--wing"),
    room: str | None = op_option("memory.list", "room", "--room"),
    limit: int = op_option("memory.list", "limit", "--limit", default=DRAWERS_PAGE),
    offset: int = op_option("memory.list", "offset", "--offset"),
    as_json: bool = JsonOpt,
) -> None:
    """List drawers, newest first (paginated with --limit/--offset)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.drawers(name, wing=wing, room=room, limit=limit, offset=offset)

    def human(r: dict[str, Any]) -> None:
        for d in r["drawers"]:
            echo_lines(render.cli_drawer(d))
        shown = offset + len(r["drawers"])
        more = f"; next: --offset {r['next_offset']}" if r.get("next_offset") is not None else ""
        typer.echo(f"({shown} of {r['total']}{more})")

    emit(res, as_json, human)
