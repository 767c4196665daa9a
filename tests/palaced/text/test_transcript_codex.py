"""Reading Codex CLI rollouts (``palaced.text.transcript_codex`` through
``palaced.text.exchanges``): the fixture in Codex CLI 0.171's format, record by record, and
incremental reads that resume mid-file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palaced.capture.drawers import room_name, to_drawer
from palaced.text.exchanges import Batch, TranscriptReader, open_transcript, records_for
from palaced.text.transcript import Answer, Malformed, Prompt, classify
from palaced.text.transcript_codex import CodexRecords, call_lines
from palaced.wire.errors import InvalidArgs
from tests.support.agent_transcripts import CodexSession

FIXTURE = Path(__file__).parents[2] / "fixtures" / "transcripts" / "codex-rollout.jsonl"
KEY = "sk-proj-Xq7vR2mN9pL4kT8wZ3cF6hJ1bD5sG0aE"


def read(path: Path, fmt: str = "codex", offset: int = 0, line: int = 0) -> Batch:
    with open_transcript(path) as fh:
        return TranscriptReader(fh, offset, line, 0, records_for(fmt)).next_batch(10_000)


def test_the_fixture_reads_as_four_exchanges_of_what_was_typed() -> None:
    batch = read(FIXTURE)
    exchanges = [*batch.complete, *([batch.tail] if batch.tail else [])]
    assert [e.prompt.text[:20] for e in exchanges] == [
        "The checkout tests t", "Put the staging Stri", "Übersetze die Fehler",
        "Which queue do we us"]
    assert (batch.malformed, batch.malformed_lines) == (1, [29])  # the line cut short
    first = exchanges[0]
    # The AGENTS.md and environment_context injections are no prompt; the reasoning, the
    # update_plan call, tool outputs and the agent_message copy are not kept.
    assert first.parts == ["→ Bash: pytest -q tests/checkout -x",
                           "→ Bash: grep -n port config/redis.toml",
                           "→ Edit config/redis.toml", "→ Bash: pytest -q tests/checkout",
                           first.parts[4]]
    assert first.parts[4].startswith("The root cause was the Redis port")
    assert first.prompt.session_id == "0199a3b2-7c4e-7d10-9f21-5e8b3c6a4d12"
    assert first.prompt.cwd == "/home/me/src/shop-api"
    assert first.prompt.at_ms is not None
    text = FIXTURE.read_text("utf-8")
    assert "AGENTS.md instructions" in text and "RAW" not in first.parts[4]
    assert all("AGENTS" not in p and "environment_context" not in p
               for e in exchanges for p in [e.prompt.text, *e.parts])
    assert "タイムアウト 🚀" in exchanges[2].prompt.text


def test_the_fixture_as_drawers_has_the_key_redacted() -> None:
    batch = read(FIXTURE)
    second = batch.complete[1]
    room = room_name(batch.complete[0], None, str(FIXTURE))
    assert room == "2025-09-14-the-checkout-tests-time-out-against-0199a3b2"
    cap = to_drawer(second, wing="shop-api", room=room, path=str(FIXTURE), limit=10_000)
    assert KEY not in cap.drawer.text and cap.redactions == 1
    assert "[REDACTED:openai_key]" in cap.drawer.text
    assert cap.drawer.source.endswith(f":{second.first_line}-{second.last_line}")


def _rec(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2025-09-14T08:00:00.000Z", "type": kind, "payload": payload}


@pytest.mark.parametrize(("record", "expected"), [
    (_rec("event_msg", {"type": "user_message", "message": "fix it", "images": ["data:x"]}),
     Prompt("fix it\n[image]", 1757836800000, None, None)),
    (_rec("event_msg", {"type": "user_message", "message": "<environment_context>x"}), None),
    (_rec("event_msg", {"type": "agent_message", "message": "copy"}), None),
    (_rec("event_msg", {"type": "token_count", "info": None}), None),
    (_rec("response_item", {"type": "message", "role": "user",
                             "content": [{"type": "input_text", "text": "fix it"}]}), None),
    (_rec("response_item", {"type": "message", "role": "developer",
                             "content": [{"type": "input_text", "text": "rules"}]}), None),
    (_rec("response_item", {"type": "message", "role": "assistant",
                             "content": [{"type": "output_text", "text": " ok "}]}),
     Answer(("ok",), 1757836800000)),
    (_rec("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "x"}),
     None),
    (_rec("response_item", {"type": "function_call_output", "call_id": "c", "output": "x"}),
     None),
    (_rec("response_item", {"type": "local_shell_call", "status": "completed",
                             "action": {"type": "exec", "command": ["ls", "-la"]}}),
     Answer(("→ Bash: ls -la",), 1757836800000)),
    (_rec("response_item", {"type": "web_search_call", "status": "completed",
                             "action": {"type": "search", "query": "redis 7.4 notes"}}),
     Answer(("→ WebSearch: redis 7.4 notes",), 1757836800000)),
    (_rec("compacted", {"message": "summary", "replacement_history": []}), None),
    (_rec("a_later_kind", {}), None),
])
def test_classify(record: dict[str, Any], expected: object) -> None:
    assert CodexRecords().classify(record) == expected


@pytest.mark.parametrize("record", [
    [], {"type": "event_msg"}, {"type": 3, "payload": {}}, {"payload": {}},
    _rec("event_msg", {"type": "user_message", "message": None}),
    _rec("response_item", {"type": "message", "role": "assistant", "content": "text"}),
    # Claude Code's and Gemini CLI's records are not Codex's.
    {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u1"},
    {"id": "m1", "type": "user", "content": [{"text": "hi"}], "timestamp": "x"},
])
def test_malformed_records(record: object) -> None:
    with pytest.raises(Malformed):
        CodexRecords().classify(record)


def test_a_codex_record_is_malformed_for_the_claude_reader() -> None:
    with pytest.raises(Malformed, match="format codex"):
        classify(_rec("event_msg", {"type": "user_message", "message": "hi"}))


def test_tool_lines() -> None:
    cwd = "/home/me/src/shop-api"
    assert call_lines("shell", {"command": ["bash", "-lc", "make  lint"]}, cwd) == [
        "→ Bash: make lint"]
    assert call_lines("exec_command", {"cmd": "cargo test"}, cwd) == ["→ Bash: cargo test"]
    assert call_lines("shell_command", {"command": "git status"}, cwd) == [
        "→ Bash: git status"]
    patch = ("*** Begin Patch\n*** Add File: /home/me/src/shop-api/docs/a.md\n+x\n"
             "*** Update File: src/b.py\n@@\n-x\n+y\n*** Delete File: old.txt\n*** End Patch")
    assert call_lines("apply_patch", {"input": patch}, cwd) == [
        "→ Write docs/a.md", "→ Edit src/b.py", "→ Delete: old.txt"]
    assert call_lines("apply_patch", {"input": "garbage"}, cwd) == ["→ apply_patch"]
    assert call_lines("update_plan", {"plan": []}, cwd) == []
    assert call_lines("mcp__github__create_issue", {"title": "Flaky test"}, cwd) == [
        "→ mcp__github__create_issue: Flaky test"]


def test_a_resumed_read_knows_the_session_from_the_first_line(tmp_path: Path) -> None:
    s = CodexSession(tmp_path, cwd="/home/me/src/shop-api")
    s.exchange("First question about the cache?", "The cache is Redis 7.")
    s.prompt("Second question: where is the config?")
    first = read(s.path)
    assert first.tail is not None and not first.tail.answered
    s.say("In config/app.toml.")
    again = read(s.path, offset=first.resume, line=first.resume_line)
    assert again.tail is not None and again.tail.parts == ["In config/app.toml."]
    # session_meta is line 1, before the offset: its id and cwd still reach the prompt.
    assert again.tail.prompt.session_id == s.session_id
    assert again.tail.prompt.cwd == "/home/me/src/shop-api"


def test_a_claude_transcript_read_as_codex_is_all_malformed() -> None:
    claude = Path(__file__).parents[2] / "fixtures" / "claude-code-session.jsonl"
    batch = read(claude, "codex")
    lines = [n for n, raw in enumerate(claude.read_bytes().split(b"\n"), 1) if raw.strip()]
    assert not batch.complete and batch.tail is None
    assert batch.malformed == len(lines)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(InvalidArgs, match="unknown transcript format"):
        records_for("cursor")
    assert json.loads(FIXTURE.read_text("utf-8").splitlines()[0])["type"] == "session_meta"


def test_a_subagents_rollout_yields_nothing(tmp_path: Path) -> None:
    """Codex writes a rollout per spawned sub-agent; its prompts are the parent agent's."""
    s = CodexSession(tmp_path)
    first = json.loads(s.path.read_text("utf-8"))
    first["payload"]["source"] = {"subagent": {"thread_spawn": {"parent_thread_id": "root",
                                                                "depth": 1}}}
    s.path.write_text(json.dumps(first) + "\n")
    s.exchange("Review the diff of src/app.py", "Two issues: a missing await, a stale import.")
    s.exchange("Summarize", "Done.")
    batch = read(s.path)
    assert (batch.complete, batch.tail, batch.malformed) == ([], None, 0)
    plain = CodexSession(tmp_path / "plain")
    plain.exchange("Review the diff of src/app.py", "Two issues.")
    assert read(plain.path).tail is not None
