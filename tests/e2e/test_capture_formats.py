"""Capturing Codex CLI, Gemini CLI and Copilot CLI sessions through a real daemon:
``capture.transcript``
with ``format`` on the fixtures (twice: the second stores nothing), appended to (only the
new exchange is stored), the planted key redacted in the stored drawers; ``palace import
codex|gemini|copilot`` from where those agents keep their sessions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import InvalidArgs
from tests.conftest import DaemonProc, fresh_name
from tests.support.agent_transcripts import CodexSession, CopilotSession, GeminiSession

pytestmark = pytest.mark.daemon

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
KEY = "sk-proj-Xq7vR2mN9pL4kT8wZ3cF6hJ1bD5sG0aE"
CODEX_ID = "0199a3b2-7c4e-7d10-9f21-5e8b3c6a4d12"
GEMINI_ID = "6f1d2c3b-9a8e-4b7c-8d6e-2f1a0b9c8d7e"
COPILOT_ID = "a3f0c9d2-5b1e-4c7a-9e84-0d6b2f1c7e55"
CORRUPT_LINE = {"codex": 29, "gemini": 28, "copilot": 22}


def _codex_layout(root: Path) -> Path:
    """The Codex fixture where Codex CLI keeps it: ``<CODEX_HOME>/sessions/YYYY/MM/DD/``."""
    path = root / "sessions" / "2025" / "09" / "14" / (
        f"rollout-2025-09-14T08-00-00-{CODEX_ID}.jsonl")
    path.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "codex-rollout.jsonl", path)
    return path


def _gemini_layout(root: Path) -> Path:
    """The Gemini fixture where Gemini CLI keeps it: ``~/.gemini/tmp/<project>/chats/``."""
    path = root / ".gemini" / "tmp" / "shop-api" / "chats" / (
        f"session-2025-09-14T08-00-{GEMINI_ID[:8]}.jsonl")
    path.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "gemini-session.jsonl", path)
    return path


def _copilot_layout(root: Path) -> Path:
    """The Copilot fixture where Copilot CLI keeps it: ``~/.copilot/session-state/<id>/``."""
    path = root / "session-state" / COPILOT_ID / "events.jsonl"
    path.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "copilot-events.jsonl", path)
    return path


LAYOUTS = {"codex": _codex_layout, "gemini": _gemini_layout, "copilot": _copilot_layout}


def _append(fmt: str, path: Path, scratch: Path) -> None:
    """One more exchange at the end of the session file, as the agent would write it."""
    writer: CodexSession | GeminiSession | CopilotSession
    if fmt == "codex":
        writer = CodexSession(scratch)
        writer.turns = 5  # not a first turn: no injections
    elif fmt == "gemini":
        writer = GeminiSession(scratch)
    else:
        writer = CopilotSession(scratch)
    writer.path = path
    writer.clock = writer.clock.replace(hour=9)
    writer.exchange("Which port does the admin UI use?", "The admin UI listens on port 8443.")


def texts(d: DaemonProc, palace: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return list(c.drawers(palace, limit=1000)["drawers"])


@pytest.mark.parametrize(("fmt", "session_id"), [("codex", CODEX_ID), ("gemini", GEMINI_ID),
                                                 ("copilot", COPILOT_ID)])
def test_capture_is_incremental_idempotent_and_redacted(shared_keyword_daemon: DaemonProc,
                                                        tmp_path: Path, fmt: str,
                                                        session_id: str) -> None:
    d = shared_keyword_daemon
    palace = fresh_name(fmt)
    path = LAYOUTS[fmt](tmp_path)
    args = {"format": fmt, "session_id": session_id, "wait": True, "create": True}
    with d.client() as c:
        first = c.capture_transcript(palace, str(path), **args)
        assert (first["exchanges"], first["drawers"], first["skipped"]) == (4, 4, 1)
        assert first["redactions"] >= 1 and first["format"] == fmt
        assert first["key"] == f"{fmt}:{session_id}"
        again = c.capture_transcript(palace, str(path), **args)
        assert (again["exchanges"], again["drawers"], again["skipped"]) == (0, 0, 0)
    stored = texts(d, palace)
    assert len(stored) == 4
    joined = "\n".join(x["text"] for x in stored)
    assert KEY not in joined and "[REDACTED:openai_key]" in joined
    # What the agent injected, its reasoning and tool output are not memories.
    for left_out in ("AGENTS.md", "environment_context", "mocks the clock", "42 passed",
                     "expected 2025-01-01", "Checking the Redis settings", "current_datetime",
                     "Looking for the body size", "client_max_body_size 1m;"):
        assert left_out not in joined, left_out
    assert {x["room"] for x in stored} == {first["room"]}

    _append(fmt, path, tmp_path / "scratch")
    with d.client() as c:
        grown = c.capture_transcript(palace, str(path), **args)
    # The previous last exchange was stored open; it is closed now, unchanged: one new drawer.
    assert (grown["exchanges"], grown["drawers"], grown["skipped"]) == (1, 1, 0)
    newest = texts(d, palace)
    assert len(newest) == 5
    assert any("port 8443" in x["text"] and x["room"] == first["room"] for x in newest)


def test_formats_do_not_share_capture_state(shared_keyword_daemon: DaemonProc,
                                            tmp_path: Path) -> None:
    """A Claude Code and a Codex session of the same id are two transcripts: each its room."""
    d = shared_keyword_daemon
    palace = fresh_name("mixed")
    claude = tmp_path / "claude.jsonl"
    shutil.copy(FIXTURES.parent / "claude-code-session.jsonl", claude)
    codex = _codex_layout(tmp_path)
    with d.client() as c:
        a = c.capture_transcript(palace, str(claude), session_id="same", wait=True,
                                 create=True)
        b = c.capture_transcript(palace, str(codex), session_id="same", format="codex",
                                 wait=True)
    assert a["key"] == "same" and b["key"] == "codex:same"
    assert a["room"] != b["room"] and b["drawers"] == 4


def test_a_file_in_another_format_is_malformed_not_stored(shared_keyword_daemon: DaemonProc,
                                                          tmp_path: Path) -> None:
    d = shared_keyword_daemon
    palace = fresh_name("wrong")
    codex = _codex_layout(tmp_path)
    lines = sum(1 for x in codex.read_text("utf-8").splitlines() if x.strip())
    with d.client() as c:
        as_claude = c.capture_transcript(palace, str(codex), wait=True, create=True)
        as_gemini = c.capture_transcript(palace, str(codex), format="gemini", wait=True)
        assert (as_claude["exchanges"], as_claude["skipped"]) == (0, lines)
        assert (as_gemini["exchanges"], as_gemini["skipped"]) == (0, lines)
        with pytest.raises(InvalidArgs, match="unknown transcript format"):
            c.capture_transcript(palace, str(codex), format="cursor", wait=True)
        assert c.palace_info(palace)["drawers"] == 0


@pytest.mark.parametrize("fmt", ["codex", "gemini", "copilot"])
def test_import_from_the_agents_default_location(shared_keyword_daemon: DaemonProc,
                                                 tmp_path: Path, fmt: str) -> None:
    """`palace import codex|gemini|copilot` without PATH: $CODEX_HOME/sessions, the .gemini/tmp
    of $GEMINI_CLI_HOME, $COPILOT_HOME/session-state; one wing per project; a second run stores
    nothing."""
    d = shared_keyword_daemon
    palace = fresh_name(f"imp-{fmt}")
    LAYOUTS[fmt](tmp_path)
    home = {"codex": "CODEX_HOME", "gemini": "GEMINI_CLI_HOME", "copilot": "COPILOT_HOME"}
    env = {**d.env, home[fmt]: str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "palace_client", "import", fmt,
                               "--palace", palace, *args], env=env, capture_output=True,
                              text=True, timeout=120)

    dry = cli("--dry-run", "--json")
    assert dry.returncode == 10, dry.stderr
    assert json.loads(dry.stdout)["records"] == 4
    res = cli("--json")
    assert res.returncode == 10, res.stderr  # the corrupt line, listed
    report = json.loads(res.stdout)
    assert (report["importer"], report["read"], report["stored"], report["redacted"]) == (
        fmt, 1, 4, 1)
    assert [p["line"] for p in report["problems"]] == [CORRUPT_LINE[fmt]]
    assert {x["wing"] for x in texts(d, palace)} == {"shop-api"}
    again = cli()
    assert again.returncode == 0, again.stderr
    assert "0 stored" in again.stdout


def test_an_older_gemini_chat_document_is_captured_by_message(shared_keyword_daemon: DaemonProc,
                                                              tmp_path: Path) -> None:
    """A Gemini CLI chat of the releases before JSONL: one document rewritten per message,
    captured by message index (twice: nothing new; rewritten longer: only the new exchange)."""
    d = shared_keyword_daemon
    palace = fresh_name("gemini-doc")
    path = tmp_path / "chats" / f"session-2025-09-14T08-00-{GEMINI_ID[:8]}.json"
    path.parent.mkdir(parents=True)
    doc = json.loads((FIXTURES / "gemini-session-legacy.json").read_text("utf-8"))
    path.write_text(json.dumps(doc, indent=2))
    args = {"format": "gemini", "session_id": GEMINI_ID, "wait": True, "create": True}
    with d.client() as c:
        first = c.capture_transcript(palace, str(path), **args)
        assert (first["exchanges"], first["skipped"], first["skipped_lines"]) == (4, 1, [5])
        again = c.capture_transcript(palace, str(path), **args)
        assert (again["exchanges"], again["drawers"]) == (0, 0)
        doc["messages"] += [
            {"id": "u-new", "timestamp": "2025-09-14T09:00:00.000Z", "type": "user",
             "content": [{"text": "Which port does the admin UI use?"}]},
            {"id": "g-new", "timestamp": "2025-09-14T09:00:05.000Z", "type": "gemini",
             "content": "The admin UI listens on port 8443.", "thoughts": []}]
        path.write_text(json.dumps(doc, indent=2))
        grown = c.capture_transcript(palace, str(path), **args)
        assert (grown["exchanges"], grown["drawers"]) == (1, 1)
    stored = texts(d, palace)
    assert len(stored) == 5 and KEY not in "\n".join(x["text"] for x in stored)
    assert any("port 8443" in x["text"] for x in stored)
