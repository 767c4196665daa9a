"""Reading Claude Code transcripts (``palaced.text.transcript``, ``palaced.text.exchanges``,
``palaced.capture.drawers``): records to exchanges to drawers, on a fixture in Claude Code's format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from palaced.capture.drawers import answer_text, room_name, source_label, to_drawer
from palaced.text import exchanges as ex_mod
from palaced.text.exchanges import TranscriptReader, open_transcript
from palaced.text.transcript import Answer, Malformed, Prompt, classify, tool_line
from palaced.wire.errors import SourceUnreadable
from tests.support.transcripts import Session

FIXTURE = Path(__file__).parents[2] / "fixtures" / "claude-code-session.jsonl"


def read_all(path: Path, offset: int = 0, line: int = 0, scanned: int = 0
             ) -> ex_mod.Batch:
    with open_transcript(path) as fh:
        return TranscriptReader(fh, offset, line, scanned).next_batch(10_000)


def test_the_fixture_reads_as_two_exchanges_and_a_pending_prompt() -> None:
    batch = read_all(FIXTURE)
    assert batch.eof
    assert [(e.first_line, e.last_line) for e in batch.complete] == [(5, 13), (17, 18)]
    assert batch.tail is not None and batch.tail.first_line == 19 and not batch.tail.answered
    assert (batch.malformed, batch.malformed_lines) == (1, [16])  # a line cut short
    lines = FIXTURE.read_bytes().split(b"\n")
    assert batch.resume == sum(len(x) + 1 for x in lines[:18]) and batch.resume_line == 18
    first = batch.complete[0]
    # The /model command got no answer: dropped. Read, thinking, tool results: not kept.
    assert first.prompt.text.startswith("The staging tests fail")
    assert first.parts == ["→ Edit config/staging.toml", "→ Bash: pytest -q tests/staging",
                           first.parts[2]]
    assert first.parts[2].startswith("The root cause was the port")


def test_the_fixture_as_drawers() -> None:
    batch = read_all(FIXTURE)
    room = room_name(batch.complete[0], None, str(FIXTURE))
    assert room == "2025-06-01-the-staging-tests-fail-to-connect-3f2a9c1e"
    fix, pref = (to_drawer(e, wing="sessions", room=room, path=str(FIXTURE), limit=200_000)
                 for e in batch.complete)
    text = fix.drawer.text
    assert text.startswith("User: The staging tests fail to connect to Postgres.")
    assert "DB_PASSWORD=[REDACTED:password]" in text and "Tr0ub4dor" not in text
    assert fix.redactions == 1
    assert "\n\nAssistant: → Edit config/staging.toml\n→ Bash: pytest -q tests/staging\n\n" \
           "The root cause" in text
    for raw in ("RAW-TOOL-OUTPUT", "port = 5432\n", "look at the connection settings",
                "Search the repo"):
        assert raw not in text and raw not in pref.drawer.text
    assert fix.drawer.tags == ("fix", "config") and fix.drawer.importance == 0.55
    assert pref.drawer.tags == ("preference",) and pref.drawer.importance == 0.6
    assert fix.drawer.source == f"{FIXTURE}:5-13"
    assert fix.drawer.occurred_ms == 1748770260000  # 2025-06-01T09:31:00Z
    assert "fix" in fix.drawer.topics and "user" not in fix.drawer.topics


@pytest.mark.parametrize(("record", "expected"), [
    ({"type": "summary", "summary": "x", "leafUuid": "u"}, None),
    ({"type": "user", "message": {"role": "user", "content": "hi there"}},
     Prompt("hi there", None, None, None)),
    ({"type": "user", "isMeta": True, "message": {"role": "user", "content": "Caveat"}}, None),
    ({"type": "user", "isCompactSummary": True,
      "message": {"role": "user", "content": "This session is being continued"}}, None),
    ({"type": "user", "message": {"role": "user",
                                  "content": [{"type": "text", "text": "[Request interrupted "
                                               "by user for tool use]"}]}}, None),
    ({"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "what is in"}, {"type": "image", "source": {}}]}},
     Prompt("what is in\n\n[image]", None, None, None)),
    ({"type": "user", "message": {"role": "user", "content":
                                  "<command-name>/review</command-name><command-args>PR 12"
                                  "</command-args>"}}, Prompt("/review PR 12", None, None, None,
                                                              command=True)),
    ({"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": "t"}]}},
     None),
    ({"type": "assistant", "message": {"content": [
        {"type": "text", "text": "Done."},
        {"type": "tool_use", "name": "Grep", "input": {"pattern": "x"}},
        {"type": "tool_use", "name": "Write", "input": {"file_path": "/p/a.py"}}]}},
     Answer(("Done.", "→ Write /p/a.py"), None)),
    ({"type": "assistant", "isSidechain": True, "message": {"content": "sub"}}, None),
])
def test_classify(record: dict[str, object], expected: object) -> None:
    assert classify(record) == expected


@pytest.mark.parametrize("record", [[1, 2], {"message": {}}, {"type": 3},
                                    {"type": "user", "message": "text"},
                                    {"type": "assistant", "message": {"content": 7}}])
def test_malformed_records(record: object) -> None:
    with pytest.raises(Malformed):
        classify(record)


def test_tool_lines() -> None:
    assert tool_line("Edit", {"file_path": "/w/p/src/app.py"}, "/w/p") == "→ Edit src/app.py"
    assert tool_line("Bash", {"command": "pytest -q\n  -x"}) == "→ Bash: pytest -q -x"
    assert tool_line("Task", {"description": "Find ports"}) == "→ Task: Find ports"
    assert tool_line("mcp__palace__recall", {"query": "ports"}) == (
        "→ mcp__palace__recall: ports")
    assert tool_line("Read", {"file_path": "/x"}) is None
    assert len(tool_line("Bash", {"command": "x" * 500}) or "") < 140
    assert answer_text(["a", "→ Edit x", "→ Edit x", "→ Bash: y", "b"]) == (
        "a\n\n→ Edit x (×2)\n→ Bash: y\n\nb")
    assert source_label("/" + "d" * 300 + ".jsonl", 1, 20).endswith(".jsonl:1-20")
    assert len(source_label("/" + "d" * 300, 1, 20)) == 200


def test_incremental_reads_resume_at_the_open_exchange(tmp_path: Path) -> None:
    s = Session(tmp_path / "s.jsonl")
    s.exchange("first question here", "first answer")
    s.prompt("second question")
    batch = read_all(s.path)
    assert [e.prompt.text for e in batch.complete] == ["first question here"]
    assert batch.tail is not None and not batch.tail.answered
    s.say("second answer")
    s.write('{"type":"user","message":{"role":"user","content":"third, still being wri')
    later = read_all(s.path, batch.resume, batch.resume_line)
    assert later.complete == [] and later.tail is not None
    assert later.tail.prompt.text == "second question" and later.tail.parts == ["second answer"]
    assert later.malformed == 1  # a newline ends the cut line: malformed, not pending


def test_a_last_line_without_newline_counts_only_when_whole(tmp_path: Path) -> None:
    s = Session(tmp_path / "s.jsonl")
    s.exchange("question one", "answer one")
    with s.path.open("a") as fh:
        fh.write('{"type":"user","message":{"role":"user","content":"question tw')
    batch = read_all(s.path)
    assert batch.malformed == 0 and batch.tail is not None
    assert batch.tail.prompt.text == "question one"
    with s.path.open("a") as fh:
        fh.write('o"}}')  # now whole, still without its newline
    batch = read_all(s.path)
    assert [e.prompt.text for e in batch.complete] == ["question one"]
    assert batch.tail is not None and batch.tail.prompt.text == "question two"


def test_duplicate_records_long_lines_and_truncation(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(tmp_path / "s.jsonl")
    s.exchange("question one", "answer one")
    lines = s.path.read_text().splitlines()
    s.write(lines[1])  # the same assistant record again (same uuid): ignored
    s.write(json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 500}}))
    s.exchange("question two", "answer two")
    batch = read_all(s.path)
    assert batch.complete[0].parts == ["answer one"] and batch.malformed == 0
    assert [e.prompt.text for e in batch.complete] == ["question one", "x" * 500]
    # A file shorter than the offset was replaced: it is read from its start.
    assert read_all(s.path, os.path.getsize(s.path) + 100, 99).complete[0].first_line == 1
    monkeypatch.setattr(ex_mod, "MAX_LINE", 64)
    monkeypatch.setattr(ex_mod, "BLOCK", 16)
    batch = read_all(s.path)  # every record is longer than 64 bytes now: skipped, counted
    assert batch.malformed_lines == [1, 2, 3, 4, 5, 6] and batch.complete == []
    assert batch.resume == os.path.getsize(s.path)


def test_only_regular_readable_files_are_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((tmp_path, "not a regular file"), (fifo, "not a regular file"),
                      (tmp_path / "missing.jsonl", "no such file")):
        with pytest.raises(SourceUnreadable, match=why):
            open_transcript(path)
