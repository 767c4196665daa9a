"""Reading GitHub Copilot CLI session logs (``palaced.text.transcript_copilot`` through
``palaced.text.exchanges``): the fixture in Copilot CLI 1.0.102's ``events.jsonl`` format,
event by event, and a resumed read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from palaced.capture.drawers import to_drawer
from palaced.text.exchanges import Batch, TranscriptReader, open_transcript, records_for
from palaced.text.transcript import Answer, Malformed, Prompt
from palaced.text.transcript_copilot import CopilotRecords, call_line
from tests.support.agent_transcripts import CopilotSession

FIXTURE = Path(__file__).parents[2] / "fixtures" / "transcripts" / "copilot-events.jsonl"
KEY = "sk-proj-Xq7vR2mN9pL4kT8wZ3cF6hJ1bD5sG0aE"


def read(path: Path, offset: int = 0, line: int = 0) -> Batch:
    with open_transcript(path) as fh:
        return TranscriptReader(fh, offset, line, 0, records_for("copilot")).next_batch(1000)


def test_the_fixture_reads_as_four_exchanges() -> None:
    batch = read(FIXTURE)
    exchanges = [*batch.complete, *([batch.tail] if batch.tail else [])]
    assert [e.prompt.text[:20] for e in exchanges] == [
        "The image upload fai", "Also set the OpenAI ", "Wie heißt die Größen",
        "Which CDN serves the"]
    assert (batch.malformed, batch.malformed_lines) == (1, [22])  # the line cut short
    first = exchanges[0]
    # report_intent and view only look; the reasoning, the transformedContent sent to the
    # model and the tool results are not kept.
    assert first.parts == ["→ Bash: grep -rn client_max_body_size deploy/",
                           "→ Edit deploy/nginx.conf", first.parts[2]]
    assert first.parts[2].startswith("The cause was nginx's client_max_body_size")
    assert first.prompt.cwd == "/home/me/src/shop-api"
    assert first.prompt.session_id == "a3f0c9d2-5b1e-4c7a-9e84-0d6b2f1c7e55"
    assert not any("current_datetime" in e.prompt.text or "Looking for the body size" in p
                   for e in exchanges for p in e.parts)
    cap = to_drawer(exchanges[1], wing="w", room="r", path=str(FIXTURE), limit=10_000)
    assert KEY not in cap.drawer.text and "[REDACTED:" in cap.drawer.text


def _event(kind: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, "id": "e1", "timestamp": "2025-09-14T08:00:00.000Z",
            "parentId": None, **extra}


T = 1757836800000


@pytest.mark.parametrize(("record", "expected"), [
    (_event("user.message", {"content": "fix it", "transformedContent": "<x/>fix it"}),
     Prompt("fix it", T, None, None, False, "e1")),
    (_event("user.message", {"content": "see", "attachments": [{"type": "file"}]}),
     Prompt("see\n[attachment]", T, None, None, False, "e1")),
    (_event("user.message", {"content": "use the pdf skill", "source": "skill-pdf"}), None),
    (_event("user.message", {"content": "go on", "isAutopilotContinuation": True}), None),
    (_event("assistant.message", {"messageId": "m", "content": " Done. ",
                                  "reasoningText": "hmm"}), Answer(("Done.",), T, "e1")),
    (_event("assistant.message", {"messageId": "m", "content": "x"}, agentId="sub-1"), None),
    (_event("assistant.message", {"messageId": "m", "content": "", "reasoningText": "r"}),
     None),
    (_event("tool.execution_complete", {"toolCallId": "t", "success": True}), None),
    (_event("session.shutdown", {}), None),
])
def test_classify(record: dict[str, Any], expected: object) -> None:
    assert CopilotRecords().classify(record) == expected


@pytest.mark.parametrize("record", [
    [], {"type": "user.message", "data": {"content": "x"}},
    {"type": "user.message", "id": "e", "data": "x"},
    _event("user.message", {"content": None}),
    {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u1"},
    {"timestamp": "x", "type": "event_msg", "payload": {"type": "user_message"}},
])
def test_malformed_records(record: object) -> None:
    with pytest.raises(Malformed):
        CopilotRecords().classify(record)


def test_tool_lines() -> None:
    cwd = "/home/me/src/app"
    assert call_line({"name": "bash", "arguments": {"command": "npm ci"}}) == "→ Bash: npm ci"
    assert call_line({"name": "create", "arguments": {"path": f"{cwd}/a.ts"}}, cwd) == (
        "→ Write a.ts")
    assert call_line({"name": "view", "arguments": {"path": "a"}}) is None
    assert call_line({"name": "github-mcp-server-list_issues",
                      "arguments": {"repo": "me/app"}}) == (
        "→ github-mcp-server-list_issues: me/app")


def test_a_resumed_read_knows_the_session_from_the_first_line(tmp_path: Path) -> None:
    s = CopilotSession(tmp_path, cwd="/home/me/src/app")
    s.exchange("Where is the router?", "In src/router.ts.")
    s.prompt("And the tests?")
    first = read(s.path)
    s.say("In tests/router.test.ts.")
    again = read(s.path, offset=first.resume, line=first.resume_line)
    assert again.tail is not None and again.tail.parts == ["In tests/router.test.ts."]
    assert again.tail.prompt.cwd == "/home/me/src/app"
    assert again.tail.prompt.session_id == s.session_id
