"""Synchronous knowledge-graph facts: temporal writes and per-entity fact queries.

A fact is ``subject --predicate--> object`` where the object is another entity or a literal
value, true over the half-open interval ``[valid_from_ms, valid_to_ms)``; ``valid_to_ms`` NULL
means the fact is still active. History is never deleted: superseding a single-valued fact
closes its interval, and ``invalidate_fact`` closes it explicitly.

This module holds predicate normalisation, the fact writes and the per-entity fact queries.
Entities live in ``entities``; navigating the graph (entity search, neighbourhoods, paths,
facts named by a query) in ``graph_walk``; the tables in ``schema``.

Every function takes an open ``apsw.Connection``. Writers expect the caller to have opened the
transaction (``Store.write``); nothing here begins or commits.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import apsw

from palaced.store.knowledge.entities import (
    _clean_text,
    _ensure_entity,
    _entity_id,
    _query,
    entity_key,
)
from palaced.text.timeparse import parse_when
from palaced.wire.errors import FactNotFound, InvalidArgs, InvalidContent, MemoryNotFound, quote
from palaced.wire.vocab import (
    MAX_NAME_CHARS,
    MAX_PREDICATE_CHARS,
    MAX_VALUE_CHARS,
    MULTI_VALUED,
    snake_case,
)

_PREDICATE = re.compile(r"\w+")

# Fact columns; the subject/object ids trail for traversal code.
_FACT_SELECT = (
    "SELECT f.id, s.name, f.predicate, o.name, f.object_value, f.valid_from_ms, "
    "f.valid_to_ms, f.confidence, f.source_drawer, f.source_url, f.source_agent, "
    "f.created_ms, f.invalidated_ms, f.subject_id, f.object_id, f.created_by, "
    "f.invalidated_by "
    "FROM facts f JOIN entities s ON s.id = f.subject_id "
    "LEFT JOIN entities o ON o.id = f.object_id "
)
_ACTIVE = "f.valid_to_ms IS NULL"
_SAME_OBJECT = (
    "f.subject_id = :s AND f.predicate = :p AND f.object_id IS :o AND f.object_value IS :v"
)
_VALID_AT = "f.valid_from_ms <= :t AND (f.valid_to_ms IS NULL OR f.valid_to_ms > :t)"


# -- predicates ---------------------------------------------------------------------------------
def normalize_predicate(predicate: str) -> str:
    """Return the canonical snake_case form of a predicate (``dependsOn`` -> ``depends_on``).

    Raises:
        InvalidContent: empty, longer than MAX_PREDICATE_CHARS, or not made of word characters
            once spaces and hyphens became underscores.
    """
    if not isinstance(predicate, str):
        raise InvalidContent(f"a predicate must be a string, not {type(predicate).__name__}")
    text = snake_case(unicodedata.normalize("NFKC", predicate))
    if not text or len(text) > MAX_PREDICATE_CHARS or not _PREDICATE.fullmatch(text):
        raise InvalidContent(
            f"invalid predicate {quote(predicate, 80)}: use 1-{MAX_PREDICATE_CHARS} letters, "
            "digits, spaces, hyphens or underscores",
            details={"predicate": quote(predicate, 80)},
        )
    return text


def is_multi_valued(predicate: str) -> bool:
    """Whether a normalised predicate keeps several active objects by default."""
    return predicate in MULTI_VALUED


# -- facts ----------------------------------------------------------------------------------
def _fact_dict(row: Sequence[Any]) -> dict[str, Any]:
    is_entity = row[14] is not None
    return {
        "id": int(row[0]),
        "subject": row[1],
        "predicate": row[2],
        "object": row[3] if is_entity else row[4],
        "object_is_entity": is_entity,
        "valid_from_ms": row[5],
        "valid_to_ms": row[6],
        "active": row[6] is None,
        "confidence": row[7],
        "source": {"drawer": row[8], "url": row[9], "agent": row[10]},
        "created_ms": row[11],
        "invalidated_ms": row[12],
        "created_by": row[15],
        "invalidated_by": row[16],
    }


def get_fact(conn: apsw.Connection, fact_id: int) -> dict[str, Any]:
    """The fact with that id.

    Raises:
        FactNotFound: no such fact.
    """
    rows = _query(conn, _FACT_SELECT + "WHERE f.id = ?", (fact_id,))
    if not rows:
        raise FactNotFound(f"no fact with id {fact_id}", details={"id": fact_id})
    return _fact_dict(rows[0])


def assert_fact(
    conn: apsw.Connection,
    subject: str,
    predicate: str,
    obj: str,
    *,
    valid_from_ms: int | None = None,
    now_ms: int,
    confidence: float = 1.0,
    source_drawer: int | None = None,
    source_url: str | None = None,
    source_agent: str | None = None,
    object_is_entity: bool = True,
    multi: bool | None = None,
    agent: str | None = None,
) -> dict[str, Any]:
    """Record that ``subject predicate obj`` holds from ``valid_from_ms`` (default ``now_ms``),
    asserted by ``agent``.

    Entities are created on demand. The predicate is normalised (``normalize_predicate``).
    ``multi`` chooses whether the predicate keeps several objects at once; None uses the
    default (the typed relations in MULTI_VALUED are multi-valued, the rest single-valued).

    Re-asserting a fact that is already active returns it unchanged (its ``valid_from_ms`` is
    not moved); so does asserting a single-valued fact whose object is already the one valid
    at ``valid_from_ms``. Otherwise, for a single-valued predicate, any fact of the same
    subject and predicate valid at ``valid_from_ms`` is closed there, and the new fact stays
    valid until the next later-starting fact of that pair (or stays active if there is none),
    so the intervals of a single-valued predicate never overlap and history is kept.

    Raises:
        InvalidContent: self-link, invalid names, predicate, literal value or time.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer.
    """
    pred = normalize_predicate(predicate)
    valid_from = parse_when(valid_from_ms, now_ms=now_ms)
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not (0.0 <= confidence <= 1.0)
    ):
        raise InvalidArgs("confidence must be a number in 0..1", details={"confidence": confidence})
    if object_is_entity and entity_key(subject) == entity_key(obj):
        raise InvalidContent(
            f"a fact cannot link {quote(subject)} to itself", details={"subject": subject}
        )
    url = None if source_url is None else _clean_text(source_url, "source_url", MAX_VALUE_CHARS)
    source = (
        None if source_agent is None else _clean_text(source_agent, "source_agent", MAX_NAME_CHARS)
    )
    value = None if object_is_entity else _clean_text(obj, "a fact value", MAX_VALUE_CHARS)
    if source_drawer is not None and (
        isinstance(source_drawer, bool)
        or not isinstance(source_drawer, int)
        or not _query(conn, "SELECT 1 FROM drawers WHERE id = ?", (source_drawer,))
    ):
        raise MemoryNotFound(
            f"no drawer with id {source_drawer!r} to cite as the fact's source",
            details={"source_drawer": source_drawer},
        )
    subject_id = _ensure_entity(conn, subject, now_ms)
    object_id = _ensure_entity(conn, obj, now_ms) if object_is_entity else None
    pair = {"s": subject_id, "p": pred, "o": object_id, "v": value, "t": valid_from}

    existing = _query(
        conn,
        f"SELECT f.id FROM facts f WHERE {_SAME_OBJECT} AND {_ACTIVE} ORDER BY f.id LIMIT 1",
        pair,
    )
    single = not (multi if multi is not None else is_multi_valued(pred))
    if not existing and single:
        existing = _query(
            conn,
            f"SELECT f.id FROM facts f WHERE {_SAME_OBJECT} AND {_VALID_AT} ORDER BY f.id LIMIT 1",
            pair,
        )
    if existing:
        return get_fact(conn, int(existing[0][0]))

    valid_to: int | None = None
    if single:
        _query(
            conn,
            "UPDATE facts AS f SET valid_to_ms = :t "
            f"WHERE f.subject_id = :s AND f.predicate = :p AND {_VALID_AT}",
            pair,
        )
        # Retracted facts (empty intervals) do not bound the new one.
        nxt = _query(
            conn,
            "SELECT min(valid_from_ms) FROM facts WHERE subject_id = :s AND predicate = :p "
            "AND valid_from_ms > :t AND (valid_to_ms IS NULL OR valid_to_ms > valid_from_ms)",
            pair,
        )[0][0]
        valid_to = None if nxt is None else int(nxt)
    fact_id = _query(
        conn,
        "INSERT INTO facts(subject_id, predicate, object_id, object_value, valid_from_ms, "
        "valid_to_ms, confidence, source_drawer, source_url, source_agent, created_ms, "
        "created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            subject_id,
            pred,
            object_id,
            value,
            valid_from,
            valid_to,
            float(confidence),
            source_drawer,
            url,
            source,
            now_ms,
            agent,
        ),
    )[0][0]
    return get_fact(conn, int(fact_id))


def link(
    conn: apsw.Connection,
    a: str,
    relation: str,
    b: str,
    *,
    now_ms: int,
    valid_from_ms: int | None = None,
    confidence: float = 1.0,
    source_drawer: int | None = None,
    source_url: str | None = None,
    source_agent: str | None = None,
    multi: bool | None = None,
    agent: str | None = None,
) -> dict[str, Any]:
    """Relate two concepts: ``assert_fact`` with an entity object.

    ``relation`` is one of TYPED_RELATIONS (camelCase such as ``dependsOn`` is accepted) or a
    free predicate; either way it is normalised to snake_case.

    Raises:
        InvalidContent: invalid relation name, concept names or time, or ``a`` equals ``b``.
        InvalidArgs: confidence outside 0..1.
        MemoryNotFound: ``source_drawer`` names no drawer.
    """
    return assert_fact(
        conn,
        a,
        relation,
        b,
        valid_from_ms=valid_from_ms,
        now_ms=now_ms,
        confidence=confidence,
        source_drawer=source_drawer,
        source_url=source_url,
        source_agent=source_agent,
        object_is_entity=True,
        multi=multi,
        agent=agent,
    )


def invalidate_fact(conn: apsw.Connection, fact_id: int, *, at_ms: int,
                    agent: str | None = None) -> dict[str, Any]:
    """End an active fact at ``at_ms`` and record when it was invalidated, and by ``agent``.

    A fact that is already closed is returned unchanged. When ``at_ms`` precedes the fact's
    ``valid_from_ms`` the fact is retracted outright (``valid_to_ms = valid_from_ms``, an
    empty interval that no as-of query returns).

    Raises:
        FactNotFound: no such fact.
        InvalidContent: ``at_ms`` is not a valid time.
    """
    at = parse_when(at_ms, now_ms=at_ms)
    fact = get_fact(conn, fact_id)
    if fact["active"]:
        _query(
            conn,
            "UPDATE facts SET valid_to_ms = max(valid_from_ms, :at), invalidated_ms = :at, "
            "invalidated_by = :agent WHERE id = :id",
            {"at": at, "id": fact_id, "agent": agent},
        )
        fact = get_fact(conn, fact_id)
    return fact


def active_facts(conn: apsw.Connection, subject: str) -> list[dict[str, Any]]:
    """Active facts (``valid_to_ms`` NULL) with ``subject`` as their subject.

    Ordered by predicate, then start. An unknown subject has no facts.

    Raises:
        InvalidContent: the name is invalid.
    """
    sid = _entity_id(conn, subject)
    if sid is None:
        return []
    rows = _query(
        conn,
        _FACT_SELECT + f"WHERE f.subject_id = ? AND {_ACTIVE} "
        "ORDER BY f.predicate, f.valid_from_ms, f.id",
        (sid,),
    )
    return [_fact_dict(r) for r in rows]


def facts_as_of(conn: apsw.Connection, subject: str, as_of_ms: int) -> list[dict[str, Any]]:
    """Facts with ``subject`` as subject that were valid at ``as_of_ms``.

    Valid means ``valid_from_ms <= as_of_ms < valid_to_ms`` (or no end). Ordered like
    ``active_facts``.

    Raises:
        InvalidContent: the name or time is invalid.
    """
    t = parse_when(as_of_ms, now_ms=as_of_ms)
    sid = _entity_id(conn, subject)
    if sid is None:
        return []
    rows = _query(
        conn,
        _FACT_SELECT + f"WHERE f.subject_id = :s AND {_VALID_AT} "
        "ORDER BY f.predicate, f.valid_from_ms, f.id",
        {"s": sid, "t": t},
    )
    return [_fact_dict(r) for r in rows]


def timeline(conn: apsw.Connection, subject: str) -> list[dict[str, Any]]:
    """Every fact, closed ones included, where the entity is subject or object, oldest first.

    Raises:
        InvalidContent: the name is invalid.
    """
    eid = _entity_id(conn, subject)
    if eid is None:
        return []
    rows = _query(
        conn,
        _FACT_SELECT + "WHERE f.subject_id = :e OR f.object_id = :e ORDER BY f.valid_from_ms, f.id",
        {"e": eid},
    )
    return [_fact_dict(r) for r in rows]
