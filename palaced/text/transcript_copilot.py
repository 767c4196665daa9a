"""GitHub Copilot CLI session events: what one line of a Copilot CLI session log says.

GitHub Copilot CLI (npm ``@github/copilot`` 1.0.102, a native binary; its event schema is
published with the Copilot SDK, ``github/copilot-sdk`` ``nodejs/src/generated/
session-events.ts``, generated from the CLI's ``session-events.schema.json``) appends every
event that is not ``ephemeral`` to ``~/.copilot/session-state/<session id>/events.jsonl``
(``$COPILOT_HOME`` for ``~/.copilot``): one JSON object per line, ``{"id", "parentId",
"timestamp", "type", "data"}`` (``agentId`` on a sub-agent's events). The format is described
in docs/capture.md; :class:`CopilotRecords` turns events into the exchange assembler's events
(``palaced.text.exchanges``):

* :class:`Prompt`: a ``user.message``: ``data.content``, what the person typed (not
  ``transformedContent``, the copy sent to the model with its XML wrapping and timestamps;
  attachments become ``[attachment]``). Not a prompt: a message with a ``source`` naming
  another origin (``skill-...`` injections, ``agent-...`` inter-agent prompts, system and
  schedule messages) or an autopilot continuation.
* :class:`Answer`: an ``assistant.message``: ``data.content`` and one line per entry of
  ``data.toolRequests`` in the words of the Claude reader's :func:`tool_line`
  (``→ Bash: npm test``, ``→ Edit src/app.ts``). ``reasoningText``, encrypted reasoning,
  tool execution events and their results are never kept.
* ``None``: events of a sub-agent (``agentId``), ``session.start`` (its ``context.cwd`` and
  ``sessionId`` are kept for the prompts), and every other event type.

:class:`Malformed` is raised for a line that is not a JSON object with string ``type`` and
``id`` and an object ``data``, or a message event whose ``content`` is not a string.
"""

from __future__ import annotations

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

# Tools that only look or plan (the Claude reader's QUIET_TOOLS, in Copilot CLI's names).
QUIET_TOOLS = frozenset({"view", "glob", "grep", "report_intent", "update_todo", "think",
                         "read_bash", "list_bash", "stop_bash", "read_agent", "list_agents",
                         "fetch_copilot_cli_documentation"})
_AS_CLAUDE = {"bash": "Bash", "shell": "Bash", "powershell": "Bash", "edit": "Edit",
              "str_replace_editor": "Edit", "str_replace": "Edit", "create": "Write",
              "web_fetch": "WebFetch", "task": "Task"}
_NOT_TYPED = ("skill-", "agent-", "system", "schedule", "command", "autopilot", "hook")


def call_line(request: Any, cwd: str | None = None) -> str | None:
    """The tool line of one ``toolRequests`` entry (None for tools that only look)."""
    if not isinstance(request, dict) or not isinstance(request.get("name"), str):
        return None
    name: str = request["name"]
    if name in QUIET_TOOLS:
        return None
    raw = request.get("arguments")
    args: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    if "path" in args and "file_path" not in args:
        args["file_path"] = args["path"]
    return tool_line(_AS_CLAUDE.get(name, name), args, cwd)


class CopilotRecords(Records):
    """GitHub Copilot CLI session events (see the module docstring)."""

    stateful: ClassVar[bool] = True

    def classify(self, record: Any) -> Event:
        """The event one session event stands for.

        Raises:
            Malformed: not a JSON object with string ``type`` and ``id`` and an object
                ``data``, or a message whose ``content`` is not a string.
        """
        if not isinstance(record, dict):
            raise Malformed("not a JSON object")
        kind, data = record.get("type"), record.get("data")
        if not isinstance(kind, str) or not isinstance(record.get("id"), str) or not (
                isinstance(data, dict)):
            raise Malformed("not a Copilot CLI session event (string 'type' and 'id', "
                            "object 'data')")
        if kind in ("session.start", "session.resume"):
            context = data.get("context")
            if isinstance(context, dict):
                self.cwd = text_or_none(context.get("cwd")) or self.cwd
            self.session_id = text_or_none(data.get("sessionId")) or self.session_id
            return None
        if kind not in ("user.message", "assistant.message"):
            return None
        content = data.get("content")
        if not isinstance(content, str):
            raise Malformed(f"a {kind} event without string content")
        if record.get("agentId") is not None:
            return None  # a sub-agent's own conversation
        at_ms = parse_time(record.get("timestamp"))
        if kind == "user.message":
            return self._prompt(data, content, at_ms, record["id"])
        parts = [content.strip()] if content.strip() else []
        requests = data.get("toolRequests")
        if isinstance(requests, list):
            parts += [line for r in requests if (line := call_line(r, self.cwd)) is not None]
        return Answer(tuple(parts), at_ms, record["id"]) if parts else None

    def _prompt(self, data: dict[str, Any], content: str, at_ms: int | None,
                key: str) -> Event:
        source = data.get("source")
        if isinstance(source, str) and source.lower().startswith(_NOT_TYPED):
            return None
        if data.get("isAutopilotContinuation") is True:
            return None
        text = content.strip()
        attachments = data.get("attachments")
        if isinstance(attachments, list) and attachments:
            text = "\n".join([text, *["[attachment]"] * len(attachments)]).strip()
        if not text:
            return None
        return Prompt(text, at_ms, self.session_id, self.cwd, text.startswith("/"), key)
