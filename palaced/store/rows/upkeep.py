"""Synchronous queries of memory upkeep: decay weights, expiry, consolidation, health rows.

The rules (what weight a drawer has, what to prune, what counts as a duplicate) live in
``palaced.text.rules`` and the async verbs in ``palaced.memory.upkeep``; this module only reads and
writes the rows they need. Every function takes an open ``apsw.Connection``; writers run
inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from palaced.store.conn.dialect import glob_test, glob_value, is_pg, json_ids
from palaced.store.rows.drawers import ACTIVE_SQL, SUMMARY_KIND


# -- decay --------------------------------------------------------------------------------------
def weigh_rows(conn: apsw.Connection, preview_chars: int) -> Iterator[tuple[Any, ...]]:
    """Every drawer as ``(id, wing, room, text preview, importance, created_ms, accessed_ms,
    access_count, stored weight, prunable)``.

    Only ``preview_chars`` of the text are read: decay runs over every drawer of large
    palaces. ``prunable``: a plain drawer, neither consolidated nor superseded (history is
    never pruned). Consume it inside the read or write that opened ``conn``.
    """
    yield from conn.execute(
        f"SELECT id, wing, room, substr(text, 1, {int(preview_chars)}), importance, "
        "created_ms, accessed_ms, access_count, weight, "
        "kind = 'drawer' AND consolidated_into IS NULL AND superseded_by IS NULL FROM drawers"
    )


def store_weights(conn: apsw.Connection, changed: Sequence[tuple[float, int]]) -> None:
    """Store decayed weights, given as ``(weight, drawer_id)`` pairs."""
    conn.executemany("UPDATE drawers SET weight = ? WHERE id = ?", changed)


# -- expiry -------------------------------------------------------------------------------------
def expired_ids(conn: apsw.Connection, now_ms: int, limit: int) -> list[int]:
    """Up to ``limit`` drawers whose ``expires_ms`` has passed at ``now_ms``, by id."""
    return [int(r[0]) for r in conn.execute(
        "SELECT id FROM drawers WHERE expires_ms IS NOT NULL AND expires_ms <= ? "
        "ORDER BY id LIMIT ?", (now_ms, limit))]


def next_expiry(conn: apsw.Connection) -> int | None:
    """The earliest ``expires_ms`` of any drawer (None: no drawer expires)."""
    row = conn.execute("SELECT min(expires_ms) FROM drawers WHERE expires_ms IS NOT NULL"
                       ).fetchall()[0][0]
    return None if row is None else int(row)


# -- consolidation ------------------------------------------------------------------------------
def drawer_wings(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, str]:
    """``{id: wing}`` of those of ``ids`` that exist."""
    return {int(r[0]): str(r[1]) for r in conn.execute(
        "SELECT id, wing FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
        (json_ids(ids),))}


def consolidation_sources(conn: apsw.Connection, room: str, wing: str | None, now_ms: int
                          ) -> list[tuple[int, str]]:
    """``(id, wing)`` of the active, unconsolidated, non-summary drawers of ``room`` (of
    ``wing`` when given), in the order they happened."""
    where = (f"{ACTIVE_SQL} AND d.consolidated_into IS NULL AND d.kind != :summary "
             "AND d.room = :room" + (" AND d.wing = :wing" if wing is not None else ""))
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        f"SELECT d.id, d.wing FROM drawers d WHERE {where} ORDER BY d.occurred_ms, d.id",
        {"now": now_ms, "summary": SUMMARY_KIND, "room": room, "wing": wing})]


def room_backlog(conn: apsw.Connection, wing: str, room: str, now_ms: int) -> int:
    """How many active, unconsolidated, non-summary drawers ``wing``/``room`` holds."""
    return int(conn.execute(
        f"SELECT count(*) FROM drawers d WHERE d.wing = :wing AND d.room = :room AND "
        f"{ACTIVE_SQL} AND d.consolidated_into IS NULL AND d.kind != :summary",
        {"wing": wing, "room": room, "now": now_ms, "summary": SUMMARY_KIND}).fetchall()[0][0])


def mark_consolidated(conn: apsw.Connection, summary_id: int, source_ids: Sequence[int], *,
                      summary_importance: float) -> tuple[list[int], list[int]]:
    """Make ``summary_id`` a summary and mark the sources ``consolidated_into`` it.

    The summary drawer gets kind ``summary`` and at least ``summary_importance`` (it may be a
    drawer that existed already with the same text). Returns ``(marked, missing)``: the
    sources marked, and those deleted meanwhile.
    """
    conn.execute("UPDATE drawers SET kind = ?, importance = max(importance, ?) WHERE id = ?",
                 (SUMMARY_KIND, summary_importance, summary_id))
    present = {int(r[0]) for r in conn.execute(
        "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
        (json_ids(source_ids),))}
    marked = [i for i in source_ids if i in present and i != summary_id]
    conn.executemany("UPDATE drawers SET consolidated_into = ? WHERE id = ?",
                     [(summary_id, i) for i in marked])
    return marked, [i for i in source_ids if i not in present]


# -- health -------------------------------------------------------------------------------------
def health_rows(conn: apsw.Connection, now_ms: int) -> Iterator[tuple[Any, ...]]:
    """Every drawer by wing, room and id as ``(id, wing, room, text, importance, created_ms,
    accessed_ms, access_count, kind, consolidated_into, active)``."""
    yield from conn.execute(
        "SELECT d.id, d.wing, d.room, d.text, d.importance, d.created_ms, d.accessed_ms, "
        "d.access_count, d.kind, d.consolidated_into, "
        f"({ACTIVE_SQL}) FROM drawers d ORDER BY d.wing, d.room, d.id", {"now": now_ms})


# -- bulk upkeep --------------------------------------------------------------------------------
def bulk_rows(conn: apsw.Connection, *, wing: str | None, room: str | None,
              tags: Sequence[str], source: str | None, before_ms: int | None,
              ids: Sequence[int] | None = None) -> list[tuple[int, str, str, str, int]]:
    """``(id, wing, room, text, created_ms)`` of every drawer (history and expired ones
    included) that matches all the selectors given, by id: ``wing``, ``room``, any of
    ``tags``, ``source`` (a glob), stored before ``before_ms``, and among ``ids``."""
    parts = ["TRUE"]
    params: dict[str, Any] = {}
    if wing is not None:
        parts.append("d.wing = :wing")
        params["wing"] = wing
    if room is not None:
        parts.append("d.room = :room")
        params["room"] = room
    if tags:
        keys = [f":tag{i}" for i in range(len(tags))]
        params.update({f"tag{i}": tag for i, tag in enumerate(tags)})
        parts.append(f"EXISTS (SELECT 1 FROM json_each(d.tags) WHERE value IN "
                     f"({','.join(keys)}))")
    if source is not None:
        parts.append(f"d.source IS NOT NULL AND {glob_test(conn, 'd.source', 'source')}")
        params["source"] = glob_value(conn, source)
    if before_ms is not None:
        parts.append("d.created_ms < :before")
        params["before"] = before_ms
    if ids is not None:
        parts.append("d.id IN (SELECT value FROM json_each(:ids))")
        params["ids"] = json_ids(ids)
    return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4])) for r in conn.execute(
        f"SELECT d.id, d.wing, d.room, d.text, d.created_ms FROM drawers d "
        f"WHERE {' AND '.join(parts)} ORDER BY d.id", params)]


def move_concept_sources(conn: apsw.Connection, from_ids: Sequence[int], to_id: int) -> int:
    """Make the concepts citing any of ``from_ids`` cite ``to_id`` (a merge's keeper); how
    many concepts gained it. (A team palace has no concepts: 0.)"""
    if is_pg(conn):
        return 0
    return len(conn.execute(
        "INSERT INTO concept_sources(concept_id, drawer_id) SELECT DISTINCT concept_id, ? "
        "FROM concept_sources WHERE drawer_id IN (SELECT value FROM json_each(?)) "
        "ON CONFLICT DO NOTHING RETURNING concept_id", (to_id, json_ids(from_ids))).fetchall())
