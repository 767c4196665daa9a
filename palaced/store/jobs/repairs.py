"""Synchronous repairs of a palace's derived tables, for ``palace doctor --repair``.

Only what can be derived again from ``drawers`` (and ``entities``) is repaired: the drawers'
full-text rows and index, the entity index, vector rows of deleted drawers, the embedded
flag of drawers whose vectors are gone, the room context (keyword context and context
vectors), and closets. Each function takes the writer
connection inside the caller's transaction (``Store.write``) and returns how many rows it
fixed. A damaged b-tree is beyond all of them: that takes a backup.
"""

from __future__ import annotations

from collections.abc import Iterable

import apsw

from palaced.store.jobs.checks import DERIVED_SQL
from palaced.store.lookup.context import date_words, refresh_context
from palaced.store.lookup.fts_log import note_changed


def _ids(conn: apsw.Connection, name: str) -> list[int]:
    return [int(r[0]) for r in conn.execute(DERIVED_SQL[name])]


def refill_fts(conn: apsw.Connection) -> int:
    """Give every drawer exactly its full-text row (text, neighbour context, date words).

    Rows of deleted drawers are dropped, missing rows added and rows whose text is not the
    drawer's rewritten; then FTS5 rebuilds its index from those rows, which also mends an
    inverted index that disagrees with them ("malformed inverted index").
    """
    orphans = _ids(conn, "fts_orphans")
    for rowid in orphans:
        conn.execute("DELETE FROM drawers_fts WHERE rowid = ?", (rowid,))
    redo = sorted(set(_ids(conn, "fts_missing")) | set(_ids(conn, "fts_stale")))
    for did in redo:
        text, occurred = conn.execute("SELECT text, occurred_ms FROM drawers WHERE id = ?",
                                      (did,)).fetchall()[0]
        conn.execute("DELETE FROM drawers_fts WHERE rowid = ?", (did,))
        conn.execute("INSERT INTO drawers_fts(rowid, text, context, dates) VALUES(?,?,?,?)",
                     (did, text, "", date_words(int(occurred))))
        refresh_context(conn, did)
    note_changed(conn, [*orphans, *redo])
    conn.execute("INSERT INTO drawers_fts(drawers_fts) VALUES('rebuild')")
    return len(orphans) + len(redo)


def rebuild_entities_fts(conn: apsw.Connection) -> None:
    """Rebuild the entity index and the drawers' substring index from the tables they index
    (their external content)."""
    conn.execute("INSERT INTO entities_fts(entities_fts) VALUES('rebuild')")
    conn.execute("INSERT INTO drawers_trigram(drawers_trigram) VALUES('rebuild')")


def drop_orphan_vectors(conn: apsw.Connection) -> list[int]:
    """Delete vector rows whose drawer is gone; returns their ids (to drop from the index)."""
    ids = _ids(conn, "orphan_vectors")
    for vid in ids:
        conn.execute("DELETE FROM vectors WHERE id = ?", (vid,))
    return ids


def requeue_unembedded(conn: apsw.Connection) -> int:
    """Mark drawers that claim vectors but have none as waiting for embedding again."""
    ids = _ids(conn, "embedded_without_vectors")
    conn.executemany("UPDATE drawers SET embedded = 0 WHERE id = ?", [(i,) for i in ids])
    return len(ids)


def refresh_contexts(conn: apsw.Connection, ids: Iterable[int]) -> int:
    """Drop context vectors of drawers gone or superseded, and recompute the keyword context
    and context vector of the drawers ``ids`` (``context.stale_contexts``); returns how many
    rows were fixed."""
    orphans = _ids(conn, "context_orphans")
    conn.executemany("DELETE FROM context_vectors WHERE drawer_id = ?", [(i,) for i in orphans])
    redo = list(ids)
    for did in redo:
        refresh_context(conn, did)
    return len(orphans) + len(redo)


def drop_orphan_closets(conn: apsw.Connection) -> int:
    """Delete closet rows of drawers that no longer exist."""
    before = conn.total_changes()
    conn.execute("DELETE FROM closets WHERE drawer_id NOT IN (SELECT id FROM drawers)")
    return int(conn.total_changes() - before)


def refile_closets(conn: apsw.Connection, drawer_id: int, topics: Iterable[str]) -> None:
    """Replace one drawer's closets with ``topics``."""
    conn.execute("DELETE FROM closets WHERE drawer_id = ?", (drawer_id,))
    conn.executemany("INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
                     [(t, drawer_id) for t in topics])
