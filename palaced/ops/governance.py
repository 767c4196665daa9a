"""Handlers of the trash, audit and policy ops: ``memory.restore``, ``memory.trash``,
``memory.empty_trash``, ``palace.audit``, ``palace.policy`` and ``palace.policy_set``.

(``memory.forget`` itself is in ``drawers``.) The keep periods come from the daemon's
``config.Retention``; who is asking from the request's context.
"""

from __future__ import annotations

import time
from typing import Any

from palaced.memory import audit, policy, trash
from palaced.ops.context import OpContext
from palaced.ops.fields import need_palace, since_ms
from palaced.palace.handle import Palace


async def _palace(ctx: OpContext, palace: str | None) -> Palace:
    return await ctx.registry.get(need_palace(palace))


async def op_restore(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await trash.restore(p, int(args["id"]), ctx.actor,
                               keep_ms=ctx.config.retention.trash_keep_ms)


async def op_trash(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await trash.list_trash(p, keep_ms=ctx.config.retention.trash_keep_ms,
                                  limit=int(args["limit"]), offset=int(args["offset"]))


async def op_empty_trash(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await trash.empty(p, ctx.actor)


async def op_audit(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    since = since_ms(args["since"], int(time.time() * 1000))
    return await audit.entries(p, since_ms=since, agent=args["agent"], op=args["op"],
                               limit=int(args["limit"]), offset=int(args["offset"]))


async def op_policy(ctx: OpContext, palace: str | None, args: dict[str, Any]
                    ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return policy.describe(await policy.current(p), ctx.agent)


async def op_policy_set(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    changed = await policy.set_policy(p, ctx.actor, {args["permission"]: args["agents"]})
    return policy.describe(changed, ctx.agent)
