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
  session's ``events.jsonl`` as ``transcriptPath``; its ``sessionEnd`` names none, only the
  ``sessionId``, from which ``copilot_transcript`` derives the file). Cursor's is not among
  them, so Cursor gets no capture hook.
* What a hook stores is authored ``hook:<agent>`` (``hook_author``: ``hook:claude``,
  ``hook:codex``...), unless ``PALACE_AGENT`` says otherwise, so that a palace's policy can
  allow or deny each agent's capture by name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

DEFAULT_AGENT = "claude"
AUTHOR_PREFIX = "hook:"
# A session id palace turns into a path: one plain name (Copilot's are UUIDs), never a
# separator nor a dot-only name.
_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

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
    (``claude`` sends no ``format``: the daemon's default). ``session_transcript`` derives
    the transcript's path from the session id when an input names no transcript (None: the
    agent always names it, or palace cannot know it). ``end_marker`` is what the agent
    writes last when a session ends: a capture of a derived transcript (the session-end hook's)
    waits for it, since the agent may flush the file only after its hook.
    """

    name: str
    session_keys: tuple[str, ...]
    cwd_keys: tuple[str, ...]
    transcript_keys: tuple[str, ...]
    prompt_keys: tuple[str, ...]
    start: Output | None
    prompt: Output | None
    capture_format: str | None
    session_transcript: Callable[[str], str | None] | None = None
    end_marker: bytes | None = None


def hook_author(agent: str) -> str:
    """The agent name a hook of ``agent`` stores under: ``hook:<agent>``."""
    return AUTHOR_PREFIX + agent


def copilot_transcript(session_id: str) -> str | None:
    """Copilot CLI's transcript of session ``session_id``:
    ``$COPILOT_HOME`` (else ``~/.copilot``) ``/session-state/<id>/events.jsonl``; None when
    the id is not one plain name (the hook input is untrusted: no ``/``, no ``..``) or the
    path would leave ``session-state`` (a symlinked session directory pointing elsewhere)."""
    if not _SESSION_NAME.fullmatch(session_id) or set(session_id) == {"."}:
        return None
    home = os.environ.get("COPILOT_HOME") or os.path.join("~", ".copilot")
    root = os.path.abspath(os.path.join(os.path.expanduser(home), "session-state"))
    path = os.path.join(root, session_id, "events.jsonl")
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        return None
    return path


class _Keys(TypedDict):
    session_keys: tuple[str, ...]
    cwd_keys: tuple[str, ...]
    transcript_keys: tuple[str, ...]
    prompt_keys: tuple[str, ...]


_SNAKE: _Keys = {"session_keys": ("session_id",), "cwd_keys": ("cwd",),
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
                          prompt=_top("additionalContext"), capture_format="copilot",
                          session_transcript=copilot_transcript,
                          end_marker=b'"session.shutdown"'),
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
