"""Reading Gemini CLI chat recordings (``palaced.text.transcript_gemini`` through
``palaced.text.exchanges``): the fixture in Gemini CLI 0.61's JSONL format, messages appended
again as they grow, and incremental reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palaced.capture.drawers import room_name, to_drawer
from palaced.text.exchanges import Batch, TranscriptReader, open_transcript, records_for
from palaced.text.transcript import Answer, Malformed, Prompt
from palaced.text.transcript_gemini import GeminiRecords, call_line
from tests.support.agent_transcripts import GeminiSession

FIXTURE = Path(__file__).parents[2] / "fixtures" / "transcripts" / "gemini-session.jsonl"
KEY = "sk-proj-Xq7vR2mN9pL4kT8wZ3cF6hJ1bD5sG0aE"


def read(path: Path, offset: int = 0, line: int = 0) -> Batch:
    with open_transcript(path) as fh:
        return TranscriptReader(fh, offset, line, 0, records_for("gemini")).next_batch(10_000)


def test_the_fixture_reads_as_four_exchanges() -> None:
    batch = read(FIXTURE)
    exchanges = [*batch.complete, *([batch.tail] if batch.tail else [])]
    assert [e.prompt.text[:20] for e in exchanges] == [
        "Why does `npm test` ", "Summarize @docs/depl", "Erkläre kurz: was he",
        "Which database runs "]
    assert (batch.malformed, batch.malformed_lines) == (1, [28])  # the line cut short
    first = exchanges[0]
    # The model message was appended 5 times as it grew (tokens, then each tool call): read
    # once, its last copy. The thought, read_file, tool results: not kept.
    assert first.parts == [
        "Let me run the payments tests first.", "→ Bash: npm test -- payments",
        "→ Edit /home/me/src/shop-api/src/payments/refund.ts", first.parts[3]]
    assert first.parts[3].startswith("The bug was a timezone slip")
    assert not any("mocks the clock" in p for e in exchanges for p in e.parts)
    assert first.prompt.session_id == "6f1d2c3b-9a8e-4b7c-8d6e-2f1a0b9c8d7e"
    # What was typed (displayContent), not the @file expansion sent to the model.
    assert "Content from referenced files" not in exchanges[1].prompt.text
    assert "日本語でも 🙂" in exchanges[2].prompt.text


def test_the_fixture_as_drawers_has_the_key_redacted() -> None:
    batch = read(FIXTURE)
    room = room_name(batch.complete[0], None, str(FIXTURE))
    assert room == "2025-09-14-why-does-npm-test-fail-on-6f1d2c3b"
    cap = to_drawer(batch.complete[1], wing="shop-api", room=room, path=str(FIXTURE),
                    limit=10_000)
    assert KEY not in cap.drawer.text and "[REDACTED:openai_key]" in cap.drawer.text


def _msg(kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"id": "m1", "timestamp": "2025-09-14T08:00:00.000Z", "type": kind,
            "content": content, **extra}


T = 1757836800000


@pytest.mark.parametrize(("record", "expected"), [
    (_msg("user", "fix it"), Prompt("fix it", T, None, None, False, "m1")),
    (_msg("user", [{"text": "see"}, {"inlineData": {"mimeType": "image/png"}}]),
     Prompt("see\n\n[image]", T, None, None, False, "m1")),
    (_msg("user", [{"text": "x"}], displayContent=[{"text": "typed"}]),
     Prompt("typed", T, None, None, False, "m1")),
    (_msg("user", "/memory show"), Prompt("/memory show", T, None, None, True, "m1")),
    (_msg("user", [{"functionResponse": {"name": "ls", "response": {}}}]), None),
    (_msg("user", "<session_context>\ncwd: /x"), None),
    (_msg("user", "<state_snapshot>summary</state_snapshot>"), None),
    (_msg("gemini", [{"text": "plan", "thought": True}, {"text": "Done."}]),
     Answer(("Done.",), T, "m1")),
    (_msg("gemini", "", toolCalls=[{"name": "write_file", "args": {"file_path": "a.py"}}],
          thoughts=[{"subject": "s", "description": "d"}]),
     Answer(("→ Write a.py",), T, "m1")),
    (_msg("gemini", "", thoughts=[{"subject": "s", "description": "d"}]), None),
    (_msg("info", "Switched model"), None),
    (_msg("error", "Quota exceeded"), None),
    ({"sessionId": "s1", "projectHash": "ab", "startTime": "x"}, None),
    ({"$set": {"lastUpdated": "x"}}, None),
    ({"$rewindTo": "m1"}, None),
])
def test_classify(record: dict[str, Any], expected: object) -> None:
    assert GeminiRecords().classify(record) == expected


@pytest.mark.parametrize("record", [
    [], "text", {"type": "user"}, _msg("user", 3), {"id": "m1", "type": "user"},
    # Claude Code's and Codex CLI's records are not Gemini CLI's.
    {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u1",
     "sessionId": "s"},
    {"timestamp": "x", "type": "event_msg", "payload": {"type": "user_message"}},
])
def test_malformed_records(record: object) -> None:
    with pytest.raises(Malformed):
        GeminiRecords().classify(record)


def test_tool_lines() -> None:
    assert call_line({"name": "run_shell_command", "args": {"command": "npm ci"}}) == (
        "→ Bash: npm ci")
    assert call_line({"name": "web_fetch",
                      "args": {"prompt": "Summarize https://example.com/a please"}}) == (
        "→ WebFetch https://example.com/a")
    assert call_line({"name": "google_web_search", "args": {"query": "vite 6"}}) == (
        "→ WebSearch: vite 6")
    assert call_line({"name": "read_many_files", "args": {"paths": ["a"]}}) is None
    assert call_line({"name": "save_memory", "args": {"fact": "uses pnpm"}}) == (
        "→ save_memory: uses pnpm")
    assert call_line("nonsense") is None


def test_a_message_grown_after_a_capture_replaces_its_parts(tmp_path: Path) -> None:
    s = GeminiSession(tmp_path)
    s.prompt("Add a health endpoint")
    s.say("Adding it now.")
    first = read(s.path)
    assert first.tail is not None and first.tail.parts == ["Adding it now."]
    s.tool("write_file", {"file_path": "src/health.ts", "content": "x"}, "ok")
    s.say("Added GET /health.")
    again = read(s.path, offset=first.resume, line=first.resume_line)
    assert again.tail is not None
    assert again.tail.parts == ["Adding it now.", "→ Write src/health.ts", "Added GET /health."]
    assert again.tail.prompt.session_id == s.session_id  # from the first line, before offset


# -- the whole-document chats of Gemini CLI before its JSONL recording -------------------------
LEGACY = FIXTURE.parent / "gemini-session-legacy.json"


def test_a_legacy_document_reads_message_by_message() -> None:
    batch = read(LEGACY)
    exchanges = [*batch.complete, *([batch.tail] if batch.tail else [])]
    assert [e.prompt.text[:20] for e in exchanges] == [
        "Why does `npm test` ", "Summarize @docs/depl", "Erkläre kurz: was he",
        "Which database runs "]
    assert (batch.malformed, batch.malformed_lines) == (1, [5])  # message 5: content 42
    assert exchanges[0].parts[:2] == ["Let me run the payments tests first.",
                                      "→ Bash: npm test -- payments"]
    # Offsets and lines count messages: the tail starts at message index 10 (line 11).
    assert (batch.resume, batch.resume_line) == (10, 10)
    assert exchanges[-1].first_line == 11 and exchanges[0].prompt.session_id == (
        "6f1d2c3b-9a8e-4b7c-8d6e-2f1a0b9c8d7e")


def test_a_legacy_document_rewritten_is_read_from_the_stored_index(tmp_path: Path) -> None:
    doc = json.loads(LEGACY.read_text("utf-8"))
    path = tmp_path / "session-2025-09-14T08-00-6f1d2c3b.json"
    path.write_text(json.dumps(doc, indent=2))
    first = read(path)
    # Gemini CLI rewrites the whole document: the last answer grows, a new exchange follows.
    doc["messages"][-1]["content"] += " Its replica runs on port 5434."
    doc["messages"] += [
        {"id": "u-new", "timestamp": "2025-09-14T09:00:00.000Z", "type": "user",
         "content": [{"text": "And production?"}]},
        {"id": "g-new", "timestamp": "2025-09-14T09:00:05.000Z", "type": "gemini",
         "content": "Production runs PostgreSQL 16 on a managed cluster."}]
    path.write_text(json.dumps(doc, indent=2))
    again = read(path, offset=first.resume, line=first.resume_line)
    assert [e.prompt.text for e in again.complete] == ["Which database runs in staging?"]
    assert again.complete[0].parts == [
        "Staging runs PostgreSQL 16 on port 5433. Its replica runs on port 5434."]
    assert again.tail is not None and again.tail.first_line == 13
    assert again.tail.prompt.session_id == doc["sessionId"]  # from the document's metadata
    assert again.malformed == 0  # message 5 was reported by the first read


def test_legacy_documents_broken_or_too_large(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from palaced.text import exchanges
    from palaced.wire.errors import SourceUnreadable

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "sessionId": "s",\n  "messages": [\n')
    batch = read(broken)
    assert (batch.malformed, batch.malformed_lines, batch.tail) == (1, [1], None)
    monkeypatch.setattr(exchanges, "MAX_DOCUMENT", 1000)
    with pytest.raises(SourceUnreadable, match="larger than"):
        read(LEGACY)
    # A JSONL chat (its first line is the metadata, without messages) is no document.
    assert read(FIXTURE).malformed == 1
