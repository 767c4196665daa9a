"""Handlers of the daemon, palace and memory ops, and the table that names them."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from palaced import __version__, reads, recall, writes
from palaced.api import Handler, OpTable, check_label, check_text, need_palace
from palaced.errors import EmbedderUnavailable, InvalidArgs, PalaceError, quote
from palaced.specs import MAX_TIME_CHARS, MAX_TTL_S, REMEMBER_MANY_ITEM, decode_args
from palaced.store import drawers as m
from palaced.timeparse import parse_when

if TYPE_CHECKING:
    from palaced.daemon import Daemon

TIGHTENED_SHOWN = 20  # status lists this many tightened paths; the log has them all


def parse_importance(value: Any) -> float:
    """Importance as 0-1 or a preset name (critical, high, medium, low).

    Raises:
        InvalidArgs: anything else.
    """
    from palaced.rules import parse_importance as parse

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
    expires = None
    if args.get("ttl") is not None and args.get("expires_at") is not None:
        raise InvalidArgs("give ttl or expires_at, not both", details={"arg": "ttl"})
    if args.get("ttl") is not None:
        expires = now + parse_ttl(args["ttl"]) * 1000
    elif args.get("expires_at") is not None:
        expires = parse_when(args["expires_at"], now_ms=now)
    from palaced.topics import extract_topics

    return m.NewDrawer(
        text=text,
        wing=check_label(args.get("wing"), "wing") or m.DEFAULT_WING,
        room=check_label(args.get("room"), "room") or m.DEFAULT_ROOM,
        tags=tags,
        importance=parse_importance(args.get("importance", 0.5)),
        source=check_label(args.get("source"), "source"),
        occurred_ms=occurred,
        expires_ms=expires,
        topics=tuple(extract_topics(text)),
        supersedes=args.get("supersedes"),
    )


_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_ttl(value: str | int) -> int:
    """A time-to-live in whole seconds, 1 to MAX_TTL_S (100 years).

    Accepts an integer of seconds, or a string: an integer, or a number with a unit
    (``90s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1.5h``).

    Raises:
        InvalidArgs: anything else: not a number, infinite or NaN, under one second, or
            longer than 100 years.
    """
    seconds: float
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and len(value) <= MAX_TIME_CHARS:
        text = value.strip().lower()
        try:
            if text[-1:] in _TTL_UNITS:
                seconds = float(text[:-1]) * _TTL_UNITS[text[-1]]
            else:
                seconds = int(text)
        except ValueError:
            seconds = math.nan
    else:
        seconds = math.nan
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise InvalidArgs(f"bad ttl {quote(value, 60)}: use seconds or 90s/15m/12h/7d/2w",
                          details={"arg": "ttl", "value": quote(value, 60)})
    if seconds > MAX_TTL_S:
        raise InvalidArgs(f"ttl {quote(value, 60)} is longer than 100 years "
                          f"({MAX_TTL_S} seconds); omit ttl to keep a memory",
                          details={"arg": "ttl", "max_s": MAX_TTL_S})
    if int(seconds) <= 0:
        raise InvalidArgs("ttl must be at least one second", details={"arg": "ttl"})
    return int(seconds)




# -- daemon -----------------------------------------------------------------------------------
async def op_status(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    palaces = []
    for name in d.registry.names():
        try:
            info = await d.registry.peek(name)
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
        # Permissions this run tightened at start (see Daemon.tightened): shown for the whole
        # run, empty from the next start on since there is then nothing left to tighten.
        "tightened": {"count": len(d.tightened), "paths": d.tightened[:TIGHTENED_SHOWN]},
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
    info = await reads.info(p)
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
    return await reads.info(p)


async def op_reembed(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    """Re-embed a palace with the loaded model.

    Raises:
        EmbedderUnavailable: the model is still loading (retry shortly) or unavailable (the
            message says why).
    """
    p = await d.registry.get(need_palace(palace))
    model = d.services.model
    if model.embedder is None:
        # A reembed resent right after a daemon restart lands while the model loads.
        if model.state == "loading":
            raise EmbedderUnavailable(
                "cannot reembed yet: the embedding model is still loading; retry in a moment",
                details={"model": "loading"})
        raise EmbedderUnavailable(
            "cannot reembed: the embedding model is unavailable: "
            f"{model.reason or 'no model is configured'}",
            details={"model": model.state, "reason": model.reason})
    return await writes.reembed(p)


# -- memories ---------------------------------------------------------------------------------
async def op_remember(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    now = int(time.time() * 1000)
    # Topic extraction of a long text takes up to ~150 ms: keep it off the event loop.
    new = await anyio.to_thread.run_sync(lambda: drawer_from_args(d, args, now))
    # A correction (supersedes) is usually a near-duplicate of what it replaces: merging it
    # into the old drawer would lose it, so dedup defaults off then.
    dedup = args["dedup"] if args["dedup"] is not None else new.supersedes is None
    return await writes.remember(p, new, dedup=bool(dedup))


async def op_remember_many(d: Daemon, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    items = args["items"]
    if len(items) > d.config.limits.max_batch:
        raise InvalidArgs(f"at most {d.config.limits.max_batch} items per batch",
                          details={"items": len(items)})
    now = int(time.time() * 1000)

    def validate() -> list[m.NewDrawer]:
        drawers = []
        for i, raw in enumerate(items):
            try:
                drawers.append(drawer_from_args(d, decode_args(REMEMBER_MANY_ITEM, raw), now))
            except PalaceError as exc:
                exc.details["index"] = i
                exc.message = f"item {i}: {exc.message}"
                exc.args = (exc.message,)
                raise
        return drawers

    # Topic extraction of thousands of items would stall the event loop: do it in a thread.
    drawers = await anyio.to_thread.run_sync(validate)
    p = await d.registry.get(name)
    return await writes.remember_many(p, drawers, dedup=bool(args["dedup"]))


def filters_from_args(args: dict[str, Any]) -> m.Filters:
    tags = tuple(t for t in (check_label(t, "tag") for t in args.get("tags") or ()) if t)
    return m.Filters(
        wing=check_label(args.get("wing"), "wing"),
        room=check_label(args.get("room"), "room"),
        tags=tags,
    )


async def op_recall(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    from palaced.recall import RecallRequest

    p = await d.registry.get(need_palace(palace))
    query = args["query"]
    if "\x00" in query:
        raise InvalidArgs("query contains NUL bytes", details={"arg": "query"})
    levels = tuple(sorted(set(args["levels"])))
    if not levels or any(lv not in (0, 1, 2, 3) for lv in levels):
        raise InvalidArgs("levels must be a non-empty subset of 0, 1, 2, 3",
                          details={"arg": "levels", "value": args["levels"]})
    filters = filters_from_args(args)
    if args["include_superseded"]:
        filters = replace(filters, include_superseded=True)
    req = RecallRequest(query=query, top_k=int(args["top_k"]), filters=filters, levels=levels,
                        budget=int(args["budget"]), deep=bool(args["deep"]))
    return (await recall.recall(p, req)).to_wire()


async def op_wake_up(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return (await recall.wake_up(p, int(args["budget"]))).to_wire()


async def op_get(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return {"drawer": await reads.get(p, int(args["id"]))}


async def op_forget(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    await writes.forget(p, int(args["id"]))
    return {"id": args["id"], "forgotten": True}


async def op_list(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await d.registry.get(need_palace(palace))
    return await reads.list_drawers(p, filters_from_args(args), int(args["limit"]),
                                    int(args["offset"]))


HANDLERS: tuple[tuple[str, Handler], ...] = (
    ("daemon.status", op_status),
    ("daemon.stop", op_stop),
    ("palace.list", op_palace_list),
    ("palace.create", op_palace_create),
    ("palace.delete", op_palace_delete),
    ("palace.info", op_palace_info),
    ("palace.reembed", op_reembed),
    ("memory.remember", op_remember),
    ("memory.remember_many", op_remember_many),
    ("memory.recall", op_recall),
    ("memory.wake_up", op_wake_up),
    ("memory.get", op_get),
    ("memory.forget", op_forget),
    ("memory.list", op_list),
)


def build_table() -> OpTable:
    """Every op the daemon serves (``daemon.hello`` is handled by the server itself)."""
    from palaced.ops_knowledge import HANDLERS as KNOWLEDGE

    return OpTable([*HANDLERS, *KNOWLEDGE])
