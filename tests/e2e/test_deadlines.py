"""Deadlines hold while the model is busy: long embeddings neither overrun nor block others.

A 199k-character drawer is ~300-500 chunks: seconds of model time on two cores. Embedding runs
in short slices, so a remember's deadline is enforced between slices (and it writes nothing),
and a recall's query embedding runs beside the slices instead of behind all of them. A single
long text is not embedded in the request at all (it is committed and embedded in the
background, ``palaced.memory.writes.INLINE_MAX_CHUNKS``): the inline embedding a deadline can cut is
that of many shorter texts in one ``remember_many``.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from palaced.wire import errors as E
from tests.conftest import DaemonProc

WORDS = (
    "the a of and to in is was for on that with as it by at from this be are or have an "
    "which one had not but all were when we there can been has more if will their what so "
    "about would into them some could time these two may first then do any like my now over "
    "such our man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go came "
    "right used take three deploy server cluster database migration release budget meeting "
    "garden kitchen holiday harbour lantern violin meadow glacier compass orchard"
).split()


def _long_text(n_chars: int, seed: int) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 22)))
        sentence = sentence.capitalize() + ". "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:n_chars].strip()


def _counts(d: DaemonProc, palace: str) -> tuple[int, int]:
    with d.client() as c:
        info = c.palace_info(palace)
    return info["drawers"], info["vectors"]


def test_a_timed_out_long_remember_answers_promptly_and_writes_nothing(
        shared_daemon: DaemonProc) -> None:
    d = shared_daemon
    with d.client() as c:
        c.create_palace("deadline")
        c.remember("deadline", "a short note that is already there")
        before = _counts(d, "deadline")
        # 40 texts of ~12 chunks each: each embedded inline, ~500 chunks in all.
        items = [{"text": _long_text(7_000, seed=i)} for i in range(40)]
        started = time.monotonic()
        with pytest.raises(E.Timeout):
            c.call("memory.remember_many", "deadline", {"items": items}, timeout_ms=1000)
        elapsed = time.monotonic() - started
        # The daemon still answers at once, and nothing of the batch was written.
        assert c.status()["pid"] > 0
        time.sleep(0.5)  # a write that slipped past the deadline would have landed by now
        assert _counts(d, "deadline") == before
        found = c.call("memory.list", "deadline", {"limit": 10})
        assert [x["text"] for x in found["drawers"]] == ["a short note that is already there"]
    assert elapsed < 3.0, f"TIMEOUT took {elapsed:.2f}s for a 1 s deadline"


def test_recall_answers_while_another_client_remembers_a_long_text(
        shared_daemon: DaemonProc) -> None:
    d = shared_daemon
    with d.client() as c:
        c.create_palace("busy")
        c.remember("busy", "The harbour lantern was repainted blue in March.")
        c.recall("busy", "warm-up query")  # palace open, index loaded
    text = _long_text(199_000, seed=2) + " The violin case is kept under the orchard bench."
    with d.client() as writer:
        t0 = time.monotonic()
        out = writer.remember_ex("busy", text)
        # Committed and answered; its ~400 chunks are embedded in the background.
        assert time.monotonic() - t0 < 3.0 and out["pending_chunks"] > 100, out
    time.sleep(1.0)  # well into the background embedding of the long text
    with d.client() as reader:
        assert reader.palace_info("busy")["pending_embeddings"] == 1
        t0 = time.monotonic()
        hits = reader.recall("busy", "what colour was the harbour lantern painted")
        recall_s = time.monotonic() - t0
        # A short remember (embedded inline) takes its turn between the long one's slices.
        t0 = time.monotonic()
        reader.remember("busy", "The compass was left in the kitchen drawer.")
        short_s = time.monotonic() - t0
        assert reader.palace_info("busy")["pending_embeddings"] == 1, (
            "the recall did not overlap the background embedding")
    assert hits and "lantern" in hits[0]["text"]
    assert recall_s < 2.5, f"recall took {recall_s:.2f}s behind a long embedding"
    assert short_s < 2.5, f"a short remember took {short_s:.2f}s behind a long one"
    deadline = time.monotonic() + 110
    while _counts(d, "busy")[1] < 3 + 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    # The long drawer landed whole: every chunk has its vector.
    with d.client() as c:
        info = c.palace_info("busy")
        assert info["pending_embeddings"] == 0 and info["drawers"] == 3
        assert info["vectors"] == out["pending_chunks"] + 2
        tail = c.recall_ex("busy", "where is the violin case kept")["results"]
    assert tail[0]["id"] == out["id"] and tail[0]["vector"] is not None
