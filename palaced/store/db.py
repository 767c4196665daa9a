"""Opening SQLite connections the way palace needs them, and mapping apsw errors.

Synchronous module: called from worker threads only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from palaced.errors import PalaceError, StorageError

# "PALC" — marks a SQLite file as a palace database.
APPLICATION_ID = 0x50414C43
BUSY_TIMEOUT_MS = 5_000


def open_connection(path: Path, *, readonly: bool = False) -> apsw.Connection:
    """Open a connection with palace's pragmas (WAL, FULL sync, foreign keys).

    Raises:
        StorageError: the file cannot be opened or SQLite lacks FTS5.
    """
    flags = apsw.SQLITE_OPEN_READONLY if readonly else (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    with storage_errors():
        conn = apsw.Connection(str(path), flags=flags)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a remember that was acknowledged survives power loss, not only a crash.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA cache_size=-16000")
        if "ENABLE_FTS5" not in {row[0] for row in conn.execute("PRAGMA compile_options")}:
            raise StorageError("this SQLite build lacks FTS5, which palace requires")
    return conn


def storage_error(exc: apsw.Error) -> StorageError:
    """The StorageError that reports an apsw error."""
    return StorageError(f"SQLite error: {exc}", details={"sqlite": type(exc).__name__})


@contextmanager
def storage_errors() -> Iterator[None]:
    """Translate apsw errors into StorageError at the storage boundary."""
    try:
        yield
    except PalaceError:
        raise
    except apsw.Error as exc:
        raise storage_error(exc) from exc
