"""Reading a JSON (or JSONC) config file and editing it in place, as text.

``parse`` builds a tree that remembers where every value, key and comma is; ``rewrite`` turns
the document into a target value by a series of small text edits (delete a member, append a
member, replace a value), re-parsing after each one. Every byte outside the edited spans is
kept: comments, trailing commas, CRLF line ends, indentation, key order, a BOM. New text
follows the file's own newline and indentation. JSONC (``//`` and ``/* */`` comments,
trailing commas) is accepted only as far as the client's ``Dialect`` reads it; otherwise it is
a ``JsonEditError`` naming the line and column, like any other syntax error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_LITERALS = {"true": True, "false": False, "null": None}
_MAX_EDITS = 500


@dataclass(frozen=True)
class Dialect:
    """What a client's JSON reader accepts beyond strict JSON."""

    name: str
    comments: bool = False
    trailing_commas: bool = False


STRICT = Dialect("strict JSON")
COMMENTS = Dialect("JSON with comments but no trailing commas", comments=True)
JSONC = Dialect("JSONC", comments=True, trailing_commas=True)


class JsonEditError(ValueError):
    """The text is not valid JSON (JSONC) or cannot be edited safely; says where and why."""


@dataclass
class Node:
    """A parsed value: its span ``[start, end)``, Python value and, for containers, items."""

    kind: str  # "object", "array" or "scalar"
    start: int
    end: int = 0
    value: Any = None
    items: list[Item] = field(default_factory=list)
    parent: Node | None = None


@dataclass
class Item:
    """An object member (``key`` set, ``start`` at the key) or an array element."""

    key: str | None
    start: int
    node: Node
    comma: int | None = None  # offset of the comma that follows the item, if any


def position(text: str, offset: int) -> str:
    """``line L, column C`` (1-based) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


class _Parser:
    def __init__(self, text: str, dialect: Dialect) -> None:
        self.text = text
        self.dialect = dialect
        self.pos = 1 if text.startswith("\ufeff") else 0

    def fail(self, message: str, at: int | None = None) -> JsonEditError:
        at = self.pos if at is None else at
        if at >= len(self.text):
            message = "unexpected end of file (is it truncated?)"
        return JsonEditError(f"{position(self.text, at)}: {message}")

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in " \t\r\n":
                self.pos += 1
            elif text.startswith("//", self.pos) or text.startswith("/*", self.pos):
                if not self.dialect.comments:
                    raise self.fail(f"a comment, which {self.dialect.name} does not allow")
                if text[self.pos + 1] == "/":
                    end = text.find("\n", self.pos)
                    self.pos = len(text) if end < 0 else end
                else:
                    end = text.find("*/", self.pos + 2)
                    if end < 0:
                        raise self.fail("unterminated /* comment")
                    self.pos = end + 2
            else:
                return

    def value(self, parent: Node | None) -> Node:
        self.skip()
        text, start = self.text, self.pos
        if start >= len(text):
            raise self.fail("")
        ch = text[start]
        if ch == "{":
            return self.container(Node("object", start, value={}, parent=parent), "}")
        if ch == "[":
            return self.container(Node("array", start, value=[], parent=parent), "]")
        if ch == '"':
            string = self.string()
            return Node("scalar", start, self.pos, string, parent=parent)
        match = _NUMBER.match(text, start)
        if match:
            self.pos = match.end()
            return Node("scalar", start, self.pos, json.loads(match.group()), parent=parent)
        for word, literal in _LITERALS.items():
            if text.startswith(word, start):
                self.pos = start + len(word)
                return Node("scalar", start, self.pos, literal, parent=parent)
        raise self.fail(f"unexpected {ch!r}")

    def string(self) -> str:
        match = _STRING.match(self.text, self.pos)
        if match is None:
            raise self.fail("an unterminated string or a bad escape or control character in it")
        self.pos = match.end()
        return str(json.loads(match.group()))

    def container(self, node: Node, close: str) -> Node:
        self.pos += 1
        is_object = close == "}"
        while True:
            self.skip()
            if self.pos >= len(self.text):
                raise self.fail("")
            if self.text[self.pos] == close:
                if node.items and node.items[-1].comma is not None and \
                        not self.dialect.trailing_commas:
                    raise self.fail(f"a trailing comma, which {self.dialect.name} does not allow",
                                    node.items[-1].comma)
                self.pos += 1
                node.end = self.pos
                return node
            if node.items and node.items[-1].comma is None:
                raise self.fail(f"expected ',' or {close!r}")
            start = self.pos
            key = None
            if is_object:
                if self.text[self.pos] != '"':
                    raise self.fail("expected a quoted key")
                key = self.string()
                if key in node.value:
                    raise self.fail(f"duplicate key {key!r}", start)
                self.skip()
                if self.text.startswith(":", self.pos):
                    self.pos += 1
                else:
                    raise self.fail("expected ':'")
            child = self.value(node)
            item = Item(key, start, child)
            node.items.append(item)
            if key is None:
                node.value.append(child.value)
            else:
                node.value[key] = child.value
            self.skip()
            if self.text.startswith(",", self.pos):
                item.comma = self.pos
                self.pos += 1


def parse(text: str, dialect: Dialect = STRICT) -> Node:
    """Parse ``text`` (as ``dialect`` allows) into a ``Node`` tree.

    Raises:
        JsonEditError: a syntax error, comment or trailing comma (strict JSON), or duplicate
            key, with its line and column.
    """
    parser = _Parser(text, dialect)
    root = parser.value(None)
    parser.skip()
    if parser.pos < len(text):
        raise parser.fail("unexpected text after the JSON value")
    return root


# -- layout -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    newline: str
    unit: str  # one level of indentation


def _layout(text: str, root: Node) -> _Layout:
    newline = "\r\n" if "\r\n" in text else "\n"
    unit = "  "
    for item in root.items:
        lead = _lead(text, item.start)
        if lead:
            unit = lead
            break
    return _Layout(newline, unit)


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def _lead(text: str, offset: int) -> str | None:
    """The whitespace before ``offset`` on its line, or None when other text precedes it."""
    before = text[_line_start(text, offset):offset]
    return before if not before.strip(" \t") else None


def _indent(text: str, offset: int) -> str:
    line = text[_line_start(text, offset):offset]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _multiline(text: str, node: Node) -> bool:
    if node.items:
        return "\n" in text[node.start:node.end]
    return node.parent is None or "\n" in text[node.parent.start:node.parent.end]


def _dump(value: Any, base: str, layout: _Layout, multiline: bool) -> str:
    if not multiline:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    out = json.dumps(value, ensure_ascii=False, indent=layout.unit)
    return out.replace("\n", layout.newline + base)


def _item_text(key: str | None, value: Any, base: str, layout: _Layout, multiline: bool
               ) -> str:
    prefix = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
    return prefix + _dump(value, base, layout, multiline)


# -- edits --------------------------------------------------------------------------------------
Edit = tuple[int, int, str]


def _end_of_line(text: str, offset: int) -> int | None:
    """Where the line of ``offset`` ends (its ``\r\n`` or ``\n``, or the end of the text) if
    only blanks and comments follow ``offset`` on it; else None."""
    pos = offset
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if text.startswith("/*", pos):
            close = text.find("*/", pos + 2)
            if close < 0 or "\n" in text[pos:close]:
                return None
            pos = close + 2
            continue
        if text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
            if text[pos - 1:pos] == "\r":
                pos -= 1
        break
    if pos >= len(text) or text.startswith("\n", pos) or text.startswith("\r\n", pos):
        return pos
    return None


def _past_line(text: str, eol: int) -> int:
    """Just past the line terminator at ``eol``."""
    if text.startswith("\r\n", eol):
        return eol + 2
    return eol + 1 if eol < len(text) else eol


def _insert(text: str, node: Node, key: str | None, value: Any, layout: _Layout
            ) -> list[Edit]:
    """Append ``key: value`` (an element when ``key`` is None) to the container ``node``, in
    its layout: on a line of its own after the last item, or inline."""
    multiline = _multiline(text, node)
    if not node.items:
        inner = text[node.start + 1:node.end - 1]
        close = _indent(text, node.start)
        if not multiline:
            return [(node.start + 1, node.start + 1, _item_text(key, value, close, layout, False))]
        base = close + layout.unit
        body = layout.newline + base + _item_text(key, value, base, layout, True)
        if not inner.strip():
            return [(node.start + 1, node.end - 1, body + layout.newline + close)]
        return [(node.start + 1, node.start + 1, body)]  # before the comments inside
    last = node.items[-1]
    after = last.node.end if last.comma is None else last.comma + 1
    if not multiline:
        entry = _item_text(key, value, "", layout, False)
        if last.comma is None:
            return [(after, after, ", " + entry)]
        return [(after, after, " " + entry + ",")]
    lead = _lead(text, last.start)
    base = lead if lead is not None else _indent(text, node.start) + layout.unit
    entry = layout.newline + base + _item_text(key, value, base, layout, True)
    eol = _end_of_line(text, after)
    at = after if eol is None else eol
    if last.comma is not None:
        return [(at, at, entry + ",")]
    if at == last.node.end:
        return [(at, at, "," + entry)]
    return [(last.node.end, last.node.end, ","), (at, at, entry)]


def _delete(text: str, node: Node, index: int) -> list[Edit]:
    """Remove item ``index`` of ``node`` with its comma (or the one before it, if it was last)
    and, when it had lines of its own, those lines; an emptied container becomes ``{}``/``[]``."""
    item = node.items[index]
    end = item.node.end if item.comma is None else item.comma + 1
    rest = text[node.start + 1:item.start] + text[end:node.end - 1]
    if len(node.items) == 1 and not rest.strip():
        return [(node.start, node.end, "{}" if node.kind == "object" else "[]")]
    prev = node.items[index - 1].comma if index > 0 else None
    edits: list[Edit] = []
    if item.comma is None and prev is not None:
        edits.append((prev, prev + 1, ""))  # the item was last: so is the one before now
    line = _line_start(text, item.start)
    eol = _end_of_line(text, end)
    before = node.items[index - 1].node.end if index > 0 else node.start + 1
    if _lead(text, item.start) is not None and eol is not None:
        edits.append((line, _past_line(text, eol), ""))  # the item's own line(s)
    elif _lead(text, item.start) is not None and line > before and \
            "//" not in text[before:line]:
        # The item starts a line but text follows it there: drop the line break before it.
        edits.append((line - (2 if text[line - 2:line] == "\r\n" else 1), end, ""))
    elif item.comma is None and prev is not None:
        return [(prev, end, "")]
    elif index == len(node.items) - 1 and prev is not None:
        edits.append((prev + 1, end, ""))  # "a, item," -> "a,"
    else:
        while item.comma is not None and end < len(text) and text[end] in " \t":
            end += 1
        edits.append((item.start, end, ""))
    return edits


def _next_edit(text: str, node: Node, new: Any, layout: _Layout) -> list[Edit]:
    """The first small edit that brings ``node`` closer to ``new``: delete a member it lacks,
    recurse into a member or element that differs, append one it adds, else replace the value."""
    old = node.value
    if node.kind == "object" and isinstance(new, dict):
        for index, item in enumerate(node.items):
            if item.key not in new:
                return _delete(text, node, index)
        for item in node.items:
            if item.node.value != new[item.key]:
                return _next_edit(text, item.node, new[item.key], layout)
        for key, value in new.items():
            if key not in old:
                return _insert(text, node, key, value, layout)
    elif node.kind == "array" and isinstance(new, list):
        i = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
                 min(len(old), len(new)))
        if i == len(old):
            return _insert(text, node, None, new[i], layout)
        if i == len(new) or len(old) > len(new):
            return _delete(text, node, i)
        return _next_edit(text, node.items[i].node, new[i], layout)
    multiline = "\n" in text[node.start:node.end] or (
        node.parent is not None and _multiline(text, node.parent))
    base = _indent(text, node.start)
    return [(node.start, node.end, _dump(new, base, layout, multiline))]


def _apply(text: str, edits: list[Edit]) -> str:
    """``edits`` (disjoint spans) applied from the last one back."""
    for start, end, new in sorted(edits, key=lambda edit: edit[0], reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite(text: str, target: dict[str, Any], dialect: Dialect = STRICT) -> str:
    """``text`` edited so that it parses to ``target``, keeping every untouched byte.

    Raises:
        JsonEditError: ``text`` does not parse (see ``parse``), or the edits did not reach
            ``target`` (the file's layout defeated the editor; nothing should be written).
    """
    for _ in range(_MAX_EDITS):
        root = parse(text, dialect)
        if root.value == target:
            return text
        text = _apply(text, _next_edit(text, root, target, _layout(text, root)))
    raise JsonEditError("the edit did not converge; edit the file by hand")


def dumps(value: dict[str, Any]) -> str:
    """A new file's text: two-space indentation, LF, a final newline."""
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"
