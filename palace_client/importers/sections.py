"""Cut a text document into drawer-sized sections: at its headings, then by size.

Markdown headings are ATX (``# Title``) and setext (a line underlined with ``===`` or
``---``), never inside fenced code blocks; reStructuredText headings are a line underlined
(and maybe overlined) with one repeated punctuation character at least as long as the title;
plain text has none. A section longer than ``MAX_CHARS`` is cut between paragraphs (then
between lines, then anywhere), each later piece starting with its heading's title so that it
still says what it is about. Sections without text under their heading are left out.

This is drawer granularity, the client's business: the daemon still cuts every drawer into
the embedding windows of ``palaced.text.chunking``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHARS = 2_000  # a drawer of a document: a screenful, shown whole by recall up to 600
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RST_RULE = re.compile(r"""^([=\-`:'"~^_*+#<>])\1+[ \t]*$""")


@dataclass(frozen=True)
class Section:
    """A piece of a document: its heading's title (None before the first heading), its
    text, and the line it starts on."""

    heading: str | None
    text: str
    line: int


def _markdown_heads(lines: list[str]) -> dict[int, tuple[int, str]]:
    """``{first line index: (lines it spans, title)}`` of the markdown headings."""
    heads: dict[int, tuple[int, str]] = {}
    fence: str | None = None
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        atx = _ATX.match(line)
        if atx:
            heads[i] = (1, atx.group(2).strip() or atx.group(1))
        elif (_SETEXT.match(line) and i > 0 and lines[i - 1].strip() and i - 1 not in heads
              and not _ATX.match(lines[i - 1]) and (i - 2 < 0 or i - 2 not in heads)):
            heads[i - 1] = (2, lines[i - 1].strip())
    return heads


def _rst_heads(lines: list[str]) -> dict[int, tuple[int, str]]:
    heads: dict[int, tuple[int, str]] = {}
    i = 0
    while i < len(lines) - 1:
        title, under = lines[i].strip(), lines[i + 1]
        if (title and not _RST_RULE.match(lines[i]) and _RST_RULE.match(under)
                and len(under.rstrip()) >= len(title)):
            over = i > 0 and _RST_RULE.match(lines[i - 1]) is not None
            start = i - 1 if over and i - 1 not in heads else i
            heads[start] = (i + 2 - start, title)
            i += 2
            continue
        i += 1
    return heads


def split(text: str, kind: str) -> list[Section]:
    """The sections of a document of ``kind`` (``markdown``, ``rst`` or ``text``), each at
    most ``MAX_CHARS`` long."""
    lines = text.splitlines()
    heads = (_markdown_heads(lines) if kind == "markdown"
             else _rst_heads(lines) if kind == "rst" else {})
    sections: list[Section] = []
    heading: str | None = None
    start, body_from, i = 0, 0, 0
    while i <= len(lines):
        if i == len(lines) or i in heads:
            body = "\n".join(lines[body_from:i]).strip()
            if body:
                whole = "\n".join(lines[start:i]).strip()
                sections += _by_size(heading, whole, start + 1)
            if i == len(lines):
                break
            span, heading = heads[i]
            start, body_from = i, i + span
            i += span
            continue
        i += 1
    return sections


def _by_size(heading: str | None, text: str, line: int) -> list[Section]:
    if len(text) <= MAX_CHARS:
        return [Section(heading, text, line)]
    prefix = f"{heading}\n\n" if heading else ""
    pieces: list[str] = []
    current = ""
    for block in _blocks(text, MAX_CHARS - len(prefix)):
        joined = f"{current}\n\n{block}" if current else block
        if len(joined) + (len(prefix) if pieces else 0) <= MAX_CHARS:
            current = joined
            continue
        pieces.append(current)
        current = block
    pieces.append(current)
    return [Section(heading, piece if n == 0 else prefix + piece, line)
            for n, piece in enumerate(p for p in pieces if p)]


def _blocks(text: str, limit: int) -> list[str]:
    """Paragraphs of ``text``, those over ``limit`` cut between lines, then anywhere."""
    out: list[str] = []
    for para in re.split(r"\n[ \t]*\n", text):
        para = para.strip("\n")
        if not para.strip():
            continue
        if len(para) <= limit:
            out.append(para)
            continue
        current = ""
        for line in para.split("\n"):
            while len(line) > limit:
                if current:
                    out.append(current)
                    current = ""
                out.append(line[:limit])
                line = line[limit:]
            joined = f"{current}\n{line}" if current else line
            if len(joined) > limit:
                out.append(current)
                joined = line
            current = joined
        if current:
            out.append(current)
    return out
