"""Handlers of the knowledge-graph ops (``graph.*``).

Handlers validate what the generic decoder cannot (times, queries) and call
``palaced.memory.graph``; every failure is a typed PalaceError.
"""

from __future__ import annotations

import time
from typing import Any

from palaced.memory import graph
from palaced.ops.context import OpContext
from palaced.ops.fields import check_query, need_palace, when
from palaced.palace.handle import Palace


def _now() -> int:
    return int(time.time() * 1000)


async def _palace(ctx: OpContext, palace: str | None) -> Palace:
    return await ctx.registry.get(need_palace(palace))


def _sources(args: dict[str, Any], now: int) -> dict[str, Any]:
    return {
        "valid_from_ms": when(args, "valid_from", now),
        "confidence": float(args["confidence"]),
        "source_drawer": args.get("source_drawer"),
        "source_url": args.get("source_url"),
        "source_agent": args.get("source_agent"),
    }


async def op_graph_assert(ctx: OpContext, palace: str | None, args: dict[str, Any]
                          ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    fact = await graph.kg_assert(p, args["subject"], args["predicate"], args["object"],
                             literal=bool(args["literal"]), multi=args["multi"],
                             actor=ctx.actor, **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_link(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    fact = await graph.kg_link(p, args["a"], args["relation"], args["b"], actor=ctx.actor,
                               **_sources(args, _now()))
    return {"fact": fact}


async def op_graph_invalidate(ctx: OpContext, palace: str | None, args: dict[str, Any]
                              ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    fact = await graph.kg_invalidate(p, int(args["id"]), at_ms=when(args, "at", _now()),
                                     actor=ctx.actor)
    return {"fact": fact}


async def op_graph_query(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await graph.kg_query(p, args["subject"], as_of_ms=when(args, "as_of", _now()))


async def op_graph_timeline(ctx: OpContext, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await graph.kg_timeline(p, args["subject"])


async def op_graph_neighbors(ctx: OpContext, palace: str | None, args: dict[str, Any]
                             ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await graph.kg_neighbors(p, args["entity"], depth=int(args["depth"]),
                                relation=args.get("relation"),
                                as_of_ms=when(args, "as_of", _now()),
                                max_nodes=int(args["max_nodes"]))


async def op_graph_path(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await graph.kg_path(p, args["a"], args["b"], max_depth=int(args["max_depth"]),
                           as_of_ms=when(args, "as_of", _now()))


async def op_graph_overview(ctx: OpContext, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await graph.kg_overview(p, as_of_ms=when(args, "as_of", _now()),
                                   max_nodes=int(args["max_nodes"]),
                                   max_facts=int(args["max_facts"]))


async def op_graph_search(ctx: OpContext, palace: str | None, args: dict[str, Any]
                          ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    check_query(args["query"])
    return await graph.kg_search(p, args["query"], limit=int(args["limit"]), type=args["type"])


async def op_graph_describe(ctx: OpContext, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    labels = args["labels"]
    return await graph.kg_describe(p, args["entity"], type=args["type"],
                                   definition=args["definition"],
                                   labels=None if labels is None else list(labels),
                                   actor=ctx.actor)
