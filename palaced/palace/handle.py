"""Palace: the handle of one open palace directory.

Owns the palace's Store, its storage flavour (``storage.Storage``: local SQLite + a usearch
index + an identity file, or a team's PostgreSQL), its lock, and the state the daemon's upkeep
reads (``checkpoint_due``, ``index_stale``, ``last_write``...), which other modules change
only through its methods. It does four things: its lifetime (``open``, ``aclose``), binding
the embedding model (``attach``, the one place the index is loaded, rebuilt or dropped for a
model; a palace whose vectors are another model's is switched over by ``reembed``), one read
hop (``read``: a worker-thread call on a reader snapshot) and one write hop (``write``: a
worker-thread call under ``write_lock``, shielded so a disconnecting client never leaves a
half-applied write, bumping ``write_counter`` so caches keyed on it are invalidated).

What a palace does lives in modules by concern, as functions taking the handle: ``writes``
(remember, forget, embedding), ``edits`` (update in place), ``recall`` (recall, wake-up),
``reads`` (get, list, info, identity), ``graph`` (the knowledge graph) and ``upkeep`` (decay,
prune, expiry, consolidation, health); ``access`` is what a recall's touches do.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
import apsw

from palaced.engine.embedder import Embedder
from palaced.engine.services import Services
from palaced.index.vector_file import IndexLoad
from palaced.index.vectors import VectorIndex
from palaced.palace.access import apply_touches
from palaced.palace.directory import (
    DB_NAME,
    IDENTITY_NAME,
    IDENTITY_TEMPLATE,
    INDEX_NAME,
    LOCK_NAME,
    has_database,
    not_found,
    release_lock,
    take_lock,
    undo_create,
)
from palaced.palace.keywords import KeywordState
from palaced.palace.storage import LocalStorage, Storage
from palaced.store import Store
from palaced.store.conn.db import storage_errors
from palaced.store.conn.meta import meta_get
from palaced.wire.errors import StorageCorrupt

log = logging.getLogger("palaced.palace.handle")
T = TypeVar("T")

__all__ = ["DB_NAME", "IDENTITY_NAME", "IDENTITY_TEMPLATE", "INDEX_NAME", "LOCK_NAME", "Palace",
           "has_database", "now_ms"]
COMPACT_MIN_DEAD = 256  # tombstones in the vector index before an idle-time compaction
# While writes go on without a pause, the index is still saved this often, so a kill -9
# replays at most this long of writes; never more than a tenth of the time goes to saving.
SAVE_INTERVAL_S = 20.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Palace:
    """One open palace. Create with ``await Palace.open(...)`` (a local one) or
    ``team.open_existing``/``team.open_new``; close with ``aclose``.

    Its state is its own: other modules read it through attributes and properties and change
    it only through the methods below (``begin_work``, ``note_unembedded``, ``replace_index``...).
    """

    def __init__(self, name: str, directory: Path, store: Store, lock_fd: int,
                 services: Services, storage: Storage) -> None:
        self.name = name
        self.dir = directory
        self.store = store
        self.services = services
        self.storage = storage  # the flavour: local (SQLite + usearch) or team (PostgreSQL)
        self._lock_fd = lock_fd
        self.write_lock = anyio.Lock()
        # one re-embedding pass at a time (palaced.maintenance.reembed)
        self.reembed_lock = anyio.Lock()
        self.keywords = KeywordState.of(store, directory, services)  # keyword engine
        self._index: VectorIndex | None = None
        self._embedder_identity: str | None = None  # the model of the live vectors
        self._index_stale = False
        self._index_load: IndexLoad | None = None  # how the index was last loaded (info)
        self._last_save = time.monotonic()
        self._save_seconds = 0.0  # how long the last index save took
        self._last_used = time.monotonic()
        self._last_write = 0.0
        self._in_flight = 0
        self._pending_touch: Counter[int] = Counter()
        self._promoted = False  # a flush changed importances: bump write_counter after it
        self._maybe_pending = True  # drawers without vectors may exist (checked lazily)
        self._embed_soon = False  # long texts were left to the background: embed them now
        self._closed = False
        # Set once SQLite reports the database corrupt: writes are refused from then on, so
        # nothing acknowledged is piled onto a damaged file; reads are still tried.
        self._corrupt: StorageCorrupt | None = None

    # -- its state, read-only outside -------------------------------------------------------
    @property
    def index(self) -> VectorIndex | None:
        """The vector index serving recall, or None (keyword-only)."""
        return self._index

    @property
    def embedder_identity(self) -> str | None:
        """The model the palace's live vectors are of (None: none recorded yet)."""
        return self._embedder_identity

    @property
    def index_stale(self) -> bool:
        """The index lacks vectors the database holds: rebuilt by the next compaction."""
        return self._index_stale

    @property
    def index_load(self) -> IndexLoad | None:
        """How the index was last loaded or rebuilt (``palace info``)."""
        return self._index_load

    @property
    def last_save(self) -> float:
        """When (monotonic) the index was last saved or rebuilt."""
        return self._last_save

    @property
    def save_seconds(self) -> float:
        """How long the last index save took."""
        return self._save_seconds

    @property
    def write_counter(self) -> int:
        """The palace's change counter: caches stamped with it are invalid once it moves
        (a team palace's counts every daemon's writes)."""
        return self.storage.changes

    @property
    def last_used(self) -> float:
        """When (monotonic) a request last used the palace (the registry closes idle ones)."""
        return self._last_used

    @property
    def last_write(self) -> float:
        """When (monotonic) the last write through this handle committed (0: none yet)."""
        return self._last_write

    @property
    def in_flight(self) -> int:
        """Jobs working on the palace now (``begin_work``): it is not closed while any runs."""
        return self._in_flight

    @property
    def maybe_pending(self) -> bool:
        """Drawers without vectors may exist (checked lazily)."""
        return self._maybe_pending

    @property
    def embed_soon(self) -> bool:
        """Long texts were left to the background: embed them without waiting for idleness."""
        return self._embed_soon

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def corrupt(self) -> StorageCorrupt | None:
        """The corruption SQLite reported, once it did (writes are refused from then on)."""
        return self._corrupt

    def used(self) -> None:
        """A request used the palace now."""
        self._last_used = time.monotonic()

    def begin_work(self) -> None:
        """A job starts working on the palace: it is not closed (as idle, or to make room)
        until the matching ``end_work``."""
        self._in_flight += 1

    def end_work(self) -> None:
        self._in_flight -= 1

    def note_unembedded(self, *, soon: bool = False) -> None:
        """Drawers were stored without vectors; ``soon``: embed them without waiting for the
        palace to be idle."""
        self._maybe_pending = True
        self._embed_soon = self._embed_soon or soon

    def all_embedded(self) -> None:
        """No drawer lacks its vectors (a full pass found none)."""
        self._maybe_pending = False

    def embedding_started(self) -> None:
        """The background embedding of pending drawers was started."""
        self._embed_soon = False

    def index_lacks_vectors(self) -> None:
        """The index misses vectors the database holds: the next compaction rebuilds it."""
        self._index_stale = True

    def bind_model(self, identity: str | None, index: VectorIndex | None) -> None:
        """The palace's vectors are ``identity``'s, served by ``index`` (None: keyword-only).
        Worker thread, under ``write_lock``."""
        self._embedder_identity = identity
        self._index = index

    def replace_index(self, index: VectorIndex, load: IndexLoad | None = None) -> None:
        """Serve ``index``, complete (no longer stale), loaded as ``load`` says. Worker
        thread, under ``write_lock``."""
        self._index = index
        self._index_stale = False
        if load is not None:
            self._index_load = load

    def index_saved(self, seconds: float | None = None) -> None:
        """The index was saved now, in ``seconds`` (None: rebuilt, nothing measured)."""
        self._last_save = time.monotonic()
        if seconds is not None:
            self._save_seconds = seconds

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
            raise not_found(name)
        if create:
            with storage_errors(directory, name):
                directory.mkdir(parents=True, exist_ok=True)
        fd = take_lock(name, directory)
        store: Store | None = None
        created = False  # only then is everything in the directory ours to undo
        try:
            # Again under the lock: another process may have created or damaged it meanwhile.
            if not has_database(name, directory):
                if not create:
                    raise not_found(name)
                created = True
            store = Store(directory / DB_NAME, palace=name)
            identity = directory / IDENTITY_NAME
            with storage_errors(identity, name):
                if not os.path.lexists(identity):
                    identity.write_text(IDENTITY_TEMPLATE.format(name=name), "utf-8")
            with storage_errors(directory, name):
                storage = LocalStorage(directory)
            palace = cls(name, directory, store, fd, services, storage)
            palace.bind_model(store.read(lambda c: meta_get(c, "embedder")), None)
            if services.model.embedder is not None:
                with storage_errors(directory, name):
                    storage.attach_sync(palace, services.model.embedder)
            return palace
        except BaseException:
            if store is not None:
                store.close()
            if created:
                undo_create(directory)
            release_lock(fd)
            raise

    # -- the model -------------------------------------------------------------------------
    async def attach(self, embedder: Embedder) -> None:
        """Bind to ``embedder``, the model loaded now (idempotent; after a model change too)."""
        await self.write(partial(self._attach_unless_closed_sync, embedder), wrote=False)

    def _attach_unless_closed_sync(self, embedder: Embedder) -> None:
        if not self.closed:
            self.storage.attach_sync(self, embedder)

    def vector_embedder(self) -> Embedder | None:
        """The embedder to use for this palace now, or None in keyword-only mode."""
        emb = self.services.model.embedder
        if emb is None or self.index is None or emb.identity != self.embedder_identity:
            return None
        return emb

    @property
    def mismatch(self) -> str | None:
        """Why the vectors cannot serve the loaded model (they are another model's), or None."""
        return self.storage.mismatch(self)

    # -- checkpoint and close --------------------------------------------------------------
    def load_index_sync(self, dims: int, *, rebuild: bool = False) -> None:
        """Load the saved index and replay what changed since its save, or rebuild it (worker
        thread, under ``write_lock``). Raises IndexError_ or StorageError."""
        self.storage.load_index_sync(self, dims, rebuild=rebuild)

    def save_index_sync(self) -> None:
        """Save the index where it is a file of its own (worker thread, under ``write_lock``).
        Raises IndexError_."""
        self.storage.save_index_sync(self)

    async def checkpoint(self, *, force: bool = False) -> None:
        """Save the index if dirty, rebuild it if stale, flush batched touches."""
        await self.write(partial(self._checkpoint_sync, force), wrote=False)
        if self._promoted:  # importances changed: caches ordered by them (L1) are stale
            self._promoted = False
            self.storage.count_write()

    def _checkpoint_sync(self, force: bool) -> None:
        self.storage.checkpoint_sync(self, force)

    @property
    def compaction_due(self) -> bool:
        """Whether the index needs rebuilding (``compaction.compact``): it lacks vectors
        (``index_stale``), or a twentieth of it (at least ``COMPACT_MIN_DEAD``) is
        tombstones."""
        index = self.index
        return (self.storage.compacts and index is not None
                and (self.index_stale or self._many_dead(index)))

    @property
    def compaction_pressing(self) -> bool:
        """Whether the rebuild is due even while writes go on: the index holds at least as
        many tombstones as live vectors (and COMPACT_MIN_DEAD). Under writes that never pause
        the idle-time rebuild never comes, and each removed vector stays in memory (~1 KB;
        ``bench/soak.py``: 1,200 live vectors a palace, 3,100 held after 4 minutes)."""
        index = self.index
        return (self.compaction_due and index is not None
                and index.dead >= max(COMPACT_MIN_DEAD, len(index)))

    @staticmethod
    def _many_dead(index: VectorIndex) -> bool:
        return index.dead >= max(COMPACT_MIN_DEAD, len(index) // 20)

    @property
    def checkpoint_due(self) -> bool:
        """Whether an idle-time checkpoint has work: touches, a save or a compaction."""
        dirty = self.index is not None and self.index.dirty
        return bool(self._pending_touch) or dirty or self.keywords.prune_due

    def save_due_at(self) -> float:
        """When (monotonic) vectors added under writes that never pause are saved anyway.

        At least ``SAVE_INTERVAL_S`` after the last save, and ten times the last save's
        duration: saving a large index holds writes up for a while.
        """
        index = self.index
        if index is None or not index.unsaved:
            return float("inf")
        return self.last_save + max(SAVE_INTERVAL_S, 10 * self.save_seconds)

    async def aclose(self) -> None:
        """Save the index, close connections and release the lock."""
        if self.closed:
            return
        await self.write(self._close_sync, wrote=False)

    def _close_sync(self) -> None:
        if self.closed:
            return
        self.storage.closing(self)
        try:
            self._checkpoint_sync(True)
        except Exception:
            log.exception("palace %s: checkpoint at close failed", self.name)
        self.store.close()
        release_lock(self._lock_fd)
        self._closed = True

    def vanished(self) -> bool:
        """Whether the palace's database is no longer the file this handle opened (its
        directory was deleted, moved or replaced under the daemon). Cheap: one stat; a stat
        that fails for another reason (permissions, I/O) is no evidence: False."""
        return not self.closed and self.storage.vanished(self)

    def discard_sync(self) -> None:
        """Close a vanished palace without touching what is now at its path: no checkpoint,
        no index save, and SQLite must not delete the WAL by name (it may be another palace's
        now). Worker thread, under ``write_lock``."""
        if self.closed:
            return
        self.storage.discard_sync(self)
        release_lock(self._lock_fd)
        self._closed = True

    # -- the two hops ----------------------------------------------------------------------
    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn(conn)`` in a worker thread on one reader snapshot; raises what it raises."""
        try:
            return await anyio.to_thread.run_sync(self.store.read, fn)
        except StorageCorrupt as exc:
            self._corrupt = exc
            raise

    async def write(self, fn: Callable[[], T], *, wrote: bool = True) -> T:
        """Run ``fn`` in a worker thread under ``write_lock``, shielded from cancellation.

        ``fn`` opens its own transactions (``self.store.write``) and may update the index in
        the same hop. With ``wrote`` (the default) ``write_counter`` is bumped afterwards, so
        caches stamped with it are invalidated; a dry run passes False. Raises what ``fn``
        raises (the counter is then not bumped).

        Raises:
            StorageCorrupt: the database was found corrupt and ``wrote`` (upkeep, which passes
                False, still runs: closing must work).
        """
        if wrote:
            self.storage.refuse_mismatched_write(self)
        if wrote and self.corrupt is not None:
            raise StorageCorrupt(
                f"palace {self.name!r}'s database {self.dir / DB_NAME} is corrupt; writes are "
                "refused until it is restored from a backup or the palace is deleted",
                details=self.corrupt.details)
        async with self.write_lock:
            with anyio.CancelScope(shield=True):
                try:
                    result = await anyio.to_thread.run_sync(fn)
                except StorageCorrupt as exc:
                    self._corrupt = exc
                    raise
        if wrote:
            self.storage.count_write()
            self._last_write = time.monotonic()
        return result

    async def transact(self, fn: Callable[[apsw.Connection], T]) -> T:
        """``write`` of one transaction: ``fn(conn)`` on the writer connection."""
        return await self.write(partial(self.store.write, fn))

    async def refresh(self) -> None:
        """Catch up with writes made elsewhere (a team palace's): none for a local one."""
        await self.storage.refresh(self)

    async def identity(self, *, keep_comments: bool = False) -> str:
        """L0, the identity text, without ``#`` comment lines unless ``keep_comments``."""
        return await self.storage.identity(self, keep_comments=keep_comments)

    # -- touches ----------------------------------------------------------------------------
    def note_touched(self, ids: Sequence[int]) -> None:
        """Count recalled ids; flushed to SQLite by the checkpointer, off the hot path."""
        self._pending_touch.update(ids)

    def flush_touches_sync(self) -> None:
        """Write the counted accesses (worker thread, under ``write_lock``; ``access``)."""
        if not self._pending_touch:
            return
        ids, self._pending_touch = self._pending_touch, Counter()
        ts, policy = now_ms(), self.services.config.upkeep
        try:
            # Access counts are a use signal, not content: a team palace's change counter
            # moves only when an importance changed (L1 is ordered by it), as a local
            # palace's does (``checkpoint``).
            self._promoted |= self.store.write(lambda c: apply_touches(c, ids, ts, policy),
                                               stamp=False, counted=bool)
        except BaseException:
            self._pending_touch.update(ids)  # a full disk must not lose them: the next run
            raise                            # retries

    def pending_check_due(self) -> bool:
        """True while drawers stored without vectors may be waiting for the model."""
        return self.maybe_pending and self.vector_embedder() is not None
