"""Op handlers of the knowledge graph (``graph.*``) and memory lifecycle (``memory.decay``,
``memory.prune``, ``memory.consolidate``, ``memory.health``), and ``register`` to add them.

Handlers validate what the generic decoder cannot (times, labels, texts) and call
``palaced.knowledge``; every failure is a typed PalaceError.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from palaced import knowledge as k
from palaced import lifecycle
from palaced.api import (
    MAX_ID,
    MAX_TIME_CHARS,
    NO_LIMIT,
    Arg,
    Op,
    OpTable,
    check_label,
    check_text,
    need_palace,
)
from palaced.errors import InvalidArgs
from palaced.store import graph as g
from palaced.timeparse import parse_when

if TYPE_CHECKING:
    from palaced.daemon import Daemon
    from palaced.palace import Palace

WHEN = Arg("str|int", max_len=MAX_TIME_CHARS)
SOURCE_ARGS: dict[str, Arg] = {
    "valid_from": WHEN,
    "confidence": Arg("float", default=1.0, min=0.0, max=1.0),
    "source_drawer": Arg("int", min=1, max=MAX_ID),
    "source_url": Arg("str", max_len=g.MAX_VALUE_CHARS),
    "source_agent": Arg("str", max_len=g.MAX_NAME_CHARS),
}
NAME = Arg("str", required=True, max_len=g.MAX_NAME_CHARS)
PREDICATE = Arg("str", required=True, max_len=g.MAX_PREDICATE_CHARS)
THRESHOLD = Arg("float", default=lifecycle.DEFAULT_PRUNE_THRESHOLD, min=0.0, max=1.0)
MAX_CONSOLIDATE_IDS = 10_000


def _now() -> int:
    return int(time.time() * 1000)


def _when(args: dict[str, Any], key: str, now: int) -> int | None:
    """The time argument ``key`` as epoch ms, or None when absent.

    Raises:
        InvalidContent: not an ISO 8601 time or epoch milliseconds within years 1-9999.
    """
    value = args.get(key)
    return None if value is None else parse_when(value, now_ms=now)


async def _palace(d: Daemon, palace: str | None) -> Palace:
    return await d.registry.get(need_palace(palace))


def _sources(args: dict[str, Any], now: int) -> dict[str, Any]:
    return {
        "valid_from_ms": _when(args, "valid_from", now),
        "confidence": float(args["confidence"]),
        "source_drawer": args.get("source_drawer"),
        "source_url": args.get("source_url"),
        "source_agent": args.get("source_agent"),
    }


# -- graph ------------------------------------------------------------------------------------
async def op_graph_assert(d: Daemon, palace: str | None, args: dict[str, Any]
                          ) -> dict[str, Any]:
    p = await _palace(d, palace)
    fact = await k.kg_assert(p, args["subject"], args["predicate"], args["object"],
                             literal=bool(args["literal"]), **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_link(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    fact = await k.kg_link(p, args["a"], args["relation"], args["b"], **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_invalidate(d: Daemon, palace: str | None, args: dict[str, Any]
                              ) -> dict[str, Any]:
    p = await _palace(d, palace)
    fact = await k.kg_invalidate(p, int(args["id"]), at_ms=_when(args, "at", _now()))
    return {"fact": fact}


async def op_graph_query(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.kg_query(p, args["subject"], as_of_ms=_when(args, "as_of", _now()))


async def op_graph_timeline(d: Daemon, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.kg_timeline(p, args["subject"])


async def op_graph_neighbors(d: Daemon, palace: str | None, args: dict[str, Any]
                             ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.kg_neighbors(p, args["entity"], depth=int(args["depth"]),
                                relation=args.get("relation"),
                                as_of_ms=_when(args, "as_of", _now()),
                                max_nodes=int(args["max_nodes"]))


async def op_graph_path(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.kg_path(p, args["a"], args["b"], max_depth=int(args["max_depth"]),
                           as_of_ms=_when(args, "as_of", _now()))


async def op_graph_search(d: Daemon, palace: str | None, args: dict[str, Any]
                          ) -> dict[str, Any]:
    p = await _palace(d, palace)
    if "\x00" in args["query"]:
        raise InvalidArgs("query contains NUL bytes", details={"arg": "query"})
    return await k.kg_search(p, args["query"], limit=int(args["limit"]))


# -- lifecycle --------------------------------------------------------------------------------
async def op_decay(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.decay(p)


async def op_prune(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.prune(p, threshold=float(args["threshold"]), dry_run=bool(args["dry_run"]))


async def op_consolidate(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(d, palace)
    room = check_label(args["room"], "room")
    assert room is not None  # required by the spec, and check_label never blanks a value
    summary = check_text(args["summary"], d.config.limits.max_text_chars)
    ids = args.get("ids")
    if ids is not None and any(i < 1 for i in ids):
        raise InvalidArgs("ids must be positive drawer ids", details={"arg": "ids"})
    return await k.consolidate(p, room, summary, wing=check_label(args.get("wing"), "wing"),
                               ids=ids or None)


async def op_health(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await k.health(p, threshold=float(args["threshold"]),
                          stale_days=float(args["stale_days"]), limit=int(args["limit"]))


def register(table: OpTable) -> None:
    """Add the graph and lifecycle ops to ``table``."""
    r = "required"
    table.add(Op("graph.assert", op_graph_assert, {
        "subject": NAME,
        "predicate": PREDICATE,
        "object": Arg("str", required=True, max_len=g.MAX_VALUE_CHARS),
        "literal": Arg("bool", default=False),
        **SOURCE_ARGS,
    }, palace=r, doc="Record a fact subject-predicate-object valid from a time."))
    table.add(Op("graph.link", op_graph_link, {
        "a": NAME,
        "relation": PREDICATE,
        "b": NAME,
        **SOURCE_ARGS,
    }, palace=r, doc="Relate two concepts (part_of, depends_on, related_to, ...)."))
    table.add(Op("graph.invalidate", op_graph_invalidate, {
        "id": Arg("int", required=True, min=1, max=MAX_ID),
        "at": WHEN,
    }, palace=r, doc="End an active fact at a time (default now)."))
    table.add(Op("graph.query", op_graph_query, {
        "subject": NAME,
        "as_of": WHEN,
    }, palace=r, doc="Active facts about an entity, or those valid at as_of."))
    table.add(Op("graph.timeline", op_graph_timeline, {"subject": NAME}, palace=r,
                 doc="Every fact about an entity, closed ones included, oldest first."))
    table.add(Op("graph.neighbors", op_graph_neighbors, {
        "entity": NAME,
        "depth": Arg("int", default=1, min=0, max=g.MAX_DEPTH),
        "relation": Arg("str", max_len=g.MAX_PREDICATE_CHARS),
        "as_of": WHEN,
        "max_nodes": Arg("int", default=200, min=1, max=g.MAX_LIMIT),
    }, palace=r, doc="Entities within depth hops, with the facts between them."))
    table.add(Op("graph.path", op_graph_path, {
        "a": NAME,
        "b": NAME,
        "max_depth": Arg("int", default=6, min=1, max=g.MAX_PATH_DEPTH),
        "as_of": WHEN,
    }, palace=r, doc="A shortest chain of facts linking two entities."))
    table.add(Op("graph.search", op_graph_search, {
        "query": Arg("str", required=True, max_len=10_000),
        "limit": Arg("int", default=20, min=1, max=g.MAX_LIMIT),
    }, palace=r, doc="Full-text search over entity names, definitions and labels."))
    table.add(Op("memory.decay", op_decay, {}, palace=r,
                 doc="Recompute the decayed weight of every drawer."))
    table.add(Op("memory.prune", op_prune, {
        "threshold": THRESHOLD,
        "dry_run": Arg("bool", default=False),
    }, palace=r, doc="Delete low/medium drawers whose weight fell below threshold."))
    table.add(Op("memory.consolidate", op_consolidate, {
        "room": Arg("str", required=True, max_len=200),
        "summary": Arg("str", required=True, max_len=NO_LIMIT),
        "wing": Arg("str", max_len=200),
        "ids": Arg("intlist", max_len=MAX_CONSOLIDATE_IDS, min=1, max=MAX_ID),
    }, palace=r, doc="Write a summary drawer and mark its sources consolidated into it."))
    table.add(Op("memory.health", op_health, {
        "threshold": THRESHOLD,
        "stale_days": Arg("float", default=k.STALE_DAYS, min=0.0, max=36_500.0),
        "limit": Arg("int", default=k.HEALTH_LIST_LIMIT, min=1, max=1000),
    }, palace=r, doc="Per-room stale drawers, duplicate candidates and consolidation hints."))
