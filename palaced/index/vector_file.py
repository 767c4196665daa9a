"""Saving a palace's vector index with a watermark, and opening it by replaying what SQLite
changed since that save.

A save writes the usearch file atomically (temp file, fsync, rename, directory fsync) and
records in ``meta`` (``index_saves``, the last two saves) what that file holds: its CRC-32
and size, its watermark (the highest vector id in it; ids are never reused, so every vector
added later has a higher one), its key and tombstone counts, the model and dimensions. The
record is committed before the rename and the previous one is kept, so whichever file a
crash leaves in place has its record.

Opening reads the file through a memory map, lets its CRC pick its record, loads it, then
replays: the vectors above the watermark are added, and the vectors deleted since become
tombstones (the file's keys plus those added, minus the vectors SQLite has). So a kill -9
costs the writes since the last save, not the palace. A missing file, a damaged one (no
record matches its CRC, usearch refuses it, a sampled vector of its range is missing) or one
made for another model or dimension is rebuilt from SQLite instead. A file saved before
watermarks existed is recognised by its sha256 (the ``index_digest`` it was saved with) and
replayed the same way, so an upgrade rebuilds nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from palaced.index.vectors import VectorIndex, new_usearch
from palaced.store import Store
from palaced.store.conn.db import is_read_only, storage_error
from palaced.store.conn.meta import meta_delete, meta_get, meta_set
from palaced.store.lookup.vectors import vector_count, vector_id_sample, vectors_after
from palaced.wire.errors import IndexError_, PalaceError, StorageFull, StorageReadOnly
from palaced.wire.safe_files import sync_dir

log = logging.getLogger("palaced.index.vectors")

SAVES_KEY = "index_saves"
LEGACY_KEYS = ("index_digest", "index_saved_epoch", "vec_epoch")
SAMPLE = 32  # vector ids of the file's range checked to be in it at open


@dataclass(frozen=True)
class IndexLoad:
    """How an open got its index: ``loaded`` (the file was current), ``replayed`` (the file
    plus the changes since its save), or ``rebuilt`` from SQLite (``reason`` says why)."""

    how: str
    replayed: int = 0
    removed: int = 0
    seconds: float = 0.0
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"how": self.how, "replayed": self.replayed,
                               "removed": self.removed, "ms": round(self.seconds * 1000, 1)}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class _Unusable(Exception):
    """The saved file cannot serve: the message says why (the caller rebuilds)."""


def open_index(store: Store, path: Path, dims: int, *, rebuild: bool = False
               ) -> tuple[VectorIndex, IndexLoad]:
    """Load the saved index and replay the changes since its save, or rebuild from SQLite.

    A rebuilt index is saved at once; a replayed one is left ``dirty`` for the next save. A
    rebuilt index that cannot be saved because the storage is full or read-only is returned
    all the same (still dirty, so a later checkpoint saves it).

    Raises:
        IndexError_: the rebuild or its save failed otherwise.
        StorageError: SQLite failed.
    """
    started = time.perf_counter()
    saves, legacy, embedder = store.read(lambda c: (
        json.loads(meta_get(c, SAVES_KEY) or "[]"), meta_get(c, "index_digest"),
        meta_get(c, "embedder")))
    reason = "asked"
    if not rebuild:
        try:
            index, record = _load_file(path, dims, saves, legacy, embedder)
            replayed, removed = store.read(lambda c: _replay(c, index, record))
            how = "replayed" if replayed or removed else "loaded"
            return index, IndexLoad(how, replayed, removed, time.perf_counter() - started)
        except _Unusable as exc:
            reason = str(exc)
    index = store.read(lambda c: build_index(c, dims))
    try:
        save_index(index, store, path)
    except (StorageFull, StorageReadOnly) as exc:
        # The file is only a cache: serve from memory (the index stays dirty, so the
        # checkpointer saves it once there is room) rather than refuse every read.
        log.warning("%s; serving the rebuilt vector index from memory", exc.message)
    return index, IndexLoad("rebuilt", seconds=time.perf_counter() - started, reason=reason)


def _load_file(path: Path, dims: int, saves: list[dict[str, Any]], legacy: str | None,
               embedder: str | None) -> tuple[VectorIndex, dict[str, Any]]:
    """The index in ``path`` and the record of its save.

    Raises:
        _Unusable: missing, damaged, or made for another model or dimension.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise _Unusable("the index file is empty")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                # The checksum (a fifth of a load's CPU) runs on a second thread while usearch
                # loads the graph: one zlib call over the map releases the GIL throughout,
                # where usearch holds it (a checksum read in pieces, each taking the GIL
                # back, waited for the load: 1.3 s instead of 0.55 s at a million drawers).
                # The map's pages count in the daemon's RSS until it closes, as page cache
                # (RssFile), beside usearch's own copy. A file that turns out unusable
                # wasted its load, which a rebuild then dwarfs.
                sums: list[int] = []
                summer = threading.Thread(target=lambda: sums.append(zlib.crc32(data)),
                                          name="index-crc", daemon=True)
                summer.start()
                from usearch.index import Index  # on first use, like index.new_usearch

                meta: dict[str, Any] | None = None
                raw: Any = None
                failed: Exception | None = None
                try:
                    with memoryview(data) as view:
                        meta = Index.metadata(view)
                        if meta and meta["dimensions"] == dims:
                            raw = new_usearch(dims, meta["kind_scalar"])
                            raw.load(view)
                except Exception as exc:  # judged after the checks below, as before
                    failed = exc
                finally:
                    summer.join()
                crc = sums[0] if sums else zlib.crc32(data)
        record = next((r for r in saves if r.get("crc") == crc
                       and r.get("bytes") == size), None)
        if record is None and not saves and legacy is not None and (
                _file_digest(path, "sha256") == legacy):
            record = {"legacy": True, "embedder": embedder, "dims": dims}
        if record is None:
            raise _Unusable("the index file matches no save of this palace")
        if record.get("embedder") != embedder or record.get("dims") != dims:
            raise _Unusable("the index file was made for another model")
        if failed is not None:
            raise failed
        if not meta or meta["dimensions"] != dims:
            raise _Unusable("the index file has other dimensions")
    except FileNotFoundError:
        raise _Unusable("no index file") from None
    except _Unusable:
        raise
    except Exception as exc:  # unreadable, or usearch refused it: rebuild
        raise _Unusable(f"the index file cannot be loaded ({type(exc).__name__})") from exc
    index = VectorIndex(dims, raw)
    if record.get("legacy"):
        # Files of old palaces hold exactly the vectors of their save: the top key is theirs.
        keys = np.asarray(raw.keys)
        record = {**record, "watermark": int(keys.max()) if len(keys) else 0, "dead": 0}
    index.watermark = int(record["watermark"])
    return index, record


def _file_digest(path: Path, kind: str) -> Any:
    """The crc32 (an int) or sha256 (hex) of the file at ``path``, read in 16 MB pieces."""
    crc, sha = 0, hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(1 << 24):
            if kind == "crc32":
                crc = zlib.crc32(piece, crc)
            else:
                sha.update(piece)
    return crc if kind == "crc32" else sha.hexdigest()


def _replay(c: apsw.Connection, index: VectorIndex, record: dict[str, Any]) -> tuple[int, int]:
    """Bring a loaded index up to SQLite (one read snapshot); returns (added, removed).

    Raises:
        _Unusable: the file lacks vectors its range should hold.
    """
    sample = vector_id_sample(c, index.watermark, SAMPLE)
    if sample and not bool(np.all(index.raw.contains(np.asarray(sample, dtype=np.uint64)))):
        raise _Unusable("the index file lacks vectors of its range")
    try:
        added = catch_up(c, index)
    except IndexError_ as exc:
        raise _Unusable(str(exc)) from exc
    removed = max(0, index.dead - int(record.get("dead", 0)))
    index.unsaved = added
    # A file saved before watermarks is saved again soon, with its record.
    index.dirty = bool(added or removed or record.get("legacy"))
    return added, removed


def build_index(c: apsw.Connection, dims: int) -> VectorIndex:
    """A new index of every vector in ``c``'s snapshot (long: run it in a read hop)."""
    index = VectorIndex(dims)
    index.add_rows(vectors_after(c, 0))
    return index


def catch_up(c: apsw.Connection, index: VectorIndex) -> int:
    """Add the vectors above the index's watermark and count the keys whose vectors are gone
    as tombstones (one snapshot); returns how many were added.

    Raises:
        IndexError_: the index holds fewer keys than SQLite has vectors (it lacks some).
    """
    live = vector_count(c)
    added = index.add_rows(vectors_after(c, index.watermark))
    dead = index.size - live
    if dead < 0:
        raise IndexError_("the index holds fewer vectors than the database")
    index.dead = dead
    return added


def save_index(index: VectorIndex, store: Store, path: Path) -> None:
    """Save atomically and record what the file holds (see the module docstring).

    The caller holds the palace's write lock, so no vector is added while the file is
    written; searches go on meanwhile (both only read the graph).

    Raises:
        StorageFull, StorageReadOnly: the storage has no room for it, or is read-only.
        IndexError_: the save failed otherwise (the previous file and its record stay in
            place either way).
    """
    tmp = path.with_name(path.name + ".tmp")
    need = int(index.raw.serialized_length)
    try:
        index.raw.save(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
            size = os.fstat(f.fileno()).st_size
        crc = _file_digest(tmp, "crc32")
        record: dict[str, Any] = {"crc": crc, "bytes": size, "watermark": index.watermark,
                                  "keys": index.size, "dead": index.dead, "dims": index.dims}

        def remember(c: apsw.Connection) -> None:
            record["embedder"] = meta_get(c, "embedder")
            saves = json.loads(meta_get(c, SAVES_KEY) or "[]")
            kept = [r for r in saves if r.get("crc") != crc][-1:]
            meta_set(c, SAVES_KEY, json.dumps([*kept, record]))
            for key in LEGACY_KEYS:
                meta_delete(c, key)

        store.write(remember, stamp=False)  # a cache, not content: no backup is outdated
        os.replace(tmp, path)
        sync_dir(path.parent)  # the rename is durable only once the entry is
    except Exception as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _save_error(exc, path, need) from exc
    index.mark_saved()


def _save_error(exc: Exception, path: Path, need: int) -> PalaceError:
    """What a failed save means. usearch reports a failed write without its errno ("Failed to
    serialize into stream"), so a full or read-only filesystem is recognised from the
    filesystem itself: a client can act on STORAGE_FULL, not on an opaque INDEX_ERROR."""
    if isinstance(exc, PalaceError):
        return exc
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


def file_entries(path: Path) -> int | None:
    """How many keys (tombstones included) the index file at ``path`` holds, read from its
    header; None when it is missing or unreadable. Never raises."""
    from usearch.index import Index  # on first use, like index.new_usearch

    try:
        meta = Index.metadata(str(path))
        return None if meta is None else int(meta["count_present"])
    except Exception:  # a missing, truncated or foreign file: the caller reports it
        return None


def file_state(path: Path, saves: list[dict[str, Any]], vectors: int, top: int,
               keys: list[int] | None = None) -> str:
    """What the next open makes of the saved index file of a palace whose database holds
    ``vectors`` vectors, the highest id ``top``: ``missing``; ``stale`` (no save of this
    palace matches it: rebuilt); ``behind`` (a save matches, vectors were written or deleted
    since: replayed); ``current``. With ``keys`` (every vector id), a matching file must
    also hold each of those up to its watermark (memory-mapped, not loaded), else it is
    ``stale``. Never raises: unreadable is ``stale``.
    """
    from usearch.index import Index  # on first use, like index.new_usearch

    if not os.path.lexists(path):
        return "missing"
    try:
        size = path.stat().st_size
        crc = _file_digest(path, "crc32")
        record = next((r for r in saves if r.get("crc") == crc and r.get("bytes") == size),
                      None)
        if record is None:
            return "stale"
        mark = int(record["watermark"])
        if keys is not None:
            held = [k for k in keys if k <= mark]
            view = Index.restore(str(path), view=True)
            if view is None or (held and not bool(np.all(
                    view.contains(np.asarray(held, dtype=np.uint64))))):
                return "stale"
        live = int(record["keys"]) - int(record.get("dead", 0))
        return "current" if top <= mark and live == vectors else "behind"
    except Exception:  # unreadable or refused by usearch: rebuilt at the next open
        return "stale"

