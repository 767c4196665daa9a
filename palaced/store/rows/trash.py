"""Synchronous queries of a palace's trash: forgotten drawers kept whole until restored or
purged.

Trashing a drawer copies everything a restore needs into one ``trash`` row (its whole
``drawers`` row as JSON, its closets, its chunk vectors end to end and the embedder that made
them, the facts that cite it and the drawers consolidated into it), then deletes it through
the one deletion path (``drawers.delete_drawers``), so a trashed drawer is simply not in
``drawers``: no recall, listing, dedup or upkeep query can meet it (its keyword and substring
index rows go with it, the substring index's by trigger). Restoring puts the row back under the
same id with its keyword-index row, closets, vectors and edit history, and relinks what still
exists. The row is saved by column name, so a drawer trashed before a migration that adds a
column restores with that column's default; beside its columns it keeps the concepts that
cited it, which cite it again once it is restored. A bulk forget or a merge trashes its
drawers with its batch id as their ``reason``, which ``batch_ids`` finds again.

Which entries count is the caller's: ``kept_since_ms`` hides entries trashed before it (past
the configured keep period), whether or not the upkeep has purged them yet. Every function
takes an open ``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw

from palaced.store.conn.dialect import for_update, is_pg, json_ids
from palaced.store.conn.meta import meta_get
from palaced.store.lookup.context import (
    CONTEXT_NEIGHBOURS,
    date_words,
    refresh_context,
    room_neighbours,
    vectors_changed,
)
from palaced.store.lookup.fts_log import note_changed
from palaced.store.lookup.vectors import store_vectors
from palaced.store.rows.drawers import delete_drawers, find_by_hash, refresh_around
from palaced.wire.errors import InvalidContent

# Trash columns besides the saved drawer row.
_ENTRY = "t.id, t.drawer, t.reason, t.trashed_ms, t.trashed_by"
# The drawer_history columns a trash entry keeps (its rows go with the drawer, ON DELETE
# CASCADE), restored in order.
_HISTORY = "text, wing, room, tags, importance, replaced_ms"
# The key of the saved row that lists the concepts citing the drawer (no column's name).
CONCEPTS_KEY = "_concepts"


def trash_drawers(conn: apsw.Connection, ids: Sequence[int], *, reason: str, agent: str,
                  now_ms: int) -> tuple[list[int], list[int]]:
    """Move drawers to the trash; ``(trashed ids, vector ids to drop from the index)``.

    Ids that name no drawer are skipped.
    """
    embedder = meta_get(conn, "embedder")
    trashed: list[int] = []
    # The drawers consolidated into each: one scan for all (consolidated_into has no index).
    consolidated: dict[int, list[int]] = {}
    for src, into in conn.execute(
            "SELECT id, consolidated_into FROM drawers WHERE consolidated_into IN "
            "(SELECT value FROM json_each(?)) ORDER BY id", (json_ids(ids),)):
        consolidated.setdefault(int(into), []).append(int(src))
    for did in ids:
        cur = conn.execute(f"SELECT * FROM drawers WHERE id = ?{for_update(conn)}", (did,))
        row = cur.fetchone()
        if row is None:
            continue
        saved = dict(zip([d[0] for d in cur.getdescription()], row, strict=True))
        topics = [str(r[0]) for r in conn.execute(
            "SELECT topic FROM closets WHERE drawer_id = ?", (did,))]
        blobs = [bytes(r[0]) for r in conn.execute(
            "SELECT vec FROM vectors WHERE drawer_id = ? ORDER BY chunk", (did,))]
        facts = [int(r[0]) for r in conn.execute(
            "SELECT id FROM facts WHERE source_drawer = ?", (did,))]
        sources = consolidated.get(int(did), [])
        cur = conn.execute(f"SELECT {_HISTORY} FROM drawer_history WHERE drawer_id = ? "
                           "ORDER BY id", (did,))
        history = [list(r) for r in cur]
        # The concepts citing it lose it with the row (ON DELETE CASCADE): kept beside the
        # row's columns, under a key no column has, so a restore cites them again. (Memoirs
        # are a local palace's: a team palace has no concepts.)
        if not is_pg(conn):
            saved[CONCEPTS_KEY] = [int(r[0]) for r in conn.execute(
                "SELECT concept_id FROM concept_sources WHERE drawer_id = ?", (did,))]
        conn.execute(
            "INSERT INTO trash(id, drawer, topics, vectors, vector_count, embedder, facts, "
            "sources, history, reason, trashed_ms, trashed_by) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            (did, json.dumps(saved), json.dumps(topics), b"".join(blobs) if blobs else None,
             len(blobs), embedder if blobs else None, json_ids(facts), json_ids(sources),
             json.dumps(history), reason, now_ms, agent))
        trashed.append(int(did))
    vector_ids = (delete_drawers(conn, trashed) or []) if trashed else []
    return trashed, vector_ids


def _summary(row: Sequence[Any]) -> dict[str, Any]:
    """A trash entry as the wire sees it: the drawer's fields plus how it got there."""
    saved = json.loads(row[1])
    drawer = {k: v for k, v in saved.items() if k not in ("content_hash", CONCEPTS_KEY)}
    drawer["tags"] = json.loads(drawer.get("tags") or "[]")
    drawer["embedded"] = bool(drawer.get("embedded"))
    return {**drawer, "id": int(row[0]), "reason": row[2], "trashed_ms": int(row[3]),
            "trashed_by": row[4]}


def entry(conn: apsw.Connection, drawer_id: int, kept_since_ms: int) -> dict[str, Any] | None:
    """Drawer ``drawer_id``'s trash entry, if it is in the trash and still kept."""
    rows = conn.execute(f"SELECT {_ENTRY} FROM trash t WHERE t.id = ? AND t.trashed_ms >= ?",
                        (drawer_id, kept_since_ms)).fetchall()
    return _summary(rows[0]) if rows else None


def list_trash(conn: apsw.Connection, kept_since_ms: int, limit: int, offset: int
               ) -> tuple[list[dict[str, Any]], int]:
    """Kept entries, most recently trashed first, and their count."""
    total = int(conn.execute("SELECT count(*) FROM trash WHERE trashed_ms >= ?",
                             (kept_since_ms,)).fetchall()[0][0])
    rows = conn.execute(
        f"SELECT {_ENTRY} FROM trash t WHERE t.trashed_ms >= ? "
        "ORDER BY t.trashed_ms DESC, t.id DESC LIMIT ? OFFSET ?",
        (kept_since_ms, limit, offset)).fetchall()
    return [_summary(r) for r in rows], total


def restore(conn: apsw.Connection, drawer_id: int, *, agent: str, now_ms: int,
            kept_since_ms: int, around: bool = True) -> tuple[list[bytes], list[int]] | None:
    """Put a kept trash entry back as drawer ``drawer_id``; None when there is none.

    ``around`` False leaves its room neighbours' keyword context and context vectors to the
    caller, who restores a batch and refreshes each neighbour once (``restore_around``).

    Returns ``(chunk vector blobs, their new vector ids)`` for the index; both are empty when
    the vectors were made by another embedder than the palace's now (the drawer then waits
    for the background embedding like one stored without a model). A drawer whose expiry has
    passed comes back without it (else it would vanish again at once).

    Raises:
        InvalidContent: a drawer with the same text in the same wing and room exists now
            (``details["conflict"]`` is its id); nothing is changed.
    """
    rows = conn.execute(
        "SELECT drawer, topics, vectors, vector_count, embedder, facts, sources, history "
        f"FROM trash WHERE id = ? AND trashed_ms >= ?{for_update(conn)}",
        (drawer_id, kept_since_ms)).fetchall()
    if not rows:
        return None
    saved_json, topics, blob, count, embedder, facts, sources, history = rows[0]
    saved: dict[str, Any] = json.loads(saved_json)
    clash = find_by_hash(conn, str(saved["content_hash"]))
    if clash is not None:
        raise InvalidContent(
            f"drawer {drawer_id} cannot be restored: drawer {clash} holds the same text in the "
            f"same wing and room now; forget {clash} first, or leave {drawer_id} in the trash",
            details={"id": drawer_id, "conflict": clash})
    vectors_ok = bool(count) and embedder is not None and embedder == meta_get(conn, "embedder")
    if saved.get("expires_ms") is not None and int(saved["expires_ms"]) <= now_ms:
        saved["expires_ms"] = None
    target = saved.get("consolidated_into")
    if target is not None and not conn.execute(
            "SELECT 1 FROM drawers WHERE id = ?", (target,)).fetchall():
        saved["consolidated_into"] = None
    saved.update(updated_ms=now_ms, updated_by=agent, embedded=0)
    columns = [str(r[1]) for r in conn.execute("PRAGMA table_info(drawers)")]
    keep = [c for c in columns if c in saved]
    conn.execute(f"INSERT INTO drawers({', '.join(keep)}) VALUES({', '.join('?' * len(keep))})",
                 [saved[c] for c in keep])
    conn.execute("INSERT INTO drawers_fts(rowid, text, context, dates) VALUES(?,?,?,?)",
                 (drawer_id, saved["text"], "", date_words(int(saved["occurred_ms"]))))
    note_changed(conn, (drawer_id,))
    for did in {drawer_id, *(room_neighbours(conn, drawer_id, CONTEXT_NEIGHBOURS)
                             if around else ())}:
        refresh_context(conn, did)
    conn.executemany("INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
                     [(t, drawer_id) for t in json.loads(topics)])
    conn.executemany(f"INSERT INTO drawer_history(drawer_id, {_HISTORY}) VALUES(?,?,?,?,?,?,?)",
                     [(drawer_id, *row) for row in json.loads(history)])
    blobs: list[bytes] = []
    vector_ids: list[int] = []
    if vectors_ok:
        size = len(blob) // int(count)
        blobs = [bytes(blob[i * size:(i + 1) * size]) for i in range(int(count))]
        vector_ids = store_vectors(conn, drawer_id, blobs, context=around)
    conn.execute("UPDATE facts SET source_drawer = ? WHERE source_drawer IS NULL AND id IN "
                 "(SELECT value FROM json_each(?))", (drawer_id, facts))
    conn.execute("UPDATE drawers SET consolidated_into = ? WHERE consolidated_into IS NULL "
                 "AND id IN (SELECT value FROM json_each(?))", (drawer_id, sources))
    if saved.get(CONCEPTS_KEY):
        conn.execute("INSERT OR IGNORE INTO concept_sources(concept_id, drawer_id) SELECT id, ? "
                     "FROM concepts WHERE id IN (SELECT value FROM json_each(?))",
                     (drawer_id, json_ids(saved[CONCEPTS_KEY])))
    conn.execute("DELETE FROM trash WHERE id = ?", (drawer_id,))
    return blobs, vector_ids


def restore_around(conn: apsw.Connection, ids: Sequence[int]) -> None:
    """The neighbours' side of restoring ``ids`` with ``around=False``: their room neighbours'
    keyword context and context vectors, each neighbour once."""
    refresh_around(conn, ids)
    vectors_changed(conn, ids)


def batch_ids(conn: apsw.Connection, reason: str, kept_since_ms: int) -> list[int]:
    """The kept entries trashed with ``reason`` (a bulk forget's or a merge's batch id), by
    id."""
    return [int(r[0]) for r in conn.execute(
        "SELECT id FROM trash WHERE reason = ? AND trashed_ms >= ? ORDER BY id",
        (reason, kept_since_ms))]


def purge(conn: apsw.Connection, ids: Sequence[int]) -> list[int]:
    """Delete trash entries for good; the ids that were there."""
    gone = [int(r[0]) for r in conn.execute(
        "DELETE FROM trash WHERE id IN (SELECT value FROM json_each(?)) RETURNING id",
        (json_ids(ids),))]
    return sorted(gone)


def purge_before(conn: apsw.Connection, before_ms: int, limit: int) -> list[int]:
    """Delete up to ``limit`` entries trashed before ``before_ms``; their ids."""
    return sorted(int(r[0]) for r in conn.execute(
        "DELETE FROM trash WHERE id IN (SELECT id FROM trash WHERE trashed_ms < ? "
        "ORDER BY trashed_ms LIMIT ?) RETURNING id", (before_ms, limit)))


def oldest_ms(conn: apsw.Connection) -> int | None:
    """When the entry longest in the trash was trashed (None: the trash is empty)."""
    row = conn.execute("SELECT min(trashed_ms) FROM trash").fetchall()[0][0]
    return None if row is None else int(row)
