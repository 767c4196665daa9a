"""``palace import markdown``: a directory of documents (``.md``, ``.markdown``, ``.txt``,
``.rst``), cut at headings and by size (``sections``).

Files and directories matched by a ``.gitignore`` inside the directory (at any depth, with
git's rules: deeper files and later lines win, ``!`` re-includes) are skipped, and so is
``.git``. Each file is one source of the import ledger, keyed by its absolute path, with the
hash of its bytes and of the import's options: a re-run sends only the files that changed
(their sections are replaced: new ones stored, vanished ones deleted, unchanged ones kept)
and deletes the drawers of files that are gone (or now ignored).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pathspec

from palaced import errors as E

from . import sections
from .runner import Problem, Unit

DEFAULT_WING = "docs"
KINDS = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text"}
MAX_FILE_BYTES = 4 << 20  # larger files are no notes (and would not fit one request)
_Specs = list[tuple[Path, pathspec.GitIgnoreSpec]]


def _read_spec(directory: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = (directory / ".gitignore").read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


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
        """Raises ClientError when ``directory`` is not a readable directory."""
        self.root = Path(directory).expanduser().resolve()
        if not self.root.is_dir():
            raise E.ClientError(f"{directory} is not a directory", details={"path": directory})
        self.source = str(self.root)
        self.prefix = str(self.root) + os.sep
        self._wing, self._room, self._tags = wing, room, list(tags)
        self._options = json.dumps({"v": 1, "wing": wing, "room": room, "tags": self._tags,
                                    "max": sections.MAX_CHARS}, sort_keys=True)
        self._files = list(documents(self.root))

    def total(self) -> int | None:
        return len(self._files)

    def parse(self) -> Iterator[Unit | Problem]:
        for path in self._files:
            yield self._unit(path)

    def _unit(self, path: Path) -> Unit | Problem:
        rel = path.relative_to(self.root).as_posix()
        key = str(path)
        try:
            stat = path.stat()
            if stat.st_size > MAX_FILE_BYTES:
                return Problem(rel, None, f"larger than {MAX_FILE_BYTES >> 20} MiB", key)
            raw = path.read_bytes()
            text = raw.decode("utf-8")
        except OSError as exc:
            return Problem(rel, None, f"cannot be read: {exc.strerror or exc}", key)
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
