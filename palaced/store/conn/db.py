"""Opening SQLite connections the way palace needs them, and mapping storage failures.

Every apsw error and every OS error met while touching a palace's files becomes a
``StorageError`` here, in one place, with a message that says what is wrong with which file
(read-only, full, corrupt...) and a stable ``details["condition"]``.

Synchronous module: called from worker threads only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from palaced.wire.errors import (
    PalaceError,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
)

# "PALC" — marks a SQLite file as a palace database.
APPLICATION_ID = 0x50414C43
BUSY_TIMEOUT_MS = 5_000

# errno values that mean "this storage cannot be written" (EACCES/EPERM: permissions or an
# immutable file; EROFS: a read-only mount).
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def open_connection(path: Path, *, readonly: bool = False, palace: str | None = None
                    ) -> apsw.Connection:
    """Open a connection with palace's pragmas (WAL, FULL sync, foreign keys).

    ``palace`` names the owner in error messages.

    Raises:
        StorageError: the file cannot be opened or SQLite lacks FTS5.
    """
    flags = apsw.SQLITE_OPEN_READONLY if readonly else (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    with storage_errors(path, palace):
        conn = apsw.Connection(str(path), flags=flags)
        try:
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
        except BaseException:
            # A half-configured connection would keep the file open until garbage collection.
            conn.close()
            raise
    return conn


def is_read_only(path: Path) -> bool:
    """Whether ``path`` or its directory cannot be written.

    SQLite needs both: the database file, and its directory for the WAL and shared-memory
    files it creates beside it.
    """
    # access(2) also answers EROFS for a read-only mount and EPERM for an immutable file,
    # even to root, which ignores the permission bits.
    if not os.access(path.parent, os.W_OK):
        return True
    return path.exists() and not os.access(path, os.W_OK)


def _describe(exc: apsw.Error | OSError, path: Path | None) -> tuple[str, str]:
    """``(condition, what)`` for a storage failure: a stable key and a human phrase."""
    if isinstance(exc, OSError):
        if exc.errno in _READ_ONLY_ERRNOS:
            return "read_only", "is read-only"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "full", "is full"
        return "os_error", "failed"
    if isinstance(exc, apsw.ReadOnlyError) or (
        isinstance(exc, apsw.CantOpenError | apsw.IOError | apsw.PermissionsError)
        and path is not None and is_read_only(path)
    ):
        return "read_only", "is read-only"
    if isinstance(exc, apsw.FullError):
        return "full", "is full"
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        return "corrupt", "is corrupt"
    if isinstance(exc, apsw.CantOpenError):
        return "cannot_open", "cannot be opened"
    if isinstance(exc, apsw.IOError):
        return "io_error", "has an I/O error"
    return "sqlite", "failed"


# SQLite's own text of each result code (sqlite3_errstr), for an error whose message SQLite
# had already reset when apsw read it: apsw then says "not an error" (the text of SQLITE_OK),
# as an online backup's step does on a full disk.
_RESULT_TEXT: dict[type[apsw.Error], str] = {
    apsw.FullError: "database or disk is full",
    apsw.ReadOnlyError: "attempt to write a readonly database",
    apsw.CorruptError: "database disk image is malformed",
    apsw.NotADBError: "file is not a database",
    apsw.CantOpenError: "unable to open database file",
    apsw.IOError: "disk I/O error",
    apsw.PermissionsError: "access permission denied",
}


def _sqlite_cause(exc: apsw.Error) -> str:
    """What SQLite said about ``exc``: its message, or its result code's text (else the
    error's class) when the message is SQLite's stale "not an error"."""
    message = str(exc)
    if message.strip().lower() == "not an error":
        message = _RESULT_TEXT.get(type(exc), type(exc).__name__)
    return f"SQLite: {message}"


# The typed errors of the conditions a client can act on; the others are plain StorageError.
_CLASSES: dict[str, type[StorageError]] = {
    "read_only": StorageReadOnly, "full": StorageFull, "corrupt": StorageCorrupt}


def storage_error(exc: apsw.Error | OSError, path: Path | None = None,
                  palace: str | None = None) -> StorageError:
    """The StorageError that reports an apsw or OS error met on ``path`` of ``palace``.

    Read-only storage reads "palace 'x''s storage is read-only (<path>): <cause>; ..." so the
    user knows what to fix; once it is writable again the next request opens the palace.
    Full, read-only and corrupt storage are StorageFull, StorageReadOnly and StorageCorrupt
    (subclasses of StorageError with their own codes).
    """
    condition, what = _describe(exc, path)
    owner = f"palace {palace!r}'s storage" if palace else "storage"
    where = f" ({path})" if path is not None else ""
    cause = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else _sqlite_cause(exc)
    hint = {
        "read_only": "; make it writable, then retry",
        "full": "; free some space, then retry",
        "corrupt": "; restore it from a backup or delete the palace",
    }.get(condition, "")
    details: dict[str, object] = {"condition": condition, "cause": type(exc).__name__}
    if isinstance(exc, apsw.Error):
        details["sqlite"] = type(exc).__name__
    if path is not None:
        details["path"] = str(path)
    if palace:
        details["palace"] = palace
    cls = _CLASSES.get(condition, StorageError)
    return cls(f"{owner} {what}{where}: {cause}{hint}", details=details)


@contextmanager
def storage_errors(path: Path | None = None, palace: str | None = None) -> Iterator[None]:
    """Translate apsw and OS errors into StorageError at the storage boundary."""
    try:
        yield
    except PalaceError:
        raise
    except (apsw.Error, OSError) as exc:
        raise storage_error(exc, path, palace) from exc
