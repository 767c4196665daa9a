"""Palace: the async façade of one palace directory.

Owns the palace's Store (SQLite), VectorIndex (usearch cache), identity file and locks.
Every blocking call makes one hop to a worker thread; writes and index mutations are
serialised by ``write_lock`` and run in shielded scopes so a disconnecting client never leaves
a half-applied write.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
import apsw
import numpy as np

from palaced import lifecycle, retrieval, search, sections
from palaced.embedder import Embedder
from palaced.errors import (
    EmbedderMismatch,
    EmbedderUnavailable,
    MemoryNotFound,
    PalaceError,
    PalaceLocked,
    PalaceNotFound,
    StorageError,
)
from palaced.index import VectorIndex, open_index, save_index, to_blob
from palaced.services import Services
from palaced.store import Store
from palaced.store import memories as m
from palaced.store.db import storage_error, storage_errors
from palaced.store.graph_walk import facts_matching

log = logging.getLogger("palaced.palace")
T = TypeVar("T")

DB_NAME = "palace.db"
INDEX_NAME = "index.usearch"
IDENTITY_NAME = "identity.txt"
LOCK_NAME = ".lock"
IDENTITY_TEMPLATE = """\
# Identity of the palace "{name}" (L0). Edit freely: this text opens every recall.
# Lines starting with # are ignored.
This palace holds the memories of {name}.
"""
EMBED_BATCH = 64
COMPACT_MIN_DEAD = 256  # tombstones in the vector index before an idle-time compaction


def now_ms() -> int:
    return int(time.time() * 1000)


L1_SIZE = 15


@dataclass(frozen=True)
class RecallRequest:
    """A validated recall."""

    query: str
    top_k: int = 10
    filters: m.Filters = field(default_factory=m.Filters)
    levels: tuple[int, ...] = (0, 1, 2, 3)
    budget: int = 1500
    deep: bool = False


class Palace:
    """One open palace. Create with ``await Palace.open(...)``; close with ``aclose``."""

    def __init__(self, name: str, directory: Path, store: Store, lock_fd: int,
                 services: Services) -> None:
        self.name = name
        self.dir = directory
        self.store = store
        self.services = services
        self._lock_fd = lock_fd
        self.write_lock = anyio.Lock()
        self.index: VectorIndex | None = None
        self.embedder_identity: str | None = None
        self.mismatch: str | None = None
        self.index_stale = False
        self.write_counter = 0
        self.last_used = time.monotonic()
        self.last_write = 0.0
        self.in_flight = 0
        self._pending_touch: set[int] = set()
        self._maybe_pending = True  # drawers without vectors may exist (checked lazily)
        self._l1_cache: tuple[int, list[dict[str, Any]]] | None = None
        self._rooms_cache: tuple[int, list[tuple[str, str]]] | None = None
        self._doc_count: tuple[int, int] | None = None
        self._term_stats = m.TermStats()
        self.closed = False

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    async def open(cls, name: str, directory: Path, services: Services, *,
                   create: bool = True) -> Palace:
        """Open palace ``name`` in ``directory``; with ``create``, make it if nothing is there.

        The registry passes ``create`` explicitly: True only from ``Registry.create``, the one
        way a new palace comes to be (the default serves in-process callers and tests). Even
        with ``create``, a directory that holds palace files but no usable database is
        damaged: it is reported, never turned into a fresh empty palace, and none of its files
        is touched. A failed open releases the lock and every connection it took (and undoes
        a failed create), so the next request simply retries.

        Raises:
            PalaceNotFound: nothing of a palace is there and ``create`` is false.
            PalaceLocked: another process holds the palace lock.
            StorageError: a damaged directory, read-only or full storage, SQLite failed.
            SchemaTooNew: the database was written by a newer palaced.
            IndexError_: the vector index could not be rebuilt or saved.
        """
        return await anyio.to_thread.run_sync(
            partial(cls._open_sync, name, directory, services, create))

    @classmethod
    def _open_sync(cls, name: str, directory: Path, services: Services, create: bool
                   ) -> Palace:
        # A damaged directory is refused before anything (even the lock file) is created.
        if not has_database(name, directory) and not create:
            raise _not_found(name)
        if create:
            with storage_errors(directory, name):
                directory.mkdir(parents=True, exist_ok=True)
        fd = _take_lock(name, directory)
        store: Store | None = None
        created = False  # only then is everything in the directory ours to undo
        try:
            # Again under the lock: another process may have created or damaged it meanwhile.
            if not has_database(name, directory):
                if not create:
                    raise _not_found(name)
                created = True
            store = Store(directory / DB_NAME, palace=name)
            identity = directory / IDENTITY_NAME
            with storage_errors(identity, name):
                if not os.path.lexists(identity):
                    identity.write_text(IDENTITY_TEMPLATE.format(name=name), "utf-8")
            palace = cls(name, directory, store, fd, services)
            palace.embedder_identity = store.read(lambda c: m.meta_get(c, "embedder"))
            if services.model.embedder is not None:
                with storage_errors(directory, name):
                    palace._attach_sync(services.model.embedder)
            return palace
        except BaseException:
            if store is not None:
                store.close()
            if created:
                _undo_create(directory)
            _release_lock(fd)
            raise

    def _attach_sync(self, embedder: Embedder) -> None:
        """Bind the palace to the loaded model: check identity, load or rebuild the index."""
        stored = self.store.read(lambda c: m.meta_get(c, "embedder"))
        if stored is None:
            def claim(c: apsw.Connection) -> None:
                m.meta_set(c, "embedder", embedder.identity)
                m.meta_set(c, "dims", str(embedder.dims))
            self.store.write(claim)
            stored = embedder.identity
        self.embedder_identity = stored
        if stored != embedder.identity:
            self.mismatch = (
                f"palace {self.name!r} was embedded with {stored}, but the daemon runs "
                f"{embedder.identity}; run `palace reembed --palace {self.name}` to switch"
            )
            self.index = None
            return
        self.mismatch = None
        self._load_or_rebuild(embedder.dims)

    def _load_or_rebuild(self, dims: int, *, rebuild: bool = False) -> None:
        index, rebuilt = open_index(self.store, self.dir / INDEX_NAME, dims, rebuild=rebuild)
        if rebuilt:
            log.info("palace %s: rebuilt the vector index (%d vectors)", self.name, len(index))
        self.index = index
        self.index_stale = False

    async def attach(self, embedder: Embedder) -> None:
        """Called when the model becomes ready after the palace was opened (idempotent)."""
        async with self.write_lock:
            if self.index is not None or self.mismatch is not None or self.closed:
                return
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._attach_sync, embedder)

    def _save_index_sync(self) -> None:
        if self.index is not None:
            save_index(self.index, self.store, self.dir / INDEX_NAME)

    async def checkpoint(self, *, force: bool = False) -> None:
        """Save the index if dirty, rebuild it if stale, flush batched touches."""
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._checkpoint_sync, force)

    def _checkpoint_sync(self, force: bool) -> None:
        """Flush touches; compact, rebuild or save the index as needed; fold the WAL.

        ``force`` (at close) also compacts a few tombstones and saves a clean index.
        """
        self._flush_touch_sync()
        index = self.index
        if index is not None:
            # Compaction rebuilds from SQLite under the write lock (~0.6 s per 1,000 vectors
            # on 2 cores), so it waits for a few percent of tombstones, or for close. The file
            # on disk never carries tombstones: while there are some, it is not rewritten.
            if self.index_stale or self._many_dead(index) or (force and index.dead):
                self._load_or_rebuild(index.dims, rebuild=True)
            elif (index.dirty or force) and not index.dead:
                self._save_index_sync()
        self.store.checkpoint()

    @staticmethod
    def _many_dead(index: VectorIndex) -> bool:
        return index.dead >= max(COMPACT_MIN_DEAD, len(index) // 20)

    @property
    def checkpoint_due(self) -> bool:
        """Whether an idle-time checkpoint has work: touches, a save or a compaction."""
        index = self.index
        if self._pending_touch:
            return True
        if index is None or not index.dirty:
            return False
        return index.dead == 0 or self._many_dead(index)

    async def aclose(self) -> None:
        """Save the index, close connections and release the lock."""
        if self.closed:
            return
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        if self.closed:
            return
        try:
            self._checkpoint_sync(True)
        except Exception:
            log.exception("palace %s: checkpoint at close failed", self.name)
        self.store.close()
        _release_lock(self._lock_fd)
        self.closed = True

    # -- helpers ----------------------------------------------------------------------------
    def _vector_embedder(self) -> Embedder | None:
        """The embedder to use for this palace now, or None in keyword-only mode."""
        emb = self.services.model.embedder
        if emb is None or self.index is None or self.mismatch is not None:
            return None
        return emb

    def require_compatible(self) -> None:
        """Raises EmbedderMismatch when the palace needs a reembed before use."""
        if self.mismatch is not None:
            raise EmbedderMismatch(self.mismatch, details={"palace": self.name,
                                                           "stored": self.embedder_identity})

    async def _read(self, fn: Callable[[apsw.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self.store.read, fn)

    async def _write(self, fn: Callable[[], T]) -> T:
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(fn)
        self.write_counter += 1
        self.last_write = time.monotonic()
        return result

    async def _embed(self, emb: Embedder, texts: list[str]) -> np.ndarray:
        """Passage vectors, embedded slice by slice (the caller's deadline applies between)."""
        return await self.services.embeds.passages(emb, texts)

    # -- writes -----------------------------------------------------------------------------
    async def remember(self, new: m.NewDrawer, *, dedup: bool = True) -> dict[str, Any]:
        """Store one drawer; returns ``{id, created, embedded, deduplicated}``.

        Idempotent by content hash. With ``dedup``, a near-duplicate of an active drawer in
        the same wing/room refreshes that drawer instead (``deduplicated: true``).

        Raises:
            EmbedderMismatch: the palace needs a reembed.
            MemoryNotFound: ``new.supersedes`` names no drawer.
        """
        self.require_compatible()
        outcome = (await self._insert_many([new], dedup=dedup))[0]
        return outcome

    async def remember_many(self, items: Sequence[m.NewDrawer], *, dedup: bool = False
                            ) -> dict[str, Any]:
        """Store many drawers, one transaction per batch of 256; ids in input order."""
        self.require_compatible()
        outcomes: list[dict[str, Any]] = []
        step = 256
        for start in range(0, len(items), step):
            outcomes.extend(await self._insert_many(items[start:start + step], dedup=dedup))
        return {
            "ids": [o["id"] for o in outcomes],
            "created": [o["created"] for o in outcomes],
            "deduplicated": [o["deduplicated"] for o in outcomes],
            "embedded": all(o["embedded"] for o in outcomes),
        }

    async def _insert_many(self, items: Sequence[m.NewDrawer], *, dedup: bool
                           ) -> list[dict[str, Any]]:
        emb = self._vector_embedder()
        hashes = [it.content_hash for it in items]
        known = await self._read(lambda c: {h for h in hashes if m.find_by_hash(c, h)})
        # Chunking a 200k-character text takes ~0.1 s: not on the event loop.
        chunk_lists: list[list[str]] = await anyio.to_thread.run_sync(lambda: [
            [] if (emb is None or it.content_hash in known) else chunk_text(it.text)
            for it in items
        ])
        flat = [c for chunks in chunk_lists for c in chunks]
        # A deadline that passes while embedding cancels here, before anything is written.
        vectors = await self._embed(emb, flat) if (emb is not None and flat) else None
        identity = emb.identity if emb is not None else None
        outcomes = await self._write(
            lambda: self._insert_sync(items, chunk_lists, vectors, identity, dedup))
        if emb is None:
            self._maybe_pending = True
        return outcomes

    def _insert_sync(self, items: Sequence[m.NewDrawer], chunk_lists: list[list[str]],
                     vectors: np.ndarray | None, identity: str | None, dedup: bool
                     ) -> list[dict[str, Any]]:
        """The write half of remember: runs in a worker thread under ``write_lock``."""
        # The model may have been swapped by a reembed while we embedded.
        if identity is not None and identity != self.embedder_identity:
            raise EmbedderUnavailable("embedder changed during the write; retry")
        ts = now_ms()
        outcomes: list[dict[str, Any]] = []
        added: list[tuple[int, list[int], np.ndarray]] = []

        def tx(c: apsw.Connection) -> None:
            offset = 0
            for it, chunks in zip(items, chunk_lists, strict=True):
                vecs = vectors[offset:offset + len(chunks)] if vectors is not None else None
                offset += len(chunks)
                dup = None
                if dedup and vecs is not None and len(vecs) and self.index is not None:
                    dup = self._near_duplicate(c, it, vecs[0], ts)
                if dup is not None:
                    did, sim = dup
                    c.execute("UPDATE drawers SET updated_ms = ?, importance = max(importance, ?)"
                              " WHERE id = ?", (ts, it.importance, did))
                    outcomes.append({"id": did, "created": False, "deduplicated": True,
                                     "similarity": round(sim, 4), "embedded": True})
                    continue
                did, created = m.insert_drawer(c, it, ts)
                if created and vecs is not None and len(vecs):
                    vids = m.store_vectors(c, did, [to_blob(v) for v in vecs])
                    added.append((did, vids, vecs))
                if created and it.supersedes is not None:
                    m.supersede(c, it.supersedes, did, ts)
                outcomes.append({"id": did, "created": created, "deduplicated": False,
                                 "embedded": identity is not None})

        self.store.write(tx)
        if self.index is not None:
            try:
                for did, vids, vecs in added:
                    self.index.add(did, vids, vecs)
            except Exception:
                # Data is committed; the checkpointer rebuilds the cache from SQLite.
                log.exception("palace %s: index add failed; marking stale", self.name)
                self.index_stale = True
        return outcomes

    def _near_duplicate(self, c: apsw.Connection, new: m.NewDrawer, vec: np.ndarray,
                        ts: int) -> tuple[int, float] | None:
        """An active drawer of the same wing/room that ``new`` nearly repeats, if any."""
        assert self.index is not None
        hits = self.index.search(vec, 10)
        candidates = [(i, s) for i, s in hits if s >= lifecycle.DEDUP_THRESHOLD]
        if not candidates:
            return None
        rows = m.get_drawers(c, [i for i, _ in candidates])
        for did, sim in candidates:
            d = rows.get(did)
            if (d is None or d["wing"] != new.wing or d["room"] != new.room
                    or d["superseded_by"] is not None
                    or (d["expires_ms"] is not None and d["expires_ms"] <= ts)):
                continue
            if lifecycle.is_near_duplicate(sim, new.text, str(d["text"])):
                return did, sim
        return None

    async def embed_pending(self) -> int:
        """Embed drawers stored without vectors (keyword-only period); returns how many."""
        total = 0
        while True:
            emb = self._vector_embedder()
            if emb is None:
                return total
            batch = await self._read(lambda c: m.pending_embeddings(c, EMBED_BATCH))
            if not batch:
                self._maybe_pending = False
                return total
            per_drawer = [chunk_text(text) for _, text in batch]
            vectors = await self._embed(emb, [c for chunks in per_drawer for c in chunks])
            await self._write(partial(self._store_pending_sync, batch, per_drawer, vectors,
                                      emb.identity))
            total += len(batch)

    def _store_pending_sync(self, batch: list[tuple[int, str]], per_drawer: list[list[str]],
                            vectors: np.ndarray, identity: str) -> None:
        """Write vectors computed for pending drawers (worker thread, under write_lock)."""
        index = self.index
        if identity != self.embedder_identity or index is None:
            return
        added: list[tuple[int, list[int], np.ndarray]] = []

        def tx(c: apsw.Connection) -> None:
            offset = 0
            for (did, _), chunks in zip(batch, per_drawer, strict=True):
                vecs = vectors[offset:offset + len(chunks)]
                offset += len(chunks)
                # Skip drawers forgotten or embedded meanwhile.
                if c.execute("SELECT embedded FROM drawers WHERE id = ?",
                             (did,)).fetchall() != [(0,)]:
                    continue
                old = m.vector_ids(c, did)
                vids = m.store_vectors(c, did, [to_blob(v) for v in vecs])
                if old:
                    index.remove(old)
                added.append((did, vids, vecs))

        self.store.write(tx)
        for did, vids, vecs in added:
            index.add(did, vids, vecs)

    async def forget(self, drawer_id: int) -> None:
        """Delete a drawer everywhere.

        Raises:
            MemoryNotFound: no such drawer.
        """
        def write() -> None:
            removed = self.store.write(lambda c: m.delete_drawers(c, [drawer_id]))
            if removed is None:
                raise MemoryNotFound(f"no drawer {drawer_id} in palace {self.name!r}",
                                     details={"id": drawer_id, "palace": self.name})
            if self.index is not None and removed:
                self.index.remove(removed)

        await self._write(write)

    @property
    def has_pending_touch(self) -> bool:
        return bool(self._pending_touch)

    def pending_check_due(self) -> bool:
        """True while drawers stored without vectors may be waiting for the model."""
        return self._maybe_pending and self._vector_embedder() is not None

    def note_touched(self, ids: Sequence[int]) -> None:
        """Remember recalled ids; flushed to SQLite by the checkpointer, off the hot path."""
        self._pending_touch.update(ids)

    def _flush_touch_sync(self) -> None:
        if not self._pending_touch:
            return
        ids, self._pending_touch = self._pending_touch, set()
        ts = now_ms()
        self.store.write(lambda c: m.touch(c, ids, ts))

    async def reembed(self) -> dict[str, Any]:
        """Drop every vector and embed all drawers with the daemon's current model.

        Raises:
            EmbedderUnavailable: no model is loaded.
        """
        emb = self.services.model.embedder
        if emb is None:
            raise EmbedderUnavailable(
                f"cannot reembed: no model loaded ({self.services.model.reason})")

        def reset() -> None:
            def tx(c: apsw.Connection) -> None:
                c.execute("DELETE FROM vectors")
                c.execute("UPDATE drawers SET embedded = 0")
                m.meta_set(c, "embedder", emb.identity)
                m.meta_set(c, "dims", str(emb.dims))
                m.bump_vec_epoch(c)

            self.store.write(tx)
            self.embedder_identity = emb.identity
            self.mismatch = None
            self.index = VectorIndex(emb.dims)
            self.index.dirty = True

        await self._write(reset)
        count = await self.embed_pending()
        await self.checkpoint()
        return {"palace": self.name, "embedder": emb.identity, "reembedded": count}

    # -- reads ------------------------------------------------------------------------------
    async def get(self, drawer_id: int) -> dict[str, Any]:
        """Return one drawer.

        Raises:
            MemoryNotFound: no such drawer.
        """
        def read(c: apsw.Connection) -> dict[str, Any] | None:
            d = m.get_drawer(c, drawer_id)
            if d is not None:
                d["supersedes"] = [int(r[0]) for r in c.execute(
                    "SELECT id FROM drawers WHERE superseded_by = ? ORDER BY id", (drawer_id,))]
            return d

        drawer = await self._read(read)
        if drawer is None:
            raise MemoryNotFound(f"no drawer {drawer_id} in palace {self.name!r}",
                                 details={"id": drawer_id, "palace": self.name})
        return drawer

    async def list_drawers(self, filters: m.Filters, limit: int, offset: int) -> dict[str, Any]:
        drawers, total = await self._read(
            lambda c: m.list_drawers(c, filters, limit, offset, now_ms()))
        nxt = offset + len(drawers)
        return {"drawers": drawers, "total": total,
                "next_offset": nxt if nxt < total else None}

    async def query_vector(self, query: str) -> np.ndarray | None:
        """The query's embedding (cached), or None in keyword-only mode."""
        emb = self._vector_embedder()
        if emb is None:
            return None
        key = (emb.identity, query)
        cache = self.services.query_vectors
        vec = cache.get(key)
        if vec is None:
            vec = await self.services.embeds.query(emb, query)
            cache[key] = vec
        return cast(np.ndarray, vec)

    async def recall(self, req: RecallRequest) -> dict[str, Any]:
        """Progressive recall: ranked ``results`` plus L0-L3 ``sections`` packed to a budget.

        ``results`` is the hybrid ranking (BM25 + vectors fused at the score level, boosted by
        closets, importance, recency and room strength) under the request's filters. The
        sections fill the token budget in order: L0 identity, L1 essential drawers, L2 the
        drawers inside the rooms/closets/filters the query points at (plus matching facts),
        L3 the palace-wide ranking (always with ``deep``, else only when L2 is thin).
        """
        self.require_compatible()
        # Embed the query while BM25 runs: ONNX and SQLite both release the GIL.
        lexical: list[tuple[int, float]] = []
        vec_box: list[np.ndarray | None] = [None]

        async def embed() -> None:
            vec_box[0] = await self.query_vector(req.query)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(embed)
                lexical = await self._read(self._lexical_sync(req))
        except BaseExceptionGroup as group:
            # The task group wraps even the host's own exception: report the PalaceError
            # inside (a StorageError stays STORAGE_ERROR), not an opaque INTERNAL.
            leaf = first_palace_error(group)
            if leaf is None:
                raise
            raise leaf from leaf.__cause__  # keep its own cause (the apsw error)
        qvec = vec_box[0]
        index = self.index if qvec is not None else None
        levels = set(req.levels)
        # Caches are stamped with the write counter read *before* the snapshot: a write that
        # lands meanwhile bumps the counter and so invalidates what this read computes.
        counter = self.write_counter
        l1_cached = self._l1_cache_valid() if 1 in levels else None
        need_l1 = 1 in levels and l1_cached is None
        rooms_cache = self._rooms_cache

        def run(c: apsw.Connection) -> dict[str, Any]:
            ts = now_ms()
            rooms = rooms_cache[1] if rooms_cache and rooms_cache[0] == counter else None
            if rooms is None:
                rooms = search.all_rooms(c)
                self._rooms_cache = (counter, rooms)
            ranking = search.rank(c, query=req.query, qvec=qvec, index=index,
                                  filters=req.filters, now_ms=ts, rooms=rooms,
                                  lexical_hits=lexical)
            top = ranking.order[: req.top_k]
            l2_ids: list[int] = []
            if 2 in levels:
                if req.filters.narrows:
                    l2_ids = top
                else:
                    pointed = ranking.closet_hits | {
                        i for i, room in ranking.room_of.items()
                        if room in ranking.mentioned_rooms}
                    l2_ids = [i for i in ranking.order if i in pointed][: req.top_k]
            l3_ids: list[int] = []
            if 3 in levels and (req.deep or len(l2_ids) < req.top_k):
                l3_ids = top
            want = list(dict.fromkeys([*top, *l2_ids, *l3_ids]))
            rows = m.get_drawers(c, want)
            facts: list[dict[str, Any]] = []
            if 2 in levels:
                facts = facts_matching(c, m.fts_terms(req.query), 5)
            l1 = m.essential(c, L1_SIZE, ts) if need_l1 else None
            # Read L0 in this same worker-thread hop.
            identity = self._identity_sync() if 0 in levels else None
            return {"ranking": ranking, "rows": rows, "top": top, "l2": l2_ids,
                    "l3": l3_ids, "facts": facts, "l1": l1, "identity": identity}

        got = await self._read(run)
        ranking: search.Ranking = got["ranking"]
        rows: dict[int, dict[str, Any]] = got["rows"]
        if got["l1"] is not None:
            self._l1_cache = (counter, got["l1"])
            l1_cached = got["l1"]

        def present(did: int) -> dict[str, Any] | None:
            d = rows.get(did)
            if d is None:
                return None
            d = dict(d)
            d["score"] = round(ranking.scores.get(did, 0.0), 6)
            lex, vec = ranking.lexical.get(did), ranking.vector.get(did)
            d["lexical"] = None if lex is None else round(lex, 6)
            d["vector"] = None if vec is None else round(vec, 6)
            return d

        results = [d for d in (present(i) for i in got["top"]) if d is not None]
        self.note_touched([r["id"] for r in results])
        out: dict[str, Any] = {
            "results": results,
            "rooms": [{"wing": w, "room": r, "score": round(sc, 6)}
                      for w, r, sc in ranking.rooms[: max(req.top_k, 10)]],
            "mode": "hybrid" if qvec is not None else "keyword",
        }
        if qvec is None:
            out["notice"] = self._keyword_reason()
        parts: list[retrieval.Section] = []
        if 0 in levels:
            parts.append(await self._l0_section(got["identity"]))
        if 1 in levels:
            parts.append(sections.essential_section(_unexpired(l1_cached or [])))
        if 2 in levels:
            items = [sections.drawer_item(d, 2) for d in (present(i) for i in got["l2"]) if d]
            items += [sections.fact_item(f) for f in got["facts"]]
            parts.append(retrieval.Section(2, "Where the query points", items))
        if 3 in levels:
            items = [sections.drawer_item(d, 3) for d in (present(i) for i in got["l3"]) if d]
            parts.append(retrieval.Section(3, "Deep search", items))
        out.update(self._pack(parts, req.budget))
        return out

    def _lexical_sync(self, req: RecallRequest) -> Callable[[apsw.Connection],
                                                          list[tuple[int, float]]]:
        counter = self.write_counter

        def run(c: apsw.Connection) -> list[tuple[int, float]]:
            if self._doc_count is None or self._doc_count[0] != counter:
                n = int(c.execute("SELECT count(*) FROM drawers").fetchall()[0][0])
                self._doc_count = (counter, n)
            return search.lexical_search(c, req.query, req.filters, now_ms(),
                                         stats=self._term_stats, n_docs=self._doc_count[1])

        return run

    async def wake_up(self, budget: int) -> dict[str, Any]:
        """L0 identity + L1 essential drawers within ``budget`` tokens (session start)."""
        counter = self.write_counter
        cached = self._l1_cache_valid()
        if cached is None:
            cached = await self._read(lambda c: m.essential(c, L1_SIZE, now_ms()))
            self._l1_cache = (counter, cached)
        parts = [await self._l0_section(), sections.essential_section(_unexpired(cached))]
        return self._pack(parts, budget)

    def _l1_cache_valid(self) -> list[dict[str, Any]] | None:
        if self._l1_cache is not None and self._l1_cache[0] == self.write_counter:
            return self._l1_cache[1]
        return None

    async def _l0_section(self, text: str | None = None) -> retrieval.Section:
        if text is None:
            text = await self.identity_text()
        return sections.identity_section(self.name, text)

    def _pack(self, parts: list[retrieval.Section], budget: int) -> dict[str, Any]:
        tok = self.services.tokenizer
        return sections.packed(parts, budget, tok, tok.exact)

    def _keyword_reason(self) -> str:
        if self.mismatch:
            return self.mismatch
        model = self.services.model
        if model.state == "loading":
            return "keyword-only: the embedding model is still loading"
        if model.embedder is None:
            return f"keyword-only: no embedding model ({model.reason})"
        return "keyword-only: vector index not ready"

    async def info(self) -> dict[str, Any]:
        """Counts, embedder identity and index agreement."""
        counts = await self._read(m.counts)
        rooms = await self._read(m.rooms)
        index_count = len(self.index) if self.index is not None else None
        return {
            "name": self.name,
            "path": str(self.dir),
            **counts,
            "index": index_count,
            "consistent": index_count == counts["vectors"] if index_count is not None else None,
            "embedder": self.embedder_identity,
            "mismatch": self.mismatch,
            "rooms": rooms,
            "identity": await self.identity_text(),
        }

    async def identity_text(self) -> str:
        """L0: identity.txt without comment lines."""
        return await anyio.to_thread.run_sync(self._identity_sync)

    def _identity_sync(self) -> str:
        return sections.read_identity(self.dir / IDENTITY_NAME)


def has_database(name: str, directory: Path) -> bool:
    """Whether ``directory`` holds palace ``name``'s database (False: nothing of a palace).

    Only a non-empty regular ``palace.db`` counts. A directory with nothing in it but the
    lock file is no palace.

    Raises:
        StorageError: the directory holds palace files (identity, index, WAL...) but its
            database is missing, empty or not a regular file: a damaged palace, which must
            never be mistaken for a new one. Nothing is changed.
    """
    db = directory / DB_NAME
    with storage_errors(db, name):
        try:
            st: os.stat_result | None = db.stat()
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size > 0:
            return True
        if st is None:
            try:
                others = sorted(e for e in os.listdir(directory) if e != LOCK_NAME)
            except FileNotFoundError:
                return False
            if not others:
                return False
            problem = f"is missing, yet the directory holds {', '.join(others[:5])}"
        elif not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        else:
            problem = "is empty (0 bytes)"
    raise StorageError(
        f"palace {name!r} is damaged: its database {db} {problem}. Nothing was changed; "
        f"restore {DB_NAME} from a backup, or delete the palace with `palace delete {name}`",
        details={"palace": name, "path": str(db), "condition": "damaged"},
    )


def first_palace_error(group: BaseExceptionGroup[Any]) -> PalaceError | None:
    """The first PalaceError inside a (possibly nested) exception group, if any."""
    for exc in group.exceptions:
        found = first_palace_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(found, PalaceError):
            return found
    return None


def _not_found(name: str) -> PalaceNotFound:
    return PalaceNotFound(f"no palace named {name!r}; create it with `palace create {name}`",
                          details={"palace": name})


def _take_lock(name: str, directory: Path) -> int:
    """Open and flock the palace's lock file; returns its descriptor.

    Raises:
        PalaceNotFound: the directory does not exist.
        PalaceLocked: another process holds the lock.
        StorageError: the lock file cannot be created or opened (read-only storage...).
    """
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        raise _not_found(name) from None
    except OSError as exc:
        raise storage_error(exc, path, name) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise PalaceLocked(
            f"palace {name!r} is locked by another process", details={"palace": name}
        ) from None
    except OSError as exc:
        os.close(fd)
        raise storage_error(exc, path, name) from exc
    return fd


def _release_lock(fd: int) -> None:
    # Unlock and close separately: a failed unlock must not leak the descriptor (closing it
    # releases the flock anyway).
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


# Everything a create may have written into a directory that held nothing but the lock.
_CREATED_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal",
                  IDENTITY_NAME, INDEX_NAME, f"{INDEX_NAME}.tmp")


def _undo_create(directory: Path) -> None:
    """Remove what a failed create wrote, so the half-made palace is neither damaged nor
    mistaken for a real one; the next create starts over."""
    for fname in _CREATED_FILES:
        with contextlib.suppress(OSError):
            (directory / fname).unlink()


def _unexpired(drawers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop drawers whose TTL ran out since the cached list was read."""
    ts = now_ms()
    return [d for d in drawers if d.get("expires_ms") is None or d["expires_ms"] > ts]


def chunk_text(text: str) -> list[str]:
    """Split a drawer into the pieces that get a vector each."""
    from palaced.chunking import chunk_text as split

    return split(text) or [text]
