"""Synchronous queries over a palace's stored vectors (the truth the vector index caches).

A drawer has one vector per chunk; ``vectors.id`` is the key of the HNSW index and is never
reused, so the highest id a saved index holds tells which vectors came after it
(``index_file``). Every function takes an open ``apsw.Connection``; writers run inside the
caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apsw
import numpy as np

from palaced.store.conn.dialect import indexed_by, is_pg, json_ids, vector_literal
from palaced.store.lookup.context import vectors_changed

# A drawer's chunk count; for drawers stored before it was recorded, an estimate from the
# text's length (chunks of ~200 wordpieces are ~580 characters of English).
CHUNKS_SQL = "coalesce(chunks, (length(text) + 579) / 580)"


def store_vectors(conn: apsw.Connection, drawer_id: int, vectors: Sequence[bytes], *,
                  context: bool = True) -> list[int]:
    """Replace a drawer's vectors (one per chunk), and the context vectors of its room
    neighbours with them (unless ``context`` is False: a batch refreshes them once, with
    ``context.vectors_changed`` or ``drawers.refresh_around``); returns the new vector ids.

    The caller removes the ids returned by ``vector_ids`` beforehand from the index.
    """
    if is_pg(conn):
        ids = _store_vectors_pg(conn, drawer_id, vectors)
    else:
        conn.execute("DELETE FROM vectors WHERE drawer_id = ?", (drawer_id,))
        ids = [int(conn.execute(
            "INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?,?,?) RETURNING id",
            (drawer_id, chunk, blob)).fetchall()[0][0]) for chunk, blob in enumerate(vectors)]
        conn.execute("UPDATE drawers SET embedded = 1, chunks = ? WHERE id = ?",
                     (len(ids), drawer_id))
    if context:
        vectors_changed(conn, [drawer_id])
    return ids


def _store_vectors_pg(conn: Any, drawer_id: int, vectors: Sequence[bytes]) -> list[int]:
    """``store_vectors``' rows on PostgreSQL in one statement: the old vectors deleted, the
    new ones inserted (the blob and the same vector as pgvector's, for its HNSW index) and
    the drawer marked embedded; returns the new ids in chunk order."""
    rows = conn.execute(
        "WITH gone AS (DELETE FROM vectors WHERE drawer_id = :d), "
        "new AS (INSERT INTO vectors(drawer_id, chunk, vec, embedding) "
        "SELECT :d, CAST(c.n AS integer) - 1, c.blob, CAST(c.lit AS vector) "
        "FROM unnest(CAST(:blobs AS bytea[]), CAST(:lits AS text[])) WITH ORDINALITY "
        "AS c(blob, lit, n) ORDER BY c.n RETURNING id, chunk), "
        "mark AS (UPDATE drawers SET embedded = 1, chunks = :count WHERE id = :d) "
        "SELECT id FROM new ORDER BY chunk",
        {"d": drawer_id, "count": len(vectors), "blobs": [bytes(b) for b in vectors],
         "lits": [vector_literal(np.frombuffer(b, dtype="<f4")) for b in vectors]}).fetchall()
    return [int(r[0]) for r in rows]


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


def pending_embeddings(conn: apsw.Connection, limit: int, max_chunks: int
                       ) -> list[tuple[int, str]]:
    """The oldest drawers stored without vectors (no model loaded then, or a long text left
    to the background): at most ``limit`` drawers and, past the first, ``max_chunks``
    chunks in all."""
    picked: list[int] = []
    total = 0
    for did, chunks in conn.execute(
            f"SELECT id, {CHUNKS_SQL} FROM drawers WHERE embedded = 0 ORDER BY id LIMIT ?",
            (limit,)):
        if picked and total + int(chunks or 1) > max_chunks:
            break
        picked.append(int(did))
        total += int(chunks or 1)
    if not picked:
        return []
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT id, text FROM drawers WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
        (json_ids(picked),))]


def owners_of(conn: apsw.Connection, vector_ids: Sequence[int]) -> dict[int, int]:
    """``{vector_id: drawer_id}`` of those of ``vector_ids`` that exist (a search's keys)."""
    if not vector_ids:
        return {}
    # SQLite's planner prefers the rowid, whose pages are the vectors' own (see schema v10).
    source = indexed_by(conn, "vectors", "vectors_owner")
    return {int(v): int(d) for v, d in conn.execute(
        f"SELECT id, drawer_id FROM {source} WHERE id IN (SELECT value FROM json_each(?))",
        (json_ids(vector_ids),))}


def vectors_after(conn: apsw.Connection, watermark: int) -> Iterator[tuple[int, bytes]]:
    """Every ``(vector_id, blob)`` with an id above ``watermark``, in id order (lazily: the
    caller consumes it inside its read)."""
    for vid, blob in conn.execute("SELECT id, vec FROM vectors WHERE id > ? ORDER BY id",
                                  (watermark,)):
        yield int(vid), bytes(blob)


def vector_count(conn: apsw.Connection) -> int:
    """How many vectors the palace holds."""
    return int(conn.execute("SELECT count(*) FROM vectors").fetchall()[0][0])


def vector_id_sample(conn: apsw.Connection, upto: int, n: int) -> list[int]:
    """Up to ``n`` existing vector ids in ``1..upto``, spread evenly (index lookups only)."""
    if upto <= 0 or n <= 0:
        return []
    step = max(1, upto // n)
    found: dict[int, None] = {}
    for start in range(1, upto + 1, step):
        rows = conn.execute("SELECT id FROM vectors WHERE id >= ? AND id <= ? ORDER BY id "
                            "LIMIT 1", (start, upto)).fetchall()
        if rows:
            found[int(rows[0][0])] = None
    return list(found)


def drawer_vectors(conn: apsw.Connection, drawer_ids: Sequence[int]) -> list[tuple[int, bytes]]:
    """``(drawer_id, blob)`` of every chunk vector of the given drawers, by drawer then chunk."""
    return [(int(did), bytes(blob)) for did, blob in conn.execute(
        "SELECT drawer_id, vec FROM vectors WHERE drawer_id IN "
        "(SELECT value FROM json_each(?)) ORDER BY drawer_id, chunk",
        (json_ids(drawer_ids),),
    )]
