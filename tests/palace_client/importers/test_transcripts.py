"""Finding agents' session files for ``palace import claude-code|codex|gemini|copilot``
(``palace_client.importers.transcripts``): each agent's layout, its session ids and wings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from palace_client.importers.transcripts import AGENTS, fallback_wing, find_transcripts
from palaced.wire.errors import SourceUnreadable

FIXTURES = Path(__file__).parents[2] / "fixtures" / "transcripts"
GEMINI_ID = "6f1d2c3b-9a8e-4b7c-8d6e-2f1a0b9c8d7e"


def test_gemini_finds_chats_and_older_documents_but_not_converted_ones(tmp_path: Path) -> None:
    gemini = AGENTS["gemini"]
    chats = tmp_path / ".gemini" / "tmp" / "shop-api" / "chats"
    chats.mkdir(parents=True)
    # An older document, and one Gemini CLI converted to JSONL beside it on resuming it.
    old = chats / "session-2025-06-01T10-00-11111111.json"
    shutil.copy(FIXTURES / "gemini-session-legacy.json", old)
    converted = chats / f"session-2025-09-14T08-00-{GEMINI_ID[:8]}.json"
    shutil.copy(FIXTURES / "gemini-session-legacy.json", converted)
    shutil.copy(FIXTURES / "gemini-session.jsonl", converted.with_suffix(".jsonl"))
    (chats / GEMINI_ID).mkdir()  # a subagent's chats: not sessions of their own
    (chats / GEMINI_ID / "abc.jsonl").write_text("{}\n")
    for where in (tmp_path / ".gemini" / "tmp", chats.parent, chats):
        assert find_transcripts(where, gemini) == [old, converted.with_suffix(".jsonl")]
    assert [gemini.session_id(p) for p in (old, converted.with_suffix(".jsonl"))] == [
        GEMINI_ID, GEMINI_ID]  # from the document's top and the metadata line
    assert fallback_wing(old, gemini) == "shop-api"


def test_codex_finds_rollouts_at_any_depth(tmp_path: Path) -> None:
    codex = AGENTS["codex"]
    day = tmp_path / "sessions" / "2025" / "09" / "14"
    day.mkdir(parents=True)
    rollout = day / "rollout-2025-09-14T08-00-00-0199a3b2-7c4e-7d10-9f21-5e8b3c6a4d12.jsonl"
    rollout.write_text("{}\n")
    (day / "notes.jsonl").write_text("{}\n")
    assert find_transcripts(tmp_path / "sessions", codex) == [rollout]
    assert codex.session_id(rollout) == "0199a3b2-7c4e-7d10-9f21-5e8b3c6a4d12"


def test_copilot_finds_session_logs(tmp_path: Path) -> None:
    copilot = AGENTS["copilot"]
    log = tmp_path / "session-state" / "a3f0c9d2" / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("{}\n")
    assert find_transcripts(tmp_path / "session-state", copilot) == [log]
    assert find_transcripts(log.parent, copilot) == [log]
    assert (copilot.session_id(log), fallback_wing(log, copilot)) == ("a3f0c9d2", "sessions")
    with pytest.raises(SourceUnreadable, match="no Copilot CLI transcripts"):
        find_transcripts(tmp_path / "nowhere", copilot)
