"""Handlers of the palace ops: list, create, delete, info, reembed."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from palaced.maintenance import reembed
from palaced.memory import audit
from palaced.ops.context import OpContext
from palaced.ops.fields import need_palace
from palaced.palace import reads, team
from palaced.retrieval import recall
from palaced.wire.errors import EmbedderUnavailable


async def op_palace_list(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    open_ = ctx.registry.open_palaces
    return {"palaces": [
        {"name": n, "path": str(ctx.registry.path_of(n)), "open": n in open_}
        for n in ctx.registry.names()
    ]}


async def op_palace_create(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    p, created = await ctx.registry.create(name, exist_ok=bool(args["exist_ok"]),
                                           store=args.get("store") or None)
    if created:
        await audit.record(p, ctx.actor, "created")
    info = await reads.info(p)
    info["created"] = created
    return info


async def op_palace_delete(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    ref = None
    if args.get("purge") and ctx.registry.exists(name):  # what to drop, read before detaching
        ref = await anyio.to_thread.run_sync(team.purge_ref, name, ctx.registry.path_of(name))
    await ctx.registry.delete(name)  # closed first: nothing of it is written any more
    dropped = ref is not None and await anyio.to_thread.run_sync(
        team.purge_sync, name, ref, ctx.services.config.team)
    return {"deleted": name, **({"purged": True} if dropped else {})}


async def op_palace_info(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    info = await reads.info(p)
    # What a recall runs now (recall.query_vector): hybrid while the palace's vectors serve
    # the loaded model, else keyword-only, and why.
    hybrid = p.vector_embedder() is not None
    return {**info, "recall_mode": "hybrid" if hybrid else "keyword",
            "keyword_reason": None if hybrid else recall.keyword_reason(p)}


async def op_reembed(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    """Re-embed a palace with the loaded model now (see
    ``palaced.maintenance.reembed.reembed_now``).

    Raises:
        EmbedderUnavailable: the model is still loading (retry shortly) or unavailable (the
            message says why).
    """
    p = await ctx.registry.get(need_palace(palace))
    team.refuse(ctx.registry, p.name, "reembed", "configure the palace's model on this "
                             "daemon instead (a team palace keeps the model it was made with)")
    model = ctx.services.model
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
    done = await reembed.reembed_now(p, model.embedder)
    await audit.record(p, ctx.actor, "reembedded", detail={"drawers": done["reembedded"]})
    return done
