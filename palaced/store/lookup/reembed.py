"""Synchronous SQL of a model switch: the new model's vectors, built beside the live ones.

While a palace is re-embedded for another model, ``meta.embedder_next`` (and ``dims_next``)
name that model and its vectors go into ``vectors_next`` (one row per chunk, like
``vectors``). The live ``vectors``, which the vector index caches, stay those of
``meta.embedder`` until ``switch`` replaces them in one transaction, so a kill at any point
leaves either the old model's complete set or the new one's. A drawer is done when it has
rows in ``vectors_next``; forgetting it deletes them (ON DELETE CASCADE). Every function takes
an open ``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from palaced.store.conn.meta import claim_embedder, meta_get, meta_set
from palaced.store.lookup.context import rebuild_context_vectors

NEXT_KEYS = ("embedder_next", "dims_next")


def next_model(conn: apsw.Connection) -> str | None:
    """The identity of the model the palace is being re-embedded for, or None."""
    return meta_get(conn, "embedder_next")


def begin(conn: apsw.Connection, identity: str, dims: int, *, fresh: bool) -> None:
    """Aim the re-embedding at model ``identity``.

    Vectors already built for that model are kept (a pass resumes) unless ``fresh``; those of
    another target are dropped.
    """
    if fresh or next_model(conn) != identity:
        conn.execute("DELETE FROM vectors_next")
    meta_set(conn, "embedder_next", identity)
    meta_set(conn, "dims_next", str(dims))


def abandon(conn: apsw.Connection) -> None:
    """Drop a re-embedding in progress (its vectors and its target)."""
    conn.execute("DELETE FROM vectors_next")
    conn.execute("DELETE FROM meta WHERE key IN (?, ?)", NEXT_KEYS)


def todo(conn: apsw.Connection, after: int, limit: int) -> list[tuple[int, str]]:
    """``(id, text)`` of drawers past id ``after`` still without the target's vectors."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT id, text FROM drawers d WHERE id > ? AND NOT EXISTS "
        "(SELECT 1 FROM vectors_next v WHERE v.drawer_id = d.id) ORDER BY id LIMIT ?",
        (after, limit))]


def store_next(conn: apsw.Connection, identity: str, drawer_id: int,
               blobs: Sequence[bytes]) -> bool:
    """Store a drawer's vectors for target ``identity``; False (nothing written) when the
    target changed, the drawer is gone or it has them already."""
    if next_model(conn) != identity or not conn.execute(
            "SELECT 1 FROM drawers d WHERE id = ? AND NOT EXISTS "
            "(SELECT 1 FROM vectors_next v WHERE v.drawer_id = d.id)",
            (drawer_id,)).fetchall():
        return False
    conn.executemany("INSERT INTO vectors_next(drawer_id, chunk, vec) VALUES(?,?,?)",
                     [(drawer_id, chunk, blob) for chunk, blob in enumerate(blobs)])
    return True


def progress(conn: apsw.Connection) -> tuple[str | None, int, int]:
    """``(target, drawers done, drawers)`` of the re-embedding (target None: none runs).

    Works on a read-only connection to a database not yet migrated to v4 (no target then).
    """
    total = int(conn.execute("SELECT count(*) FROM drawers").fetchall()[0][0])
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vectors_next'").fetchall():
        return None, 0, total
    done = int(conn.execute(
        "SELECT count(DISTINCT drawer_id) FROM vectors_next").fetchall()[0][0])
    return next_model(conn), done, total


def switch(conn: apsw.Connection, identity: str) -> bool:
    """Make the target's vectors the live ones, if every drawer has them; True if it did.

    The old vectors go, the new ones get fresh ids (index keys are never reused), every drawer
    counts as embedded, the context vectors are recomputed from the new vectors, and the
    palace records ``identity`` as its model.
    """
    if next_model(conn) != identity or todo(conn, 0, 1):
        return False
    dims = int(meta_get(conn, "dims_next") or 0)
    conn.execute("DELETE FROM vectors")
    conn.execute("INSERT INTO vectors(drawer_id, chunk, vec) SELECT drawer_id, chunk, vec "
                 "FROM vectors_next ORDER BY drawer_id, chunk")
    conn.execute("UPDATE drawers SET embedded = 1 WHERE embedded = 0")
    rebuild_context_vectors(conn)
    abandon(conn)
    claim_embedder(conn, identity, dims)
    return True
