"""Keeping palace's paths private from other local users (another uid on the same machine).

Leaf module (stdlib): the daemon and the clients both use it. The runtime directory is created
with ``mkdir`` and checked with ``O_NOFOLLOW``/``fstat`` (never trusted, chmod-ed or written
through when it is a symlink or belongs to someone else), the lock file and a leftover socket
are checked the same way, and :func:`tighten_install` makes existing data, state, config and
log paths 0700/0600 whatever the umask they were created with.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from palaced.wire.errors import UnsafePath
from palaced.wire.paths import Paths

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ADVICE = ("remove it, or set PALACE_SOCKET to a path in a private directory you own "
           "(e.g. ~/.palace/palaced.sock)")


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"),
                       (stat.S_ISFIFO, "a fifo"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "a special file"


def _unsafe(path: Path, problem: str, advice: str = _ADVICE) -> UnsafePath:
    return UnsafePath(f"refusing {path}: {problem}; {advice}",
                      details={"path": str(path), "problem": problem})


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (whatever the umask).

    Existing directories are left as they are: tightening them is :func:`tighten_install`'s
    and :func:`prepare_runtime_dir`'s job, which check ownership first.

    Raises:
        OSError: a component cannot be created (or exists and is not a directory).
    """
    missing: list[Path] = []
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            # A umask only removes bits, so the result is never wider than 0700.
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not directory.is_dir():
                raise


def _open_dir_nofollow(path: Path, advice: str = _ADVICE) -> int:
    """Open an existing directory without following a symlink at its last component.

    Raises:
        UnsafePath: it is a symlink or not a directory.
        FileNotFoundError: it does not exist.
    """
    try:
        return os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            raise _unsafe(path, f"it is a symlink (to {target}) owned by uid {st.st_uid}, not "
                                "a directory; palace never follows a link here", advice) from None
        if not stat.S_ISDIR(st.st_mode):
            raise _unsafe(path, f"it is {_kind(st)}, not a directory", advice) from None
        raise


def _check_ancestors(path: Path) -> None:
    """Every directory from ``path`` up to ``/`` must be safe from other users.

    Safe means owned by us or root, and not writable by others unless sticky (like /tmp,
    where nobody can rename or remove our entries). Symlinks in the chain are resolved
    first and the real directories checked, as sshd's StrictModes does. Group-writable
    directories are accepted when the group is our own primary group (user private groups).

    Raises:
        UnsafePath: one of them is not.
    """
    uid, gid = os.geteuid(), os.getegid()
    real = Path(os.path.realpath(path))
    for directory in (real, *real.parents):
        st = os.stat(directory)
        if st.st_uid not in (uid, 0):
            raise _unsafe(path, f"its ancestor {directory} is owned by uid {st.st_uid}, who "
                                "could replace anything below it")
        sticky = bool(st.st_mode & stat.S_ISVTX)
        if st.st_mode & stat.S_IWOTH and not sticky:
            raise _unsafe(path, f"its ancestor {directory} is writable by every user "
                                f"(mode {_mode(st)})")
        if st.st_mode & stat.S_IWGRP and not sticky and st.st_gid != gid:
            raise _unsafe(path, f"its ancestor {directory} is writable by group "
                                f"{st.st_gid} (mode {_mode(st)})")


def check_runtime_dir(path: Path) -> None:
    """Client-side early check of a runtime directory before starting a daemon in it.

    Only what a client can check without changing anything: if ``path`` exists it must be a
    real directory owned by us. (The daemon checks more and refuses to start otherwise; this
    lets the client say why at once instead of timing out.) The real protection for clients
    is the daemon's peer uid, checked on every connection.

    Raises:
        UnsafePath: ``path`` is a symlink, not a directory, or owned by another uid.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _unsafe(path, f"it is a symlink (to {os.readlink(path)}) owned by uid "
                            f"{st.st_uid}, not a directory")
    if not stat.S_ISDIR(st.st_mode):
        raise _unsafe(path, f"it is {_kind(st)}, not a directory")
    if st.st_uid != os.geteuid():
        raise _unsafe(path, f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}); "
                            "another local user may have created it to intercept palace")


def prepare_runtime_dir(path: Path, *, private: bool = True) -> tuple[int, list[str]]:
    """Create or verify the daemon's runtime directory; return an open fd on it and notes.

    A new directory is made with ``mkdir(0700)``. An existing one is opened with
    ``O_NOFOLLOW`` and checked with ``fstat`` on that fd (no check-then-use race): it must be
    a real directory owned by our uid. When ``private`` (palace's own runtime dir) its mode
    is then made exactly 0700 and the change noted; otherwise (the directory of a
    PALACE_SOCKET the user chose) it is never chmod-ed and must simply not be writable by
    others. Its ancestors must be safe too (see ``_check_ancestors``).

    Raises:
        UnsafePath: any of the above does not hold; the message names the path, the problem
            and what to do.
        OSError: the directory cannot be created.
    """
    uid = os.geteuid()
    make_private_dirs(path.parent)
    _check_ancestors(path.parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = _open_dir_nofollow(path)
    notes: list[str] = []
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            raise _unsafe(
                path, f"it is owned by uid {st.st_uid}, not by you (uid {uid}), with mode "
                      f"{_mode(st)}; another local user may have created it to intercept "
                      "palace",
                f"have it removed (it is not yours: `sudo rm -rf {path}`), or set "
                "PALACE_SOCKET to a path in a private directory you own")
        mode = stat.S_IMODE(st.st_mode)
        if private and mode != 0o700:
            os.fchmod(fd, 0o700)
            notes.append(f"{path} ({mode:04o} -> 0700)")
        elif not private and mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise _unsafe(path, f"the socket's directory is writable by other users (mode "
                                f"{mode:04o})", "choose a PALACE_SOCKET in a private directory")
    except BaseException:
        os.close(fd)
        raise
    return fd, notes


def open_lock_file(dir_fd: int, dir_path: Path, name: str) -> int:
    """Open (creating 0600) the lock file ``name`` inside an already verified directory.

    Opened relative to ``dir_fd`` with ``O_NOFOLLOW``: a symlink planted there is refused,
    never followed (the daemon truncates and writes its pid into this file).

    Raises:
        UnsafePath: it is a symlink, not a regular file, or owned by another uid.
    """
    path = dir_path / name
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            raise exc from None
        raise _unsafe(path, f"it is {_kind(st)} owned by uid {st.st_uid}, not palace's lock "
                            "file", "remove it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise _unsafe(path, f"it is {_kind(st)} owned by uid {st.st_uid}, not palace's "
                                "lock file", "remove it")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def stale_socket(path: Path) -> bool:
    """Whether ``path`` holds a leftover socket of ours (the caller, holding the lock, may
    remove it); False when nothing is there.

    Raises:
        UnsafePath: something else is there (a symlink, a file, another uid's socket); the
            daemon refuses rather than unlink or bind through it.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
        return True
    raise _unsafe(path, f"it is {_kind(st)} owned by uid {st.st_uid}, not a socket of yours",
                  "remove it if you know what it is, or set PALACE_SOCKET to another path")


def refuse_symlink(path: Path) -> None:
    """Refuse a symlink where palace is about to create or append to a file of its own.

    Raises:
        UnsafePath: ``path`` is a symlink.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _unsafe(path, f"it is a symlink (to {os.readlink(path)}) owned by uid "
                            f"{st.st_uid}; palace never writes through a link", "remove it")


def _tighten_fd(fd: int, display: Path, want: int, notes: list[str]) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        return  # not ours to change (and root never "fixes" another user's files)
    mode = stat.S_IMODE(st.st_mode)
    new = want if stat.S_ISDIR(st.st_mode) else mode & ~0o077
    if mode != new and mode & 0o077:
        os.fchmod(fd, new)
        notes.append(f"{display} ({mode:04o} -> {new:04o})")


def _tighten_dir(path: Path, notes: list[str], *, depth: int, dir_fd: int | None = None,
                 name: str | None = None, only: frozenset[str] | None = None) -> None:
    """Make the directory at ``path`` 0700 and its regular files 0600 (keeping owner bits).

    Symlinks are never followed: a linked directory or file is skipped. Subdirectories are
    tightened down to ``depth`` levels. Entries owned by other uids are left alone. ``only``
    names the files of ``path`` that are palace's (None: all are), for a directory the user
    may share with palace (a ``PALACE_HOME`` holding notes of their own).
    """
    try:
        fd = os.open(name if name is not None else path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return  # missing, a symlink or not a directory: nothing of ours to tighten
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return
        _tighten_fd(fd, path, 0o700, notes)
        for entry in _scan(fd):
            try:
                st = os.lstat(entry, dir_fd=fd)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth > 0:
                    _tighten_dir(path / entry, notes, depth=depth - 1, dir_fd=fd, name=entry)
            elif stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and (
                    st.st_mode & 0o077) and (only is None or entry in only):
                # The directory is now 0700 and ours: nobody else can swap this entry between
                # the lstat above and the chmod below.
                new = stat.S_IMODE(st.st_mode) & ~0o077
                os.chmod(entry, new, dir_fd=fd)
                notes.append(f"{path / entry} ({_mode(st)} -> {new:04o})")
    finally:
        os.close(fd)


def _scan(fd: int) -> Iterator[str]:
    with os.scandir(fd) as it:
        yield from [e.name for e in it]


def tighten_install(paths: Paths) -> list[str]:
    """Make an existing install private: directories 0700, files 0600.

    Covers the data dir, the palaces dir and every palace in it (its database, WAL, lock,
    identity and index files), the state dir with its log files, and the config file and
    (unless PALACE_CONFIG chose it) its directory. Other files in the data and config
    directories are not palace's (with ``PALACE_HOME`` both are that directory, where a user
    may keep files of their own) and are left as they are. Never follows symlinks and never touches
    what another uid owns. Returns one ``"path (old -> new)"`` note per change, for the log
    and ``daemon.status``; nothing to change returns an empty list.
    """
    notes: list[str] = []
    _tighten_dir(paths.data_dir, notes, depth=0, only=frozenset())
    _tighten_dir(paths.palaces_dir, notes, depth=3)
    _tighten_dir(paths.state_dir, notes, depth=0)
    if not os.environ.get("PALACE_CONFIG"):
        _tighten_dir(paths.config_file.parent, notes, depth=0,
                     only=frozenset({paths.config_file.name}))
    else:
        try:
            fd = os.open(paths.config_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK)
        except OSError:
            return notes
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                _tighten_fd(fd, paths.config_file, 0o600, notes)
        finally:
            os.close(fd)
    return notes
