"""Editing keys of the config file as text, so its comments and layout survive.

``palace model use`` sets ``[embedder] model`` (and comments out a ``model_path`` that named
another model's files) this way. Lines are found with ``toml_lines.key_lines``; a key's value
is replaced in place (an inline comment after it is kept), a missing key goes under its
table's header, a missing table at the end. The result is parsed again and must be the
intended document exactly, or the edit is refused: a shape this does not handle (an inline
``embedder = {...}`` table, a multi-line value) is left for a person to edit.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from palaced.config.toml_lines import key_lines
from palaced.wire.errors import InvalidArgs
from palaced.wire.safe_files import private_file
from palaced.wire.toml_text import toml_string

# ``key = "value"  # comment``: the key part, a one-line string value, the rest.
_ASSIGN = re.compile(r"""^(\s*[^=#]+?\s*=\s*)("(?:[^"\\]|\\.)*"|'[^']*')(.*)$""")
_HEADER = re.compile(r"\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?$")
CLEARED = "  # commented out by `palace model use`"


def edit_keys(text: str, table: str, values: dict[str, str | None], where: str) -> str:
    """``text`` with ``[table] key = value`` for each item (None: the key's line commented
    out; nothing when it is absent).

    Raises:
        InvalidArgs: ``text`` is not valid TOML, or the edit cannot be made safely (the
            message says which key to edit by hand).
    """
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgs(f"bad config file {where}: {exc}") from None
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines()
    for key, value in values.items():
        found = key_lines("\n".join(lines)).get((table, key))
        if found is not None:
            i = found - 1
            if value is None:
                lines[i] = "# " + lines[i] + CLEARED
                continue
            m = _ASSIGN.match(lines[i])
            if m is None:
                raise _by_hand(where, table, key, value)
            lines[i] = m.group(1) + toml_string(value) + m.group(3)
        elif value is not None:
            header = next((n for n, line in enumerate(lines)
                           if (h := _HEADER.match(line)) and h.group(1) == table), None)
            if header is None:
                lines += ([""] if lines and lines[-1].strip() else []) + [f"[{table}]"]
                header = len(lines) - 1
            lines.insert(header + 1, f"{key} = {toml_string(value)}")
    out = newline.join(lines) + newline
    expected: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                                for k, v in before.items()}
    section = expected.setdefault(table, {})
    if not isinstance(section, dict):
        raise _by_hand(where, table, *next(iter(values.items())))
    for key, value in values.items():
        if value is None:
            section.pop(key, None)
        else:
            section[key] = value
    try:
        after = tomllib.loads(out)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:
        key, value = next(iter(values.items()))
        raise _by_hand(where, table, key, value)
    return out


def _by_hand(where: str, table: str, key: str, value: str | None) -> InvalidArgs:
    want = f"{key} = {toml_string(value)}" if value is not None else f"no {key}"
    return InvalidArgs(
        f"cannot edit {where} safely (its [{table}] is written in a shape this edit does not "
        f"handle): set `{want}` under [{table}] by hand, then run `palace model load`",
        details={"condition": "config-edit", "path": where, "table": table, "key": key})


def read_text(path: Path) -> str | None:
    """The config file's text, None when there is none. Raises OSError."""
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None


def write_text(path: Path, text: str) -> None:
    """Replace the config file with ``text`` atomically, as a private (0600) file
    (``safe_files.private_file``); a symlink's target is replaced, since dotfile managers link
    the file. Raises OSError."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with private_file(target) as out:
        out.write(text)
