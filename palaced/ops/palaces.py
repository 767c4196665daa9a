"""Handlers of the palace ops: list, create, delete, info, reembed."""

from __future__ import annotations

from typing import Any

from palaced import audit, reads, reembed
from palaced.errors import EmbedderUnavailable
from palaced.ops.context import OpContext
from palaced.ops.fields import need_palace


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
    p, created = await ctx.registry.create(name, exist_ok=bool(args["exist_ok"]))
    if created:
        await audit.record(p, ctx.actor, "created")
    info = await reads.info(p)
    info["created"] = created
    return info


async def op_palace_delete(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    await ctx.registry.delete(name)
    return {"deleted": name}


async def op_palace_info(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    return await reads.info(p)


async def op_reembed(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    """Re-embed a palace with the loaded model now (see ``palaced.reembed.reembed_now``).

    Raises:
        EmbedderUnavailable: the model is still loading (retry shortly) or unavailable (the
            message says why).
    """
    p = await ctx.registry.get(need_palace(palace))
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
