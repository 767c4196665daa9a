"""Which line of a TOML text defines a table or key: tomllib reports none for values.

Leaf module (stdlib). A light scan, not a parser: it follows ``[table]`` headers, ``key =``
and dotted ``a.b =`` lines and skips the inside of multi-line strings. It only has to point a
person at the right line of a file ``tomllib`` has already accepted; where it cannot tell (a
key inside an inline table), the line of the nearest enclosing key or table stands in.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
                  r"(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")
_PART = re.compile(r"[A-Za-z0-9_-]+|\"([^\"]*)\"|'([^']*)'")


def _dotted(text: str) -> tuple[str, ...]:
    """``a."b.c".d`` as ``("a", "b.c", "d")``."""
    parts = []
    for m in _PART.finditer(text):
        quoted = m.group(1) if m.group(1) is not None else m.group(2)
        parts.append(quoted if quoted is not None else m.group(0))
    return tuple(parts)


def _opens_multiline(line: str, delim: str | None) -> str | None:
    """The multi-line string delimiter still open after ``line`` (``delim`` was open before
    it), or None."""
    rest = line
    while True:
        if delim is not None:
            end = rest.find(delim)
            if end < 0:
                return delim
            rest, delim = rest[end + 3:], None
            continue
        starts = [(rest.find(d), d) for d in ('"""', "'''") if rest.find(d) >= 0]
        if not starts:
            return None
        pos, delim = min(starts)
        rest = rest[pos + 3:]


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of each table and key path in ``text`` (its first mention).

    ``[limits]`` gives ``("limits",)``; ``max_frame = 1`` under it ``("limits", "max_frame")``.
    """
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    delim: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if delim is not None:
            delim = _opens_multiline(line, delim)
            continue
        header = _HEADER.match(line)
        if header:
            table = _dotted(header.group(1))
            lines.setdefault(table, number)
        else:
            key = _KEY.match(line)
            if key:
                path = table + _dotted(key.group(1))
                for depth in range(len(table) + 1, len(path) + 1):
                    lines.setdefault(path[:depth], number)
                line = line[key.end():]
        delim = _opens_multiline(line, None)
    return lines


def line_of(lines: dict[tuple[str, ...], int], *path: str) -> int | None:
    """The line of ``path``, else of its nearest enclosing table or key, else None."""
    for depth in range(len(path), 0, -1):
        found = lines.get(path[:depth])
        if found is not None:
            return found
    return None
