"""``palace import markdown``: a directory of documents (``.md``, ``.markdown``, ``.txt``,
``.rst``), cut at headings and by size (``sections``).

Files and directories matched by a ``.gitignore`` inside the directory (at any depth, with
git's rules: deeper files and later lines win, ``!`` re-includes) are skipped, and so is
``.git``. Each file is one source of the import ledger, keyed by its absolute path, with the
hash of its bytes and of the import's options: a re-run sends only the files that changed
(their sections are replaced: new ones stored, vanished ones deleted, unchanged ones kept)
and deletes the drawers of files that are gone (or now ignored).

The directory may be shared with other users, so nothing in it is trusted: only regular files
are read (a FIFO or device named ``*.md`` is skipped, never opened for a blocking read), at
most ``MAX_FILE_BYTES`` + 1 bytes of each, through directories opened one by one without
following a symlink. A symlink to a file inside the directory is read as that file; one that
leads outside it (say, to the owner's ``~/.netrc``) is skipped and reported, and drawers an
earlier run stored from it are deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pathspec

from palace_client.importers import sections
from palace_client.importers.runner import Problem, Unit
from palaced.wire import errors as E
from palaced.wire.safe_files import read_beneath, read_regular

DEFAULT_WING = "docs"
KINDS = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text"}
MAX_FILE_BYTES = 4 << 20  # larger files are no notes (and would not fit one request)
MAX_GITIGNORE_BYTES = 1 << 20
# Reasons a file is skipped for good (its drawers of an earlier run are deleted), rather than
# for now (an I/O error, a file too large or not UTF-8 yet: its drawers are kept).
_NOT_A_DOCUMENT = ("symlink", "not a regular file")
_Specs = list[tuple[Path, pathspec.GitIgnoreSpec]]


def _read_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    """The ``.gitignore`` of ``directory``; None when there is none or it is no regular file
    (read capped and without blocking: only its patterns are used, so a link is followed)."""
    try:
        raw, _ = read_regular(directory / ".gitignore", MAX_GITIGNORE_BYTES, follow=True)
    except E.SourceUnreadable:
        return None
    return pathspec.GitIgnoreSpec.from_lines(raw.decode("utf-8", "replace").splitlines())


def _ignored(path: Path, is_dir: bool, specs: _Specs) -> bool:
    """Whether the ``.gitignore`` files above ``path`` (root first) ignore it."""
    verdict = False
    for base, spec in specs:
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        include = spec.check_file(rel).include
        if include is not None:  # a later (deeper) file's match overrides an earlier one
            verdict = include
    return verdict


def documents(root: Path) -> Iterator[Path]:
    """The documents under ``root`` that no ``.gitignore`` ignores, in path order."""
    specs_of: dict[Path, _Specs] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        inherited = specs_of.get(here.parent, []) if here != root else []
        spec = _read_spec(here)
        specs = [*inherited, (here, spec)] if spec is not None else inherited
        specs_of[here] = specs
        dirnames[:] = sorted(d for d in dirnames
                             if d != ".git" and not _ignored(here / d, True, specs))
        for name in sorted(filenames):
            path = here / name
            if path.suffix.lower() in KINDS and not _ignored(path, False, specs):
                yield path


class MarkdownImport:
    """The documents of one directory tree."""

    name = "markdown"
    unit = "file"

    def __init__(self, directory: str, *, wing: str = DEFAULT_WING, room: str | None = None,
                 tags: Sequence[str] = ()) -> None:
        """Raises SourceUnreadable (as the other importers do for a missing source) when
        ``directory`` does not exist or is not a directory."""
        self.root = Path(directory).expanduser().resolve()
        if not self.root.is_dir():
            why = "not a directory" if self.root.exists() else "no such directory"
            raise E.SourceUnreadable(f"cannot read {directory}: {why}",
                                     details={"path": directory})
        self.source = str(self.root)
        self.prefix = str(self.root) + os.sep
        self._wing, self._room, self._tags = wing, room, list(tags)
        self._options = json.dumps({"v": 1, "wing": wing, "room": room, "tags": self._tags,
                                    "max": sections.MAX_CHARS}, sort_keys=True)
        self._files = list(documents(self.root))

    def total(self) -> int | None:
        return len(self._files)

    def parse(self) -> Iterator[Unit | Problem]:
        try:
            root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise E.ClientError(f"cannot read {self.root}: {exc.strerror or exc}",
                                details={"path": str(self.root)}) from exc
        try:
            for path in self._files:
                yield self._unit(root_fd, path)
        finally:
            os.close(root_fd)

    def _parts(self, path: Path) -> tuple[str, ...] | str:
        """The path under the root to read for ``path``: its own, or for a symlink its
        target's when that lies inside the root; else why it is skipped."""
        try:
            if not os.path.islink(path):
                return path.relative_to(self.root).parts
            target = Path(os.path.realpath(path))
        except OSError as exc:
            return f"cannot be read: {exc.strerror or exc}"
        if self.root not in target.parents:
            return f"a symlink leading outside {self.root} (to {target}): not followed"
        return target.relative_to(self.root).parts

    def _unit(self, root_fd: int, path: Path) -> Unit | Problem:
        rel = path.relative_to(self.root).as_posix()
        key = str(path)
        parts = self._parts(path)
        if isinstance(parts, str):
            return Problem(rel, None, parts, None if "symlink" in parts else key)
        try:
            raw, stat = read_beneath(root_fd, parts, MAX_FILE_BYTES)
            text = raw.decode("utf-8")
        except E.SourceUnreadable as exc:
            reason = str(exc.details["reason"])
            gone = any(word in reason for word in _NOT_A_DOCUMENT)
            return Problem(rel, None, reason if reason.startswith("larger") else
                           f"cannot be read: {reason}", None if gone else key)
        except UnicodeDecodeError as exc:
            return Problem(rel, None, f"not UTF-8 text (byte {exc.start})", key)
        room = self._room or rel.rsplit(".", 1)[0][:200]
        items: list[dict[str, Any]] = []
        for part in sections.split(text, KINDS[path.suffix.lower()]):
            item: dict[str, Any] = {
                "text": part.text, "wing": self._wing, "room": room,
                "source": (f"{rel}#{part.heading}" if part.heading else rel)[:200],
                "occurred_at": int(stat.st_mtime * 1000)}
            if self._tags:
                item["tags"] = self._tags
            items.append(item)
        digest = hashlib.sha256(raw + b"\x00" + self._options.encode()).hexdigest()
        size = sum(len(i["text"].encode()) + 300 for i in items)
        return Unit(rel, None, items, key=key, digest=digest, size=size)
