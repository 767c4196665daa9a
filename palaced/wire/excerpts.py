"""Bounded excerpts of input for error texts: an error never grows with its input.

Leaf module (stdlib only), re-exported by ``palaced.wire.errors`` (which messages and details go
through): ``quote`` a value, ``clip`` a text, ``bounded`` a details map.
"""

from __future__ import annotations

import reprlib
from typing import Any

# Error texts echo input only as bounded excerpts: a 2.5 MB bad value must not come back as a
# 5 MB message (nor make the reply itself too large to send).
QUOTE_CHARS = 200
MAX_MESSAGE_CHARS = 1_000
MAX_DETAIL_CHARS = QUOTE_CHARS
MAX_DETAIL_ITEMS = 100
_MAX_DETAIL_DEPTH = 4

_repr = reprlib.Repr()
_repr.maxstring = QUOTE_CHARS
_repr.maxother = QUOTE_CHARS
_repr.maxlong = 60
_repr.maxlevel = 3


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """A repr-like excerpt of ``value`` of at most ``limit`` characters, for error texts.

    Short values come back as ``repr(value)``. A longer string or bytes value becomes the repr
    of its head, an ellipsis and its length, e.g. ``'xxxx…' (2500000 chars)``; any other value
    a bounded repr (huge numbers and containers are abbreviated). Never raises.
    """
    limit = max(limit, 24)
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            text = repr(value)
            if len(text) <= limit:
                return text
        unit = "chars" if isinstance(value, str) else "bytes"
        suffix = f"… ({len(value)} {unit})"
        room = limit - len(suffix)
        keep = room - 3  # the quotes (and the b of bytes)
        head = repr(value[:keep])
        while len(head) > room and keep > 0:
            # Escapes (NUL, line separators...) make a repr longer than its text: cut in proportion.
            keep = min(keep - 1, keep * (room - 3) // len(head))
            head = repr(value[:keep])
        return head + suffix
    if isinstance(value, int) and value.bit_length() > 256:
        return f"<int of {value.bit_length()} bits>"
    try:
        text = _repr.repr(value)
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in an ellipsis and the full length."""
    if len(text) <= limit:
        return text
    suffix = f"… ({len(text)} chars)"
    return text[: max(limit - len(suffix), 0)] + suffix


def bounded(value: Any, depth: int = 0) -> Any:
    """A copy of a details value with every string, bytes, list and map cut to a small size.

    Strings keep at most MAX_DETAIL_CHARS characters, containers MAX_DETAIL_ITEMS items;
    numbers, booleans and None pass through; anything else (or anything nested too deeply)
    becomes its ``quote``.
    """
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return clip(value, MAX_DETAIL_CHARS)
    if depth < _MAX_DETAIL_DEPTH:
        if isinstance(value, list | tuple):
            out = [bounded(v, depth + 1) for v in value[:MAX_DETAIL_ITEMS]]
            if len(value) > MAX_DETAIL_ITEMS:
                out.append(f"… ({len(value)} items)")
            return out
        if isinstance(value, dict):
            items = list(value.items())[:MAX_DETAIL_ITEMS]
            return {(clip(k, MAX_DETAIL_CHARS) if isinstance(k, str) else quote(k)):
                    bounded(v, depth + 1) for k, v in items}
    return quote(value, MAX_DETAIL_CHARS)
