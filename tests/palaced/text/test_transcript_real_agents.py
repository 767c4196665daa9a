"""The palaced.text transcript readers on records as the real binaries write them (trimmed
copies of what Codex CLI 0.171.0 ``codex exec`` and Gemini CLI 0.61.0 ``gemini -p`` wrote in
tests/e2e/agents, with the palace hooks of ``palace init --hooks`` installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from palaced.text.exchanges import Batch, TranscriptReader, open_transcript, records_for


def read(path: Path, fmt: str, records: list[dict[str, Any]]) -> Batch:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with open_transcript(path) as fh:
        return TranscriptReader(fh, 0, 0, 0, records_for(fmt)).next_batch(100)


def exchanges(batch: Batch) -> list[tuple[str, list[str]]]:
    found = [*batch.complete, *([batch.tail] if batch.tail else [])]
    return [(x.prompt.text, x.parts) for x in found]


def _codex(kind: str, payload: dict[str, Any], second: int) -> dict[str, Any]:
    return {"timestamp": f"2026-12-05T05:57:{second:02d}.000Z", "type": kind,
            "payload": payload}


def _codex_session(*, user_message: bool) -> list[dict[str, Any]]:
    """A codex exec rollout: the prompt only as an ``item_completed`` UserMessage (what 0.171.0
    writes), or also as a ``user_message`` event just before it."""
    prompt = "remember: the deploy key rotates every 90 days"
    typed = [_codex("event_msg", {"type": "user_message", "message": prompt}, 3)
             ] if user_message else []
    return [
        _codex("session_meta", {"id": "01a2", "cwd": "/p", "cli_version": "0.171.0"}, 0),
        _codex("event_msg", {"type": "task_started", "turn_id": "t1"}, 0),
        _codex("response_item", {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "Wake-up context of palace 'p'"}]}, 1),
        _codex("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/p</cwd>"}]}, 2),
        _codex("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": prompt}]}, 3),
        *typed,
        _codex("event_msg", {"type": "item_completed", "turn_id": "t1", "item": {
            "type": "UserMessage", "id": "u1",
            "content": [{"type": "text", "text": prompt, "text_elements": []}]}}, 3),
        _codex("response_item", {"type": "function_call", "name": "remember",
                                 "namespace": "mcp__palace", "call_id": "c1",
                                 "arguments": json.dumps({"text": "the deploy key"})}, 4),
        _codex("event_msg", {"type": "item_completed", "item": {
            "type": "McpToolCall", "server": "palace", "tool": "remember"}}, 4),
        _codex("event_msg", {"type": "item_completed", "item": {
            "type": "AgentMessage", "content": [{"type": "Text", "text": "Stored."}]}}, 5),
        _codex("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Stored."}]}, 5),
        _codex("event_msg", {"type": "task_complete", "last_agent_message": "Stored."}, 6),
    ]


def test_codex_exec_prompt_is_its_user_message_item(tmp_path: Path) -> None:
    batch = read(tmp_path / "rollout.jsonl", "codex", _codex_session(user_message=False))
    assert exchanges(batch) == [("remember: the deploy key rotates every 90 days",
                                 ["→ remember: the deploy key", "Stored."])]


def test_codex_prompt_said_twice_is_one_exchange(tmp_path: Path) -> None:
    batch = read(tmp_path / "rollout.jsonl", "codex", _codex_session(user_message=True))
    assert [p for p, _ in exchanges(batch)] == [
        "remember: the deploy key rotates every 90 days"]


def test_gemini_prompt_after_the_hook_context_is_kept_without_it(tmp_path: Path) -> None:
    records = [
        {"sessionId": "4119238a", "projectHash": "a3", "startTime": "2026-12-05T05:58:44Z",
         "kind": "main"},
        {"id": "m0", "timestamp": "2026-12-05T05:58:44.449Z", "type": "user", "content": [
            {"text": "<session_context>\nThis is the Gemini CLI.\n</session_context>"}]},
        {"id": "m1", "timestamp": "2026-12-05T05:58:45.638Z", "type": "user", "content": [
            {"text": "<hook_context>Wake-up context of palace 'proj' (530 of 800 tokens)\n\n"
                     "## L1 · Essential\n- #18 [general/general] 2026-12-05\n  Note 14"
                     "</hook_context>\n\nHow often does the deploy key rotate?"}]},
        {"$set": {"lastUpdated": "2026-12-05T05:58:45.638Z"}},
        {"id": "m2", "timestamp": "2026-12-05T05:58:45.876Z", "type": "gemini",
         "content": "Noted.", "thoughts": [], "model": "gemini-2.5-flash"},
    ]
    batch = read(tmp_path / "session.jsonl", "gemini", records)
    assert exchanges(batch) == [("How often does the deploy key rotate?", ["Noted."])]
