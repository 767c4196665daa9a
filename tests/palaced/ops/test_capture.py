"""``capture.transcript`` through the daemon core (in-process, hashing embedder): incremental,
idempotent, open exchanges replaced as they grow, typed errors for bad input."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import InvalidArgs, PalaceNotFound, SourceUnreadable
from tests.support.inproc import InProcDaemon
from tests.support.transcripts import Session

FIXTURE = Path(__file__).parents[2] / "fixtures" / "claude-code-session.jsonl"


def capture(d: InProcDaemon, palace: str, s: Session, **args: Any) -> dict[str, Any]:
    with d.client() as c:
        return c.capture_transcript(palace, s.path, session_id=s.session_id,
                                    **{"wait": True, "create": True, **args})


def drawers(d: InProcDaemon, palace: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return list(reversed(c.drawers(palace, limit=1000)["drawers"]))


def test_repeats_store_nothing_and_appends_store_only_what_is_new(
        inproc: InProcDaemon, tmp_path: Path) -> None:
    s = Session(tmp_path / "a.jsonl")
    for i in range(3):
        s.exchange(f"question number {i}", f"answer number {i}")
    first = capture(inproc, "cap-incr", s)
    assert (first["exchanges"], first["drawers"], first["pending"]) == (3, 3, False)
    assert capture(inproc, "cap-incr", s)["exchanges"] == 0
    s.exchange("question number 3", "answer number 3")
    s.prompt("question number 4")  # no answer yet: left for later
    later = capture(inproc, "cap-incr", s)
    assert (later["exchanges"], later["drawers"], later["replaced"]) == (1, 1, 0)
    assert later["pending"] is True
    s.say("answer number 4")
    assert capture(inproc, "cap-incr", s)["exchanges"] == 1
    texts = [d["text"] for d in drawers(inproc, "cap-incr")]
    assert texts == [f"User: question number {i}\n\nAssistant: answer number {i}"
                     for i in range(5)]
    rooms = {d["room"] for d in drawers(inproc, "cap-incr")}
    assert rooms == {f"2025-06-01-question-number-0-{s.session_id[:8]}"}


def test_an_open_exchange_that_grows_replaces_its_drawer(inproc: InProcDaemon,
                                                         tmp_path: Path) -> None:
    s = Session(tmp_path / "b.jsonl")
    s.prompt("deploy the service")
    s.say("Starting the deploy.")
    assert capture(inproc, "cap-grow", s)["drawers"] == 1
    s.tool("Bash", {"command": "make deploy"}, "RAW-DEPLOY-LOG ok")
    s.say("Deployed version 2.4.1.")
    grown = capture(inproc, "cap-grow", s)
    assert (grown["exchanges"], grown["replaced"]) == (1, 1)
    (only,) = drawers(inproc, "cap-grow")
    assert only["text"] == ("User: deploy the service\n\nAssistant: Starting the deploy.\n\n"
                            "→ Bash: make deploy\n\nDeployed version 2.4.1.")
    s.exchange("thanks", "You're welcome.")  # the open one is complete now, unchanged
    closed = capture(inproc, "cap-grow", s)
    assert (closed["exchanges"], closed["replaced"]) == (1, 0)
    assert [d["text"][:20] for d in drawers(inproc, "cap-grow")] == [
        "User: deploy the ser", "User: thanks\n\nAssist"]


def test_fixture_counts_tags_and_malformed_lines_once(inproc: InProcDaemon) -> None:
    with inproc.client() as c:
        dry = c.capture_transcript("cap-fixture", FIXTURE, dry_run=True)
        assert not any(p["name"] == "cap-fixture" for p in c.list_palaces())
        res = c.capture_transcript("cap-fixture", FIXTURE, wait=True, create=True)
        again = c.capture_transcript("cap-fixture", FIXTURE, wait=True)
    for r in (dry, res):
        assert (r["exchanges"], r["redactions"], r["skipped"], r["skipped_lines"]) == (
            2, 1, 1, [16])
        assert r["tags"] == {"fix": 1, "config": 1, "preference": 1} and r["pending"]
    assert dry["dry_run"] and not res["dry_run"]
    assert (again["exchanges"], again["skipped"]) == (0, 0)  # reported once
    texts = " ".join(d["text"] for d in drawers(inproc, "cap-fixture"))
    assert "[REDACTED:password]" in texts and "Tr0ub4dor" not in texts
    assert "RAW-TOOL-OUTPUT" not in texts and "→ Bash: pytest -q tests/staging" in texts
    fix = drawers(inproc, "cap-fixture")[0]
    assert fix["importance"] == 0.55 and fix["tags"] == ["fix", "config"]
    assert fix["source"] == f"{FIXTURE}:5-13" and fix["wing"] == "sessions"


def test_project_wing_and_key_by_path(inproc: InProcDaemon, tmp_path: Path) -> None:
    s = Session(tmp_path / "c.jsonl", cwd="/home/me/src/My Shop_API")
    s.exchange("hello project", "hello back")
    with inproc.client() as c:
        res = c.capture_transcript("cap-wing", s.path, project_wing=True, wait=True,
                                   create=True)
        assert (res["wing"], res["key"]) == ("my-shop-api", str(s.path))
        assert c.capture_transcript("cap-wing", s.path, wait=True)["exchanges"] == 0


def test_queued_requests_are_coalesced_and_done_in_the_background(
        inproc: InProcDaemon, tmp_path: Path) -> None:
    s = Session(tmp_path / "d.jsonl")
    for i in range(30):
        s.exchange(f"background question {i}", f"background answer {i}")
    with inproc.client() as c:
        before = c.status()["captures"]["done"]
        answers = [c.capture_transcript("cap-bg", s.path, session_id=s.session_id, create=True)
                   for _ in range(5)]
        assert all(a["queued"] for a in answers)
        assert any(a["coalesced"] for a in answers)
        deadline = time.monotonic() + 30
        while c.status()["captures"]["waiting"] and time.monotonic() < deadline:
            time.sleep(0.05)
        while len(drawers(inproc, "cap-bg")) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        status = c.status()["captures"]
    assert len(drawers(inproc, "cap-bg")) == 30
    assert 1 <= status["done"] - before <= 3 and status["failed"] == 0


def test_bad_requests_get_typed_errors_and_change_nothing(inproc: InProcDaemon,
                                                          tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with inproc.client() as c:
        with pytest.raises(InvalidArgs, match="absolute"):
            c.call("capture.transcript", "cap-bad", {"path": "rel/t.jsonl", "create": True})
        with pytest.raises(InvalidArgs, match="unknown argument"):
            c.call("capture.transcript", "cap-bad", {"path": "/x", "nope": 1})
        with pytest.raises(SourceUnreadable, match="not a regular file"):
            c.capture_transcript("cap-bad", fifo, create=True)
        with pytest.raises(SourceUnreadable, match="not a regular file"):
            c.capture_transcript("cap-bad", tmp_path, create=True, wait=True)
        with pytest.raises(SourceUnreadable, match="no such file"):
            c.capture_transcript("cap-bad", tmp_path / "gone.jsonl", create=True)
        with pytest.raises(PalaceNotFound):
            c.capture_transcript("cap-bad", FIXTURE)
        assert not any(p["name"] == "cap-bad" for p in c.list_palaces())
        assert c.status()["pid"] == os.getpid()  # the daemon core is still serving
