"""Files palace writes or reads where another local user may place things.

Leaf module (stdlib): the daemon and the clients both use it. A shared directory (the target
of ``palace export FILE``, a shared notes folder an importer reads) may hold whatever another
uid put there: a file pre-created under the name palace is about to write, a symlink to one
of the owner's secrets, a FIFO, a link to a device. :func:`private_file` writes a new 0600
file made exclusively under a random name and renamed over the target once complete
(:func:`sync_dir` makes such a rename durable, for every writer of palace);
:func:`open_regular`, :func:`read_regular` and :func:`read_beneath` open regular files only,
never block on a FIFO and never read more than asked (:func:`read_capped`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO

from palaced.wire.errors import SourceUnreadable
from palaced.wire.private import _DIR_FLAGS, _kind


@contextlib.contextmanager
def private_file(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A new private text file (UTF-8, mode 0600) that replaces ``path`` once complete.

    The text goes to a temporary file created exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``,
    ``tempfile.mkstemp``: a random name) in ``path``'s directory; when the block ends without
    an exception it is flushed, fsynced and renamed over ``path`` (atomically: readers see the
    old file or the whole new one), and the directory is fsynced. On an exception it is
    removed and ``path`` is left as it was. Nothing another user placed in the directory is
    opened or written through: not a file pre-created under the temporary name (the name is
    not predictable and ``O_EXCL`` refuses an existing one), not a symlink at ``path`` (the
    rename replaces the link itself, never its target).

    Raises:
        OSError: the file cannot be created, written or renamed (then nothing is left behind).
    """
    target = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(target)
    # The name is cut so that the temporary one stays within NAME_MAX (255) as ``path`` does.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name[:200]}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # best effort: some file systems refuse it
        sync_dir(directory)


def sync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a rename or create in it survives a power loss: the one
    helper for it, daemon and clients alike.

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unreadable(path: str | os.PathLike[str], reason: str) -> SourceUnreadable:
    return SourceUnreadable(f"cannot read {os.fspath(path)}: {reason}",
                            details={"path": os.fspath(path), "reason": reason})


def _limit(cap: int) -> str:
    return f"{cap >> 20} MiB" if cap >= 1 << 20 and not cap % (1 << 20) else f"{cap} bytes"


def read_capped(read: Callable[[int], bytes], cap: int) -> bytes:
    """What ``read(n)`` returns until the end, but at most ``cap`` + 1 bytes (a result longer
    than ``cap`` means there was more), in chunks of at most 1 MiB: a stream that claims to be
    small but is not (a decompressing zip member, a file still growing) never takes more.

    Raises:
        OSError: ``read`` failed.
    """
    chunks: list[bytes] = []
    got = 0
    while got <= cap:
        chunk = read(min(cap + 1 - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None,
                 follow: bool = False) -> int:
    """A blocking read-only descriptor on the regular file at ``path`` (relative to
    ``dir_fd`` when given).

    Opened with ``O_NONBLOCK`` (a FIFO planted under a file's name must not hang the reader;
    the descriptor is made blocking again once it is known to be a regular file) and, unless
    ``follow``, ``O_NOFOLLOW`` (a symlink at the last component is refused); the kind is
    checked with ``fstat`` on the open descriptor, so a swap of the path after a check cannot
    slip a device or FIFO in.

    Raises:
        SourceUnreadable: missing, a symlink (without ``follow``), not a regular file (a
            FIFO, a device, a directory), or unreadable; ``details["reason"]`` says which.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise _unreadable(path, "it is a symlink, which is not followed here") from None
        raise _unreadable(path, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _unreadable(path, f"it is {_kind(st)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], cap: int, *, dir_fd: int | None = None,
                 follow: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given) and its
    ``fstat``, reading at most ``cap`` + 1 bytes whatever the file claims to be (opened
    with :func:`open_regular`).

    Raises:
        SourceUnreadable: missing, a symlink (without ``follow``), not a regular file (a
            FIFO, a device, a directory), larger than ``cap`` bytes, or unreadable;
            ``details["reason"]`` says which, without the path.
    """
    fd = open_regular(path, dir_fd=dir_fd, follow=follow)
    try:
        st = os.fstat(fd)
        if st.st_size > cap:
            raise _unreadable(path, f"larger than {_limit(cap)}")
        data = read_capped(lambda n: os.read(fd, n), cap)
        if len(data) > cap:  # grew since the fstat
            raise _unreadable(path, f"larger than {_limit(cap)}")
        return data, st
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_beneath(root_fd: int, parts: Sequence[str], cap: int) -> tuple[bytes, os.stat_result]:
    """:func:`read_regular` of the file ``parts`` names under the directory open as
    ``root_fd``, following no symlink on the way: each directory is opened with
    ``O_NOFOLLOW|O_DIRECTORY`` relative to the one before, so a directory replaced by a link
    after the caller listed it cannot lead the read outside the tree.

    Raises:
        SourceUnreadable: as :func:`read_regular`, or a directory on the way is a symlink,
            missing or not a directory.
    """
    if not parts:
        raise _unreadable(".", "no file named")
    fds: list[int] = []
    try:
        current = root_fd
        for part in parts[:-1]:
            try:
                current = os.open(part, _DIR_FLAGS, dir_fd=current)
            except OSError as exc:
                reason = ("a directory on the way is a symlink, which is not followed here"
                          if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                          else exc.strerror or str(exc))
                raise _unreadable(os.path.join(*parts), reason) from None
            fds.append(current)
        try:
            return read_regular(parts[-1], cap, dir_fd=current)
        except SourceUnreadable as exc:
            raise _unreadable(os.path.join(*parts), str(exc.details["reason"])) from None
    finally:
        for fd in fds:
            os.close(fd)
