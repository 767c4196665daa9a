"""Op handlers of the knowledge graph (``graph.*``) and memory lifecycle (``memory.decay``,
``memory.prune``, ``memory.consolidate``, ``memory.health``); their specs are in ``specs``.

Handlers validate what the generic decoder cannot (times, labels, texts) and call
``palaced.graph``, ``palaced.upkeep`` and ``palaced.health``; every failure is a typed
PalaceError.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from palaced import graph, health, upkeep
from palaced.api import Handler, check_label, check_text, need_palace
from palaced.errors import InvalidArgs
from palaced.timeparse import parse_when

if TYPE_CHECKING:
    from palaced.daemon import Daemon
    from palaced.palace import Palace


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
    fact = await graph.kg_assert(p, args["subject"], args["predicate"], args["object"],
                                 literal=bool(args["literal"]), **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_link(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    fact = await graph.kg_link(p, args["a"], args["relation"], args["b"],
                               **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_invalidate(d: Daemon, palace: str | None, args: dict[str, Any]
                              ) -> dict[str, Any]:
    p = await _palace(d, palace)
    fact = await graph.kg_invalidate(p, int(args["id"]), at_ms=_when(args, "at", _now()))
    return {"fact": fact}


async def op_graph_query(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await graph.kg_query(p, args["subject"], as_of_ms=_when(args, "as_of", _now()))


async def op_graph_timeline(d: Daemon, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await graph.kg_timeline(p, args["subject"])


async def op_graph_neighbors(d: Daemon, palace: str | None, args: dict[str, Any]
                             ) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await graph.kg_neighbors(p, args["entity"], depth=int(args["depth"]),
                                    relation=args.get("relation"),
                                    as_of_ms=_when(args, "as_of", _now()),
                                    max_nodes=int(args["max_nodes"]))


async def op_graph_path(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await graph.kg_path(p, args["a"], args["b"], max_depth=int(args["max_depth"]),
                               as_of_ms=_when(args, "as_of", _now()))


async def op_graph_search(d: Daemon, palace: str | None, args: dict[str, Any]
                          ) -> dict[str, Any]:
    p = await _palace(d, palace)
    if "\x00" in args["query"]:
        raise InvalidArgs("query contains NUL bytes", details={"arg": "query"})
    return await graph.kg_search(p, args["query"], limit=int(args["limit"]))


# -- lifecycle --------------------------------------------------------------------------------
async def op_decay(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await upkeep.decay(p)


async def op_prune(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await upkeep.prune(p, threshold=float(args["threshold"]),
                              dry_run=bool(args["dry_run"]))


async def op_consolidate(d: Daemon, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(d, palace)
    room = check_label(args["room"], "room")
    assert room is not None  # required by the spec, and check_label never blanks a value
    summary = check_text(args["summary"], d.config.limits.max_text_chars)
    ids = args.get("ids")
    if ids is not None and any(i < 1 for i in ids):
        raise InvalidArgs("ids must be positive drawer ids", details={"arg": "ids"})
    return await upkeep.consolidate(p, room, summary,
                                    wing=check_label(args.get("wing"), "wing"), ids=ids or None)


async def op_health(d: Daemon, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(d, palace)
    return await health.report(p, threshold=float(args["threshold"]),
                               stale_days=float(args["stale_days"]), limit=int(args["limit"]))


HANDLERS: tuple[tuple[str, Handler], ...] = (
    ("graph.assert", op_graph_assert),
    ("graph.link", op_graph_link),
    ("graph.invalidate", op_graph_invalidate),
    ("graph.query", op_graph_query),
    ("graph.timeline", op_graph_timeline),
    ("graph.neighbors", op_graph_neighbors),
    ("graph.path", op_graph_path),
    ("graph.search", op_graph_search),
    ("memory.decay", op_decay),
    ("memory.prune", op_prune),
    ("memory.consolidate", op_consolidate),
    ("memory.health", op_health),
)
