"""Unpacking a model archive (``palace model import x.tar.gz|x.zip``) without trusting it.

Every member is checked before anything is written: a name that is absolute, climbs out with
``..`` or names a drive, a link (symbolic or hard), a device or a FIFO, a name given twice
(or both as a file and as a directory), more than ``MAX_MEMBERS`` members or more than
``MAX_UNPACKED`` bytes in all refuses the whole archive, and so does a damaged one. Only the
files the model needs are written, each with ``O_EXCL`` into a fresh private directory, so
nothing lands outside it, and no member is written past the size it declared.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from palaced.wire.errors import InvalidContent

MAX_UNPACKED = 4 * 1024**3  # the model is ~90 MB; more than this is no model archive
MAX_MEMBERS = 10_000  # a model export has a handful of files
# What a damaged, truncated, encrypted or oddly compressed archive raises while it is read.
_DAMAGED = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError,
            RuntimeError)
WANTED_SUFFIXES = (".onnx", ".json")  # the model and tokenizer files; the rest is skipped


def _unsafe(archive: Path, member: str, why: str) -> InvalidContent:
    return InvalidContent(
        f"refusing archive {archive}: member {member!r} {why}; nothing was installed",
        details={"condition": "unsafe-archive", "member": member[:200], "path": str(archive)})


def _safe_parts(archive: Path, name: str) -> tuple[str, ...]:
    """The path parts of a member name, or raise: absolute, ``..``, drive or empty."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise _unsafe(archive, name, "would be written outside the directory it unpacks into")
    return tuple(p for p in parts if p not in ("", "."))


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a tar (any compression) or zip file."""
    return path.is_file() and (tarfile.is_tarfile(path) or zipfile.is_zipfile(path))


def unpack(archive: Path, dest: Path) -> None:
    """Check every member of ``archive``, then write its model files into ``dest`` (empty).

    Raises:
        InvalidContent: an unsafe member (nothing is written then), or not an archive.
        OSError: reading or writing failed.
    """
    try:
        _unpack(archive, dest)
    except _DAMAGED as exc:
        raise InvalidContent(f"refusing archive {archive}: it cannot be read ({exc}); nothing "
                             "was installed",
                             details={"condition": "damaged-archive", "path": str(archive)}
                             ) from exc


def _unpack(archive: Path, dest: Path) -> None:
    with _members(archive) as members:
        wanted: list[tuple[tuple[str, ...], str, int, Opener]] = []
        files: set[tuple[str, ...]] = set()
        dirs: set[tuple[str, ...]] = set()
        total = 0
        for name, kind, size, opener in members:
            parts = _safe_parts(archive, name)
            if kind != "dir" and kind != "file":
                raise _unsafe(archive, name, f"is a {kind}, not a regular file")
            if parts in files or (kind == "file" and parts in dirs):
                raise _unsafe(archive, name, "appears twice in the archive (which one is the "
                              "model's is ambiguous)")
            if any(parts[:i] in files for i in range(1, len(parts))):
                raise _unsafe(archive, name, "lies under a member that is a file")
            (dirs if kind == "dir" else files).add(parts)
            dirs.update(parts[:i] for i in range(1, len(parts)))
            if kind == "dir":
                continue
            total += size
            if total > MAX_UNPACKED:
                raise _unsafe(archive, name, f"takes the archive past {MAX_UNPACKED} bytes")
            if parts and parts[-1].endswith(WANTED_SUFFIXES):
                wanted.append((parts, name, size, opener))
        for parts, name, size, opener in wanted:
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            written = 0
            with os.fdopen(fd, "wb") as out, opener() as src:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > size:
                        raise _unsafe(archive, name, f"holds more than the {size} bytes it "
                                      "declares")
                    out.write(chunk)


Opener = Callable[[], IO[bytes]]


@contextmanager
def _members(archive: Path) -> Iterator[list[tuple[str, str, int, Opener]]]:
    """``(name, kind, size, opener)`` of every member; kind is file, dir, link or device."""
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive, "r:*") as tar:
            out: list[tuple[str, str, int, Opener]] = []
            for m in tar:  # one header at a time: the count is checked before all are read
                _count(archive, len(out) + 1)
                kind = ("file" if m.isfile() else "dir" if m.isdir() else
                        "link" if m.issym() or m.islnk() else "device or FIFO")
                out.append((m.name, kind, m.size, _tar_opener(tar, m)))
            yield out
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            out = []
            _count(archive, len(zf.infolist()))
            for info in zf.infolist():
                mode = info.external_attr >> 16
                kind = ("dir" if info.is_dir() else "link" if (mode & 0o170000) == 0o120000
                        else "file")
                out.append((info.filename, kind, info.file_size, _zip_opener(zf, info)))
            yield out
    else:
        raise InvalidContent(f"{archive} is neither a directory nor a .tar(.gz) or .zip archive",
                             details={"condition": "not-an-archive", "path": str(archive)})


def _count(archive: Path, members: int) -> None:
    """Raises InvalidContent when an archive has more than ``MAX_MEMBERS`` members."""
    if members > MAX_MEMBERS:
        raise InvalidContent(
            f"refusing archive {archive}: more than {MAX_MEMBERS} members, which no model "
            "export has; nothing was installed",
            details={"condition": "unsafe-archive", "path": str(archive)})


def _tar_opener(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Opener:
    def open_() -> IO[bytes]:
        f = tar.extractfile(member)
        assert f is not None  # a regular file always has a stream
        return f
    return open_


def _zip_opener(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Opener:
    return lambda: zf.open(info)
