"""Handlers of the drawer ops: remember, remember_many, recall, recall_all, wake_up, get,
update, forget, list."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio.to_thread

from palaced.memory import edits, trash, truth, writes
from palaced.ops.context import OpContext
from palaced.ops.fields import (
    check_query,
    check_text,
    drawer_from_args,
    drawers_from_items,
    edit_from_args,
    filters_from_args,
    need_palace,
)
from palaced.palace import reads
from palaced.retrieval import recall
from palaced.retrieval.recall import RecallRequest
from palaced.text.timeparse import iso
from palaced.wire.errors import InvalidArgs, MemoryNotFound, PalaceError


async def op_remember(ctx: OpContext, palace: str | None, args: dict[str, Any]
                      ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    now = int(time.time() * 1000)
    limit = ctx.config.limits.max_text_chars
    # Topic extraction of a long text takes up to ~150 ms: keep it off the event loop.
    new = await anyio.to_thread.run_sync(lambda: drawer_from_args(limit, args, now))
    # A correction (supersedes) is usually a near-duplicate of what it replaces: merging it
    # into the old drawer would lose it, so dedup defaults off then.
    dedup = args["dedup"] if args["dedup"] is not None else new.supersedes is None
    return await writes.remember(p, new, dedup=bool(dedup), actor=ctx.actor)


async def op_remember_many(ctx: OpContext, palace: str | None, args: dict[str, Any]
                           ) -> dict[str, Any]:
    name = need_palace(palace)
    limits = ctx.config.limits
    now = int(time.time() * 1000)
    # Topic extraction of thousands of items would stall the event loop: do it in a thread.
    drawers = await anyio.to_thread.run_sync(lambda: drawers_from_items(
        limits.max_text_chars, limits.max_batch, args["items"], now))
    p = await ctx.registry.get(name)
    return await writes.remember_many(p, drawers, dedup=bool(args["dedup"]), actor=ctx.actor)


async def op_recall(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    query = check_query(args["query"])
    levels = tuple(sorted(set(args["levels"])))
    if not levels or any(lv not in (0, 1, 2, 3) for lv in levels):
        raise InvalidArgs("levels must be a non-empty subset of 0, 1, 2, 3",
                          details={"arg": "levels", "value": args["levels"]})
    filters = filters_from_args(args)
    if args["include_superseded"]:
        filters = replace(filters, include_superseded=True)
    req = RecallRequest(query=query, top_k=int(args["top_k"]), filters=filters, levels=levels,
                        budget=int(args["budget"]), deep=bool(args["deep"]),
                        compact=bool(args["compact"]), for_agent=bool(args["for_agent"]),
                        exclude=frozenset(args["exclude"]))
    return (await recall.recall(p, req)).to_wire()


async def op_recall_all(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    """Rank every palace for the query and merge by relevance (one scale for all palaces).

    A palace that cannot be opened or searched (damaged, needs a reembed...) is listed in
    ``skipped`` with its error instead of failing the whole recall. Palaces are searched one
    at a time, each kept open only while searched when the open-palace budget is reached, so
    every palace answers however many there are.
    """
    query = check_query(args["query"])
    filters = filters_from_args(args)
    if args["include_superseded"]:
        filters = replace(filters, include_superseded=True)
    top_k = int(args["top_k"])
    req = RecallRequest(query=query, top_k=top_k, filters=filters, levels=(), budget=0)
    merged: list[dict[str, Any]] = []
    searched: list[str] = []
    skipped: list[dict[str, Any]] = []
    modes: set[str] = set()
    for name in ctx.registry.names():
        try:
            async with ctx.registry.budget.using(name, passing=True) as p:
                found = await recall.recall(p, req)
        except PalaceError as exc:
            skipped.append({"palace": name, "error": exc.name, "message": exc.message})
            continue
        searched.append(name)
        modes.add("hybrid" if found.hybrid else "keyword")
        merged += [{**r, "palace": name} for r in found.results]
    # Relevance first; the fused rank score (per palace) breaks ties.
    merged.sort(key=lambda r: (-float(r["score"]), -float(r["rank_score"])))
    results = merged[:top_k]
    return {"results": results, "palaces": searched, "skipped": skipped,
            "mode": "hybrid" if modes == {"hybrid"} else "keyword" if modes else "hybrid",
            "nothing_relevant": not any(not r["below_floor"] for r in results)}


async def op_wake_up(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    return (await recall.wake_up(p, int(args["budget"]),
                                 compact=bool(args["compact"]),
                                 for_agent=bool(args["for_agent"]))).to_wire()


async def op_get(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    did = int(args["id"])
    try:
        drawer = await reads.get(p, did, history=bool(args["history"]))
    except MemoryNotFound as exc:
        keep = ctx.config.retention.trash_keep_ms
        entry = await trash.in_trash(p, did, keep_ms=keep)
        if entry is None:
            raise
        until = entry["trashed_ms"] + keep
        raise MemoryNotFound(
            f"drawer {did} is in the trash of palace {p.name!r} (forgotten by "
            f"{entry['trashed_by']} at {iso(entry['trashed_ms'])}, {entry['reason']}); "
            f"`palace restore-drawer {did} --palace {p.name}` brings it back until "
            f"{iso(until)}", details={**exc.details, "in_trash": True, "reason":
                                      entry["reason"], "trashed_ms": entry["trashed_ms"],
                                      "trashed_by": entry["trashed_by"],
                                      "restorable_until_ms": until}) from None
    if args.get("max_tokens") is not None:
        drawer = await _cut_to_tokens(ctx, drawer, int(args["max_tokens"]))
    return {"drawer": drawer}


async def _cut_to_tokens(ctx: OpContext, drawer: dict[str, Any], max_tokens: int
                         ) -> dict[str, Any]:
    """``drawer`` with ``tokens`` (its whole text's count) and, past ``max_tokens``, its text
    cut to that many tokens and ``truncated``. Counting a 200k-character text takes tens of
    milliseconds: off the event loop."""
    tok = await ctx.services.ready_tokenizer()
    text = str(drawer.get("text", ""))
    count = await anyio.to_thread.run_sync(tok.count, text)
    if count <= max_tokens:
        return {**drawer, "tokens": count, "truncated": False}
    cut = await anyio.to_thread.run_sync(tok.truncate, text, max_tokens)
    return {**drawer, "text": cut, "tokens": count, "truncated": True}


async def op_update(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    edit = edit_from_args(ctx.config.limits.max_text_chars, args)
    return await edits.update(p, int(args["id"]), edit, actor=ctx.actor)


async def op_forget(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    return await trash.forget(p, int(args["id"]), ctx.actor, purge=bool(args["purge"]),
                              keep_ms=ctx.config.retention.trash_keep_ms)


async def op_list(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    return await reads.list_drawers(p, filters_from_args(args), int(args["limit"]),
                                    int(args["offset"]))


async def op_conflicts(ctx: OpContext, palace: str | None, args: dict[str, Any]
                       ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    return await truth.list_conflicts(p, include_resolved=bool(args["include_resolved"]),
                                      limit=int(args["limit"]))


async def op_resolve_conflict(ctx: OpContext, palace: str | None, args: dict[str, Any]
                              ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    text = args.get("text")
    if text is not None:
        text = check_text(text, ctx.config.limits.max_text_chars)
    return await truth.resolve_conflict(p, int(args["id"]), str(args["resolution"]),
                                        text=text, actor=ctx.actor)
