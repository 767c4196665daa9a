"""VectorIndex: the usearch HNSW cache of a palace's ``vectors`` table, and its persistence.

SQLite is the truth; the index file is a cache. Keys are ``vectors.id``; each vector belongs
to a drawer (long drawers have one vector per chunk), so the index also keeps the in-memory
``vector id -> drawer id`` map it needs to answer in drawer ids. ``open_index`` loads the
saved file only when its recorded epoch and digest prove it current, else rebuilds it from
SQLite; ``save_index`` writes it atomically. Synchronous; the palace calls it from worker
threads under its write lock for mutations.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from usearch.index import Index

from palaced.errors import IndexError_, PalaceError, StorageFull, StorageReadOnly
from palaced.store import Store
from palaced.store.db import is_read_only, storage_error
from palaced.store.meta import meta_get, meta_set
from palaced.store.vectors import all_vectors, vector_owners

log = logging.getLogger("palaced.index")

DTYPE = np.float32


def to_blob(vec: np.ndarray) -> bytes:
    """Serialise one vector for the SQLite ``vectors`` table (little-endian float32)."""
    return np.asarray(vec, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class VectorIndex:
    """An HNSW index over unit vectors (cosine), keyed by vector id."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._index = self._new_index()
        self._owner: dict[int, int] = {}
        self.dead = 0  # removed vectors still in the graph (see remove)
        self.dirty = False
        # usearch mutations are not safe against concurrent search from another thread.
        self._lock = threading.RLock()

    def _new_index(self) -> Index:
        return Index(ndim=self.dims, metric="cos", dtype="f32", connectivity=16,
                     expansion_add=128, expansion_search=64)

    def __len__(self) -> int:
        return len(self._owner)

    def load(self, path: Path, owners: dict[int, int]) -> bool:
        """Load the saved index file; True if it loaded and holds exactly ``owners``' keys."""
        try:
            index = self._new_index()
            index.load(str(path))
        except Exception:  # corrupt or foreign file: the caller rebuilds
            return False
        if len(index) != len(owners) or index.ndim != self.dims:
            return False
        if owners:
            sample = np.fromiter(list(owners)[:: max(1, len(owners) // 64)], dtype=np.uint64)
            if not bool(np.all(index.contains(sample))):
                return False
        with self._lock:
            self._index = index
            self._owner = dict(owners)
            self.dead = 0
            self.dirty = False
        return True

    def rebuild(self, rows: Iterable[tuple[int, int, bytes]]) -> None:
        """Rebuild from ``(vector_id, drawer_id, blob)`` rows."""
        keys: list[int] = []
        owners: dict[int, int] = {}
        blobs: list[bytes] = []
        for vid, did, blob in rows:
            keys.append(vid)
            owners[vid] = did
            blobs.append(blob)
        index = self._new_index()
        if keys:
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(keys), self.dims)
            try:
                index.add(np.asarray(keys, dtype=np.uint64), matrix)
            except Exception as exc:
                raise IndexError_(f"index rebuild failed: {exc}") from exc
        with self._lock:
            self._index = index
            self._owner = owners
            self.dead = 0
            self.dirty = True

    def add(self, drawer_id: int, vector_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Add a drawer's vectors (one row per vector id)."""
        if not vector_ids:
            return
        with self._lock:
            try:
                self._index.add(np.asarray(vector_ids, dtype=np.uint64),
                                np.asarray(vectors, dtype=DTYPE).reshape(len(vector_ids), -1))
            except Exception as exc:
                raise IndexError_(f"index add failed: {exc}") from exc
            for vid in vector_ids:
                self._owner[vid] = drawer_id
            self.dirty = True

    def remove(self, vector_ids: Sequence[int]) -> None:
        """Forget vectors by id (unknown ids are ignored).

        The vectors stay in the HNSW graph as tombstones that searches skip; the palace
        compacts (rebuilds from SQLite) before saving. usearch's own ``remove`` is never
        called: after enough add/remove churn it can spin forever holding the GIL
        (usearch 2.25, reproduced by the soak workload), which would freeze the daemon.
        """
        with self._lock:
            for vid in vector_ids:
                if self._owner.pop(vid, None) is not None:
                    self.dead += 1
                    self.dirty = True

    def owners(self) -> dict[int, int]:
        """A copy of the live ``{vector id: drawer id}`` map (tombstones excluded)."""
        with self._lock:
            return dict(self._owner)

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Best ``(drawer_id, cosine similarity)`` pairs, one per drawer, best first."""
        with self._lock:
            n = len(self._owner)
            if n == 0 or k <= 0:
                return []
            # Over-fetch past the tombstones that may take places in the top.
            want = min(n + self.dead, k * 2 + self.dead)
            matches = self._index.search(np.asarray(query, dtype=DTYPE), want)
            best: dict[int, float] = {}
            for key, dist in zip(matches.keys.tolist(), matches.distances.tolist(),
                                 strict=True):
                did = self._owner.get(int(key))
                if did is None:
                    continue
                sim = 1.0 - float(dist)
                if sim > best.get(did, -2.0):
                    best[did] = sim
        return sorted(best.items(), key=lambda kv: -kv[1])[:k]

    def save(self, path: Path) -> str:
        """Write the index atomically (temp file + fsync + rename); returns the file digest.

        Raises:
            StorageFull, StorageReadOnly: the storage has no room for it, or is read-only.
            IndexError_: the write failed otherwise (the old file stays in place either way).
        """
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            need = int(self._index.serialized_length)
            try:
                self._index.save(str(tmp))
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                digest = file_digest(tmp)
                os.replace(tmp, path)
            except Exception as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise _save_error(exc, path, need) from exc
            self.dirty = False
        return digest


def _save_error(exc: Exception, path: Path, need: int) -> PalaceError:
    """What a failed save means. usearch reports a failed write without its errno ("Failed to
    serialize into stream"), so a full or read-only filesystem is recognised from the
    filesystem itself: a client can act on STORAGE_FULL, not on an opaque INDEX_ERROR."""
    if isinstance(exc, OSError):
        err = storage_error(exc, path)
        if isinstance(err, StorageFull | StorageReadOnly):
            return err
    try:
        st = os.statvfs(path.parent)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    if free is not None and free < need:
        return StorageFull(f"storage is full ({path}): the vector index needs {need} bytes, "
                           f"{free} are free; free some space, then retry",
                           details={"condition": "full", "path": str(path), "need": need,
                                    "free": free})
    if is_read_only(path):
        return StorageReadOnly(f"storage is read-only ({path}): the vector index cannot be "
                               "saved; make it writable, then retry",
                               details={"condition": "read_only", "path": str(path)})
    return IndexError_(f"index save failed ({path}): {exc}", details={"path": str(path)})


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


def open_index(store: Store, path: Path, dims: int, *, rebuild: bool = False
               ) -> tuple[VectorIndex, bool]:
    """Load the saved index if it is current and intact, else rebuild it from SQLite.

    "Current" means the palace's ``vec_epoch`` (bumped with every vector write) equals the
    ``index_saved_epoch`` recorded after the last save and the file's digest matches. A
    rebuilt index is saved at once. Returns ``(index, rebuilt)``.

    A rebuilt index that cannot be saved because the storage is full or read-only is
    returned all the same (still dirty, so a later checkpoint saves it).

    Raises:
        IndexError_: the rebuild or the save failed.
        StorageError: SQLite failed.
    """
    def snapshot(c: Any) -> tuple[str | None, str | None, str | None, dict[int, int]]:
        return (meta_get(c, "vec_epoch"), meta_get(c, "index_saved_epoch"),
                meta_get(c, "index_digest"), vector_owners(c))

    epoch, saved_epoch, digest, owners = store.read(snapshot)
    index = VectorIndex(dims)
    if not rebuild and path.is_file() and (epoch or "0") == (saved_epoch or "0") and digest:
        try:
            if file_digest(path) == digest and index.load(path, owners):
                return index, False
        except OSError:
            pass
    index.rebuild(store.read(all_vectors))
    try:
        save_index(index, store, path)
    except (StorageFull, StorageReadOnly) as exc:
        # The file is only a cache: serve from memory (the index stays dirty, so the
        # checkpointer saves it once there is room) rather than refuse every read.
        log.warning("%s; serving the rebuilt vector index from memory", exc.message)
    return index, True


def save_index(index: VectorIndex, store: Store, path: Path) -> None:
    """Save atomically and record which vector epoch the file holds.

    The caller holds the palace's write lock, so no vector write runs between reading the
    epoch and recording it.

    Raises:
        StorageFull, StorageReadOnly, IndexError_: the save failed (the previous file stays
            in place); StorageError: recording it in SQLite failed.
    """
    epoch = store.read(lambda c: meta_get(c, "vec_epoch")) or "0"
    digest = index.save(path)

    def record(c: Any) -> None:
        meta_set(c, "index_saved_epoch", epoch)
        meta_set(c, "index_digest", digest)

    store.write(record, stamp=False)


def file_entries(path: Path) -> int | None:
    """How many vectors the index file at ``path`` holds, read from its header; None when it
    is missing or unreadable. Never raises."""
    try:
        meta = Index.metadata(str(path))
        return None if meta is None else int(meta["count_present"])
    except Exception:  # a missing, truncated or foreign file: the caller reports it
        return None


def file_holds(path: Path, keys: Sequence[int]) -> bool:
    """Whether the index file at ``path`` holds exactly the vector ids ``keys``.

    The file is memory-mapped (a view), not loaded. Never raises: unreadable is False.
    """
    try:
        view = Index.restore(str(path), view=True)
        if view is None or len(view) != len(keys):
            return False
        return not keys or bool(np.all(view.contains(np.asarray(keys, dtype=np.uint64))))
    except Exception:  # a missing, truncated or foreign file: the caller reports it
        return False
