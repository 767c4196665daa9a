"""Handlers of the memory lifecycle ops: ``memory.decay``, ``memory.prune``,
``memory.consolidate``, ``memory.health`` and the bulk upkeep ``memory.forget_many``,
``memory.restore_batch`` and ``memory.merge``.

Handlers validate what the generic decoder cannot (labels, texts, ids) and call
``palaced.memory.upkeep`` and ``palaced.memory.health``; every failure is a typed PalaceError.
"""

from __future__ import annotations

import time
from typing import Any

from palaced.memory import bulk, health, upkeep
from palaced.ops.context import OpContext
from palaced.ops.fields import check_label, check_query, check_text, need_palace, since_ms
from palaced.palace.handle import Palace
from palaced.wire.errors import InvalidArgs


async def _palace(ctx: OpContext, palace: str | None) -> Palace:
    return await ctx.registry.get(need_palace(palace))


async def op_decay(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await upkeep.decay(p)


async def op_prune(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await upkeep.prune(p, threshold=float(args["threshold"]), dry_run=bool(args["dry_run"]),
                              actor=ctx.actor, keep_ms=ctx.config.retention.trash_keep_ms)


async def op_consolidate(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    room = check_label(args["room"], "room")
    assert room is not None  # required by the spec, and check_label never blanks a value
    summary = check_text(args["summary"], ctx.config.limits.max_text_chars)
    ids = args.get("ids")
    if ids is not None and any(i < 1 for i in ids):
        raise InvalidArgs("ids must be positive drawer ids", details={"arg": "ids"})
    return await upkeep.consolidate(p, room, summary, wing=check_label(args.get("wing"), "wing"),
                                    ids=ids or None, actor=ctx.actor)


async def op_health(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await health.report(p, threshold=float(args["threshold"]),
                          stale_days=float(args["stale_days"]), limit=int(args["limit"]))


async def op_forget_many(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    tags = tuple(t for t in (check_label(t, "tag") for t in args["tags"]) if t is not None)
    query = args["query"]
    sel = bulk.Selection(
        wing=check_label(args["wing"], "wing"), room=check_label(args["room"], "room"),
        tags=tags, source=check_label(args["source"], "source"),
        before_ms=since_ms(args["older_than"], int(time.time() * 1000), "older_than"),
        query=None if query is None else check_query(query))
    return await bulk.forget_many(p, sel, ctx.actor, keep_ms=ctx.config.retention.trash_keep_ms,
                                  max_drawers=int(args["max_drawers"]),
                                  dry_run=bool(args["dry_run"]), show=int(args["show"]),
                                  expect=args["expect"])


async def op_restore_batch(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await bulk.restore_batch(p, bulk.check_batch(args["batch"]), ctx.actor,
                                    keep_ms=ctx.config.retention.trash_keep_ms)


async def op_merge(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await bulk.merge(p, args["ids"], ctx.actor, keep_ms=ctx.config.retention.trash_keep_ms,
                            dry_run=bool(args["dry_run"]))
