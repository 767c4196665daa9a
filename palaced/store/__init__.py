"""Store: the SQLite side of one palace — one writer and one reader connection.

``write(fn)`` runs ``fn(conn)`` in a transaction on the writer connection; ``read(fn)`` runs
it on the reader, which sees a consistent WAL snapshot while a write is in progress. Both are
synchronous: the async ``Palace`` calls them from worker threads under its locks, so there is
exactly one thread hop per unit of work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw

from .db import open_connection, storage_errors
from .schema import migrate

T = TypeVar("T")


class Store:
    """Owns the two apsw connections of one palace database."""

    def __init__(self, path: Path) -> None:
        """Open (creating if needed) and migrate the database at ``path``.

        Raises:
            StorageError, SchemaTooNew: see ``open_connection`` and ``migrate``.
        """
        self.path = path
        self._writer = open_connection(path)
        try:
            migrate(self._writer)
            self._reader = open_connection(path)
        except BaseException:
            self._writer.close()
            raise

    def write(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` inside one write transaction; rolled back if it raises."""
        with storage_errors(), self._writer:
            return fn(self._writer)

    def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot)."""
        with storage_errors(), self._reader:
            return fn(self._reader)

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (at idle and at close)."""
        with storage_errors():
            self._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    def close(self) -> None:
        for conn in (getattr(self, "_reader", None), self._writer):
            if conn is not None:
                try:
                    conn.close()
                except apsw.Error:
                    pass
