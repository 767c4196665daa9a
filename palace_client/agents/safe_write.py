"""Safe rewrites of a user's config file: atomic replacement and a one-time backup.

``palace init`` (``agents``) writes every config through ``atomic_write``, after
``backup_once`` while the file is still the user's own, so the pre-palace copy survives as
``<file>.palace-bak``; ``drop_backup`` removes it once an uninstall restored the file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

BACKUP_SUFFIX = ".palace-bak"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file in the same directory + rename).

    A symlinked config (dotfile managers) is written through to its target. The file keeps its
    mode; a new file gets ``0o666 & ~umask``.

    Raises:
        OSError: the directory cannot be created or written.
    """
    real = path.resolve() if path.is_symlink() else path
    real.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = real.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".palace-tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def backup_path(path: Path) -> Path:
    """Where the pre-palace copy of ``path`` is kept."""
    real = path.resolve() if path.is_symlink() else path
    return real.with_name(real.name + BACKUP_SUFFIX)


def backup_once(path: Path) -> None:
    """Copy ``path`` (if it exists) to ``backup_path(path)`` unless a backup is already there."""
    bak = backup_path(path)
    if path.exists() and not bak.exists():
        shutil.copy2(path.resolve(), bak)


def drop_backup(path: Path) -> None:
    """Remove ``path``'s backup (the file is back to it); a missing backup is fine."""
    with contextlib.suppress(FileNotFoundError):
        backup_path(path).unlink()
