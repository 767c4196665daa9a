"""``palace import chatgpt``: the conversations of a ChatGPT data export (``conversations.json``,
or the export's zip holding it).

The file is a JSON list of conversations, each with ``id`` (or ``conversation_id``),
``title``, ``create_time`` (Unix seconds), ``current_node`` and a ``mapping`` of node id ->
``{message, parent, children}``. Edits and regenerations branch the tree; the conversation as
the user last saw it is the path from ``current_node`` up to the root, read root first (when
``current_node`` is missing: from the root down, always taking the last child).

Along that path, user and assistant messages with text are kept: system and tool messages,
assistant messages addressed to a tool (``recipient`` other than ``all``), messages hidden
from the conversation, and content other than ``text``/``multimodal_text`` (code, execution
output, browsing results, reasoning) are left out; in a multimodal message, text parts are
kept and an image becomes ``[image]``. Each user message and the assistant answers that
follow it make one exchange, one drawer (``User: ...`` then ``Assistant: ...``), dated by the
user message's ``create_time``. A conversation is one source of the import ledger (key: its
id), filed in a room named after its title.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from palace_client.api.slug import slugify
from palace_client.importers.runner import Problem, Unit
from palaced.wire import errors as E
from palaced.wire.protocol import loads_json
from palaced.wire.safe_files import open_regular, read_capped

DEFAULT_WING = "chatgpt"
_TEXT_TYPES = ("text", "multimodal_text")
# conversations.json is parsed whole; its Python objects take several times its size.
MAX_JSON_BYTES = 1 << 30


def _too_large(path: str) -> E.InvalidContent:
    return E.InvalidContent(
        f"{path}: conversations.json is larger than {MAX_JSON_BYTES >> 20} MiB, more than "
        "palace reads at once", details={"path": path, "limit": MAX_JSON_BYTES})


def _read(path: str) -> bytes:
    """The bytes of ``conversations.json``: the file itself, or the export's zip holding it;
    at most ``MAX_JSON_BYTES`` of it, counted as they are read (a zip member is decompressed
    as a stream, whatever size its header claims).

    Raises:
        SourceUnreadable: ``path`` is not a regular file (a FIFO is never waited on);
        InvalidContent: too large, a zip without conversations.json, or a damaged zip;
        OSError: reading failed.
    """
    with os.fdopen(open_regular(path, follow=True), "rb") as f:
        if not zipfile.is_zipfile(f):
            f.seek(0)
            data = read_capped(f.read, MAX_JSON_BYTES)
        else:
            try:
                with zipfile.ZipFile(f) as archive:
                    names = [n for n in archive.namelist()
                             if n.rsplit("/", 1)[-1] == "conversations.json"]
                    if not names:
                        raise E.InvalidContent(f"{path} is a zip without conversations.json: "
                                               "not a ChatGPT data export")
                    info = archive.getinfo(min(names, key=len))
                    if info.file_size > MAX_JSON_BYTES:
                        raise _too_large(path)
                    with archive.open(info) as member:
                        data = read_capped(member.read, MAX_JSON_BYTES)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError,
                    RuntimeError) as exc:  # damaged, encrypted, an unknown compression
                raise E.InvalidContent(f"{path}: the zip cannot be read ({exc})",
                                       details={"path": path}) from exc
    if len(data) > MAX_JSON_BYTES:
        raise _too_large(path)
    return data


def _load(path: str) -> list[Any]:
    """The conversations of ``path`` (a ``conversations.json``, or the export's zip).

    Raises:
        ClientError: the file cannot be read; InvalidContent: it is not a JSON list.
    """
    try:
        data = loads_json(_read(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise E.ClientError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                            details={"path": path}) from exc
    except ValueError as exc:
        raise E.InvalidContent(f"{path} is not JSON ({exc}): not a ChatGPT "
                               "conversations.json") from exc
    except RecursionError as exc:  # Python's parser recurses once per nesting level
        raise E.InvalidContent(f"{path} nests JSON arrays or objects deeper than palace "
                               "reads: not a ChatGPT conversations.json",
                               details={"path": path}) from exc
    if not isinstance(data, list):
        raise E.InvalidContent(f"{path} holds a JSON {type(data).__name__}, not the list of "
                               "conversations of a ChatGPT conversations.json")
    return data


def branch(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes of the conversation's current branch, root first."""
    if not isinstance(current, str) or current not in mapping:
        current = _last_leaf(mapping)
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    node_id = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            break
        chain.append(node)
        node_id = node.get("parent")
    chain.reverse()
    return chain


def _last_leaf(mapping: dict[str, Any]) -> str | None:
    roots = [k for k, n in mapping.items()
             if isinstance(n, dict) and n.get("parent") not in mapping]
    node_id = roots[0] if roots else None
    seen: set[str] = set()
    while node_id is not None and node_id not in seen:
        seen.add(node_id)
        children = [c for c in (mapping[node_id].get("children") or []) if c in mapping]
        if not children:
            return node_id
        node_id = children[-1]
    return node_id


def message_text(message: dict[str, Any]) -> str:
    """The visible text of one message ("" when it has none)."""
    content = message.get("content")
    if not isinstance(content, dict) or content.get("content_type") not in _TEXT_TYPES:
        return ""
    pieces: list[str] = []
    for part in content.get("parts") or []:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):  # e.g. an audio transcription
                pieces.append(part["text"])
            elif part.get("content_type") == "image_asset_pointer":
                pieces.append("[image]")
    return "\n".join(p for p in (s.strip() for s in pieces) if p)


def _visible(message: Any) -> tuple[str, str, float | None] | None:
    """``(role, text, create_time)`` of a user or assistant message shown in the chat."""
    if not isinstance(message, dict):
        return None
    author = message.get("author") or {}
    role = author.get("role") if isinstance(author, dict) else None
    meta = message.get("metadata") or {}
    if role not in ("user", "assistant") or (isinstance(meta, dict) and meta.get(
            "is_visually_hidden_from_conversation")):
        return None
    if role == "assistant" and message.get("recipient") not in (None, "all"):
        return None  # a call to a tool (browser, python...), not an answer
    text = message_text(message)
    when = message.get("create_time")
    return (role, text, float(when) if isinstance(when, int | float) else None) if text else None


def exchanges(nodes: Sequence[dict[str, Any]]) -> list[tuple[str, float | None]]:
    """``(drawer text, create_time)`` of each exchange: a user message and the answers that
    follow it (an answer before any question, or a question left unanswered, stands alone)."""
    out: list[tuple[str, float | None]] = []
    user: str | None = None
    answers: list[str] = []
    when: float | None = None

    def flush() -> None:
        parts = ([f"User: {user}"] if user is not None else []) + (
            [f"Assistant: {chr(10).join(answers)}"] if answers else [])
        if parts:
            out.append(("\n\n".join(parts), when))

    for node in nodes:
        seen = _visible(node.get("message"))
        if seen is None:
            continue
        role, text, created = seen
        if role == "user":
            flush()
            user, answers, when = text, [], created
        else:
            if user is None and not answers:
                when = created
            answers.append(text)
    flush()
    return out


class ChatGptImport:
    """The conversations of one ``conversations.json``."""

    name = "chatgpt"
    unit = "conversation"

    def __init__(self, path: str, *, wing: str = DEFAULT_WING, tags: Sequence[str] = ()
                 ) -> None:
        """Raises ClientError or InvalidContent when the file is no conversations.json."""
        self.source = path
        self._file = Path(path).name
        self._wing, self._tags = wing, list(tags)
        self._conversations = _load(path)

    def total(self) -> int | None:
        return len(self._conversations)

    def parse(self) -> Iterator[Unit | Problem]:
        for i, conv in enumerate(self._conversations):
            try:
                got = self._unit(i, conv)
            except (ValueError, TypeError, OverflowError, RecursionError) as exc:
                # One conversation the checks did not foresee (a time of 1e999...) is
                # skipped alone; the others are still imported.
                cid = (conv.get("conversation_id") or conv.get("id")) if isinstance(
                    conv, dict) else None
                got = Problem(self._file, None, f"conversation {i} cannot be read: "
                              f"{type(exc).__name__}: {exc}",
                              cid if isinstance(cid, str) else None)
            yield got

    def _unit(self, i: int, conv: Any) -> Unit | Problem:
        where = self._file
        if not isinstance(conv, dict):
            return Problem(where, None, f"conversation {i} is not a JSON object")
        cid = conv.get("conversation_id") or conv.get("id")
        if not isinstance(cid, str) or not cid.strip():
            return Problem(where, None, f"conversation {i} has no id")
        mapping = conv.get("mapping")
        if not isinstance(mapping, dict):
            return Problem(where, None, f"conversation {i} ({cid}) has no message mapping",
                           cid)
        title = conv.get("title")
        title = title if isinstance(title, str) else ""
        room = slugify(title) or f"conversation-{slugify(cid)[:8] or i}"
        started = conv.get("create_time")
        items: list[dict[str, Any]] = []
        for text, when in exchanges(branch(mapping, conv.get("current_node"))):
            when = when if when is not None else started
            item: dict[str, Any] = {"text": text, "wing": self._wing, "room": room,
                                    "source": f"{self._file}#{cid}"[:200]}
            if isinstance(when, int | float):
                item["occurred_at"] = int(when * 1000)
            if self._tags:
                item["tags"] = self._tags
            items.append(item)
        body = json.dumps(items, sort_keys=True, ensure_ascii=False)
        return Unit(where, None, items, key=cid, size=len(body.encode()),
                    digest=hashlib.sha256(body.encode()).hexdigest())
