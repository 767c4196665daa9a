"""The lock file of a palace directory: one process at a time opens a palace."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from palaced.errors import PalaceLocked, PalaceNotFound
from palaced.store.db import storage_error

LOCK_NAME = ".lock"


def take_lock(name: str, directory: Path, not_found: Callable[[str], PalaceNotFound]) -> int:
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
