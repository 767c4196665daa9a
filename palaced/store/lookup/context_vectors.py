"""Each drawer's context vector: the mean vector of its room neighbours, kept at write time.

A recall adds ``RankParams.neighbour_vector`` times the query's cosine with a vector hit's
context vector to its own cosine: a turn is also scored by what was said around it. The
neighbours are the drawers of its keyword context (``CONTEXT_NEIGHBOURS`` on each side, same
wing and room, time order, superseded drawers skipped); each counts by the mean of its
chunk vectors, and one without vectors (not embedded yet, or a palace without a model) is
left out. A superseded drawer has none (hidden from recall by default; a recall that
includes it scores it by its own cosine). The query's cosine with the mean is the mean of
its cosines with the neighbours, so one row per candidate replaces reading the neighbours
and their vectors at every recall.

The vector is derived, like the keyword context: ``context.refresh_context`` recomputes it
whenever a drawer's neighbours change, ``vectors.store_vectors`` whenever its own vectors
change (for the drawers it is a neighbour of), ``rebuild`` for the whole palace after a
model switch and when the table is first made (``context`` owns the neighbour window and
passes it in, so this module needs none of the store's but ``dialect``). No row: no
neighbour has vectors. Every function takes an open connection (SQLite or ``PgConn``);
writers run inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from itertools import groupby

import apsw
import numpy as np

from palaced.store.conn.dialect import json_ids

# Stored as half floats: a derived score term, weighted 0.5, needs ~3 digits (a cosine off by
# at most ~1e-3), and a palace keeps one per drawer beside its own vectors (768 bytes, not
# 1,536, at 384 dimensions).
STORED = np.dtype("<f2")

_UPSERT = ("INSERT INTO context_vectors(drawer_id, vec) VALUES(?, ?) "
           "ON CONFLICT(drawer_id) DO UPDATE SET vec = excluded.vec")


def mean_vectors(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, np.ndarray]:
    """``{drawer_id: the mean of its chunk vectors}`` for those of ``ids`` with vectors.

    The query of ``vectors.drawer_vectors``, which this leaf cannot import (``vectors``
    imports ``context``, which imports this module to keep the rows current)."""
    if not ids:
        return {}
    return dict(_per_drawer(conn.execute(
        "SELECT drawer_id, vec FROM vectors WHERE drawer_id IN (SELECT value FROM json_each(?)) "
        "ORDER BY drawer_id, chunk", (json_ids(ids),))))


def _per_drawer(rows: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, np.ndarray]]:
    """``(drawer_id, mean chunk vector)`` from ``(drawer_id, blob)`` rows grouped by drawer."""
    for did, group in groupby(rows, key=lambda r: int(r[0])):
        vecs = [np.frombuffer(bytes(b), dtype="<f4") for _, b in group]
        yield did, vecs[0] if len(vecs) == 1 else np.asarray(np.mean(vecs, axis=0),
                                                             dtype=np.float32)


def _mean(vecs: list[np.ndarray]) -> np.ndarray | None:
    """The mean of ``vecs`` of the most common dimension (a palace has one model's; this
    guards a half-finished switch), None if there are none."""
    if not vecs:
        return None
    dims = max({len(v) for v in vecs}, key=lambda d: sum(len(v) == d for v in vecs))
    same = [v for v in vecs if len(v) == dims]
    return np.asarray(np.mean(same, axis=0), dtype=np.float32)


def drop(conn: apsw.Connection, drawer_id: int) -> None:
    """Remove the context vector of ``drawer_id`` (superseded: recall scores it by its own
    cosine)."""
    _write(conn, drawer_id, None)


def _write(conn: apsw.Connection, drawer_id: int, mean: np.ndarray | None) -> None:
    if mean is None:
        conn.execute("DELETE FROM context_vectors WHERE drawer_id = ?", (drawer_id,))
    else:
        conn.execute(_UPSERT, (drawer_id, np.asarray(mean, dtype=STORED).tobytes()))


def refresh(conn: apsw.Connection, drawer_id: int, neighbours: Sequence[int]) -> None:
    """Set the context vector of ``drawer_id`` from its room ``neighbours`` (their ids, as
    ``context`` found them); none with vectors, or a superseded drawer, removes it."""
    live = conn.execute("SELECT 1 FROM drawers WHERE id = ? AND superseded_by IS NULL",
                        (drawer_id,)).fetchall()
    means = mean_vectors(conn, neighbours) if live else {}
    _write(conn, drawer_id, _mean(list(means.values())))


def refresh_many(conn: apsw.Connection, windows: Mapping[int, Sequence[int]],
                 live: Set[int]) -> None:
    """``refresh`` of every drawer of ``windows`` (``{drawer_id: its room neighbours}``),
    ``live`` those of them not superseded: one read of the neighbours' vectors and two
    batched writes."""
    means = mean_vectors(conn, sorted({j for i, js in windows.items() if i in live
                                       for j in js}))
    put: list[tuple[int, bytes]] = []
    gone: list[tuple[int]] = []
    for did, near in windows.items():
        # In id order, as ``refresh`` reads them: the same float sums.
        mean = _mean([means[j] for j in sorted(near) if j in means]) if did in live else None
        if mean is None:
            gone.append((did,))
        else:
            put.append((did, np.asarray(mean, dtype=STORED).tobytes()))
    conn.executemany("DELETE FROM context_vectors WHERE drawer_id = ?", gone)
    conn.executemany(_UPSERT, put)


REBUILD_BATCH = 2_048  # drawers whose context vectors ``rebuild`` computes per read


def rebuild(conn: apsw.Connection, n: int) -> int:
    """Recompute every drawer's context vector from its ``n`` live room neighbours on each
    side; returns how many drawers have one. The same vectors ``refresh`` would give.
    """
    conn.execute("DELETE FROM context_vectors")
    made = 0
    for _, batch in expected(conn, n):
        for did, _, mean in batch:
            if mean is not None:
                _write(conn, did, mean)
                made += 1
    return made


Batch = list[tuple[int, list[int], np.ndarray | None]]


def expected(conn: apsw.Connection, n: int) -> Iterator[tuple[list[int], Batch]]:
    """Every live drawer's ``n`` room neighbours on each side (time order) and the context
    vector they give (None: none has vectors), as ``refresh`` computes it: per room,
    ``REBUILD_BATCH`` drawers at a time, each batch with its window (the batch's drawers and
    their neighbours on either side). Memory stays that of one batch's vectors however large
    a room grows.
    """
    rooms = conn.execute("SELECT DISTINCT wing, room FROM drawers").fetchall()
    for wing, room in rooms:
        live = [int(i) for (i,) in conn.execute(
            "SELECT id FROM drawers WHERE wing = ? AND room = ? AND superseded_by IS NULL "
            "ORDER BY occurred_ms, id", (wing, room))]
        for first in range(0, len(live), REBUILD_BATCH):
            last = min(first + REBUILD_BATCH, len(live))
            window = live[max(first - n, 0):last + n]
            means = mean_vectors(conn, window)
            batch: Batch = []
            for k in range(first, last):
                near = live[max(k - n, 0):k] + live[k + 1:k + 1 + n]
                batch.append((live[k], near,
                              _mean([means[j] for j in sorted(near) if j in means])))
            yield window, batch


def stored(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, bytes]:
    """The stored context vectors of those of ``ids`` that have one (raw half floats)."""
    if not ids:
        return {}
    return {int(i): bytes(b) for i, b in conn.execute(
        "SELECT drawer_id, vec FROM context_vectors "
        "WHERE drawer_id IN (SELECT value FROM json_each(?))", (json_ids(ids),))}


def agrees(row: bytes | None, mean: np.ndarray | None) -> bool:
    """Whether a stored row is ``mean`` (both absent, or equal to half-float precision)."""
    if row is None or mean is None:
        return row is None and mean is None
    got = np.frombuffer(row, dtype=STORED)
    return len(got) == len(mean) and bool(np.allclose(got.astype(np.float32), mean,
                                                      atol=2e-3))


def cosines(conn: apsw.Connection, ids: Sequence[int], qvec: np.ndarray) -> dict[int, float]:
    """``{drawer_id: the query's cosine with its context vector}`` for those of ``ids`` that
    have one of the query's dimension (a context vector is the mean of unit vectors, so the
    dot product is the mean of the query's cosines with the neighbours)."""
    dims = qvec.shape[0]
    rows = [(i, b) for i, b in stored(conn, ids).items() if len(b) == STORED.itemsize * dims]
    if not rows:
        return {}
    # One buffer, one product: a small array per row costs more than the product.
    mat = np.frombuffer(b"".join(b for _, b in rows), dtype=STORED).reshape(len(rows), dims)
    sims = mat.astype(np.float32) @ qvec.astype(np.float32)
    return {i: float(s) for (i, _), s in zip(rows, sims.tolist(), strict=True)}
