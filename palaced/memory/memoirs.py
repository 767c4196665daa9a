"""Memoirs of an open palace: the async verbs over curated concept graphs.

A memoir is a named container of concepts (definition, ``namespace:value`` labels, confidence,
revision, source drawers) related by the nine typed relations. The rules live in the
synchronous ``store.knowledge`` modules ``memoirs``, ``concepts`` and ``concept_links``; each verb
here runs them in one hop of the ``Palace`` handle: reads in one reader snapshot
(``Palace.read``), writes in one transaction (``Palace.transact``), each write that changes
something audited in it (``audited``: the memoir's and concept's ids and the source drawers,
never names or definitions). Recall's L2 shows the concepts a query points at
(``store.knowledge.concepts.concepts_matching``, called by ``recall``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import apsw

from palaced.palace.handle import Palace
from palaced.palace.handle import now_ms as clock_ms
from palaced.store.knowledge import concept_links, concepts, memoirs
from palaced.store.rows import audit

T = TypeVar("T")
# What a write's result says to record: (outcome, detail, drawer ids), or None (unchanged).
Entry = tuple[str, dict[str, Any], Sequence[int]] | None


async def audited(palace: Palace, actor: audit.Actor, write: Callable[[apsw.Connection], T],
                  entry: Callable[[T], Entry]) -> T:
    """Run ``write`` in one transaction and record ``entry(result)`` in the audit log in it."""
    def tx(c: apsw.Connection) -> T:
        result = write(c)
        got = entry(result)
        if got is not None:
            outcome, detail, drawer_ids = got
            audit.append(c, actor, outcome, clock_ms(), drawer_ids=drawer_ids, detail=detail)
        return result

    return await palace.transact(tx)


def _concept_entry(flag: str, outcome: str) -> Callable[[dict[str, Any]], Entry]:
    return lambda r: (outcome, {"concept": r["id"]}, r["sources"]) if r[flag] else None


async def create(palace: Palace, memoir: str, *, description: str = "",
                 consolidation_threshold: int, exist_ok: bool = False,
                 actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Create a memoir; returns it with ``created``.

    Raises:
        InvalidContent: an invalid name or description; InvalidArgs: a bad threshold.
        MemoirExists: it exists and ``exist_ok`` is false.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: memoirs.create_memoir(
        c, memoir, description=description, consolidation_threshold=consolidation_threshold,
        exist_ok=exist_ok, now_ms=ts),
        lambda r: ("created", {"memoir": r["id"]}, ()) if r["created"] else None)


async def update(palace: Palace, memoir: str, *, description: str | None,
                 consolidation_threshold: int | None, actor: audit.Actor = audit.SYSTEM
                 ) -> dict[str, Any]:
    """Change a memoir's description and/or consolidation threshold; returns it with
    ``changed`` (the fields changed).

    Raises:
        InvalidContent: an invalid name or description; InvalidArgs: a bad threshold, or
            nothing to change; MemoirNotFound: no such memoir.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: memoirs.update_memoir(
        c, memoir, description=description, consolidation_threshold=consolidation_threshold,
        now_ms=ts), lambda r: ("updated", {"memoir": r["id"], "changed": ",".join(r["changed"])},
                               ()) if r["changed"] else None)


async def list_all(palace: Palace) -> list[dict[str, Any]]:
    """Every memoir of the palace with its counts."""
    return await palace.read(memoirs.list_memoirs)


async def show(palace: Palace, memoir: str, *, limit: int, offset: int) -> dict[str, Any]:
    """A memoir, its stats (average confidence, top labels) and a page of its concepts.

    Returns ``{"memoir", "stats", "concepts", "next_offset"}``.

    Raises:
        InvalidContent: an invalid name; MemoirNotFound: no such memoir.
    """
    def run(c: apsw.Connection) -> dict[str, Any]:
        found = memoirs.get_memoir(c, memoir)
        page = concepts.list_concepts(c, found["id"], limit, offset)
        more = offset + len(page) < found["concepts"]
        return {"memoir": found, "stats": memoirs.memoir_stats(c, found["id"]),
                "concepts": page, "next_offset": offset + len(page) if more else None}

    return await palace.read(run)


async def delete(palace: Palace, memoir: str, *, actor: audit.Actor = audit.SYSTEM
                 ) -> dict[str, Any]:
    """Delete a memoir with its concepts and links, in one transaction.

    Raises:
        InvalidContent: an invalid name; MemoirNotFound: no such memoir.
    """
    def write(c: apsw.Connection) -> dict[str, Any]:
        mid = memoirs.memoir_id(c, memoir)
        return {**memoirs.delete_memoir(c, memoir), "id": mid}

    found = await audited(palace, actor, write, lambda r: (
        "deleted", {"memoir": r["id"], "concepts": r["concepts"], "links": r["links"]}, ()))
    found.pop("id")
    return dict(found)


async def add_concept(palace: Palace, memoir: str, name: str, definition: str, *,
                      labels: Sequence[str], confidence: float, sources: Sequence[int],
                      actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Add a concept (see ``store.knowledge.concepts.add_concept``); returns it with ``created``.

    Raises:
        InvalidContent, InvalidArgs, MemoirNotFound, MemoryNotFound, ConceptExists.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: concepts.add_concept(
        c, memoir, name, definition, labels=labels, confidence=confidence, sources=sources,
        now_ms=ts), _concept_entry("created", "created"))


async def refine(palace: Palace, memoir: str, name: str, definition: str, *,
                 labels: Sequence[str], sources: Sequence[int],
                 actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Refine a concept (``store.knowledge.concepts.refine_concept``); returns it with ``changed``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound, MemoryNotFound.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: concepts.refine_concept(
        c, memoir, name, definition, labels=labels, sources=sources, now_ms=ts),
        _concept_entry("changed", "updated"))


async def rename_concept(palace: Palace, memoir: str, name: str, new_name: str, *,
                         actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Rename a concept (``store.knowledge.concepts.rename_concept``); returns it with
    ``changed``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound, ConceptExists.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: concepts.rename_concept(
        c, memoir, name, new_name, now_ms=ts), _concept_entry("changed", "renamed"))


async def delete_concept(palace: Palace, memoir: str, name: str, *,
                         actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Delete a concept with its labels, sources and links: ``{"concept", "links"}``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound.
    """
    return await audited(palace, actor, lambda c: concepts.delete_concept(c, memoir, name),
                         lambda r: ("deleted", {"concept": r["concept"]["id"],
                                                "links": r["links"]}, r["concept"]["sources"]))


async def search(palace: Palace, *, text: str | None, label: str | None,
                 memoir: str | None, limit: int) -> list[dict[str, Any]]:
    """Concepts by words and/or label, in one memoir or all of them, best first.

    Raises:
        InvalidArgs: neither words nor a label; InvalidContent: a bad label or memoir name;
        MemoirNotFound: no such memoir.
    """
    return await palace.read(lambda c: concepts.search_concepts(
        c, text=text, label=label, memoir=memoir, limit=limit))


async def inspect(palace: Palace, memoir: str, name: str, *, depth: int, max_nodes: int
                  ) -> dict[str, Any]:
    """A concept and its neighbourhood (see ``store.knowledge.concept_links.neighbourhood``).

    Raises:
        InvalidArgs, InvalidContent, MemoirNotFound, ConceptNotFound.
    """
    return await palace.read(lambda c: concept_links.neighbourhood(
        c, memoir, name, depth, max_nodes=max_nodes))


async def link(palace: Palace, memoir: str, name: str, relation: str, to: str, *,
               weight: float, actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Link two concepts of a memoir; returns the link with ``created``.

    Raises:
        InvalidContent: an unknown relation or a self-link; InvalidArgs: a bad weight;
        MemoirNotFound, ConceptNotFound.
    """
    ts = clock_ms()
    return await audited(palace, actor, lambda c: concept_links.link(
        c, memoir, name, relation, to, weight=weight, now_ms=ts),
        lambda r: ("linked", {"link": r["id"]}, ()) if r["created"] else None)


async def unlink(palace: Palace, memoir: str, name: str, relation: str, to: str, *,
                 actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Remove a link; ``{"removed", "link"}``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound.
    """
    return await audited(palace, actor, lambda c: concept_links.unlink(
        c, memoir, name, relation, to),
        lambda r: ("unlinked", {"link": r["link"]["id"]}, ()) if r["removed"] else None)
