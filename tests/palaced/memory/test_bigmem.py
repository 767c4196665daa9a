"""Big memories: a long text is durable when remember returns and is embedded in the
background (recall treats it keyword-only meanwhile), and a huge drawer does not make
wake-up or recall slower."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory.writes import INLINE_MAX_CHUNKS
from tests.conftest import TIKTOKEN_FILE, DaemonProc, base_env, short_home
from tests.support.inproc import InProcDaemon, inproc_daemon

MARK = "zanzibarquill"  # a word only the long text has


def long_text(sentences: int, *, seed: int = 0) -> str:
    rnd = np.random.default_rng(seed)
    topics = ["harbour crane", "tide tables", "ferry timetable", "lighthouse keeper",
              "fish market", "dry dock", "pilot boat", "breakwater", "customs shed"]
    out = [f"Sentence {i} notes that the {topics[int(rnd.integers(len(topics)))]} "
           f"changed on day {int(rnd.integers(1, 365))}." for i in range(sentences)]
    out.insert(sentences // 2, f"The {MARK} ledger is kept in the harbour master's safe.")
    return " ".join(out)


class GatedEmbedder(HashEmbedder):
    """The hashing embedder, except that texts of the long drawer wait for ``gate``."""

    def __init__(self) -> None:
        super().__init__(64)
        self.gate = threading.Event()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if any("Sentence" in t for t in texts):
            assert self.gate.wait(30), "test never opened the gate"
        return super().embed_passages(texts)


@pytest.fixture
def gated() -> Iterator[tuple[InProcDaemon, GatedEmbedder]]:
    import shutil

    emb = GatedEmbedder()
    path = short_home()
    with inproc_daemon(path, tokenizer_file=TIKTOKEN_FILE, embedder=emb) as d:
        yield d, emb
    emb.gate.set()
    shutil.rmtree(path, ignore_errors=True)


def test_a_long_text_returns_durable_and_is_embedded_in_the_background(
        gated: tuple[InProcDaemon, GatedEmbedder]) -> None:
    d, emb = gated
    text = long_text(400)  # ~27k characters: well over INLINE_MAX_CHUNKS chunks
    with d.client() as c:
        c.create_palace("big")
        small = c.remember_ex("big", "The harbour master keeps the ledger key on a hook")
        assert small["embedded"] is True and "pending_chunks" not in small
        res = c.remember_ex("big", text, room="logs")
        assert res["created"] is True and res["embedded"] is False
        chunks = res["pending_chunks"]
        assert chunks > INLINE_MAX_CHUNKS
        info = c.palace_info("big")
        assert info["pending_embeddings"] == 1 and info["pending_chunks"] == chunks
        status = {p["name"]: p for p in c.status()["palaces"]}
        assert status["big"]["pending_chunks"] == chunks
        # While it waits for its vectors, recall finds it by its words alone, scored by them.
        found = c.recall_ex("big", f"where is the {MARK} ledger kept?")
        hit = next(r for r in found["results"] if r["id"] == res["id"])
        assert found["mode"] == "hybrid" and hit["vector"] is None and hit["lexical"] is not None
        assert hit["excerpt"] is True and MARK in hit["text"]
        assert c.get("big", res["id"])["text"] == text  # durable and whole
        emb.gate.set()
        deadline = time.monotonic() + 30
        while c.palace_info("big")["pending_embeddings"] and time.monotonic() < deadline:
            time.sleep(0.05)
        info = c.palace_info("big")
        assert info["pending_embeddings"] == 0 and info["pending_chunks"] == 0
        assert info["vectors"] == info["index"] == chunks + 1 and info["consistent"]
        found = c.recall_ex("big", f"where is the {MARK} ledger kept?")
        hit = next(r for r in found["results"] if r["id"] == res["id"])
        assert hit["vector"] is not None


def test_up_to_the_threshold_a_remember_embeds_inline(inproc: InProcDaemon) -> None:
    text = long_text(60, seed=3)  # a few chunks
    with inproc.client() as c:
        c.create_palace("inline")
        res = c.remember_ex("inline", text)
        assert res["embedded"] is True and "pending_chunks" not in res
        info = c.palace_info("inline")
        assert info["pending_embeddings"] == 0 and 1 < info["vectors"] <= INLINE_MAX_CHUNKS


def _median_ms(fn: object, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def test_a_huge_drawer_does_not_slow_wake_up_or_recall(inproc: InProcDaemon) -> None:
    """The same palace with and without one 150k-character drawer (important, so it is in
    L1, and matching the queries): wake-up and recall stay within a small factor."""
    rnd = np.random.default_rng(8)
    words = ["otter", "river", "kayak", "bridge", "north", "paint", "sunset", "harbour",
             "crane", "ferry", "ledger", "tide", "market", "dock", "pilot", "keeper"]
    items = [{"text": " ".join(rnd.choice(words, 10)) + f" note {i}", "room": f"r{i % 5}",
              "importance": 0.8 if i % 4 == 0 else 0.5} for i in range(300)]
    huge = long_text(2500, seed=5)
    assert len(huge) > 150_000
    queries = [" ".join(rnd.choice(words, 3)) + " harbour ledger" for _ in range(25)]
    times = {}
    with inproc.client() as c:
        for name in ("plain", "with-huge"):
            c.create_palace(name)
            c.remember_many(name, items)
        c.remember("with-huge", huge, importance=1.0, room="r1")
        wake = c.wake_up("with-huge")
        assert any(it.get("excerpt") for s in wake["sections"] for it in s["items"])
        for name in ("plain", "with-huge"):
            for q in queries[:3]:  # warm: the huge drawer's word map is built once
                c.recall(name, q)
            times[name] = (
                _median_ms(lambda n=name: c.wake_up(n), 25),
                _median_ms(lambda n=name: [c.call("memory.recall", n, {
                    "query": q, "deep": True, "levels": [0, 1, 2, 3]}) for q in queries], 1)
                / len(queries),
            )
        hit = c.recall_ex("with-huge", f"{MARK} ledger")["results"][0]
        assert hit["excerpt"] and MARK in hit["text"]
    (wake_plain, recall_plain), (wake_huge, recall_huge) = times["plain"], times["with-huge"]
    assert wake_huge < 3 * wake_plain + 2, times
    assert recall_huge < 3 * recall_plain + 5, times


@pytest.mark.daemon
def test_real_model_big_remember_is_durable_across_kill_9(home: Path) -> None:
    """With the real model: a 40k-character remember returns before its ~70 chunks are
    embedded; a kill -9 right after loses nothing, and the next daemon embeds it."""
    d = DaemonProc(home, base_env(home))
    d.start()
    text = long_text(600, seed=9)
    try:
        with d.client() as c:
            c.create_palace("durable")
            t = time.monotonic()
            res = c.remember_ex("durable", text)
            took = time.monotonic() - t
            assert res["pending_chunks"] > 50 and res["embedded"] is False, res
            # Embedding its chunks inline takes seconds; the remember only commits.
            assert took < 2.0, took
            # Meanwhile the background embeds it in short slices: a small remember (embedded
            # inline) waits for one slice at most, not for the whole text.
            t = time.monotonic()
            assert c.remember_ex("durable", "Ferries leave at dawn")["embedded"] is True
            assert time.monotonic() - t < 2.0
            assert c.palace_info("durable")["pending_embeddings"] == 1
        status = d.cli("status", check=True).stdout
        assert f"1 pending embedding ({res['pending_chunks']} chunks)" in status, status
        d.kill9()
        d.start()
        with d.client() as c:
            assert c.get("durable", res["id"])["text"] == text
            deadline = time.monotonic() + 120
            while c.palace_info("durable")["pending_embeddings"] and (
                    time.monotonic() < deadline):
                time.sleep(0.2)
            info = c.palace_info("durable")
            assert info["pending_embeddings"] == 0
            assert info["vectors"] == info["index"] == res["pending_chunks"] + 1
            top = c.recall_ex("durable", f"Where is the {MARK} ledger kept?")["results"][0]
            assert top["id"] == res["id"] and top["vector"] is not None
    finally:
        d.stop()
