"""Handlers of the memoir ops (``memoir.*``): curated concept graphs.

The generic decoder has checked types and bounds against ``palaced.wire.specs``; names, labels,
relations and sources are checked by ``palaced.store`` (typed errors, nothing changed).
"""

from __future__ import annotations

from typing import Any

from palaced.memory import memoirs
from palaced.ops.context import OpContext
from palaced.ops.fields import check_query, need_palace
from palaced.palace import team
from palaced.palace.handle import Palace


async def _palace(ctx: OpContext, palace: str | None) -> Palace:
    name = need_palace(palace)
    team.refuse(ctx.registry, name, "memoirs", "keep curated knowledge in a local palace, or "
                             "use the knowledge graph (graph.*), which team palaces share")
    return await ctx.registry.get(name)


async def op_memoir_create(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    found = await memoirs.create(p, args["memoir"], description=args["description"],
                                 consolidation_threshold=int(args["consolidation_threshold"]),
                                 exist_ok=bool(args["exist_ok"]), actor=ctx.actor)
    return {"memoir": found, "created": found.pop("created")}


async def op_memoir_list(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    return {"memoirs": await memoirs.list_all(await _palace(ctx, palace))}


async def op_memoir_show(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await memoirs.show(p, args["memoir"], limit=int(args["limit"]),
                              offset=int(args["offset"]))


async def op_memoir_delete(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return {**await memoirs.delete(p, args["memoir"], actor=ctx.actor), "deleted": True}


async def op_memoir_add_concept(ctx: OpContext, palace: str | None, args: dict[str, Any]
                                ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    concept = await memoirs.add_concept(p, args["memoir"], args["name"], args["definition"],
                                        labels=args["labels"],
                                        confidence=float(args["confidence"]),
                                        sources=args["sources"], actor=ctx.actor)
    return {"concept": concept, "created": concept.pop("created")}


async def op_memoir_refine(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    concept = await memoirs.refine(p, args["memoir"], args["name"], args["definition"],
                                   labels=args["labels"], sources=args["sources"],
                                   actor=ctx.actor)
    return {"concept": concept, "changed": concept.pop("changed")}


async def op_memoir_search(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    text = args["query"]
    found = await memoirs.search(p, text=None if text is None else check_query(text),
                                 label=args["label"], memoir=args["memoir"],
                                 limit=int(args["limit"]))
    return {"concepts": found}


async def op_memoir_inspect(ctx: OpContext, palace: str | None, args: dict[str, Any]
                            ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await memoirs.inspect(p, args["memoir"], args["name"], depth=int(args["depth"]),
                                 max_nodes=int(args["max_nodes"]))


async def op_memoir_link(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    found = await memoirs.link(p, args["memoir"], args["name"], args["relation"], args["to"],
                               weight=float(args["weight"]), actor=ctx.actor)
    return {"link": found, "created": found.pop("created")}


async def op_memoir_unlink(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return await memoirs.unlink(p, args["memoir"], args["name"], args["relation"], args["to"],
                                actor=ctx.actor)


async def op_memoir_update(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    threshold = args["consolidation_threshold"]
    found = await memoirs.update(p, args["memoir"], description=args["description"],
                                 consolidation_threshold=None if threshold is None
                                 else int(threshold), actor=ctx.actor)
    return {"memoir": found, "changed": found.pop("changed")}


async def op_memoir_rename_concept(ctx: OpContext, palace: str | None, args: dict[str, Any]
                                   ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    concept = await memoirs.rename_concept(p, args["memoir"], args["name"], args["new_name"],
                                           actor=ctx.actor)
    return {"concept": concept, "changed": concept.pop("changed")}


async def op_memoir_delete_concept(ctx: OpContext, palace: str | None, args: dict[str, Any]
                                   ) -> dict[str, Any]:
    p = await _palace(ctx, palace)
    return {**await memoirs.delete_concept(p, args["memoir"], args["name"], actor=ctx.actor),
            "deleted": True}


HANDLERS = (
    ("memoir.create", op_memoir_create),
    ("memoir.list", op_memoir_list),
    ("memoir.show", op_memoir_show),
    ("memoir.delete", op_memoir_delete),
    ("memoir.add_concept", op_memoir_add_concept),
    ("memoir.refine", op_memoir_refine),
    ("memoir.search", op_memoir_search),
    ("memoir.inspect", op_memoir_inspect),
    ("memoir.link", op_memoir_link),
    ("memoir.unlink", op_memoir_unlink),
    ("memoir.update", op_memoir_update),
    ("memoir.rename_concept", op_memoir_rename_concept),
    ("memoir.delete_concept", op_memoir_delete_concept),
)
