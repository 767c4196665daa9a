"""How a palace keeps its data: the storage flavour an open ``Palace`` holds.

``Storage`` says everything that differs between the two flavours, so that no caller asks
which one it has: the lifecycle (binding the model, loading, saving and checkpointing the
vector index, closing, noticing the palace vanished), the identity text (L0), the change
counter recall's caches key on, what an import must do after inserting ids, and what a
model mismatch means. ``LocalStorage`` (here) is SQLite + a usearch index + WAL files + an
identity file in the palace directory; ``team.TeamStorage`` is PostgreSQL + pgvector, shared
by several daemons, with the identity in the database and never re-embedded here.

Every method that works on the palace's files or index runs in a worker thread under the
palace's ``write_lock`` (the ``_sync`` ones), as ``Palace`` calls them.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread

from palaced.engine.embedder import Embedder
from palaced.engine.services import Services
from palaced.index.vector_file import IndexLoad, open_index, save_index
from palaced.index.vectors import VectorIndex
from palaced.palace.directory import IDENTITY_NAME, INDEX_NAME, db_identity
from palaced.palace.identity import read_identity, write_identity
from palaced.palace.keywords import KeywordState
from palaced.store import Store
from palaced.store.conn.meta import claim_embedder, meta_get
from palaced.store.lookup import reembed as next_vectors
from palaced.wire.errors import StorageError

log = logging.getLogger("palaced.palace.storage")
T = TypeVar("T")


class Palace(Protocol):
    """What a storage flavour uses of the palace holding it (``handle.Palace``, which imports
    this module: the protocol keeps the two apart)."""

    @property
    def name(self) -> str: ...
    @property
    def store(self) -> Store: ...
    @property
    def services(self) -> Services: ...
    @property
    def keywords(self) -> KeywordState: ...
    @property
    def index(self) -> VectorIndex | None: ...
    @property
    def index_stale(self) -> bool: ...
    @property
    def embedder_identity(self) -> str | None: ...

    def bind_model(self, identity: str | None, index: VectorIndex | None) -> None: ...
    def replace_index(self, index: VectorIndex, load: IndexLoad | None = None) -> None: ...
    def index_saved(self, seconds: float | None = None) -> None: ...
    def flush_touches_sync(self) -> None: ...
    async def read(self, fn: Callable[[Any], T]) -> T: ...


class Storage(ABC):
    """The storage flavour of one open palace (see the module docstring)."""

    # Other daemons write this palace too: what is read from it must not be cached across
    # requests unless keyed on a fresh ``changes``; its vectors are never re-embedded here,
    # it has no memoirs (concepts), no local index or keyword engine, and no files to back up.
    shared = False

    # -- the model and the index -------------------------------------------------------------
    @abstractmethod
    def attach_sync(self, palace: Palace, embedder: Embedder) -> None:
        """Bind ``palace`` to the loaded model: record it when the palace has none, then load
        its index, or drop it when the vectors are another model's. Raises StorageError,
        IndexError_."""

    @abstractmethod
    def load_index_sync(self, palace: Palace, dims: int, *, rebuild: bool = False) -> None:
        """Load (or with ``rebuild`` rebuild) ``palace``'s index. Raises IndexError_,
        StorageError."""

    @abstractmethod
    def save_index_sync(self, palace: Palace) -> None:
        """Save ``palace``'s index where it is a cache of the database. Raises IndexError_."""

    @abstractmethod
    def checkpoint_sync(self, palace: Palace, force: bool) -> None:
        """Flush what is batched (touches), save what changed, fold what the engine keeps
        apart (the WAL); ``force`` (at close) saves even what did not change. Raises
        StorageError, IndexError_."""

    @property
    @abstractmethod
    def compacts(self) -> bool:
        """Whether the palace has an index of its own that tombstones fill up (rebuilt by
        ``palaced.maintenance.compaction``)."""

    # -- closing -----------------------------------------------------------------------------
    @abstractmethod
    def closing(self, palace: Palace) -> None:
        """``palace`` is about to run its closing checkpoint: stop what reads it meanwhile."""

    @abstractmethod
    def vanished(self, palace: Palace) -> bool:
        """Whether the palace's storage is gone from under its directory (deleted, moved or
        replaced); a check that fails for another reason is no evidence: False."""

    @abstractmethod
    def discard_sync(self, palace: Palace) -> None:
        """Close a vanished palace without touching what is now at its path."""

    # -- the model mismatch ------------------------------------------------------------------
    def mismatch(self, palace: Palace) -> str | None:
        """Why the palace's vectors cannot serve the loaded model (they are another
        model's), or None."""
        emb = palace.services.model.embedder
        stored = palace.embedder_identity
        if emb is None or stored is None or stored == emb.identity:
            return None
        return self.mismatch_text(palace.name, stored, emb.identity)

    @abstractmethod
    def mismatch_text(self, name: str, stored: str, current: str) -> str:
        """What the mismatch of palace ``name``'s ``stored`` model with the daemon's
        ``current`` one means for this flavour."""

    @abstractmethod
    def refuse_mismatched_write(self, palace: Palace) -> None:
        """Raise when a write must not happen while the model mismatches (EmbedderMismatch
        on a shared palace); a local palace writes on and is re-embedded later."""

    # -- the change counter ------------------------------------------------------------------
    @property
    @abstractmethod
    def changes(self) -> int:
        """The palace's change counter as this daemon knows it (recall's caches key on it)."""

    @abstractmethod
    def count_write(self) -> None:
        """A write through this daemon committed (``Palace.write``)."""

    @abstractmethod
    async def refresh(self, palace: Palace) -> None:
        """Catch up with writes made elsewhere before a cached value is used."""

    # -- L0 and imports ----------------------------------------------------------------------
    @abstractmethod
    async def identity(self, palace: Palace, *, keep_comments: bool = False) -> str:
        """L0, in a worker thread; as ``identity_sync``."""

    @abstractmethod
    def identity_sync(self, conn: Any, *, keep_comments: bool = False) -> str:
        """L0 read in the hop of ``conn`` (worker thread), without ``#`` comment lines unless
        ``keep_comments``. Never raises for a damaged identity file."""

    @abstractmethod
    def replace_identity_sync(self, palace: Palace, text: str) -> bool:
        """Replace L0 (comments and all) with ``text`` unless it is that already (an import;
        worker thread): whether it changed. Raises StorageError."""

    @abstractmethod
    def after_import(self, conn: Any) -> None:
        """In the import's write transaction, after records came with their own ids."""

    def describe(self) -> dict[str, Any]:
        """What ``palace info`` adds about where the palace lives."""
        return {}


class LocalStorage(Storage):
    """A local palace: SQLite (with its WAL) + a usearch index file + an identity file, all in
    ``directory``, written by this daemon only."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._writes = 0
        # (device, inode) of the database opened: ``vanished`` compares it
        self.db_id = db_identity(directory)

    # -- the model and the index -------------------------------------------------------------
    def attach_sync(self, palace: Palace, embedder: Embedder) -> None:
        """Bind to the loaded model; when the vectors are another model's, drop the index
        (``palaced.maintenance.reembed`` switches it)."""
        store = palace.store
        stored, target = store.read(
            lambda c: (meta_get(c, "embedder"), next_vectors.next_model(c)))
        if stored is None:
            store.write(lambda c: claim_embedder(c, embedder.identity, embedder.dims))
            stored = embedder.identity
        if stored != embedder.identity:
            # Keyword-only until palaced.maintenance.reembed has built this model's vectors;
            # the old model's stay untouched (and valid for it) until then.
            palace.bind_model(stored, None)
            return
        palace.bind_model(stored, palace.index)
        if target is not None and target != stored:
            # A switch toward a model the daemon no longer runs: its vectors would only age.
            try:
                store.write(next_vectors.abandon)
            except StorageError as exc:  # read-only storage: harmless leftovers
                log.warning("palace %s: cannot drop an abandoned re-embedding: %s",
                            palace.name, exc.message)
        if palace.index is None or palace.index.dims != embedder.dims:
            self.load_index_sync(palace, embedder.dims)

    def load_index_sync(self, palace: Palace, dims: int, *, rebuild: bool = False) -> None:
        """Load the saved index of the live vectors and replay what changed since its save,
        or rebuild it."""
        index, load = open_index(palace.store, self.directory / INDEX_NAME, dims,
                                 rebuild=rebuild)
        if load.how == "rebuilt":
            log.info("palace %s: rebuilt the vector index (%d vectors, %.2fs): %s",
                     palace.name, len(index), load.seconds, load.reason)
            palace.index_saved()
        elif load.how == "replayed":
            log.info("palace %s: loaded the vector index and replayed %d added and %d removed "
                     "vectors since its save (%.2fs)", palace.name, load.replayed, load.removed,
                     load.seconds)
        palace.replace_index(index, load)

    def save_index_sync(self, palace: Palace) -> None:
        if palace.index is not None:
            started = time.monotonic()
            save_index(palace.index, palace.store, self.directory / INDEX_NAME)
            palace.index_saved(time.monotonic() - started)

    def checkpoint_sync(self, palace: Palace, force: bool) -> None:
        """Flush touches; save the index when it changed; fold the WAL.

        ``force`` (at close) saves it even when nothing changed since it was loaded, and
        rebuilds a stale one first: a save records the file as complete up to its watermark.
        """
        palace.flush_touches_sync()
        palace.keywords.prune_sync()
        index = palace.index
        if index is not None:
            if palace.index_stale and force:
                self.load_index_sync(palace, index.dims, rebuild=True)
            elif not palace.index_stale and (index.dirty or force):
                self.save_index_sync(palace)
        palace.store.checkpoint()

    @property
    def compacts(self) -> bool:
        return True

    # -- closing -----------------------------------------------------------------------------
    def closing(self, palace: Palace) -> None:
        palace.keywords.stop()  # a build reads the store being closed

    def discard_sync(self, palace: Palace) -> None:
        """No checkpoint, no index save, and SQLite must not delete the WAL by name (it may
        be another palace's now)."""
        palace.keywords.stop()
        palace.store.abandon()

    def vanished(self, palace: Palace) -> bool:
        """Whether the database is no longer the file this palace opened. Cheap: one stat."""
        try:
            return db_identity(self.directory) != self.db_id
        except OSError:
            return False

    # -- the model mismatch ------------------------------------------------------------------
    def mismatch_text(self, name: str, stored: str, current: str) -> str:
        return (f"palace {name!r} holds vectors of {stored}; it is being re-embedded for "
                f"{current} in the background")

    def refuse_mismatched_write(self, palace: Palace) -> None:
        """Nothing: the palace's writes go on; it is re-embedded for the new model."""

    # -- the change counter ------------------------------------------------------------------
    @property
    def changes(self) -> int:
        return self._writes

    def count_write(self) -> None:
        self._writes += 1

    async def refresh(self, palace: Palace) -> None:
        """Nothing: only this daemon writes the palace."""

    # -- L0 ----------------------------------------------------------------------------------
    async def identity(self, palace: Palace, *, keep_comments: bool = False) -> str:
        return await anyio.to_thread.run_sync(
            partial(self.identity_sync, None, keep_comments=keep_comments))

    def identity_sync(self, conn: Any, *, keep_comments: bool = False) -> str:
        return read_identity(self.directory / IDENTITY_NAME, keep_comments=keep_comments)

    def replace_identity_sync(self, palace: Palace, text: str) -> bool:
        if self.identity_sync(None, keep_comments=True) == text:
            return False
        write_identity(self.directory / IDENTITY_NAME, text, palace.name)
        return True

    def after_import(self, conn: Any) -> None:
        """Nothing: SQLite's ids follow the largest id present."""


__all__ = ["LocalStorage", "Palace", "Storage"]
