"""Claude Code transcript records: what one JSONL line of a session transcript says.

Claude Code appends one JSON object per line to ``~/.claude/projects/<project>/<session>.jsonl``
(the format is described in docs/capture.md). :func:`classify` turns one parsed record into an
event for the exchange assembler (``palaced.text.exchanges``):

* :class:`Prompt`: a ``user`` record that a person typed: its ``message.content`` is a string,
  or a list holding text blocks (images become ``[image]``). Not a prompt: records with
  ``isMeta`` (caveats, expanded command bodies), ``isSidechain`` (a subagent's own
  conversation), ``isCompactSummary`` (the summary that continues a compacted session), a
  content of ``tool_result`` blocks (tool output Claude Code files as a ``user`` record), and
  "[Request interrupted by user]". A slash command (``<command-name>/x</command-name>`` with
  its ``<command-args>``) is the prompt ``/x args``; a command's local output
  (``<local-command-stdout>``) is nothing.
* :class:`Answer`: an ``assistant`` record's parts in order: its ``text`` blocks, and one line
  per tool call (:func:`tool_line`: ``→ Edit src/app.py``, ``→ Bash: pytest -q``) or nothing
  for tools that only look (Read, Grep, Glob, LS, TodoWrite...). ``thinking`` blocks, tool
  inputs and tool outputs are never kept.
* ``None``: anything else that is well formed (``summary``, ``system``,
  ``file-history-snapshot`` and other bookkeeping records, sidechains, API error notices).

:class:`Malformed` is raised for a record that is not a JSON object with a string ``type``,
or whose ``user``/``assistant`` ``message`` is not an object with string or list content,
and for a Codex CLI rollout record (a ``payload`` object): a file of the wrong format reads
as malformed lines, not as an empty session.

The other agents' formats (``transcript_codex``, ``transcript_gemini``) produce the same
events through a :class:`Records` reader of their own; :class:`ClaudeRecords` is this one's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

MAX_TOOL_TARGET = 120  # characters of a tool line's target (a command, a path, a query)
# Tools that only read or plan: a line each would bury what was done.
QUIET_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "TodoWrite", "TodoRead", "BashOutput",
                         "KillShell", "KillBash", "ListMcpResourcesTool",
                         "ReadMcpResourceTool", "ExitPlanMode", "NotebookRead"})
_FILE_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
_INTERRUPTED = re.compile(r"^\[Request interrupted by user[^\]]*\]$")
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_LOCAL_OUTPUT = re.compile(r"^\s*<(?:local-command-stdout|local-command-stderr|"
                           r"bash-stdout|bash-stderr)>", re.S)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


class Malformed(ValueError):
    """A record that is not what a transcript line must be (the message says why)."""


@dataclass(frozen=True)
class Prompt:
    """What a person typed, with the record's time (epoch ms), session id and working dir."""

    text: str
    at_ms: int | None
    session_id: str | None
    cwd: str | None
    command: bool = False  # a slash command (``/model``): dropped when nothing answers it
    key: str | None = None  # the record's own id: a second record with it is a copy


@dataclass(frozen=True)
class Answer:
    """The assistant's visible parts of one record: texts and one-line tool summaries."""

    parts: tuple[str, ...]
    at_ms: int | None
    # The message's own id. A later record with the same id is a copy (Claude Code, a resumed
    # session) or the same message grown (Gemini CLI re-appends it with its tool calls): it
    # replaces the earlier one's parts while that is in the exchange being read.
    key: str | None = None


Event = Prompt | Answer | None
_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context",
                          "compacted"})


class Records:
    """The records of one transcript format, read in order by one reader
    (``palaced.text.exchanges``); a format that keeps state across records (the session's id
    and directory from its first record: ``session_id``, ``cwd``) sets ``stateful``, and the
    reader then shows it the file's first record before it resumes in the middle."""

    stateful: ClassVar[bool] = False
    # The format was also written as one JSON document (``{..., "messages": [...]}``): such a
    # file is read message by message (``palaced.text.exchanges``).
    documents: ClassVar[bool] = False

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.cwd: str | None = None

    def classify(self, record: Any) -> Event:
        """The event ``record`` stands for.

        Raises:
            Malformed: the record is not one this format writes.
        """
        raise NotImplementedError


class ClaudeRecords(Records):
    """Claude Code's records: :func:`classify` (each record stands alone)."""

    def classify(self, record: Any) -> Event:
        return classify(record)


def parse_time(value: Any) -> int | None:
    """Epoch milliseconds of an ISO 8601 ``timestamp`` (``2025-06-01T12:00:00.123Z``), or None."""
    if not isinstance(value, str) or not 10 <= len(value) <= 40:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    return int(stamp.timestamp() * 1000)


def text_or_none(value: Any) -> str | None:
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None



def _one_line(text: str, limit: int = MAX_TOOL_TARGET) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _relative(path: str, cwd: str | None) -> str:
    """``path`` relative to ``cwd`` when it lies inside it (shorter, and stable across clones)."""
    if cwd and os.path.isabs(path) and os.path.isabs(cwd):
        try:
            rel = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel
    return path


def tool_line(name: str, tool_input: Any, cwd: str | None = None) -> str | None:
    """One line for a tool call (``→ Edit src/app.py``), or None for tools that only look."""
    if name in QUIET_TOOLS:
        return None
    args = tool_input if isinstance(tool_input, dict) else {}
    if name in _FILE_TOOLS:
        path = (text_or_none(args.get("file_path")) or text_or_none(args.get("notebook_path"))
                or text_or_none(args.get("path")))
        return f"→ {name} {_one_line(_relative(path, cwd))}" if path else f"→ {name}"
    if name == "Bash":
        command = text_or_none(args.get("command"))
        return f"→ Bash: {_one_line(command)}" if command else "→ Bash"
    if name in ("Task", "Agent"):
        what = text_or_none(args.get("description")) or text_or_none(args.get("subagent_type"))
        return f"→ {name}: {_one_line(what)}" if what else f"→ {name}"
    if name == "WebFetch":
        url = text_or_none(args.get("url"))
        return f"→ WebFetch {_one_line(url)}" if url else "→ WebFetch"
    if name == "WebSearch":
        query = text_or_none(args.get("query"))
        return f"→ WebSearch: {_one_line(query)}" if query else "→ WebSearch"
    # Any other tool (MCP tools included): its name and its first short string argument.
    first = next((v for v in args.values() if isinstance(v, str) and v.strip()), None)
    return f"→ {_one_line(name, 80)}: {_one_line(first, 60)}" if first else (
        f"→ {_one_line(name, 80)}")


def _command_prompt(text: str) -> str | None:
    """``/name args`` of a slash-command record, or None when ``text`` is not one."""
    m = _COMMAND_NAME.search(text)
    if m is None:
        return None
    args = _COMMAND_ARGS.search(text)
    name = m.group(1).strip()
    if not name.startswith("/"):
        name = "/" + name
    extra = args.group(1).strip() if args else ""
    return f"{name} {extra}".strip()


def _prompt_text(content: Any) -> tuple[str | None, bool]:
    """The typed text of a user record's content and whether it is a slash command;
    ``(None, False)`` when it is tool output or nothing a person typed.

    Raises:
        Malformed: the content is neither a string nor a list.
    """
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return None, False
        texts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "image":
                texts.append("[image]")
    else:
        raise Malformed("message.content is neither a string nor a list")
    text = _REMINDER.sub("", "\n\n".join(texts)).strip()
    if not text or _INTERRUPTED.match(text) or _LOCAL_OUTPUT.match(text):
        return None, False
    command = _command_prompt(text)
    if command is not None:
        return command, True
    return text, False


def _answer_parts(content: Any, cwd: str | None) -> tuple[str, ...]:
    if isinstance(content, str):
        return (content.strip(),) if content.strip() else ()
    if not isinstance(content, list):
        raise Malformed("message.content is neither a string nor a list")
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text = block["text"].strip()
            if text and text != "(no content)":
                parts.append(text)
        elif kind == "tool_use" and isinstance(block.get("name"), str):
            line = tool_line(block["name"], block.get("input"), cwd)
            if line is not None:
                parts.append(line)
        # thinking / redacted_thinking / anything else: never kept
    return tuple(parts)


def classify(record: Any) -> Event:
    """The event one transcript record stands for (see the module docstring).

    Raises:
        Malformed: not a JSON object with a string ``type``, or a user/assistant record whose
            ``message`` is not an object with string or list ``content``.
    """
    if not isinstance(record, dict):
        raise Malformed("not a JSON object")
    kind = record.get("type")
    if not isinstance(kind, str):
        raise Malformed("no string 'type'")
    if kind not in ("user", "assistant"):
        if kind in _CODEX_TYPES and isinstance(record.get("payload"), dict):
            raise Malformed("a Codex CLI rollout record (capture it with format codex)")
        return None
    message = record.get("message")
    if not isinstance(message, dict) or "content" not in message:
        raise Malformed(f"a {kind} record without a message object with content")
    if record.get("isSidechain") is True:
        return None
    at_ms = parse_time(record.get("timestamp"))
    cwd = text_or_none(record.get("cwd"))
    if kind == "assistant":
        if record.get("isApiErrorMessage") is True:
            return None
        parts = _answer_parts(message["content"], cwd)
        return Answer(parts, at_ms, text_or_none(record.get("uuid"))) if parts else None
    if record.get("isMeta") is True or record.get("isCompactSummary") is True:
        # Still checked: a meta record of the wrong shape is as malformed as any other.
        if not isinstance(message["content"], str | list):
            raise Malformed("message.content is neither a string nor a list")
        return None
    text, command = _prompt_text(message["content"])
    if text is None:
        return None
    return Prompt(text, at_ms, text_or_none(record.get("sessionId")), cwd, command,
                  text_or_none(record.get("uuid")))
