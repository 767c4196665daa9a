"""Captured exchanges as drawers: their text, labels, importance and tags.

One drawer per exchange (``palaced.text.exchanges``): the prompt and its answer, as

    User: <prompt>

    Assistant: <answer text>

    → Edit src/app.py
    → Bash: pytest -q

    <more answer text>

with tool calls one line each (repeats folded: ``→ Edit src/app.py (×3)``), secrets
redacted (``palaced.wire.redact``) and the rules of ``palaced.text.extract`` deciding tags and
importance. Filed under

* wing: the one asked for (``sessions`` by default), or with ``project_wing`` the session's
  project: the last component of its working directory, slugified;
* room: ``<date>-<first prompt, slugified, at most 6 words / 40 characters>-<first 8
  characters of the session id>``, e.g. ``2025-06-01-fix-the-flaky-login-test-3f2a9c1e``,
  fixed by the first capture of the session (kept in its capture state);
* source: ``<transcript path>:<first line>-<last line>`` (the path shortened from the left
  to fit 200 characters);
* occurred_at: the prompt's timestamp.

Pure and synchronous: the daemon runs it in a worker thread.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from palaced.store.rows.drawers import NewDrawer, normalise_text
from palaced.text.exchanges import Exchange, source_label
from palaced.text.topics import extract_topics

DEFAULT_WING = "sessions"
ROOM_WORDS = 6
ROOM_SLUG_CHARS = 40
CUT_MARK = "\n… (cut: longer than the palace's text limit)"
# Words every captured drawer has (its labels, tool names, redaction marks): no topic.
NO_TOPICS = frozenset({"user", "assistant", "redacted", "edit", "multiedit", "write", "bash",
                       "task", "agent", "webfetch", "websearch", "notebookedit"})


@dataclass(frozen=True)
class Captured:
    """One exchange as a drawer to store, with what the redaction and the rules found."""

    drawer: NewDrawer
    redactions: int
    start: int  # byte offset of the exchange in its transcript


def slug(text: str, words: int = ROOM_WORDS, chars: int = ROOM_SLUG_CHARS) -> str:
    """Lowercase kebab-case of the first ``words`` words of ``text``, at most ``chars``."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    parts = re.findall(r"[a-z0-9]+", ascii_text.lower())[:words]
    out = ""
    for part in parts:
        candidate = f"{out}-{part}" if out else part
        if len(candidate) > chars:
            break
        out = candidate
    return out or (parts[0][:chars] if parts else "")


def session_tag(session_id: str | None, path: str) -> str:
    """Eight characters naming a session: its id's first alphanumerics, else a hash of path."""
    alnum = re.sub(r"[^a-z0-9]", "", (session_id or "").lower())
    return alnum[:8] if len(alnum) >= 4 else hashlib.sha1(path.encode()).hexdigest()[:8]


def room_name(first: Exchange, session_id: str | None, path: str) -> str:
    """The room of a session, from its first exchange (see the module docstring)."""
    pieces = []
    if first.prompt.at_ms is not None:
        pieces.append(datetime.fromtimestamp(first.prompt.at_ms / 1000, UTC).strftime("%Y-%m-%d"))
    pieces.append(slug(first.prompt.text) or "session")
    pieces.append(session_tag(session_id or first.prompt.session_id, path))
    return "-".join(pieces)


def project_wing(exchanges: Iterable[Exchange], fallback: str) -> str:
    """The session's project as a wing: its working directory's last component, slugified."""
    for ex in exchanges:
        cwd = ex.prompt.cwd
        if cwd:
            name = slug(cwd.rstrip("/").rsplit("/", 1)[-1], words=12, chars=64)
            if name:
                return name
    return fallback


def answer_text(parts: Iterable[str]) -> str:
    """The answer's parts in order: texts apart, tool lines together, repeats folded."""
    lines: list[list[str]] = []  # groups: a text, or a run of tool lines
    for part in parts:
        tool = part.startswith("→ ")
        if tool and lines and lines[-1][0].startswith("→ "):
            lines[-1].append(part)
        else:
            lines.append([part])
    blocks = []
    for group in lines:
        if not group[0].startswith("→ "):
            blocks.append(group[0])
            continue
        folded: list[tuple[str, int]] = []
        for line in group:
            if folded and folded[-1][0] == line:
                folded[-1] = (line, folded[-1][1] + 1)
            else:
                folded.append((line, 1))
        blocks.append("\n".join(f"{line} (×{n})" if n > 1 else line for line, n in folded))
    return "\n\n".join(blocks)


def exchange_text(ex: Exchange, limit: int) -> str:
    """The drawer text of ``ex`` (before redaction), at most ``limit`` characters."""
    text = f"User: {ex.prompt.text}"
    if ex.parts:
        text += f"\n\nAssistant: {answer_text(ex.parts)}"
    text = normalise_text(text.replace("\x00", ""))
    if len(text) > limit:
        text = text[: max(limit - len(CUT_MARK), 0)] + CUT_MARK
    return text


def to_drawer(ex: Exchange, *, wing: str, room: str, path: str, limit: int) -> Captured:
    """Exchange ``ex`` as a drawer: redacted, tagged and weighed by the extraction rules."""
    # Imported on first capture: their ~25 patterns take ~30 ms to compile, a tenth of the
    # daemon's start (bench/scale.py "ready"), for a path many daemons never take.
    from palaced.text.extract import extract
    from palaced.wire.redact import redact

    text, count = redact(exchange_text(ex, limit))
    if len(text) > limit:  # a redaction mark longer than what it replaced
        text = text[: max(limit - len(CUT_MARK), 0)] + CUT_MARK
    found = extract(text)
    topics = tuple(dict.fromkeys(
        [*found.tags, *(t for t in extract_topics(text) if t not in NO_TOPICS)]))
    drawer = NewDrawer(
        text=text, wing=wing, room=room, tags=found.tags, importance=found.importance,
        source=source_label(path, ex.first_line, ex.last_line), occurred_ms=ex.prompt.at_ms,
        topics=topics)
    return Captured(drawer, count, ex.start)
