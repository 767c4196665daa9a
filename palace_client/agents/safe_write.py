"""Safe rewrites of a user's config file: atomic replacement and a one-time backup.

``palace init`` (``agents``) writes every config through ``atomic_write``, after
``backup_once`` while the file is still the user's own, so the pre-palace copy survives as
``<state_dir>/init-backups/<the file's absolute path>.palace-bak``: outside the project tree,
where a backup beside ``.mcp.json`` showed up in ``git status`` (a backup an older palace left
beside its file is still used). ``drop_backup`` removes it once an uninstall restored the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from palaced.wire.private import make_private_dirs

BACKUP_SUFFIX = ".palace-bak"
BACKUPS_DIR = "init-backups"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _own_target(path: Path) -> Path:
    """``path``, or for a symlink of ours its target (dotfile managers link configs).

    A project's directory may be shared: a symlink another user planted at a config's name
    is never written through (nor is its target copied to a backup).

    Raises:
        PermissionError: ``path`` is a symlink owned by another uid.
    """
    if not path.is_symlink():
        return path
    owner = path.lstat().st_uid
    if owner != os.geteuid():
        raise PermissionError(errno.EPERM, f"it is a symlink owned by uid {owner}, not by "
                              "you; palace writes through your own links only", str(path))
    return path.resolve()


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file in the same directory + rename).

    A symlinked config (dotfile managers) is written through to its target, when the link is
    ours. The file keeps its mode; a new file gets ``0o666 & ~umask``.

    Raises:
        OSError: the directory cannot be created or written; PermissionError: ``path`` is a
            symlink owned by another uid.
    """
    real = _own_target(path)
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


def backups_dir() -> Path:
    """The private directory of ``init``'s backups (``PALACE_HOME`` moves it)."""
    from palaced.wire.paths import resolve

    return resolve().state_dir / BACKUPS_DIR


def backup_path(path: Path) -> Path:
    """Where the pre-palace copy of ``path`` is kept: under ``backups_dir()`` at the file's
    absolute path, or beside the file where an older palace left it (a regular file of
    yours named ``<file>.palace-bak``).

    Raises:
        PermissionError: ``path`` is a symlink owned by another uid.
    """
    real = _own_target(path).absolute()
    legacy = real.with_name(real.name + BACKUP_SUFFIX)
    try:
        st = legacy.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return legacy
    except OSError:
        pass
    return backups_dir() / real.relative_to(real.anchor).with_name(real.name + BACKUP_SUFFIX)


def backup_once(path: Path) -> None:
    """Copy ``path`` (if it exists) to ``backup_path(path)`` unless a backup is already there.

    The backup is created with ``O_EXCL|O_NOFOLLOW``: anything already at its name (a backup
    of an earlier run, or a dangling symlink another user planted to have the config copied
    wherever it points) is left alone and never written through.

    Raises:
        OSError: the copy failed; PermissionError: ``path`` is a symlink owned by another uid.
    """
    real = _own_target(path)
    if not real.exists():
        return
    bak = backup_path(path)
    make_private_dirs(bak.parent)
    try:
        fd = os.open(bak, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as out, open(real, "rb") as src:
        shutil.copyfileobj(src, out)
        out.flush()  # before the times are set: a later write would move the mtime
        st = os.fstat(src.fileno())
        os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
        os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))


def drop_backup(path: Path) -> None:
    """Remove ``path``'s backup (the file is back to it); a missing backup is fine."""
    with contextlib.suppress(FileNotFoundError):
        backup_path(path).unlink()
