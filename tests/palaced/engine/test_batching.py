"""Micro-batched embedding (``palaced.engine.batching``): callers waiting at once share one run.

Unit tests drive ``EmbedBatcher`` with a fake model whose runs are held open by a gate, so
which requests queue during a run is certain; the last tests use the real model, in-process
and through a real daemon with concurrent clients.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import numpy as np
import pytest

from palaced.engine.batching import EmbedBatcher
from palaced.engine.embedder import FastEmbedder
from tests.conftest import DaemonProc

pytestmark = pytest.mark.anyio


class GatedModel:
    """Row i of a run is the vector [number in text i, 0...]; each run waits for a permit
    (``let``), so a test decides when runs end. ``calls`` records every run's texts. A text
    ``bad...`` makes its whole run fail.
    """

    def __init__(self, hold: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.permits = threading.Semaphore(0 if hold else 1_000)

    def let(self, runs: int = 1_000) -> None:
        self.permits.release(runs)

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        assert self.permits.acquire(timeout=10)
        if any(t.startswith("bad") for t in texts):
            raise ValueError(f"cannot embed {texts}")
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, 0] = float(t.split()[-1])
        return out


async def _wait_running(model: GatedModel, runs: int = 1) -> None:
    """Until the model has started ``runs`` runs."""
    with anyio.fail_after(5):
        while len(model.calls) < runs:
            await anyio.sleep(0.001)


async def _queued(batcher: EmbedBatcher, n: int) -> None:
    """Until ``n`` requests are queued behind the running one."""
    with anyio.fail_after(5):
        while len(batcher._queue) < n:
            await anyio.sleep(0.001)


async def test_requests_waiting_during_a_run_share_the_next_run() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    got: dict[int, Any] = {}

    async def ask(i: int) -> None:
        got[i] = await batcher.embed("m", model, [f"query {i}"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, 0)
        await _wait_running(model)  # a lone request ran at once, alone
        assert model.calls == [["query 0"]]
        for i in range(1, 11):
            tg.start_soon(ask, i)
        await _queued(batcher, 10)
        model.let()
    assert model.calls == [["query 0"], [f"query {i}" for i in range(1, 11)]]
    assert {i: float(v[0, 0]) for i, v in got.items()} == {i: float(i) for i in range(11)}
    assert all(v.shape == (1, 4) for v in got.values())
    assert (batcher.runs, batcher.requests) == (2, 11)


async def test_multi_text_requests_get_their_own_rows_in_order() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    got: dict[str, Any] = {}

    async def ask(name: str, texts: list[str]) -> None:
        got[name] = await batcher.embed("m", model, texts)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "first", ["a 1"])
        await _wait_running(model)
        tg.start_soon(ask, "x", ["x 5", "x 6", "x 7"])
        await _queued(batcher, 1)
        tg.start_soon(ask, "y", ["y 8", "y 9"])
        await _queued(batcher, 2)
        model.let()
    assert model.calls[1] == ["x 5", "x 6", "x 7", "y 8", "y 9"]
    assert got["x"][:, 0].tolist() == [5.0, 6.0, 7.0]
    assert got["y"][:, 0].tolist() == [8.0, 9.0]


async def test_an_error_goes_to_every_caller_of_its_run_and_no_other() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=3)
    got: dict[int, Any] = {}

    async def ask(i: int, text: str) -> None:
        try:
            got[i] = await batcher.embed("m", model, [text])
        except ValueError as exc:
            got[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, 0, "q 0")
        await _wait_running(model)
        for i, text in enumerate(["q 1", "bad 2", "q 3", "q 4", "q 5"], start=1):
            tg.start_soon(ask, i, text)
            await _queued(batcher, i)
        model.let()
    # max_texts 3: [q 0], then [q 1, bad 2, q 3] (fails as a whole), then [q 4, q 5]
    assert model.calls == [["q 0"], ["q 1", "bad 2", "q 3"], ["q 4", "q 5"]]
    assert all(isinstance(got[i], ValueError) for i in (1, 2, 3))
    assert [float(got[i][0, 0]) for i in (0, 4, 5)] == [0.0, 4.0, 5.0]
    assert batcher.runs == 2  # failed runs are not counted
    # The batcher is idle and usable after the failure.
    assert float((await batcher.embed("m", model, ["q 6"]))[0, 0]) == 6.0


async def test_a_cancelled_waiter_leaves_the_queue_and_others_still_run() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    got: dict[int, Any] = {}

    async def ask(i: int) -> None:
        got[i] = await batcher.embed("m", model, [f"q {i}"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, 0)
        await _wait_running(model)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await batcher.embed("m", model, ["q 99"])  # queued, then cancelled: never runs
        async with anyio.create_task_group() as inner:
            inner.start_soon(ask, 1)
            await _queued(batcher, 1)
            inner.cancel_scope.cancel()  # the only waiter, which would have led, goes away
        assert not batcher._queue
        tg.start_soon(ask, 2)
        await _queued(batcher, 1)
        model.let()
    assert model.calls == [["q 0"], ["q 2"]]
    assert sorted(got) == [0, 2]
    assert not batcher._busy and not batcher._queue


async def test_a_caller_cancelled_during_its_run_does_not_break_the_run() -> None:
    """The run is shielded: the other callers in it get their rows; the cancelled caller's
    cancellation takes effect once the run is over."""
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    got: dict[int, Any] = {}

    async def ask(i: int) -> None:
        got[i] = await batcher.embed("m", model, [f"q {i}"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, 0)
        await _wait_running(model)
        tg.start_soon(ask, 1)
        await _queued(batcher, 1)
        async with anyio.create_task_group() as inner:
            inner.start_soon(ask, 2)
            await _queued(batcher, 2)
            model.let(1)  # run 1 ends; run 2 = [q 1, q 2] starts and is held
            await _wait_running(model, 2)
            inner.cancel_scope.cancel()  # q 2's caller goes away mid-run
            model.let(1)
    assert model.calls == [["q 0"], ["q 1", "q 2"]]
    assert float(got[1][0, 0]) == 1.0 and 2 not in got
    assert not batcher._busy and not batcher._queue


async def test_requests_of_different_models_never_share_a_run() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    other = GatedModel(hold=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(batcher.embed, "m", model, ["q 0"]))
        await _wait_running(model)
        tg.start_soon(partial(batcher.embed, "m", model, ["q 1"]))
        await _queued(batcher, 1)
        tg.start_soon(partial(batcher.embed, "other", other, ["o 2"]))
        await _queued(batcher, 2)
        tg.start_soon(partial(batcher.embed, "m", model, ["q 3"]))
        await _queued(batcher, 3)
        model.let()
    assert model.calls == [["q 0"], ["q 1", "q 3"]] and other.calls == [["o 2"]]


async def test_the_budget_bounds_a_run_in_arrival_order() -> None:
    model, batcher = GatedModel(), EmbedBatcher(max_texts=32)
    runs: list[tuple[float, float]] = []
    batcher._on_run = lambda units, seconds: runs.append((units, seconds))
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(batcher.embed, "m", model, ["q 0"], units=10, budget=25))
        await _wait_running(model)
        for i, units in ((1, 10), (2, 10), (3, 10), (4, 1)):
            tg.start_soon(partial(batcher.embed, "m", model, [f"q {i}"], units=units,
                                  budget=25))
            await _queued(batcher, i)
        model.let()
    # 1 and 2 fit in 25 units; 3 does not, and 4 does not jump ahead of it.
    assert model.calls == [["q 0"], ["q 1", "q 2"], ["q 3", "q 4"]]
    assert [u for u, _ in runs] == [10, 20, 11]


async def test_lanes_give_each_concurrent_query_its_own_vector() -> None:
    from palaced.engine.embedder import HashEmbedder
    from palaced.engine.services import EmbedLanes

    lanes, emb = EmbedLanes(), HashEmbedder(32)
    texts = [f"query number {i} about topic {i % 7}" for i in range(40)]
    got: dict[str, Any] = {}

    async def ask(t: str) -> None:
        got[t] = await lanes.query(emb, t)

    async with anyio.create_task_group() as tg:
        for t in texts:
            tg.start_soon(ask, t)
    for t in texts:
        assert np.allclose(got[t], emb.embed_query(t))
    stats = lanes.as_dict()
    assert stats["queries"] == 40 and stats["query_runs"] < 40


def test_real_model_batched_queries_match_single_ones(real_embedder: FastEmbedder) -> None:
    emb = real_embedder
    texts = ["where did Caroline go last summer", "ok", "a much longer question " * 30,
             "what does the deploy pipeline do after midnight"]
    rows = emb.embed_queries(texts)
    assert rows.shape == (4, 384)
    for t, row in zip(texts, rows, strict=True):
        assert float(row @ emb.embed_query(t)) > 0.9999


def test_concurrent_recalls_through_the_daemon_share_runs(daemon: DaemonProc) -> None:
    """24 clients recall at once (distinct queries): every answer is the one a lone recall
    of the same query gives, and the daemon embedded them in fewer runs than queries."""
    with daemon.client() as c:
        c.create_palace("batch")
        notes = [f"Note {i}: the {w} service restarts at {i} o'clock" for i, w in
                 enumerate(["billing", "search", "auth", "mail", "queue", "cache"] * 5)]
        ids = c.remember_many("batch", [{"text": t} for t in notes])
        texts = dict(zip(ids, notes, strict=True))
        before = c.status()["embedding"]
    asks = ("when does", "at what hour does", "what time does", "tell me when does",
            "remind me when does", "how late does")
    queries = [f"{a} the {w} service restart" for a in asks
               for w in ("billing", "search", "auth", "mail")]
    answers = _all_at_once(daemon, queries, lambda c, q: [
        r["id"] for r in c.recall("batch", q, top_k=5)])
    with daemon.client() as c:
        after = c.status()["embedding"]
    runs = after["query_runs"] - before["query_runs"]
    served = after["queries"] - before["queries"]
    assert served == len(queries)
    assert runs < served  # some queries shared a run
    # Each caller got the answer to its own question: the top drawer names its service.
    for q, top in answers.items():
        service = q.split(" the ")[1].split()[0]
        assert service in texts[top[0]], (q, texts[top[0]])


def _all_at_once(daemon: DaemonProc, items: list[str],
                 call: Callable[[Any, str], Any]) -> dict[str, Any]:
    """``{item: call(client, item)}``, each on its own client and thread, all released at
    once by a barrier so that they reach the daemon together. Asserts none failed."""
    start = threading.Barrier(len(items))
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def one(item: str, client: Any) -> None:
        try:
            start.wait(10)
            results[item] = call(client, item)
        except BaseException as exc:  # collected and asserted on
            errors.append(exc)

    clients = [daemon.client() for _ in items]
    threads = [threading.Thread(target=one, args=(item, cl))
               for item, cl in zip(items, clients, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for cl in clients:
        cl.close()
    assert not errors and len(results) == len(items), errors
    return results


def test_concurrent_remembers_through_the_daemon_share_runs(daemon: DaemonProc) -> None:
    """16 clients remember at once: every drawer is stored with its vector, in fewer passage
    runs than remembers, and the palace is consistent."""
    with daemon.client() as c:
        c.create_palace("writes")
        before = c.status()["embedding"]
    texts = [f"Writer {i} notes that the {w} backup finished at {i} past nine"
             for i, w in enumerate(["nightly", "weekly", "offsite", "cold"] * 4)]
    ids = _all_at_once(daemon, texts, lambda c, text: c.remember("writes", text))
    assert len(set(ids.values())) == len(texts)
    with daemon.client() as c:
        after = c.status()["embedding"]
        info = c.palace_info("writes")
        assert info["consistent"] and info["vectors"] == info["index"] == len(texts)
        for text, did in ids.items():
            assert c.get("writes", did)["text"] == text
    slices = after["passage_slices"] - before["passage_slices"]
    assert slices == len(texts)
    assert after["passage_runs"] - before["passage_runs"] < slices


async def test_a_lone_caller_past_its_deadline_stops_between_runs() -> None:
    # A caller embedding slice after slice on an idle batcher never queues, and each run is
    # shielded: the deadline must still stop it before its next slice, not after the last.
    model, batcher = GatedModel(hold=False), EmbedBatcher(max_texts=32)
    done: list[int] = []
    with anyio.CancelScope() as scope:
        for i in range(5):
            await batcher.embed("m", model, [f"slice {i}"])
            done.append(i)
            if i == 1:
                scope.cancel()  # the deadline passes during the second slice
    assert scope.cancelled_caught and done == [0, 1] and len(model.calls) == 2
    assert not batcher._busy and not batcher._queue
