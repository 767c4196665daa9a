"""Codex CLI and Gemini CLI session files for tests, written the way those agents write them.

``CodexSession`` appends rollout lines as Codex CLI 0.171 does (``codex-rs/rollout``: every
line ``{"timestamp", "type", "payload"}``; ``session_meta`` first; per turn a
``turn_context``, the injected ``AGENTS.md`` / ``<environment_context>`` user messages on the
first turn, the ``user`` ``message`` response item *and* the ``user_message`` event for what
was typed, ``reasoning``, ``function_call`` / ``function_call_output``, the ``assistant``
``message`` and its ``agent_message`` event copy, ``token_count``). ``GeminiSession`` appends
chat records as Gemini CLI 0.61 does (``ChatRecordingService``: a metadata line, message
records appended again whole as they grow, ``$set`` updates, tool output as a user message of
``functionResponse`` parts). ``CopilotSession`` appends session events as GitHub Copilot CLI
1.0.102 does (the non-``ephemeral`` events of the Copilot SDK's ``session-events`` schema:
``session.start`` with the working directory, ``user.message`` with its ``transformedContent``,
``assistant.turn_start``, ``assistant.message`` with ``toolRequests`` and ``reasoningText``,
``tool.execution_start``/``_complete``, ``assistant.turn_end``). docs/capture.md describes the
formats.
"""

from __future__ import annotations

import json
import uuid as uuid_mod
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CODEX_VERSION = "0.171.0"
GEMINI_MODEL = "gemini-2.5-pro"
AGENTS_MD = ("# AGENTS.md instructions for /home/me/src/shop-api\n\n<INSTRUCTIONS>\n"
             "Run `make lint` before every commit. Never push to main.\n</INSTRUCTIONS>")


class _Writer:
    def __init__(self, path: Path, start: datetime | None) -> None:
        self.path = path
        self.clock = start or datetime(2025, 9, 14, 8, 0, tzinfo=UTC)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def stamp(self) -> str:
        self.clock += timedelta(seconds=3)
        return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def write(self, record: dict[str, Any] | str) -> None:
        """Append one line: a record, or raw text (a malformed line)."""
        line = record if isinstance(record, str) else json.dumps(
            record, ensure_ascii=False, separators=(",", ":"))  # as JSON.stringify and serde write
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class CodexSession(_Writer):
    """A Codex CLI rollout being written (see the module docstring)."""

    def __init__(self, root: Path, *, session_id: str | None = None,
                 cwd: str = "/home/me/src/shop-api", start: datetime | None = None) -> None:
        self.session_id = session_id or str(uuid_mod.uuid4())
        first = start or datetime(2025, 9, 14, 8, 0, tzinfo=UTC)
        name = f"rollout-{first.strftime('%Y-%m-%dT%H-%M-%S')}-{self.session_id}.jsonl"
        super().__init__(root / first.strftime("%Y/%m/%d") / name, first)
        self.cwd = cwd
        self.turns = 0
        self.write(self._line("session_meta", {
            "id": self.session_id, "timestamp": self.stamp(), "cwd": cwd,
            "originator": "codex_cli_rs", "cli_version": CODEX_VERSION,
            "instructions": None, "source": "cli", "model_provider": "openai",
            "git": {"commit_hash": "4f1c2d9", "branch": "main",
                    "repository_url": "git@github.com:me/shop-api.git"}}))

    def _line(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": self.stamp(), "type": kind, "payload": payload}

    def item(self, payload: dict[str, Any]) -> None:
        self.write(self._line("response_item", payload))

    def event(self, payload: dict[str, Any]) -> None:
        self.write(self._line("event_msg", payload))

    def prompt(self, text: str) -> None:
        """A turn's start: context, the first turn's injections, and what was typed."""
        self.turns += 1
        self.write(self._line("turn_context", {
            "cwd": self.cwd, "approval_policy": "on-request",
            "sandbox_policy": {"mode": "workspace-write", "network_access": False},
            "model": "gpt-5-codex", "effort": "medium", "summary": "auto"}))
        if self.turns == 1:
            for injected in (AGENTS_MD, f"<environment_context>\n  <cwd>{self.cwd}</cwd>\n"
                             "  <approval_policy>on-request</approval_policy>\n"
                             "  <sandbox_mode>workspace-write</sandbox_mode>\n"
                             "  <shell>bash</shell>\n</environment_context>"):
                self.item({"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": injected}]})
        self.item({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": text}]})
        self.event({"type": "user_message", "message": text, "images": [],
                    "local_images": [], "text_elements": []})

    def think(self, summary: str) -> None:
        self.item({"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
                   "content": None, "encrypted_content": "gAAAAABo" + "x" * 40})
        self.event({"type": "agent_reasoning", "text": summary})

    def shell(self, command: str, output: str) -> None:
        call = f"call_{uuid_mod.uuid4().hex[:24]}"
        self.item({"type": "function_call", "name": "shell", "call_id": call,
                   "arguments": json.dumps({"command": ["bash", "-lc", command],
                                            "workdir": self.cwd, "timeout_ms": 120000})})
        self.item({"type": "function_call_output", "call_id": call,
                   "output": json.dumps({"output": output,
                                         "metadata": {"exit_code": 0, "duration_seconds": 0.4}})})

    def patch(self, path: str, body: str) -> None:
        call = f"call_{uuid_mod.uuid4().hex[:24]}"
        patch = f"*** Begin Patch\n*** Update File: {path}\n@@\n{body}\n*** End Patch\n"
        self.item({"type": "custom_tool_call", "status": "completed", "call_id": call,
                   "name": "apply_patch", "input": patch})
        self.item({"type": "custom_tool_call_output", "call_id": call,
                   "output": "Success. Updated the following files:\nM " + path})

    def plan(self) -> None:
        call = f"call_{uuid_mod.uuid4().hex[:24]}"
        self.item({"type": "function_call", "name": "update_plan", "call_id": call,
                   "arguments": json.dumps({"plan": [{"step": "fix", "status": "completed"}]})})

    def say(self, text: str) -> None:
        self.item({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": text}]})
        self.event({"type": "agent_message", "message": text})
        self.event({"type": "token_count", "info": {"total_token_usage": {
            "input_tokens": 5210, "cached_input_tokens": 4096, "output_tokens": 180,
            "reasoning_output_tokens": 64, "total_tokens": 5390}}, "rate_limits": None})

    def exchange(self, prompt: str, answer: str) -> None:
        self.prompt(prompt)
        self.say(answer)


class GeminiSession(_Writer):
    """A Gemini CLI chat recording being written (see the module docstring)."""

    def __init__(self, root: Path, *, session_id: str | None = None,
                 project: str = "shop-api", start: datetime | None = None) -> None:
        self.session_id = session_id or str(uuid_mod.uuid4())
        first = start or datetime(2025, 9, 14, 8, 0, tzinfo=UTC)
        name = f"session-{first.strftime('%Y-%m-%dT%H-%M')}-{self.session_id[:8]}.jsonl"
        super().__init__(root / project / "chats" / name, first)
        self.project_hash = uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, project).hex * 2
        self.last: dict[str, Any] | None = None
        stamp = self.stamp()
        self.write({"sessionId": self.session_id, "projectHash": self.project_hash,
                    "startTime": stamp, "lastUpdated": stamp})

    def _touch(self) -> None:
        self.write({"$set": {"lastUpdated": self.stamp()}})

    def _message(self, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
        msg = {"id": str(uuid_mod.uuid4()), "timestamp": self.stamp(), "type": kind,
               "content": content, **extra}
        self.write(msg)
        self._touch()
        return msg

    def prompt(self, text: str, *, display: str | None = None) -> None:
        extra = {"displayContent": [{"text": display}]} if display is not None else {}
        self._message("user", [{"text": text}], **extra)
        self.last = None

    def say(self, text: str, *, thought: str | None = None) -> None:
        """The model's text (with the thought summary it had before it, if any)."""
        thoughts = ([{"subject": thought.split(".")[0], "description": thought,
                      "timestamp": self.stamp()}] if thought else [])
        self.last = self._message("gemini", text, thoughts=thoughts, model=GEMINI_MODEL)
        # Its token counts arrive after: the whole message is appended again.
        self.last["tokens"] = {"input": 8123, "output": 212, "cached": 4096, "thoughts": 96,
                               "tool": 0, "total": 8431}
        self.write(self.last)

    def tool(self, name: str, args: dict[str, Any], output: str) -> None:
        """A tool call (added to the last model message, appended again) and its result."""
        call = {"id": f"{name}-{uuid_mod.uuid4().hex[:12]}", "name": name, "args": args,
                "result": [{"functionResponse": {"id": name, "name": name,
                                                 "response": {"output": output}}}],
                "status": "success", "timestamp": self.stamp(), "displayName": name,
                "description": "", "renderOutputAsMarkdown": False}
        if self.last is None:
            self.last = self._message("gemini", "", toolCalls=[], thoughts=[],
                                      model=GEMINI_MODEL)
        self.last.setdefault("toolCalls", []).append(call)
        self.write(self.last)
        self._message("user", [{"functionResponse": {"id": call["id"], "name": name,
                                                     "response": {"output": output}}}])
        self.last = None

    def exchange(self, prompt: str, answer: str) -> None:
        self.prompt(prompt)
        self.say(answer)


class CopilotSession(_Writer):
    """A GitHub Copilot CLI ``events.jsonl`` being written (see the module docstring)."""

    def __init__(self, root: Path, *, session_id: str | None = None,
                 cwd: str = "/home/me/src/shop-api", start: datetime | None = None) -> None:
        self.session_id = session_id or str(uuid_mod.uuid4())
        super().__init__(root / self.session_id / "events.jsonl", start)
        self.cwd = cwd
        self.parent: str | None = None
        self.turn = 0
        self.event("session.start", {
            "sessionId": self.session_id, "version": 1, "producer": "copilot-agent",
            "copilotVersion": "1.0.102", "startTime": self.stamp(),
            "selectedModel": "claude-sonnet-4.5",
            "context": {"cwd": cwd, "gitRoot": cwd, "branch": "main",
                        "repository": "me/shop-api", "hostType": "github"}})

    def event(self, kind: str, data: dict[str, Any]) -> None:
        event_id = str(uuid_mod.uuid4())
        self.write({"type": kind, "data": data, "id": event_id, "timestamp": self.stamp(),
                    "parentId": self.parent})
        self.parent = event_id

    def prompt(self, text: str) -> None:
        self.turn += 1
        self.event("user.message", {
            "content": text, "transformedContent": (
                f"<current_datetime>{self.stamp()}</current_datetime>\n\n{text}"),
            "attachments": [], "agentMode": "interactive", "delivery": "idle",
            "interactionId": str(uuid_mod.uuid4())})
        self.event("assistant.turn_start", {"turnId": str(self.turn - 1)})

    def say(self, text: str, *, reasoning: str | None = None,
            tools: list[tuple[str, dict[str, Any], str]] | None = None) -> None:
        """An assistant message, its tool requests and their executions."""
        tools = tools or []
        requests = [{"toolCallId": f"toolu_{uuid_mod.uuid4().hex[:24]}", "name": name,
                     "arguments": args, "type": "function"} for name, args, _ in tools]
        data: dict[str, Any] = {"messageId": str(uuid_mod.uuid4()), "content": text,
                                "toolRequests": requests, "model": "claude-sonnet-4.5",
                                "outputTokens": 184}
        if reasoning is not None:
            data["reasoningText"] = reasoning
        self.event("assistant.message", data)
        for request, (_, _, output) in zip(requests, tools, strict=True):
            self.event("tool.execution_start", {"toolCallId": request["toolCallId"],
                                                "toolName": request["name"],
                                                "arguments": request["arguments"]})
            self.event("tool.execution_complete", {
                "toolCallId": request["toolCallId"], "success": True,
                "result": {"content": output, "detailedContent": output}})

    def end_turn(self) -> None:
        self.event("assistant.turn_end", {"turnId": str(self.turn - 1)})

    def exchange(self, prompt: str, answer: str) -> None:
        self.prompt(prompt)
        self.say(answer)
        self.end_turn()
