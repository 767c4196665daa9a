"""Reading what ``palace`` commands take on stdin: text, and JSONL drawers checked line by
line, so that a bad line is reported by its number before anything is stored."""

from __future__ import annotations

import json
import sys
from typing import Any

from palaced.wire import errors as E
from palaced.wire.args import decode_args
from palaced.wire.errors import quote
from palaced.wire.protocol import loads_json
from palaced.wire.specs import REMEMBER_MANY_ITEM


def read_stdin() -> str:
    """All of stdin as text.

    Raises:
        InvalidArgs: it is not UTF-8.
    """
    # Bytes, decoded strictly: a text stream under a C locale would let invalid bytes
    # through as surrogates, which fail later and less clearly.
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise E.InvalidArgs(f"stdin is not UTF-8 text: {exc}") from None


def parse_jsonl(text: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The drawers of a ``remember-many`` JSONL text, each checked like ``memory.remember``'s
    arguments, and the line each came from (blank lines are skipped).

    Raises:
        InvalidArgs: a line is not JSON, not an object, or not valid drawer arguments (a
            missing or non-string ``text``, an unknown key, a value of the wrong type); the
            message starts with ``line N:`` and ``details["line"]`` is N.
    """
    items: list[dict[str, Any]] = []
    lines: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            raise E.InvalidArgs(f"line {lineno}: not JSON: {exc}",
                                details={"line": lineno}) from None
        if not isinstance(obj, dict):
            raise E.InvalidArgs(f"line {lineno}: expected a JSON object, got {quote(obj, 60)}",
                                details={"line": lineno})
        try:
            decode_args(REMEMBER_MANY_ITEM, obj)
        except E.InvalidArgs as exc:
            raise E.InvalidArgs(f"line {lineno}: {_item_message(exc.message)}",
                                details={**exc.details, "line": lineno}) from None
        items.append(obj)
        lines.append(lineno)
    return items, lines


def _item_message(message: str) -> str:
    """``"memory.remember_many item: missing required argument 'text'"`` without the op."""
    return message.removeprefix(f"{REMEMBER_MANY_ITEM.name}: ")
