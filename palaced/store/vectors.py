"""Synchronous queries over a palace's stored vectors (the truth the vector index caches).

A drawer has one vector per chunk; ``vectors.id`` is the key of the HNSW index and is never
reused. Every write bumps ``vec_epoch`` in ``meta`` so a saved index file can tell it is
stale. Every function takes an open ``apsw.Connection``; writers run inside the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from .meta import bump_vec_epoch


def store_vectors(conn: apsw.Connection, drawer_id: int, vectors: Sequence[bytes]) -> list[int]:
    """Replace a drawer's vectors (one per chunk); returns the new vector ids.

    The caller removes the ids returned by ``vector_ids`` beforehand from the index.
    """
    conn.execute("DELETE FROM vectors WHERE drawer_id = ?", (drawer_id,))
    ids = [
        int(
            conn.execute(
                "INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?,?,?) RETURNING id",
                (drawer_id, chunk, blob),
            ).fetchall()[0][0]
        )
        for chunk, blob in enumerate(vectors)
    ]
    conn.execute("UPDATE drawers SET embedded = 1 WHERE id = ?", (drawer_id,))
    bump_vec_epoch(conn)
    return ids


def vector_ids(conn: apsw.Connection, drawer_id: int) -> list[int]:
    """The ids of one drawer's vectors."""
    return [
        int(r[0])
        for r in conn.execute("SELECT id FROM vectors WHERE drawer_id = ?", (drawer_id,))
    ]


def awaits_vectors(conn: apsw.Connection, drawer_id: int) -> bool:
    """Whether the drawer exists and is still stored without vectors."""
    rows = conn.execute("SELECT embedded FROM drawers WHERE id = ?", (drawer_id,)).fetchall()
    return bool(rows == [(0,)])


def pending_embeddings(conn: apsw.Connection, limit: int) -> list[tuple[int, str]]:
    """Drawers stored without vectors (e.g. while no model was loaded)."""
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, text FROM drawers WHERE embedded = 0 ORDER BY id LIMIT ?", (limit,)
        )
    ]


def vector_owners(conn: apsw.Connection) -> dict[int, int]:
    """``{vector_id: drawer_id}`` of every stored vector (to check a saved index file)."""
    return {int(v): int(d) for v, d in conn.execute("SELECT id, drawer_id FROM vectors")}


def all_vectors(conn: apsw.Connection) -> list[tuple[int, int, bytes]]:
    """Every ``(vector_id, drawer_id, blob)`` in id order, for index rebuilds."""
    return [
        (int(v), int(d), bytes(b))
        for v, d, b in conn.execute("SELECT id, drawer_id, vec FROM vectors ORDER BY id")
    ]


def drawer_vectors(conn: apsw.Connection, drawer_ids: Sequence[int]) -> list[tuple[int, bytes]]:
    """``(drawer_id, blob)`` of every chunk vector of the given drawers, by drawer then chunk."""
    return [(int(did), bytes(blob)) for did, blob in conn.execute(
        "SELECT drawer_id, vec FROM vectors WHERE drawer_id IN "
        "(SELECT value FROM json_each(?)) ORDER BY drawer_id, chunk",
        (_json_ids(drawer_ids),),
    )]


def _json_ids(ids: Sequence[int]) -> str:
    # One parameter for any number of ids: IN (SELECT value FROM json_each(?)).
    return "[" + ",".join(str(int(i)) for i in ids) + "]"
