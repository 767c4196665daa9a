"""Codex CLI rollout records: what one line of a Codex session file says.

Codex CLI (built from ``openai/codex`` ``codex-rs``, npm ``@openai/codex`` 0.171) appends one
JSON object per line to ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl``
(``~/.codex`` without ``CODEX_HOME``): ``{"timestamp", "type", "payload"}`` with ``type`` one
of ``session_meta`` (the first line: the session's ``id``, ``cwd``, ``cli_version``...),
``turn_context`` (a turn's ``cwd``, model, policies), ``response_item`` (what went to and came
from the model), ``event_msg`` (what the interface showed) and ``compacted``. The format is
described in docs/capture.md; :class:`CodexRecords` turns records into the exchange
assembler's events (``palaced.text.exchanges``):

* :class:`Prompt`: an ``event_msg`` of ``payload.type`` ``user_message``: what the person
  typed (``payload.message``; attached images become ``[image]``); or, as the real 0.171.0
  binary writes it (``codex exec``, checked by tests/e2e/agents), an ``event_msg`` of type
  ``item_completed`` whose ``item`` is a ``UserMessage`` (its ``text`` parts). A file holding
  both says each prompt twice in a row: the second copy is dropped. The ``response_item``
  ``message`` of role ``user`` carries the same words *and* what Codex injects on its own
  (``AGENTS.md`` instructions, ``<environment_context>``, ``<user_instructions>``), so it is
  never a prompt; neither is a ``user_message`` that is one of those injections.
* :class:`Answer`: a ``response_item`` ``message`` of role ``assistant`` (its ``output_text``
  blocks), and one line per tool call (``function_call``, ``custom_tool_call``,
  ``local_shell_call``, ``web_search_call``) in the words of the Claude reader's
  :func:`tool_line` (``→ Bash: pytest -q``, ``→ Edit src/app.py`` per file of an
  ``apply_patch``). ``reasoning``, tool outputs, ``agent_message``/``agent_reasoning`` events
  (copies of the response items), token counts and turn bookkeeping are never kept.
* ``None``: every other well-formed record.

:class:`Malformed` is raised for a line that is not a JSON object with a string ``type`` and
a ``payload`` object, or whose ``user_message`` or ``message`` payload has the wrong shape.
The reader keeps the session's id and working directory from ``session_meta`` and
``turn_context`` (``stateful``: a capture resuming mid-file is shown the first line again). A
sub-agent's rollout (``session_meta.source`` naming a ``subagent``: Codex writes a rollout per
spawned agent, prompted by the parent agent, not by a person) yields no events, as Claude
Code's sidechains do not.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from palaced.text.transcript import (
    Answer,
    Event,
    Malformed,
    Prompt,
    Records,
    parse_time,
    text_or_none,
    tool_line,
)

# Tools that only look or plan (the Claude reader's QUIET_TOOLS, in Codex's names).
QUIET_TOOLS = frozenset({"update_plan", "view_image", "read_file", "list_dir", "grep_files",
                         "list_mcp_resources", "list_mcp_resource_templates",
                         "read_mcp_resource", "write_stdin", "tool_search"})
_SHELL_TOOLS = frozenset({"shell", "shell_command", "exec_command", "local_shell",
                          "container.exec", "unified_exec"})
# What Codex injects as a user message on its own: the repository's AGENTS.md, the user's
# instructions, the environment (cwd, sandbox, shell), turn-aborted notices.
_INJECTED = re.compile(r"^\s*(?:<user_instructions>|<environment_context>|<turn_aborted>|"
                       r"<user_shell_command>|<subagent_notification>|"
                       r"# AGENTS\.md instructions for )")
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.M)
_PATCH_VERBS = {"Add": "Write", "Update": "Edit", "Delete": "Delete"}
_SHELL_WRAPPERS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/bin/zsh",
                             "/usr/bin/bash", "/usr/bin/zsh", "pwsh", "powershell"})
MAX_ARGUMENTS = 1 << 20  # characters of a call's JSON arguments parsed for its tool line


def _command(value: Any) -> str | None:
    """A shell call's command as one string: ``["bash", "-lc", "pytest -q"]`` -> ``pytest -q``."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) == 3 and value[0] in _SHELL_WRAPPERS and value[1] in ("-lc", "-c"):
            return value[2].strip() or None
        return " ".join(value)
    return None


def _arguments(raw: Any) -> dict[str, Any]:
    """A ``function_call``'s ``arguments`` (a JSON string) as an object; {} when it is none."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or len(raw) > MAX_ARGUMENTS:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _patch_lines(patch: str, cwd: str | None) -> list[str]:
    """One line per file an ``apply_patch`` adds, updates or deletes."""
    lines = [tool_line(_PATCH_VERBS[verb], {"file_path": path}, cwd)
             for verb, path in _PATCH_FILE.findall(patch)]
    return [line for line in lines if line is not None] or ["→ apply_patch"]


def call_lines(name: str, args: dict[str, Any], cwd: str | None) -> list[str]:
    """The tool lines of one Codex tool call (none for tools that only look)."""
    if name in QUIET_TOOLS:
        return []
    if name in _SHELL_TOOLS:
        command = _command(args.get("command")) or _command(args.get("cmd"))
        line = tool_line("Bash", {"command": command} if command else {}, cwd)
    elif name == "apply_patch":
        patch = text_or_none(args.get("input")) or text_or_none(args.get("patch")) or ""
        return _patch_lines(patch, cwd)
    elif name in ("web_search", "search"):
        line = tool_line("WebSearch", {"query": args.get("query")}, cwd)
    else:
        line = tool_line(name, args, cwd)
    return [line] if line is not None else []


class CodexRecords(Records):
    """Codex CLI rollout records (see the module docstring)."""

    stateful: ClassVar[bool] = True
    subagent = False  # a sub-agent's rollout (see the module docstring)
    # The last prompt's text until an answer follows it: a user_message and the UserMessage
    # item of the same prompt come one after the other.
    _unanswered: str | None = None

    def classify(self, record: Any) -> Event:
        """The event one rollout record stands for.

        Raises:
            Malformed: not a JSON object with a string ``type`` and an object ``payload``, or
                a ``user_message`` / ``UserMessage`` / ``message`` payload of the wrong shape.
        """
        if not isinstance(record, dict):
            raise Malformed("not a JSON object")
        kind = record.get("type")
        payload = record.get("payload")
        if not isinstance(kind, str) or not isinstance(payload, dict):
            raise Malformed("not a Codex rollout record (string 'type', object 'payload')")
        at_ms = parse_time(record.get("timestamp"))
        if kind == "session_meta":
            self.session_id = text_or_none(payload.get("id")) or self.session_id
            self.cwd = text_or_none(payload.get("cwd")) or self.cwd
            source = payload.get("source")
            self.subagent = self.subagent or (isinstance(source, dict) and "subagent" in source)
            return None
        if self.subagent:
            return None
        if kind == "turn_context":
            self.cwd = text_or_none(payload.get("cwd")) or self.cwd
            return None
        if kind == "event_msg":
            return self._event(payload, at_ms)
        if kind == "response_item":
            parts = self._item(payload)
            if not parts:
                return None
            self._unanswered = None
            return Answer(tuple(parts), at_ms)
        return None  # compacted, and records of later versions

    def _event(self, payload: dict[str, Any], at_ms: int | None) -> Event:
        kind = payload.get("type")
        if kind == "user_message":
            message = payload.get("message")
            if not isinstance(message, str):
                raise Malformed("a user_message without a string message")
            text = message.strip()
            images = payload.get("images")
            local = payload.get("local_images")
            count = (len(images) if isinstance(images, list) else 0) + (
                len(local) if isinstance(local, list) else 0)
        elif kind == "item_completed" and isinstance(payload.get("item"), dict) \
                and payload["item"].get("type") == "UserMessage":
            content = payload["item"].get("content")
            if not isinstance(content, list):
                raise Malformed("a UserMessage item without a content list")
            text = "\n".join(b["text"] for b in content if isinstance(b, dict)
                             and b.get("type") == "text" and isinstance(b.get("text"), str)
                             ).strip()
            count = sum(1 for b in content if isinstance(b, dict)
                        and b.get("type") in ("image", "local_image"))
        else:
            return None  # agent_message, agent_reasoning and the other items copy response
            #              items; the rest is bookkeeping (token counts, turn starts and ends)
        if count:
            text = "\n".join([text, *["[image]"] * count]).strip()
        if not text or _INJECTED.match(text) or text == self._unanswered:
            return None
        self._unanswered = text
        return Prompt(text, at_ms, self.session_id, self.cwd)

    def _item(self, payload: dict[str, Any]) -> list[str]:
        kind = payload.get("type")
        if kind == "message":
            content = payload.get("content")
            if not isinstance(content, list):
                raise Malformed("a message without a content list")
            if payload.get("role") != "assistant":
                return []  # the user's words come from user_message; developer: injections
            texts = [b["text"].strip() for b in content
                     if isinstance(b, dict) and b.get("type") in ("output_text", "text")
                     and isinstance(b.get("text"), str)]
            return [t for t in texts if t]
        if kind == "function_call" and isinstance(payload.get("name"), str):
            return call_lines(payload["name"], _arguments(payload.get("arguments")), self.cwd)
        if kind == "custom_tool_call" and isinstance(payload.get("name"), str):
            name, raw = payload["name"], payload.get("input")
            args = {"input": raw} if name == "apply_patch" else _arguments(raw)
            return call_lines(name, args, self.cwd)
        if kind == "local_shell_call":
            action = payload.get("action")
            command = action.get("command") if isinstance(action, dict) else None
            return call_lines("local_shell", {"command": command}, self.cwd)
        if kind == "web_search_call":
            action = payload.get("action")
            query = action.get("query") if isinstance(action, dict) else None
            return call_lines("web_search", {"query": query}, self.cwd)
        return []  # reasoning, tool outputs, compaction markers: never kept
