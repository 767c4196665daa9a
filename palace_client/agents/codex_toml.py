"""Editing the ``[mcp_servers.<name>]`` table of a Codex CLI ``config.toml``, as text.

The text is edited line by line so comments and layout survive, then re-parsed: unless the
result equals the intended document exactly, the edit is refused with ``TomlEditError``.
Reading is ``tomllib``'s; the small writer here covers what a server entry holds (strings,
numbers, booleans, arrays, inline tables). ``agents`` turns the edit into a file plan.
"""

from __future__ import annotations

import copy
import re
import tomllib
from typing import Any

from palace_client.agents.entries import merge_entry
from palaced.wire.toml_text import toml_string as _toml_str

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ANY_HEADER = re.compile(r"^\s*\[")


class TomlEditError(ValueError):
    """The table cannot be edited safely; the message says why."""


def _header(name: str) -> re.Pattern[str]:
    """Matches the header of table ``mcp_servers.<name>`` or of one of its sub-tables."""
    key = re.escape(name)
    return re.compile(
        rf"""^\s*\[\s*mcp_servers\s*\.\s*(?:{key}|"{key}"|'{key}')\s*(?:\.[^\]]*)?\]\s*(?:\#.*)?$"""
    )


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_str(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TomlEditError(f"cannot write the TOML value {value!r}")


def server_table(name: str, entry: dict[str, Any], newline: str = "\n") -> str:
    """The ``[mcp_servers.<name>]`` table holding ``entry``, as TOML text.

    Raises:
        TomlEditError: a value has no TOML form.
    """
    lines = [f"[mcp_servers.{name}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()]
    return newline.join(lines) + newline


def _servers(data: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    """``data``'s ``[mcp_servers.<name>]`` table (None when absent), shapes checked.

    Raises:
        TomlEditError: ``mcp_servers`` is not a table (``[[mcp_servers]]``, a value) or
            ``mcp_servers.<name>`` / its ``env`` is not one.
    """
    servers = data.get("mcp_servers")
    if servers is None:
        return None
    if not isinstance(servers, dict):
        shape = "an array of tables ([[mcp_servers]])" if isinstance(servers, list) else \
            f"a {type(servers).__name__}"
        raise TomlEditError(f"{where}: 'mcp_servers' is {shape}, not a table; Codex expects "
                            "[mcp_servers.<name>] tables, so fix it by hand")
    current = servers.get(name)
    if current is not None and not isinstance(current, dict):
        raise TomlEditError(f"{where}: 'mcp_servers.{name}' is not a table; edit it by hand")
    if current is not None and not isinstance(current.get("env", {}), dict):
        raise TomlEditError(f"{where}: 'mcp_servers.{name}.env' is not a table; edit it by "
                            "hand")
    return current


def has_server(text: str, name: str, *, where: str) -> bool:
    """True if ``text`` holds ``[mcp_servers.<name>]``.

    Raises:
        TomlEditError: ``text`` is not valid TOML or has an unexpected shape.
    """
    return _servers(_load(text, where), name, where) is not None


def _load(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"{where} is not valid TOML ({exc})") from None


def set_server_table(text: str, name: str, entry: dict[str, Any] | None, *, where: str
                     ) -> str | None:
    """Return ``text`` with ``[mcp_servers.<name>]`` updated with ``entry`` (None: removed).

    The entry is merged as ``entries.merge_entry`` does (the user's extra keys are kept).
    Returns ``text`` itself when nothing would change (a real change never yields equal
    text), and None when the result is blank. New lines use the file's line ends.

    Raises:
        TomlEditError: ``text`` is not valid TOML, has an unexpected shape (``[[mcp_servers]]``,
            a value where a table belongs), a value has no TOML form, or the table is not a
            plain one (an inline table, dotted keys); the message names ``where``.
    """
    data = _load(text, where)
    current = _servers(data, name, where)
    if entry is None and current is None:
        return text
    merged: dict[str, Any] | None = None
    if entry is not None:
        merged = merge_entry(current, entry)
        if merged == current:
            return text
    newline = "\r\n" if "\r\n" in text else "\n"
    kept, position = _remove_tables(text, name)
    if merged is not None:
        try:
            block = server_table(name, merged, newline)
        except TomlEditError as exc:
            raise TomlEditError(f"{where}: {exc}") from None
        if position is None or position >= len(kept):
            if kept and not kept[-1].endswith("\n"):
                kept[-1] += newline
            if kept and kept[-1].strip():
                kept.append(newline)
            kept.append(block)
        else:
            kept.insert(position, block + newline)
    new = "".join(kept)
    new_text = new if new.strip() else None
    expected = copy.deepcopy(data)
    exp_servers = expected.setdefault("mcp_servers", {})
    if merged is None:
        exp_servers.pop(name, None)
    else:
        exp_servers[name] = merged
    try:
        actual = tomllib.loads(new_text or "")
    except tomllib.TOMLDecodeError:
        actual = None
    if actual is None or _drop_empty_servers(actual) != _drop_empty_servers(expected):
        hint = "" if merged is None else ":\n" + server_table(name, merged)
        raise TomlEditError(f"{where}: cannot edit [mcp_servers.{name}] safely (it is not a "
                            f"plain table); edit it by hand{hint}")
    return new_text


def _drop_empty_servers(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("mcp_servers") == {}:
        data = {k: v for k, v in data.items() if k != "mcp_servers"}
    return data


def _remove_tables(text: str, name: str) -> tuple[list[str], int | None]:
    """Split ``text`` into lines without table(s) ``name`` and the index where the first was.

    Comments and blank lines right above the following table header stay with that header.
    """
    ours = _header(name)
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    position: int | None = None
    block: list[str] | None = None
    for line in lines:
        if ours.match(line):
            if block is not None:
                out.extend(_block_tail(block))
            block = []
            if position is None:
                position = len(out)
            continue
        if block is not None:
            if _ANY_HEADER.match(line):
                out.extend(_block_tail(block))
                block = None
            else:
                block.append(line)
                continue
        out.append(line)
    if block is not None:
        out.extend(_block_tail(block))
    if position is not None and position == len(out):
        # Our table ended the file: drop the blank separator line(s) added with it.
        while out and not out[-1].strip():
            out.pop()
        position = len(out)
    return out, position


def _block_tail(block: list[str]) -> list[str]:
    """The trailing comment lines of a removed table (they describe the next table)."""
    tail: list[str] = []
    for line in reversed(block):
        stripped = line.strip()
        if stripped.startswith("#"):
            tail.insert(0, line)
        elif stripped or tail:
            break
    return tail
