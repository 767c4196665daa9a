"""Knowledge graph over an open Palace: the async ``kg_*`` operations.

The rules live in the synchronous ``store.graph`` (entities and temporal facts) and
``store.graph_walk`` (search, neighbourhoods, paths); this module runs them with one
worker-thread hop per unit of work (``hops``): reads in one reader snapshot, writes under the
palace's ``write_lock`` in a shielded scope, bumping ``write_counter``.

The memory lifecycle (decay, prune, expiry, consolidation, health) lives in ``lifecycle_ops``;
its operations are re-exported here for existing callers.
"""

from __future__ import annotations

from typing import Any

import apsw

from palaced import hops
from palaced.lifecycle_ops import CONSOLIDATE_OVER as CONSOLIDATE_OVER
from palaced.lifecycle_ops import DECAY_INTERVAL_MS as DECAY_INTERVAL_MS
from palaced.lifecycle_ops import NEAR_DUP_MAX_ROOM as NEAR_DUP_MAX_ROOM
from palaced.lifecycle_ops import PREVIEW_CHARS as PREVIEW_CHARS
from palaced.lifecycle_ops import SUMMARY_IMPORTANCE as SUMMARY_IMPORTANCE
from palaced.lifecycle_ops import SUMMARY_KIND as SUMMARY_KIND
from palaced.lifecycle_ops import SUMMARY_SOURCE as SUMMARY_SOURCE
from palaced.lifecycle_ops import SWEEP_BATCH as SWEEP_BATCH
from palaced.lifecycle_ops import _last_decay as _last_decay
from palaced.lifecycle_ops import consolidate as consolidate
from palaced.lifecycle_ops import decay as decay
from palaced.lifecycle_ops import duplicate_key as duplicate_key
from palaced.lifecycle_ops import health as health
from palaced.lifecycle_ops import maybe_decay as maybe_decay
from palaced.lifecycle_ops import prune as prune
from palaced.lifecycle_ops import sweep_expired as sweep_expired
from palaced.palace import Palace
from palaced.palace import now_ms as clock_ms
from palaced.store import graph, graph_walk


# -- knowledge graph --------------------------------------------------------------------------
async def kg_assert(
    palace: Palace,
    subject: str,
    predicate: str,
    obj: str,
    *,
    valid_from_ms: int | None = None,
    confidence: float = 1.0,
    source_drawer: int | None = None,
    source_url: str | None = None,
    source_agent: str | None = None,
    literal: bool = False,
) -> dict[str, Any]:
    """Record that ``subject predicate obj`` holds from ``valid_from_ms`` (default now).

    ``literal`` stores ``obj`` as a value rather than an entity. A single-valued predicate
    closes the interval of the fact it replaces (see ``graph.assert_fact``). Returns the fact.

    Raises:
        InvalidContent: self-link, invalid names, predicate, value or time.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer of this palace.
    """
    ts = clock_ms()
    return await hops.write(palace, lambda c: graph.assert_fact(
        c, subject, predicate, obj, valid_from_ms=valid_from_ms, now_ms=ts,
        confidence=confidence, source_drawer=source_drawer, source_url=source_url,
        source_agent=source_agent, object_is_entity=not literal))


async def kg_link(
    palace: Palace,
    a: str,
    relation: str,
    b: str,
    *,
    valid_from_ms: int | None = None,
    confidence: float = 1.0,
    source_drawer: int | None = None,
    source_url: str | None = None,
    source_agent: str | None = None,
) -> dict[str, Any]:
    """Relate two concepts (typed relations such as ``depends_on`` stay multi-valued).

    Raises:
        InvalidContent: ``a`` and ``b`` are the same concept, or invalid names or relation.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer of this palace.
    """
    ts = clock_ms()
    return await hops.write(palace, lambda c: graph.link(
        c, a, relation, b, now_ms=ts, valid_from_ms=valid_from_ms, confidence=confidence,
        source_drawer=source_drawer, source_url=source_url, source_agent=source_agent))


async def kg_invalidate(palace: Palace, fact_id: int, *, at_ms: int | None = None
                        ) -> dict[str, Any]:
    """End an active fact at ``at_ms`` (default now); a closed fact is returned unchanged.

    Raises:
        FactNotFound: no such fact.
        InvalidContent: invalid time.
    """
    at = clock_ms() if at_ms is None else at_ms
    return await hops.write(palace, lambda c: graph.invalidate_fact(c, fact_id, at_ms=at))


async def kg_query(palace: Palace, subject: str, *, as_of_ms: int | None = None
                   ) -> dict[str, Any]:
    """The facts about ``subject``: active ones, or those valid at ``as_of_ms``.

    Returns ``{"subject", "entity", "as_of_ms", "facts"}``; ``entity`` is None when unknown.

    Raises:
        InvalidContent: invalid name or time.
    """
    def run(c: apsw.Connection) -> dict[str, Any]:
        entity = graph.get_entity(c, subject)
        facts = (graph.active_facts(c, subject) if as_of_ms is None
                 else graph.facts_as_of(c, subject, as_of_ms))
        return {"subject": subject, "entity": entity, "as_of_ms": as_of_ms, "facts": facts}

    return await hops.read(palace, run)


async def kg_timeline(palace: Palace, subject: str) -> dict[str, Any]:
    """Every fact, closed ones included, where ``subject`` is subject or object, oldest first.

    Raises:
        InvalidContent: invalid name.
    """
    def run(c: apsw.Connection) -> dict[str, Any]:
        return {"subject": subject, "entity": graph.get_entity(c, subject),
                "facts": graph.timeline(c, subject)}

    return await hops.read(palace, run)


async def kg_neighbors(palace: Palace, entity: str, *, depth: int = 1,
                       relation: str | None = None, as_of_ms: int | None = None,
                       max_nodes: int = 200) -> dict[str, Any]:
    """Breadth-first neighbourhood of ``entity`` (see ``graph_walk.neighbors``).

    Raises:
        InvalidArgs: depth or max_nodes out of range.
        InvalidContent: invalid name, relation or time.
    """
    return await hops.read(palace, lambda c: graph_walk.neighbors(
        c, entity, depth, relation=relation, as_of_ms=as_of_ms, max_nodes=max_nodes))


async def kg_path(palace: Palace, a: str, b: str, *, max_depth: int = 6,
                  as_of_ms: int | None = None) -> dict[str, Any]:
    """A shortest chain of facts from ``a`` to ``b``.

    Returns ``{"from", "to", "found", "length", "path"}``; ``path`` is the list of facts in
    order from ``a`` (empty when ``a`` is ``b``) and None when there is no chain.

    Raises:
        InvalidArgs: max_depth out of range.
        InvalidContent: invalid names or time.
    """
    chain = await hops.read(
        palace, lambda c: graph_walk.path(c, a, b, max_depth, as_of_ms=as_of_ms))
    return {"from": a, "to": b, "found": chain is not None,
            "length": None if chain is None else len(chain), "path": chain}


async def kg_search(palace: Palace, query: str, *, limit: int = 20) -> dict[str, Any]:
    """Entities whose name, definition or labels match ``query``, best first.

    Raises:
        InvalidArgs: limit out of range.
    """
    entities = await hops.read(palace, lambda c: graph_walk.search_entities(c, query, limit))
    return {"entities": entities}
