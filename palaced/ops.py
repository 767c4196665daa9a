"""Handlers of the daemon, palace and memory ops, and the table that names them."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from palaced import __version__
from palaced.api import Arg, Op, OpTable, check_label, check_text, need_palace
from palaced.errors import InvalidArgs
from palaced.store import memories as m
from palaced.timeparse import parse_when

if TYPE_CHECKING:
    from palaced.daemon import Daemon

IMPORTANCE = Arg("str|float", default=0.5)


def parse_importance(value: Any) -> float:
    """Importance as 0-1 or a preset name (critical, high, medium, low).

    Raises:
        InvalidArgs: anything else.
    """
    from palaced.lifecycle import parse_importance as parse

    return parse(value)


def drawer_from_args(d: Daemon, args: dict[str, Any], now: int) -> m.NewDrawer:
    """Validate drawer fields into a NewDrawer.

    Raises:
        InvalidArgs, InvalidContent, TextTooLarge.
    """
    text = check_text(args["text"], d.config.limits.max_text_chars)
    tags = tuple(dict.fromkeys(t for t in (check_label(t, "tag") for t in args.get("tags") or ())
                               if t))
    occurred = parse_when(args["occurred_at"], now_ms=now) if args.get("occurred_at") else None
    from palaced.closets import extract_topics

    return m.NewDrawer(
        text=text,
        wing=check_label(args.get("wing"), "wing") or m.DEFAULT_WING,
        room=check_label(args.get("room"), "room") or m.DEFAULT_ROOM,
        tags=tags,
        importance=parse_importance(args.get("importance", 0.5)),
        source=check_label(args.get("source"), "source"),
        occurred_ms=occurred,
        topics=tuple(extract_topics(text)),
    )


DRAWER_ARGS: dict[str, Arg] = {
    "text": Arg("str", required=True),
    "wing": Arg("str", max_len=200),
    "room": Arg("str", max_len=200),
    "tags": Arg("strlist", default=[], max_len=64),
    "importance": IMPORTANCE,
    "source": Arg("str", max_len=200),
    "occurred_at": Arg("str|int"),
}


# -- daemon -----------------------------------------------------------------------------------
async def op_status(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    palaces = []
    for name in d.registry.names():
        try:
            p = await d.registry.get(name)
            info = await p.info()
            info.pop("rooms", None)
            info.pop("identity", None)
            palaces.append(info)
        except Exception as exc:  # one broken palace must not hide the others
            palaces.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    tok = d.services.tokenizer
    return {
        "version": __version__,
        "pid": os.getpid(),
        "uptime_s": round(time.monotonic() - d.started, 3),
        "socket": str(d.config.paths.socket),
        "data_dir": str(d.config.paths.data_dir),
        "log_file": str(d.config.paths.log_file),
        "model": d.services.model.as_dict(),
        "mode": "hybrid" if d.services.model.ready else "keyword-only",
        "tokenizer": {"name": tok.name, "exact": tok.exact, "reason": tok.reason},
        "connections": d.connections,
        "palaces": palaces,
    }


async def op_stop(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    d.request_stop()
    return {"stopping": True}


# -- palaces ----------------------------------------------------------------------------------
async def op_palace_list(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    open_ = d.registry.open_palaces
    return {"palaces": [
        {"name": n, "path": str(d.registry.path_of(n)), "open": n in open_}
        for n in d.registry.names()
    ]}


async def op_palace_create(d: Daemon, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    existed = d.registry.exists(name)
    p = await d.registry.create(name, exist_ok=bool(args["exist_ok"]))
    info = await p.info()
    info["created"] = not existed
    return info


async def op_palace_delete(d: Daemon, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    await d.registry.delete(name)
    return {"deleted": name}


async def op_palace_info(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return await p.info()


async def op_reembed(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return await p.reembed()


# -- memories ---------------------------------------------------------------------------------
async def op_remember(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    new = drawer_from_args(d, args, int(time.time() * 1000))
    return await p.remember(new)


async def op_remember_many(d: Daemon, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    items = args["items"]
    if len(items) > d.config.limits.max_batch:
        raise InvalidArgs(f"at most {d.config.limits.max_batch} items per batch",
                          details={"items": len(items)})
    now = int(time.time() * 1000)
    op = d.ops.get("memory.remember")
    from palaced.api import decode_args

    drawers = []
    for i, raw in enumerate(items):
        try:
            drawers.append(drawer_from_args(d, decode_args(op, raw), now))
        except Exception as exc:
            if hasattr(exc, "details"):
                exc.details["index"] = i
                exc.args = (f"item {i}: {exc}",)
                if hasattr(exc, "message"):
                    exc.message = f"item {i}: {exc.message}"
            raise
    p = await d.registry.get(name)
    return await p.remember_many(drawers)


def filters_from_args(args: dict[str, Any]) -> m.Filters:
    tags = tuple(t for t in (check_label(t, "tag") for t in args.get("tags") or ()) if t)
    return m.Filters(
        wing=check_label(args.get("wing"), "wing"),
        room=check_label(args.get("room"), "room"),
        tags=tags,
    )


async def op_recall(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    from palaced.palace import RecallRequest

    p = await d.registry.get(need_palace(palace))
    query = args["query"]
    if "\x00" in query:
        raise InvalidArgs("query contains NUL bytes", details={"arg": "query"})
    req = RecallRequest(query=query, top_k=int(args["top_k"]), filters=filters_from_args(args))
    return await p.recall(req)


async def op_get(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return {"drawer": await p.get(int(args["id"]))}


async def op_forget(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    await p.forget(int(args["id"]))
    return {"id": args["id"], "forgotten": True}


async def op_list(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return await p.list(filters_from_args(args), int(args["limit"]), int(args["offset"]))


def build_table() -> OpTable:
    """Every op the daemon serves (``daemon.hello`` is handled by the server itself)."""
    t = OpTable()
    t.add(Op("daemon.status", op_status))
    t.add(Op("daemon.stop", op_stop))
    t.add(Op("palace.list", op_palace_list))
    t.add(Op("palace.create", op_palace_create, {"exist_ok": Arg("bool", default=False)},
             palace="required"))
    t.add(Op("palace.delete", op_palace_delete, palace="required"))
    t.add(Op("palace.info", op_palace_info, palace="required"))
    t.add(Op("palace.reembed", op_reembed, palace="required"))
    t.add(Op("memory.remember", op_remember, dict(DRAWER_ARGS), palace="required"))
    t.add(Op("memory.remember_many", op_remember_many,
             {"items": Arg("list", required=True)}, palace="required"))
    t.add(Op("memory.recall", op_recall, {
        "query": Arg("str", required=True, max_len=10_000),
        "top_k": Arg("int", default=10, min=1, max=1000),
        "wing": Arg("str", max_len=200),
        "room": Arg("str", max_len=200),
        "tags": Arg("strlist", default=[], max_len=64),
    }, palace="required"))
    t.add(Op("memory.get", op_get, {"id": Arg("int", required=True, min=1)},
             palace="required"))
    t.add(Op("memory.forget", op_forget, {"id": Arg("int", required=True, min=1)},
             palace="required"))
    t.add(Op("memory.list", op_list, {
        "wing": Arg("str", max_len=200),
        "room": Arg("str", max_len=200),
        "tags": Arg("strlist", default=[], max_len=64),
        "limit": Arg("int", default=50, min=1, max=1000),
        "offset": Arg("int", default=0, min=0),
    }, palace="required"))
    return t
