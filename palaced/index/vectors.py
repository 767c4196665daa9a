"""VectorIndex: the usearch HNSW cache of a palace's ``vectors`` table.

SQLite is the truth; the index is a cache of it. Keys are ``vectors.id``, which SQLite never
reuses. A search resolves the keys it finds to drawers through SQLite (``owners``: the
caller's snapshot), so a vector deleted there is a tombstone the search skips, and the index
keeps no ``key -> drawer`` map in memory nor has one to load at open. usearch's own
``remove`` is never called (after enough add/remove churn it can spin forever holding the
GIL, usearch 2.25): deleted vectors stay in the graph, counted in ``dead``, until a
compaction rebuilds the index. Vectors are stored in half precision (``f16``): cosines
within ~1e-3 of float32, half the memory, disk and load time.

Persistence (saving with a watermark, replaying after a crash) is ``index_file``.
Synchronous; the palace calls it from worker threads, mutations under its write lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from palaced.wire.errors import IndexError_

if TYPE_CHECKING:
    from usearch.index import Index

DTYPE = np.float32
INDEX_DTYPE = "f16"
ADD_BATCH = 4096  # rows per usearch add while rebuilding or replaying (bounded memory)
# Up to this many keys a search scans every vector exactly instead of walking the graph.
# HNSW is approximate: a vector the graph reaches badly is missed even by a search for its
# own text (2 of 992 near-identical notes at k=200, bench/crash.py), a memory its vector
# side can never find. ``bench/exact_search.py``: exact 0.09 / 0.44 / 0.80 ms per search at
# 1k / 10k / 20k keys, the graph 0.09 / 0.10 / 0.10 ms (384 dims, half floats).
EXACT_SEARCH_MAX = 10_000

# ``owners(keys)``: ``{key: drawer_id}`` of the keys whose vectors still exist.
Owners = Callable[[Sequence[int]], dict[int, int]]


def to_blob(vec: np.ndarray) -> bytes:
    """Serialise one vector for the SQLite ``vectors`` table (little-endian float32)."""
    return np.asarray(vec, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


def new_usearch(dims: int, dtype: str = INDEX_DTYPE) -> Index:
    """An empty usearch index with palace's graph parameters."""
    # Imported on first use (~40 ms): the daemon answers its first request without it.
    from usearch.index import Index

    return Index(ndim=dims, metric="cos", dtype=dtype, connectivity=16, expansion_add=128,
                 expansion_search=64)


class VectorIndex:
    """An HNSW index over unit vectors (cosine), keyed by vector id.

    ``len()`` is the number of live vectors (keys minus tombstones); ``watermark`` the
    highest key ever added; ``unsaved`` how many vectors were added since the last save and
    ``dirty`` whether anything changed since (what a crash would have to replay).
    """

    def __init__(self, dims: int, index: Index | None = None) -> None:
        self.dims = dims
        self._index = index if index is not None else new_usearch(dims)
        self.dead = 0
        self.watermark = 0
        self.unsaved = 0
        self.dirty = False
        # usearch mutations are not safe against a concurrent search from another thread.
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return max(0, self.size - self.dead)

    @property
    def size(self) -> int:
        """Keys in the graph, tombstones included."""
        return int(self._index.size)

    @property
    def raw(self) -> Index:
        """The usearch index itself (for saving; never mutate it from outside)."""
        return self._index

    def add(self, vector_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Add vectors (one row per vector id).

        Raises:
            IndexError_: usearch refused them (the index may then lack them: mark it stale).
        """
        if not len(vector_ids):
            return
        keys = np.asarray(vector_ids, dtype=np.uint64)
        with self._lock:
            try:
                self._index.add(keys, np.asarray(vectors, dtype=DTYPE).reshape(len(keys), -1))
            except Exception as exc:
                raise IndexError_(f"index add failed: {exc}") from exc
            self.watermark = max(self.watermark, int(keys.max()))
            self.unsaved += len(keys)
            self.dirty = True

    def add_rows(self, rows: Iterable[tuple[int, bytes]]) -> int:
        """Add ``(vector_id, blob)`` rows in batches; returns how many were added.

        Raises:
            IndexError_: usearch refused a batch.
        """
        added = 0
        keys: list[int] = []
        blobs: list[bytes] = []

        def flush() -> None:
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(keys), self.dims)
            self.add(keys, matrix)

        for vid, blob in rows:
            keys.append(vid)
            blobs.append(blob)
            if len(keys) >= ADD_BATCH:
                flush()
                added += len(keys)
                keys, blobs = [], []
        if keys:
            flush()
            added += len(keys)
        return added

    def remove(self, vector_ids: Sequence[int]) -> None:
        """Turn vectors into tombstones (ids not in the index are ignored).

        Each id is deleted from SQLite once, so none is counted twice.
        """
        if not len(vector_ids):
            return
        with self._lock:
            present = self._index.contains(np.asarray(vector_ids, dtype=np.uint64))
            gone = int(np.count_nonzero(present))
            if gone:
                self.dead += gone
                self.dirty = True

    def holds(self, vector_ids: Sequence[int]) -> bool:
        """Whether every one of ``vector_ids`` is in the graph (``palace doctor``)."""
        if not len(vector_ids):
            return True
        with self._lock:
            return bool(np.all(self._index.contains(np.asarray(vector_ids, dtype=np.uint64))))

    def search(self, query: np.ndarray, k: int, owners: Owners) -> list[tuple[int, float]]:
        """Best ``(drawer_id, cosine similarity)`` pairs, one per drawer, best first.

        ``owners`` resolves keys to drawers in the caller's snapshot; keys it does not know
        (tombstones) are skipped, and the search widens until it has ``k`` drawers or has
        seen every key. An index of at most ``EXACT_SEARCH_MAX`` keys is searched exactly.
        """
        if k <= 0 or len(self) == 0:
            return []
        q = np.asarray(query, dtype=DTYPE)
        # A long drawer has several chunks among the nearest keys, and tombstones take
        # places too: over-fetch, then widen when that was not enough.
        want = k * 2 + min(self.dead, k * 8)
        while True:
            with self._lock:
                size = self.size
                matches = self._index.search(q, min(want, size),
                                             exact=size <= EXACT_SEARCH_MAX)
            keys = [int(x) for x in matches.keys.tolist()]
            own = owners(keys)
            best: dict[int, float] = {}
            for key, dist in zip(keys, matches.distances.tolist(), strict=True):
                did = own.get(key)
                if did is None:
                    continue
                sim = 1.0 - float(dist)
                if sim > best.get(did, -2.0):
                    best[did] = sim
            if len(best) >= k or want >= size:
                return sorted(best.items(), key=lambda kv: -kv[1])[:k]
            want *= 4

    def mark_saved(self) -> None:
        self.unsaved = 0
        self.dirty = False


def brute_force(query: np.ndarray, rows: Sequence[tuple[int, bytes]], dims: int, k: int
                ) -> list[tuple[int, float]]:
    """Exact cosine search over ``(drawer_id, blob)`` rows; one best score per drawer."""
    if not rows:
        return []
    matrix = np.frombuffer(b"".join(b for _, b in rows), dtype="<f4").reshape(len(rows), dims)
    sims = matrix @ np.asarray(query, dtype=DTYPE)
    best: dict[int, float] = {}
    for (did, _), sim in zip(rows, sims.tolist(), strict=True):
        if sim > best.get(did, -2.0):
            best[did] = float(sim)
    return sorted(best.items(), key=lambda kv: -kv[1])[:k]


class PgVectors(VectorIndex):
    """What stands for the vector index of a team palace: its vectors live in PostgreSQL
    (pgvector, HNSW) and are written in the write transaction (``store.lookup.vectors``), so there
    is nothing to add, remove, save or rebuild here; searches run in SQL
    (``store.lookup.pg_search.vector_search``, through ``palaced.retrieval.search``)."""

    def __init__(self, dims: int) -> None:  # no usearch graph: not VectorIndex.__init__
        self.dims = dims
        self.dead = 0
        self.watermark = 0
        self.unsaved = 0
        self.dirty = False

    def __len__(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 0

    def add(self, vector_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Nothing: the vectors were written with their drawers."""

    def add_rows(self, rows: Iterable[tuple[int, bytes]]) -> int:
        return 0

    def remove(self, vector_ids: Sequence[int]) -> None:
        """Nothing: the vectors were deleted with their drawers."""

    def holds(self, vector_ids: Sequence[int]) -> bool:
        return True

    def search(self, query: np.ndarray, k: int, owners: Owners) -> list[tuple[int, float]]:
        raise TypeError("a team palace's vectors are searched in SQL (store.lookup.pg_search)")
