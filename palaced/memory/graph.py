"""Knowledge graph of an open palace: the async ``kg_*`` verbs.

The rules live in the synchronous ``store.knowledge`` modules ``entities`` and ``facts``
(entities and temporal facts) and ``graph_walk`` (search, neighbourhoods, paths); each verb
here runs them in one hop of the ``Palace`` handle: reads in one reader snapshot (``Palace.read``),
writes in one transaction under the palace's ``write_lock`` in a shielded scope
(``Palace.transact``), bumping ``write_counter``, with their audit entry in the same
transaction.
"""

from __future__ import annotations

from typing import Any

import apsw

from palaced.palace.handle import Palace
from palaced.palace.handle import now_ms as clock_ms
from palaced.store.knowledge import conflicts, entities, facts, graph_walk
from palaced.store.rows import audit
from palaced.wire.errors import InvalidArgs


def _audited(c: apsw.Connection, actor: audit.Actor, fact: dict[str, Any], stamp: int,
             changed: str) -> dict[str, Any]:
    """``fact``, after recording in the audit log whether this call ``changed`` it (its
    ``created_ms`` or ``invalidated_ms`` is this call's ``stamp``) or found it so already."""
    done = stamp in (fact.get("created_ms"), fact.get("invalidated_ms"))
    audit.append(c, actor, changed if done else "exists", clock_ms(), fact_ids=[int(fact["id"])])
    return fact


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
    multi: bool | None = None,
    actor: audit.Actor = audit.SYSTEM,
) -> dict[str, Any]:
    """Record that ``subject predicate obj`` holds from ``valid_from_ms`` (default now), for
    ``actor``.

    ``literal`` stores ``obj`` as a value rather than an entity. ``multi`` says whether the
    predicate keeps several objects at once (None: its default, see ``vocab.MULTI_VALUED``);
    a single-valued predicate closes the interval of the fact it replaces (see
    ``store.knowledge.facts.assert_fact``). Returns the fact.

    Raises:
        InvalidContent: self-link, invalid names, predicate, value or time.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer of this palace.
    """
    ts = clock_ms()

    def tx(c: apsw.Connection) -> dict[str, Any]:
        fact = facts.assert_fact(
            c, subject, predicate, obj, valid_from_ms=valid_from_ms, now_ms=ts,
            confidence=confidence, source_drawer=source_drawer, source_url=source_url,
            source_agent=source_agent, object_is_entity=not literal, multi=multi,
            agent=actor.agent)
        # A new value of a single-valued predicate cited from another drawer than the old
        # value's: those two drawers conflict (recall marks the older).
        conflicts.fact_replaced(c, fact, ts)
        return _audited(c, actor, fact, ts, "asserted")

    return await palace.transact(tx)


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
    actor: audit.Actor = audit.SYSTEM,
) -> dict[str, Any]:
    """Relate two concepts (typed relations such as ``depends_on`` stay multi-valued).

    Raises:
        InvalidContent: ``a`` and ``b`` are the same concept, or invalid names or relation.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer of this palace.
    """
    ts = clock_ms()
    return await palace.transact(lambda c: _audited(c, actor, facts.link(
        c, a, relation, b, now_ms=ts, valid_from_ms=valid_from_ms, confidence=confidence,
        source_drawer=source_drawer, source_url=source_url, source_agent=source_agent,
        agent=actor.agent), ts, "asserted"))


async def kg_invalidate(palace: Palace, fact_id: int, *, at_ms: int | None = None,
                        actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """End an active fact at ``at_ms`` (default now); a closed fact is returned unchanged.

    Raises:
        FactNotFound: no such fact.
        InvalidContent: invalid time.
    """
    at = clock_ms() if at_ms is None else at_ms
    return await palace.transact(lambda c: _audited(c, actor, facts.invalidate_fact(
        c, fact_id, at_ms=at, agent=actor.agent), at, "invalidated"))


async def kg_query(palace: Palace, subject: str, *, as_of_ms: int | None = None
                   ) -> dict[str, Any]:
    """The facts about ``subject``: active ones, or those valid at ``as_of_ms``.

    Returns ``{"subject", "entity", "as_of_ms", "facts"}``; ``entity`` is None when unknown.

    Raises:
        InvalidContent: invalid name or time.
    """
    def run(c: apsw.Connection) -> dict[str, Any]:
        entity = entities.get_entity(c, subject)
        found = (facts.active_facts(c, subject) if as_of_ms is None
                 else facts.facts_as_of(c, subject, as_of_ms))
        return {"subject": subject, "entity": entity, "as_of_ms": as_of_ms, "facts": found}

    return await palace.read(run)


async def kg_timeline(palace: Palace, subject: str) -> dict[str, Any]:
    """Every fact, closed ones included, where ``subject`` is subject or object, oldest first.

    Raises:
        InvalidContent: invalid name.
    """
    def run(c: apsw.Connection) -> dict[str, Any]:
        return {"subject": subject, "entity": entities.get_entity(c, subject),
                "facts": facts.timeline(c, subject)}

    return await palace.read(run)


async def kg_neighbors(palace: Palace, entity: str, *, depth: int = 1,
                       relation: str | None = None, as_of_ms: int | None = None,
                       max_nodes: int = 200) -> dict[str, Any]:
    """Breadth-first neighbourhood of ``entity`` (see ``graph_walk.neighbors``).

    Raises:
        InvalidArgs: depth or max_nodes out of range.
        InvalidContent: invalid name, relation or time.
    """
    return await palace.read(lambda c: graph_walk.neighbors(
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
    chain = await palace.read(lambda c: graph_walk.path(c, a, b, max_depth, as_of_ms=as_of_ms))
    return {"from": a, "to": b, "found": chain is not None,
            "length": None if chain is None else len(chain), "path": chain}


async def kg_overview(palace: Palace, *, as_of_ms: int | None = None, max_nodes: int = 500,
                      max_facts: int = 2_000) -> dict[str, Any]:
    """The whole graph, bounded, for drawing (see ``graph_walk.overview``).

    Raises:
        InvalidArgs: max_nodes or max_facts out of range.
        InvalidContent: invalid time.
    """
    return await palace.read(lambda c: graph_walk.overview(
        c, as_of_ms=as_of_ms, max_nodes=max_nodes, max_facts=max_facts))


async def kg_search(palace: Palace, query: str, *, limit: int = 20,
                    type: str | None = None) -> dict[str, Any]:
    """Entities whose name, definition or labels match ``query`` (of ``type``: only that
    type's), best first.

    Raises:
        InvalidArgs: limit out of range.
    """
    found = await palace.read(lambda c: graph_walk.search_entities(c, query, limit, type=type))
    return {"entities": found}


_DESCRIBED = ("name", "type", "definition", "labels")


async def kg_describe(palace: Palace, name: str, *, type: str | None = None,
                      definition: str | None = None, labels: list[str] | None = None,
                      actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Set an entity's type, definition and/or labels (None: keep; labels replace the
    list), creating it when it is new; returns ``{"entity", "changed"}`` (the fields whose
    value changed; audited as ``described`` when any did).

    Raises:
        InvalidArgs: nothing to set.
        InvalidContent: an invalid name, type, definition or labels.
    """
    if type is None and definition is None and labels is None:
        raise InvalidArgs("give a type, a definition or labels to set",
                          details={"arg": "type"})

    def tx(c: apsw.Connection) -> dict[str, Any]:
        before = entities.get_entity(c, name)
        after = entities.upsert_entity(c, name, type=type, definition=definition,
                                       labels=labels, now_ms=clock_ms())
        changed = [k for k in _DESCRIBED if before is None or before[k] != after[k]]
        if changed:
            audit.append(c, actor, "described", clock_ms(),
                         detail={"entity": int(after["id"]), "changed": ",".join(changed)})
        return {"entity": after, "changed": changed}

    return await palace.transact(tx)
