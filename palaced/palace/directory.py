"""The files of one palace directory: whether it holds a database, its lock, undoing a
failed create, and noticing that the directory was deleted or replaced under an open palace.

Synchronous helpers for ``palaced.palace.handle`` (worker threads) and ``palaced.palace.registry``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from palaced.store.conn.db import storage_error, storage_errors
from palaced.wire.errors import PalaceLocked, PalaceNotFound, StorageError

DB_NAME = "palace.db"
INDEX_NAME = "index.usearch"
KEYWORDS_NAME = "keywords.bin"  # the keyword engine's file (palaced/palace/keywords.py)
IDENTITY_NAME = "identity.txt"
IDENTITY_TEMPLATE = """\
# Identity of the palace "{name}" (L0). Edit freely: this text opens every recall.
# Lines starting with # are ignored.
This palace holds the memories of {name}.
"""
LOCK_NAME = ".lock"
# A team palace's directory holds this instead of DB_NAME: where its PostgreSQL schema is.
STORE_NAME = "store.toml"


def is_team(directory: Path) -> bool:
    """Whether ``directory`` is a team palace's (it holds ``store.toml``)."""
    return (directory / STORE_NAME).is_file()


def db_identity(directory: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the palace's database file, None when it is not there.

    An open palace compares it with the one it opened: a palace directory deleted (or its
    database replaced) under the daemon must not go on taking writes into a file that no path
    reaches any more, where every acknowledged write would be lost.

    Raises:
        OSError: the file could not be looked at for another reason (permissions, I/O): that
            says nothing about whether it is still the same file.
    """
    try:
        st = os.stat(directory / DB_NAME)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


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
    if is_team(directory):
        return True
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


def not_found(name: str) -> PalaceNotFound:
    return PalaceNotFound(f"no palace named {name!r}; create it with `palace create {name}`",
                          details={"palace": name})


def take_lock(name: str, directory: Path) -> int:
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
        raise not_found(name) from None
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


def release_lock(fd: int) -> None:
    # Unlock and close separately: a failed unlock must not leak the descriptor (closing it
    # releases the flock anyway).
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


# Everything a create may have written into a directory that held nothing but the lock.
_CREATED_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal",
                  IDENTITY_NAME, INDEX_NAME, f"{INDEX_NAME}.tmp", KEYWORDS_NAME)


def undo_create(directory: Path) -> None:
    """Remove what a failed create wrote, so the half-made palace is neither damaged nor
    mistaken for a real one; the next create starts over."""
    for fname in _CREATED_FILES:
        with contextlib.suppress(OSError):
            (directory / fname).unlink()
