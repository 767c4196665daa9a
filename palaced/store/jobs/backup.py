"""Synchronous online copies of a palace database, and the check of a copy.

``SnapshotCopy`` copies a live database with SQLite's backup API from a connection of its
own that holds one read transaction for the whole copy: in WAL mode that snapshot never
blocks the palace's writer, and because the source connection never sees another snapshot
the copy is never restarted by concurrent writes (the backup API restarts a copy whose
source changed under it). The copy is made in steps of pages, so the caller can hand the
CPU back between steps and give up on a deadline. ``inspect_copy`` opens a finished copy and
says what it holds and whether SQLite finds it intact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from palaced.store.conn.db import open_connection, storage_error
from palaced.store.conn.meta import last_write_ms, meta_get
from palaced.store.jobs.checks import header, integrity_problems
from palaced.store.schema.check import Deviation, schema_deviations
from palaced.wire.errors import StorageError


@dataclass(frozen=True)
class CopyFacts:
    """What a copied database holds (``inspect_copy``) or a snapshot held when taken."""

    schema: int
    application_id: int
    embedder: str | None
    last_write_ms: int | None
    counts: dict[str, int]
    problems: tuple[str, ...] = ()
    # How its schema objects differ from palace's own for its version (``inspect_copy``).
    deviations: tuple[Deviation, ...] = ()


def _counts(conn: apsw.Connection) -> dict[str, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM drawers), (SELECT count(*) FROM vectors), "
        "(SELECT count(*) FROM facts), (SELECT count(*) FROM entities)").fetchall()[0]
    return {"drawers": int(row[0]), "vectors": int(row[1]), "facts": int(row[2]),
            "entities": int(row[3])}


def _facts(conn: apsw.Connection, problems: tuple[str, ...] = (),
           deviations: tuple[Deviation, ...] = ()) -> CopyFacts:
    app_id, version = header(conn)
    return CopyFacts(schema=version, application_id=app_id, embedder=meta_get(conn, "embedder"),
                     last_write_ms=last_write_ms(conn), counts=_counts(conn),
                     problems=problems, deviations=deviations)


class SnapshotCopy:
    """One online copy of ``source`` into a new file ``dest``, step by step.

    Use: ``copy = SnapshotCopy(...)``; ``while not copy.step(pages): ...``; ``copy.finish()``;
    ``copy.close()`` always (it also abandons an unfinished copy).
    """

    def __init__(self, source: Path, dest: Path, *, palace: str | None = None) -> None:
        """Open the source, start its snapshot and prepare the copy.

        Raises:
            StorageError: the source cannot be read or the destination cannot be created.
        """
        self._path = source
        self._dest_path = dest
        self._palace = palace
        self._src = open_connection(source, palace=palace)
        self._dest: apsw.Connection | None = None
        self._backup: apsw.Backup | None = None
        try:
            # The first read after BEGIN fixes the snapshot every later step copies from.
            self._src.execute("BEGIN")
            self.snapshot = _facts(self._src)
            self.taken_ms = int(time.time() * 1000)
            self._dest = apsw.Connection(str(dest))
            self._backup = self._dest.backup("main", self._src, "main")
        except apsw.Error as exc:
            self.close()
            raise self._error(exc) from exc
        except BaseException:
            self.close()
            raise

    @property
    def progress(self) -> tuple[int, int]:
        """``(pages copied, pages in all)`` so far."""
        if self._backup is None:
            return 0, 0
        total = int(self._backup.page_count)
        return total - int(self._backup.remaining), total

    def step(self, pages: int) -> bool:
        """Copy up to ``pages`` more pages; True once the copy is complete.

        Raises:
            StorageError: SQLite failed (the source is unreadable, the disk is full...).
        """
        assert self._backup is not None
        try:
            return bool(self._backup.step(pages))
        except apsw.Error as exc:
            raise self._error(exc) from exc

    def finish(self) -> None:
        """Complete the copy and make it a stand-alone file (rollback journal, not WAL).

        A copy in rollback mode can be opened read-only by any SQLite tool; a restored copy
        is switched back to WAL when the palace opens it.

        Raises:
            StorageError: SQLite failed to finish the copy.
        """
        assert self._backup is not None and self._dest is not None
        try:
            self._backup.finish()
            self._backup = None
            self._dest.execute("PRAGMA journal_mode=DELETE")
        except apsw.Error as exc:
            raise self._error(exc) from exc

    def _error(self, exc: apsw.Error) -> StorageError:
        """The StorageError for ``exc``: only the copy is written, so a full or read-only
        disk is the destination's, not the palace's."""
        if isinstance(exc, apsw.FullError | apsw.ReadOnlyError):
            return storage_error(exc, self._dest_path)
        return storage_error(exc, self._path, self._palace)

    def close(self) -> None:
        """Release both connections (and abandon an unfinished copy). Never raises."""
        for closer in (self._backup, self._dest, self._src):
            if closer is None:
                continue
            try:
                if isinstance(closer, apsw.Backup):
                    closer.finish()
                else:
                    closer.close()
            except apsw.Error:
                pass
        self._backup = self._dest = None


def inspect_copy(path: Path, *, full: bool = False) -> CopyFacts:
    """Open a database copy and report its header, meta, counts and integrity problems.

    ``problems`` lists what ``PRAGMA quick_check`` (``integrity_check`` with ``full``) found;
    the counts are only read when there are none. ``deviations`` lists the schema objects
    that are not palace's own for the copy's version (read first: nothing of the file's
    runs, and a foreign view is never read as a table of palace's).

    Raises:
        StorageError: the file is not a database SQLite can open, or is not a palace's.
    """
    conn = open_connection(path, readonly=True)
    try:
        with conn:
            problems = tuple(integrity_problems(conn, full=full))
            if problems:
                app_id, version = header(conn)
                return CopyFacts(schema=version, application_id=app_id, embedder=None,
                                 last_write_ms=None, counts={}, problems=problems)
            deviations = tuple(schema_deviations(conn))
            if deviations:
                app_id, version = header(conn)
                return CopyFacts(schema=version, application_id=app_id, embedder=None,
                                 last_write_ms=None, counts={}, deviations=deviations)
            return _facts(conn)
    except apsw.Error as exc:
        raise storage_error(exc, path) from exc
    finally:
        conn.close()
