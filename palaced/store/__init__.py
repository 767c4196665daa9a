"""Store: the SQLite side of one palace — one writer and one reader connection.

``write(fn)`` runs ``fn(conn)`` in a transaction on the writer connection; ``read(fn)`` runs
it on one of a small pool of readers (an apsw connection serves one thread at a time), each of
which sees a consistent WAL snapshot while a write is in progress. Both are
synchronous: the async ``Palace`` calls them from worker threads under its locks, so there is
exactly one thread hop per unit of work.
"""

from __future__ import annotations

import contextlib
import ctypes
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw

from palaced.store.conn.db import open_connection, storage_error, storage_errors
from palaced.store.conn.meta import stamp_write
from palaced.store.schema.check import refuse_foreign
from palaced.store.schema.sqlite import migrate

T = TypeVar("T")


MAX_READERS = 4


class Store:
    """Owns the apsw connections of one palace database: one writer, up to 4 readers."""

    def __init__(self, path: Path, *, palace: str | None = None) -> None:
        """Open (creating if needed) and migrate the database at ``path``.

        ``palace`` names the owner in error messages.

        Raises:
            StorageError, SchemaTooNew: see ``open_connection``, ``refuse_foreign`` (schema
                objects palace did not make) and ``migrate``.
        """
        self.path = path
        self.palace = palace
        self._writer = open_connection(path, palace=palace)
        try:
            refuse_foreign(self._writer, palace)  # before anything runs in the file
            migrate(self._writer)
        except BaseException:
            self._writer.close()
            raise
        self._idle: queue.SimpleQueue[apsw.Connection] = queue.SimpleQueue()
        self._readers: list[apsw.Connection] = []
        self._pool_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_READERS)

    def write(self, fn: Callable[[apsw.Connection], T], *, stamp: bool = True,
              counted: Callable[[T], bool] | None = None) -> T:
        """Run ``fn`` inside one write transaction; rolled back if it raises.

        With ``stamp`` (content writes) the transaction also records the time in meta
        ``last_write_ms``; upkeep that changes no content (touches, the index record, decay)
        passes False, so that restoring a backup taken since is not refused as older.
        ``counted`` serves a team palace's change counter (``PgStore.write``); here the
        palace counts writes itself (``Palace.write``), so it is ignored.
        """
        try:
            with self._writer:
                result = fn(self._writer)
                if stamp:
                    stamp_write(self._writer, int(time.time() * 1000))
                return result
        except apsw.Error as exc:
            raise storage_error(exc, self.path, self.palace) from exc

    def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot)."""
        with self._slots:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = open_connection(self.path, palace=self.palace)
                with self._pool_lock:
                    self._readers.append(conn)
            try:
                with conn:
                    return fn(conn)
            except apsw.Error as exc:
                raise storage_error(exc, self.path, self.palace) from exc
            finally:
                self._idle.put(conn)

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (at idle and at close)."""
        with storage_errors(self.path, self.palace):
            self._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    def abandon(self) -> None:
        """Close without deleting the WAL and shared-memory files by name.

        For a database whose directory was deleted or replaced under us: SQLite's last close
        checkpoints and unlinks ``palace.db-wal`` *by path*, which may now be another
        palace's. Persistent-WAL mode keeps it from unlinking anything.
        """
        keep = ctypes.c_int(1)
        with self._pool_lock:
            conns = [*self._readers, self._writer]
        for conn in conns:
            with contextlib.suppress(apsw.Error):
                conn.file_control("main", apsw.SQLITE_FCNTL_PERSIST_WAL, ctypes.addressof(keep))
        self.close()

    def close(self) -> None:
        with self._pool_lock:
            conns = [*self._readers, self._writer]
            self._readers = []
        for conn in conns:
            try:
                conn.close()
            except apsw.Error:
                pass
