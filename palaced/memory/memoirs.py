"""Memoirs of an open palace: the async verbs over curated concept graphs.

A memoir is a named container of concepts (definition, ``namespace:value`` labels, confidence,
revision, source drawers) related by the nine typed relations. The rules live in the
synchronous ``store.knowledge`` modules ``memoirs``, ``concepts`` and ``concept_links``; each verb
here runs them in one hop of the ``Palace`` handle: reads in one reader snapshot
(``Palace.read``), writes in one transaction (``Palace.transact``). Recall's L2 shows the
concepts a query points at (``store.knowledge.concepts.concepts_matching``, called by ``recall``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from palaced.palace.handle import Palace
from palaced.palace.handle import now_ms as clock_ms
from palaced.store.knowledge import concept_links, concepts, memoirs


async def create(palace: Palace, memoir: str, *, description: str = "",
                 consolidation_threshold: int, exist_ok: bool = False) -> dict[str, Any]:
    """Create a memoir; returns it with ``created``.

    Raises:
        InvalidContent: an invalid name or description; InvalidArgs: a bad threshold.
        MemoirExists: it exists and ``exist_ok`` is false.
    """
    ts = clock_ms()
    return await palace.transact(lambda c: memoirs.create_memoir(
        c, memoir, description=description, consolidation_threshold=consolidation_threshold,
        exist_ok=exist_ok, now_ms=ts))


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


async def delete(palace: Palace, memoir: str) -> dict[str, Any]:
    """Delete a memoir with its concepts and links, in one transaction.

    Raises:
        InvalidContent: an invalid name; MemoirNotFound: no such memoir.
    """
    return await palace.transact(lambda c: memoirs.delete_memoir(c, memoir))


async def add_concept(palace: Palace, memoir: str, name: str, definition: str, *,
                      labels: Sequence[str], confidence: float, sources: Sequence[int]
                      ) -> dict[str, Any]:
    """Add a concept (see ``store.knowledge.concepts.add_concept``); returns it with ``created``.

    Raises:
        InvalidContent, InvalidArgs, MemoirNotFound, MemoryNotFound, ConceptExists.
    """
    ts = clock_ms()
    return await palace.transact(lambda c: concepts.add_concept(
        c, memoir, name, definition, labels=labels, confidence=confidence, sources=sources,
        now_ms=ts))


async def refine(palace: Palace, memoir: str, name: str, definition: str, *,
                 labels: Sequence[str], sources: Sequence[int]) -> dict[str, Any]:
    """Refine a concept (``store.knowledge.concepts.refine_concept``); returns it with ``changed``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound, MemoryNotFound.
    """
    ts = clock_ms()
    return await palace.transact(lambda c: concepts.refine_concept(
        c, memoir, name, definition, labels=labels, sources=sources, now_ms=ts))


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
               weight: float) -> dict[str, Any]:
    """Link two concepts of a memoir; returns the link with ``created``.

    Raises:
        InvalidContent: an unknown relation or a self-link; InvalidArgs: a bad weight;
        MemoirNotFound, ConceptNotFound.
    """
    ts = clock_ms()
    return await palace.transact(lambda c: concept_links.link(
        c, memoir, name, relation, to, weight=weight, now_ms=ts))


async def unlink(palace: Palace, memoir: str, name: str, relation: str, to: str
                 ) -> dict[str, Any]:
    """Remove a link; ``{"removed", "link"}``.

    Raises:
        InvalidContent, MemoirNotFound, ConceptNotFound.
    """
    return await palace.transact(lambda c: concept_links.unlink(c, memoir, name, relation, to))
