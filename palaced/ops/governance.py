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
from palaced.ops.fields import need_palace, parse_ttl, when
from palaced.palace.handle import Palace
from palaced.wire.errors import InvalidArgs, quote


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


def since_ms(value: str | int | None, now: int, arg: str = "since") -> int | None:
    """``palace.audit``'s ``since`` (or the argument ``arg``, e.g. a bulk forget's
    ``older_than``): a time (ISO 8601, epoch ms) or a duration back from ``now`` (``90m``,
    ``12h``, ``7d``: a number and a unit).

    Raises:
        InvalidArgs: a malformed duration. InvalidContent: a malformed time.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip()[-1:].lower() in ("s", "m", "h", "d", "w"):
        try:
            return now - parse_ttl(value) * 1000
        except InvalidArgs:
            # parse_ttl's own words name ``ttl`` and offer bare seconds, which ``since``
            # reads as epoch milliseconds.
            raise InvalidArgs(
                f"bad {arg} {quote(value, 60)}: use a duration back from now (90m, 12h, 7d) "
                "or a time (ISO 8601 such as 2023-05-08, or epoch milliseconds)",
                details={"arg": arg, "value": quote(value, 60)}) from None
    return when({arg: value}, arg, now)


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
