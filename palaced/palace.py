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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import apsw
import numpy as np

from palaced.embedder import Embedder
from palaced.errors import EmbedderMismatch, EmbedderUnavailable, MemoryNotFound, PalaceLocked
from palaced.index import VectorIndex, brute_force, file_digest, to_blob
from palaced.services import Services
from palaced.store import Store
from palaced.store import memories as m

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
BRUTE_FORCE_MAX = 20_000  # filtered vector search scans at most this many vectors exactly


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RecallRequest:
    """A validated recall."""

    query: str
    top_k: int = 10
    filters: m.Filters = m.Filters()


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
        self.closed = False

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    async def open(cls, name: str, directory: Path, services: Services) -> Palace:
        """Open (creating files if needed) a palace directory.

        Raises:
            PalaceLocked: another process holds the palace lock.
            StorageError, SchemaTooNew: the database cannot be used.
        """
        def _open() -> Palace:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise PalaceLocked(
                    f"palace {name!r} is locked by another process", details={"palace": name}
                ) from None
            try:
                store = Store(directory / DB_NAME)
            except BaseException:
                os.close(fd)
                raise
            identity = directory / IDENTITY_NAME
            if not identity.exists():
                identity.write_text(IDENTITY_TEMPLATE.format(name=name), "utf-8")
            palace = cls(name, directory, store, fd, services)
            palace.embedder_identity = store.read(lambda c: m.meta_get(c, "embedder"))
            if services.model.embedder is not None:
                palace._attach_sync(services.model.embedder)
            return palace

        return await anyio.to_thread.run_sync(_open)

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

    def _load_or_rebuild(self, dims: int) -> None:
        path = self.dir / INDEX_NAME

        def snapshot(c: apsw.Connection) -> tuple[str | None, str | None, str | None,
                                                   dict[int, int]]:
            owners = {int(v): int(d) for v, d in c.execute("SELECT id, drawer_id FROM vectors")}
            return (m.meta_get(c, "vec_epoch"), m.meta_get(c, "index_saved_epoch"),
                    m.meta_get(c, "index_digest"), owners)

        epoch, saved_epoch, digest, owners = self.store.read(snapshot)
        index = VectorIndex(dims)
        loaded = False
        if path.is_file() and (epoch or "0") == (saved_epoch or "0") and digest:
            try:
                loaded = file_digest(path) == digest and index.load(path, owners)
            except OSError:
                loaded = False
        if not loaded:
            if path.exists() or owners:
                log.info("palace %s: rebuilding vector index (%d vectors)", self.name,
                         len(owners))
            rows = self.store.read(lambda c: [
                (int(v), int(d), bytes(b))
                for v, d, b in c.execute("SELECT id, drawer_id, vec FROM vectors ORDER BY id")
            ])
            index.rebuild(rows)
            self.index = index
            self._save_index_sync()
        else:
            self.index = index
        self.index_stale = False

    async def attach(self, embedder: Embedder) -> None:
        """Called when the model becomes ready after the palace was opened."""
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._attach_sync, embedder)

    def _save_index_sync(self) -> None:
        if self.index is None:
            return
        epoch = self.store.read(lambda c: m.meta_get(c, "vec_epoch")) or "0"
        digest = self.index.save(self.dir / INDEX_NAME)

        def record(c: apsw.Connection) -> None:
            m.meta_set(c, "index_saved_epoch", epoch)
            m.meta_set(c, "index_digest", digest)

        self.store.write(record)

    async def checkpoint(self, *, force: bool = False) -> None:
        """Save the index if dirty, rebuild it if stale, flush batched touches."""
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._checkpoint_sync, force)

    def _checkpoint_sync(self, force: bool) -> None:
        self._flush_touch_sync()
        if self.index_stale and self.index is not None:
            self._load_or_rebuild(self.index.dims)
        elif self.index is not None and (self.index.dirty or force):
            self._save_index_sync()
        self.store.checkpoint()

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
            self._checkpoint_sync(False)
        except Exception:
            log.exception("palace %s: checkpoint at close failed", self.name)
        self.store.close()
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
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
        return await anyio.to_thread.run_sync(
            emb.embed_passages, texts, limiter=self.services.embed_limiter
        )

    # -- writes -----------------------------------------------------------------------------
    async def remember(self, new: m.NewDrawer) -> dict[str, Any]:
        """Store one drawer; idempotent by content hash. Returns ``{id, created, embedded}``."""
        self.require_compatible()
        existing = await self._read(lambda c: m.find_by_hash(c, new.content_hash))
        if existing is not None:
            await self._write(lambda: self.store.write(
                lambda c: m.insert_drawer(c, new, now_ms())))
            return {"id": existing, "created": False, "embedded": True}
        ids, created, embedded = await self._insert_many([new])
        return {"id": ids[0], "created": created[0], "embedded": embedded}

    async def remember_many(self, items: Sequence[m.NewDrawer]) -> dict[str, Any]:
        """Store many drawers in one transaction per batch; ids in input order."""
        self.require_compatible()
        ids: list[int] = []
        created: list[bool] = []
        embedded = True
        step = 256
        for start in range(0, len(items), step):
            part_ids, part_created, part_emb = await self._insert_many(items[start:start + step])
            ids.extend(part_ids)
            created.extend(part_created)
            embedded = embedded and part_emb
        return {"ids": ids, "created": created, "embedded": embedded}

    async def _insert_many(self, items: Sequence[m.NewDrawer]
                           ) -> tuple[list[int], list[bool], bool]:
        emb = self._vector_embedder()
        hashes = [it.content_hash for it in items]
        known = await self._read(lambda c: {h for h in hashes if m.find_by_hash(c, h)})
        chunk_lists: list[list[str]] = []
        vectors: np.ndarray | None = None
        if emb is not None:
            flat: list[str] = []
            for it in items:
                chunks = [] if it.content_hash in known else chunk_text(it.text)
                chunk_lists.append(chunks)
                flat.extend(chunks)
            vectors = await self._embed(emb, flat) if flat else None
        identity = emb.identity if emb is not None else None

        def write() -> tuple[list[int], list[bool], list[tuple[int, list[int], np.ndarray]]]:
            ts = now_ms()
            out_ids: list[int] = []
            out_created: list[bool] = []
            added: list[tuple[int, list[int], np.ndarray]] = []

            def tx(c: apsw.Connection) -> None:
                offset = 0
                for i, it in enumerate(items):
                    did, was_created = m.insert_drawer(c, it, ts)
                    out_ids.append(did)
                    out_created.append(was_created)
                    if vectors is not None:
                        n = len(chunk_lists[i])
                        if was_created and n:
                            vecs = vectors[offset:offset + n]
                            vids = m.store_vectors(c, did, [to_blob(v) for v in vecs])
                            added.append((did, vids, vecs))
                        offset += n

            # The model may have been swapped by a reembed while we embedded.
            if identity is not None and identity != self.embedder_identity:
                raise EmbedderUnavailable("embedder changed during the write; retry")
            self.store.write(tx)
            if self.index is not None:
                try:
                    for did, vids, vecs in added:
                        self.index.add(did, vids, vecs)
                except Exception:
                    # Data is committed; the checkpointer rebuilds the cache from SQLite.
                    log.exception("palace %s: index add failed; marking stale", self.name)
                    self.index_stale = True
            return out_ids, out_created, added

        ids, created, _ = await self._write(write)
        if emb is None:
            self._maybe_pending = True
        return ids, created, emb is not None

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
            flat = [c for chunks in per_drawer for c in chunks]
            vectors = await self._embed(emb, flat)
            identity = emb.identity

            def write() -> None:
                if identity != self.embedder_identity or self.index is None:
                    return
                added: list[tuple[int, list[int], np.ndarray]] = []

                def tx(c: apsw.Connection) -> None:
                    offset = 0
                    for (did, _), chunks in zip(batch, per_drawer, strict=True):
                        vecs = vectors[offset:offset + len(chunks)]
                        offset += len(chunks)
                        if c.execute("SELECT embedded FROM drawers WHERE id = ?",
                                     (did,)).fetchall() != [(0,)]:
                            continue
                        old = m.vector_ids(c, did)
                        vids = m.store_vectors(c, did, [to_blob(v) for v in vecs])
                        if old and self.index is not None:
                            self.index.remove(old)
                        added.append((did, vids, vecs))

                self.store.write(tx)
                for did, vids, vecs in added:
                    self.index.add(did, vids, vecs)

            await self._write(write)
            total += len(batch)

    async def forget(self, drawer_id: int) -> None:
        """Delete a drawer everywhere.

        Raises:
            MemoryNotFound: no such drawer.
        """
        def write() -> None:
            removed = self.store.write(lambda c: m.delete_drawer(c, drawer_id))
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
        drawer = await self._read(lambda c: m.get_drawer(c, drawer_id))
        if drawer is None:
            raise MemoryNotFound(f"no drawer {drawer_id} in palace {self.name!r}",
                                 details={"id": drawer_id, "palace": self.name})
        return drawer

    async def list(self, filters: m.Filters, limit: int, offset: int) -> dict[str, Any]:
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
            vec = await anyio.to_thread.run_sync(emb.embed_query, query,
                                                 limiter=self.services.embed_limiter)
            cache[key] = vec
        return vec  # type: ignore[no-any-return]

    async def recall(self, req: RecallRequest) -> dict[str, Any]:
        """Hybrid recall: BM25 + vector similarity fused at the score level."""
        self.require_compatible()
        qvec = await self.query_vector(req.query)
        index = self.index if qvec is not None else None
        pool = max(50, req.top_k * 5)

        def run(c: apsw.Connection) -> dict[str, Any]:
            ts = now_ms()
            lexical = m.fts_search(c, req.query, req.filters, pool, ts)
            vector: list[tuple[int, float]] = []
            if qvec is not None and index is not None:
                vector = self._vector_search(c, index, qvec, req.filters, pool, ts)
            fused = fuse_scores(dict(lexical), dict(vector))
            ranked = sorted(fused.items(), key=lambda kv: -kv[1])[: req.top_k]
            rows = m.get_drawers(c, [i for i, _ in ranked])
            lex, vec = dict(lexical), dict(vector)
            results = []
            for did, score in ranked:
                d = rows.get(did)
                if d is None:
                    continue
                d["score"] = round(score, 6)
                d["lexical"] = round(lex[did], 6) if did in lex else None
                d["vector"] = round(vec[did], 6) if did in vec else None
                results.append(d)
            return {"results": results}

        out = await self._read(run)
        self.note_touched([r["id"] for r in out["results"]])
        out["mode"] = "hybrid" if qvec is not None else "keyword"
        if qvec is None:
            out["notice"] = self._keyword_reason()
        return out

    def _keyword_reason(self) -> str:
        if self.mismatch:
            return self.mismatch
        model = self.services.model
        if model.state == "loading":
            return "keyword-only: the embedding model is still loading"
        if model.embedder is None:
            return f"keyword-only: no embedding model ({model.reason})"
        return "keyword-only: vector index not ready"

    def _vector_search(self, c: apsw.Connection, index: VectorIndex, qvec: np.ndarray,
                       filters: m.Filters, pool: int, ts: int) -> list[tuple[int, float]]:
        where, params = filters.sql(ts)
        if filters.wing is None and filters.room is None and not filters.tags:
            hits = index.search(qvec, pool * 2)
            if not hits:
                return []
            marks = ",".join(str(int(i)) for i, _ in hits)
            active = {int(r[0]) for r in c.execute(
                f"SELECT d.id FROM drawers d WHERE d.id IN ({marks}) AND {where}", params)}
            return [(i, s) for i, s in hits if i in active][:pool]
        count = int(c.execute(
            f"SELECT count(*) FROM vectors v JOIN drawers d ON d.id = v.drawer_id WHERE {where}",
            params).fetchall()[0][0])
        if count <= BRUTE_FORCE_MAX:
            rows = [(int(r[0]), bytes(r[1])) for r in c.execute(
                f"SELECT v.drawer_id, v.vec FROM vectors v JOIN drawers d ON d.id = v.drawer_id "
                f"WHERE {where}", params)]
            return brute_force(qvec, rows, index.dims, pool)
        hits = index.search(qvec, pool * 20)
        ids = [i for i, _ in hits]
        if not ids:
            return []
        marks = ",".join(str(int(i)) for i in ids)
        ok = {int(r[0]) for r in c.execute(
            f"SELECT d.id FROM drawers d WHERE d.id IN ({marks}) AND {where}", params)}
        return [(i, s) for i, s in hits if i in ok][:pool]

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
        def read() -> str:
            try:
                text = (self.dir / IDENTITY_NAME).read_text("utf-8")
            except OSError:
                return ""
            return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")
                             ).strip()

        return await anyio.to_thread.run_sync(read)


def chunk_text(text: str) -> list[str]:
    """Split a drawer into the pieces that get a vector each."""
    from palaced.chunking import chunk_text as split

    return split(text) or [text]


def fuse_scores(lexical: dict[int, float], vector: dict[int, float]) -> dict[int, float]:
    """Standardised score fusion (z-scores per list, missing = the list's floor)."""
    from palaced.retrieval import fuse

    return fuse(lexical, vector)
