"""The hook shapes of each agent palace serves: what its hook input calls things, and what
its hook must print to add context at session start and at prompt time.

One row per agent (``AGENTS``), read by ``palace hook wake-up``, ``palace hook prompt`` and
``palace hook capture`` (``--agent NAME``, default ``claude``) and by ``palace init --hooks``
(``palace_client.agents.entries.AGENT_HOOK_EVENTS`` names the events). Built from each
agent's documentation and source at these versions: Claude Code 2.x, Codex CLI 0.171
(``codex-rs/hooks``), Gemini CLI 0.61 (``docs/hooks/reference.md``), Cursor 2.x
(``cursor.com/docs/agent/hooks``), GitHub Copilot CLI 1.0.102 (``cli-hooks-reference``
and the bundled changelog); details and what each cannot do in ``docs/agents.md``.

* Claude Code, Codex CLI and Gemini CLI send snake_case fields (``session_id``, ``cwd``,
  ``transcript_path``, ``prompt``) and read ``hookSpecificOutput.additionalContext``; Codex
  validates ``hookEventName`` against the event, Gemini ignores it.
* Cursor sends ``conversation_id``/``session_id`` and ``workspace_roots`` (no ``cwd``) and
  reads ``additional_context`` from its ``sessionStart`` hook; its ``beforeSubmitPrompt``
  hook can only allow or block a prompt, never add to it, so Cursor gets no prompt hook.
* Copilot CLI's camelCase events send ``sessionId``, ``cwd``, ``prompt`` and
  ``transcriptPath`` and read a top-level ``additionalContext``.
* Capture needs a transcript palace can read (``capture.transcript``'s ``format``): Claude
  Code's, Codex's, Gemini's and Copilot's (whose ``agentStop`` and ``preCompact`` name its
  session's ``events.jsonl`` as ``transcriptPath``). Cursor's is not among them, so Cursor
  gets no capture hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_AGENT = "claude"

Output = Callable[[str], dict[str, Any]]


def _specific(event: str) -> Output:
    """Claude Code's shape (Codex's and Gemini's too): ``hookSpecificOutput`` naming the event."""

    def build(text: str) -> dict[str, Any]:
        return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}

    return build


def _top(key: str) -> Output:
    """A top-level context key (Cursor's ``additional_context``, Copilot's
    ``additionalContext``)."""

    def build(text: str) -> dict[str, Any]:
        return {key: text}

    return build


@dataclass(frozen=True)
class AgentHooks:
    """One agent's hook input fields and output builders.

    Each ``*_keys`` tuple lists the input keys that may hold the value, first found wins.
    ``start`` and ``prompt`` build the stdout that adds context at session start and at
    prompt time; None when the agent cannot take context there. ``capture_format`` is the
    ``capture.transcript`` format of its transcripts; None when palace cannot read them
    (``claude`` sends no ``format``: the daemon's default).
    """

    name: str
    session_keys: tuple[str, ...]
    cwd_keys: tuple[str, ...]
    transcript_keys: tuple[str, ...]
    prompt_keys: tuple[str, ...]
    start: Output | None
    prompt: Output | None
    capture_format: str | None


_SNAKE = {"session_keys": ("session_id",), "cwd_keys": ("cwd",),
          "transcript_keys": ("transcript_path",), "prompt_keys": ("prompt",)}

AGENTS: Mapping[str, AgentHooks] = {
    "claude": AgentHooks("claude", **_SNAKE, start=_specific("SessionStart"),
                         prompt=_specific("UserPromptSubmit"), capture_format="claude"),
    "codex": AgentHooks("codex", **_SNAKE, start=_specific("SessionStart"),
                        prompt=_specific("UserPromptSubmit"), capture_format="codex"),
    "gemini": AgentHooks("gemini", **_SNAKE, start=_specific("SessionStart"),
                         prompt=_specific("BeforeAgent"), capture_format="gemini"),
    "cursor": AgentHooks("cursor", session_keys=("session_id", "conversation_id"),
                         cwd_keys=("cwd", "workspace_roots"), transcript_keys=(),
                         prompt_keys=("prompt",), start=_top("additional_context"),
                         prompt=None, capture_format=None),
    "copilot": AgentHooks("copilot", session_keys=("sessionId", "session_id"),
                          cwd_keys=("cwd",), transcript_keys=("transcriptPath",
                                                              "transcript_path"),
                          prompt_keys=("prompt",), start=_top("additionalContext"),
                          prompt=_top("additionalContext"), capture_format="copilot"),
}


def agent_hooks(name: str) -> AgentHooks:
    """The row of agent ``name``.

    Raises:
        ValueError: an agent palace has no hooks for (the message lists them).
    """
    try:
        return AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r} (one of {', '.join(AGENTS)})") from None


def field(data: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first non-empty string under ``keys`` of the hook input (the first string of a
    list, as Cursor's ``workspace_roots``); None when there is none."""
    for key in keys:
        value = data.get(key)
        if isinstance(value, list):
            value = next((v for v in value if isinstance(v, str) and v), None)
        if isinstance(value, str) and value:
            return value
    return None
