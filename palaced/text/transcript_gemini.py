"""Gemini CLI chat records: what one line of a Gemini CLI chat recording says.

Gemini CLI (``google-gemini/gemini-cli``, npm ``@google/gemini-cli`` 0.61) records every
session in ``~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<session id's first 8
characters>.jsonl`` (``$GEMINI_CLI_HOME/.gemini`` when that is set; ``<project>`` is the
project's short name, a hash of its path before 0.3x): JSON lines, appended
(``ChatRecordingService.appendRecord``). The first line is the session's metadata
(``sessionId``, ``projectHash``, ``startTime``...); then *message records* (``id``,
``timestamp``, ``type``: ``user`` | ``gemini`` | ``info`` | ``error`` | ``warning``,
``content`` (a Gemini ``PartListUnion``), ``displayContent``, and for ``gemini``
``toolCalls``, ``thoughts``, ``tokens``, ``model``), metadata updates ``{"$set": {...}}`` and
rewinds ``{"$rewindTo": id}``. A message is appended again, whole, each time it changes (its
tool calls and token counts arrive after its text): the last copy is the message. The format
is described in docs/capture.md; :class:`GeminiRecords` turns records into the exchange
assembler's events (``palaced.text.exchanges``):

* :class:`Prompt`: a ``user`` message a person typed: its ``displayContent`` when it has one
  (what was typed, before ``@file`` expansion), else its ``content``'s text parts. Not a
  prompt: a ``user`` message of ``functionResponse`` parts (tool output Gemini CLI records as
  a user message), the session and hook context it injects (``<session_context>``,
  ``<hook_context>``: a prompt that follows the hook context in the same message is kept
  without it), and the ``<state_snapshot>`` that continues a compressed chat. A
  ``/command`` is a prompt dropped when nothing answers it.
* :class:`Answer`: a ``gemini`` message's text parts (not the ``thought`` ones) and one line
  per entry of its ``toolCalls`` in the words of the Claude reader's :func:`tool_line`
  (``→ Bash: npm test``, ``→ Edit src/app.ts``), keyed by the message's ``id`` so that its
  later copies replace it. ``thoughts``, tool results and token counts are never kept.
* ``None``: the metadata line, ``$set``, ``$rewindTo`` (what a rewind took back and was
  already captured stays captured), ``info``/``error``/``warning`` messages.

:class:`Malformed` is raised for a line that is none of those records, or a message whose
``content`` is not a string, a part or a list of parts.

Gemini CLI before the JSONL recording wrote a whole JSON document per session
(``session-<time>-<id>.json``: the metadata fields and a ``messages`` list of the same message
records, rewritten after every message): ``documents`` has the reader read such a file
message by message, offsets counting messages (``palaced.text.exchanges``).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from palaced.text.transcript import (
    Answer,
    Event,
    Malformed,
    Prompt,
    Records,
    parse_time,
    tool_line,
)
from palaced.wire.vocab import typed_prompt

# Tools that only look or plan (the Claude reader's QUIET_TOOLS, in Gemini CLI's names).
QUIET_TOOLS = frozenset({"read_file", "read_many_files", "glob", "grep_search",
                         "search_file_content", "list_directory", "write_todos",
                         "list_mcp_resources", "read_mcp_resource", "get_internal_docs",
                         "tracker_get_task", "tracker_list_tasks", "tracker_visualize",
                         "update_topic", "enter_plan_mode", "exit_plan_mode", "ask_user",
                         "activate_skill", "complete_task"})
# Gemini CLI's tools that the Claude reader's tool lines name by another name.
_AS_CLAUDE = {"run_shell_command": "Bash", "write_file": "Write", "replace": "Edit",
              "edit": "Edit", "google_web_search": "WebSearch", "web_fetch": "WebFetch",
              "invoke_agent": "Agent"}
_NOT_TYPED = re.compile(r"^\s*<(?:session_context|hook_context|state_snapshot)>")
_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


def _parts(content: Any) -> list[Any]:
    """A ``PartListUnion`` as a list of parts (a string is one text part).

    Raises:
        Malformed: neither a string, a part object nor a list.
    """
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    raise Malformed("message content is neither a string, a part nor a list of parts")


def _texts(parts: list[Any]) -> list[str]:
    """The visible text of parts: text parts but thoughts, attachments as ``[image]``."""
    out: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str) and part.get("thought") is not True:
            out.append(part["text"])
        elif "inlineData" in part or "fileData" in part:
            out.append("[image]")
    return out


def call_line(call: Any) -> str | None:
    """The tool line of one ``toolCalls`` entry (None for tools that only look)."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    name: str = call["name"]
    if name in QUIET_TOOLS:
        return None
    raw = call.get("args")
    args: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if name == "web_fetch":  # its argument is a prompt holding the URLs
        url = re.search(r"https?://\S+", str(args.get("prompt") or args.get("url") or ""))
        args = {"url": url.group(0)} if url else {}
    return tool_line(_AS_CLAUDE.get(name, name), args)


class GeminiRecords(Records):
    """Gemini CLI chat records (see the module docstring)."""

    stateful: ClassVar[bool] = True
    documents: ClassVar[bool] = True  # the chats of Gemini CLI before its JSONL recording

    def classify(self, record: Any) -> Event:
        """The event one chat record stands for.

        Raises:
            Malformed: not a message, metadata, ``$set`` or ``$rewindTo`` record, or a message
                whose ``content`` is not a string, a part or a list of parts.
        """
        if not isinstance(record, dict):
            raise Malformed("not a JSON object")
        kind = record.get("type")
        if isinstance(record.get("id"), str) and kind in _MESSAGE_TYPES:
            return self._message(record, kind)
        if isinstance(record.get("sessionId"), str) and isinstance(
                record.get("projectHash"), str):
            self.session_id = record["sessionId"] or self.session_id
            return None
        if isinstance(record.get("$set"), dict) or isinstance(record.get("$rewindTo"), str):
            return None
        raise Malformed("not a Gemini CLI chat record (message, metadata, $set or $rewindTo)")

    def _message(self, record: dict[str, Any], kind: str) -> Event:
        if "content" not in record:
            raise Malformed(f"a {kind} message without content")
        parts = _parts(record["content"])
        at_ms = parse_time(record.get("timestamp"))
        if kind == "user":
            return self._prompt(record, parts, at_ms)
        if kind != "gemini":
            return None
        answer = [t.strip() for t in _texts(parts) if t.strip()]
        calls = record.get("toolCalls")
        if isinstance(calls, list):
            answer += [line for call in calls if (line := call_line(call)) is not None]
        return Answer(tuple(answer), at_ms, record["id"]) if answer else None

    def _prompt(self, record: dict[str, Any], parts: list[Any], at_ms: int | None) -> Event:
        if any(isinstance(p, dict) and "functionResponse" in p for p in parts):
            return None  # tool output, recorded as a user message
        shown = record.get("displayContent")
        if shown is not None:
            try:
                parts = _parts(shown)
            except Malformed:
                pass  # what was sent is still the prompt
        # The SessionStart hooks' context comes in front of a session's first prompt.
        text = typed_prompt("\n\n".join(_texts(parts))).strip()
        if not text or _NOT_TYPED.match(text):
            return None
        return Prompt(text, at_ms, self.session_id, None, text.startswith("/"), record["id"])
