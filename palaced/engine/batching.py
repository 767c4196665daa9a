"""Micro-batching of embedding calls: callers that wait for the model at once share one run.

One ONNX run of n short texts costs far less than n runs of one (a run's fixed cost, the
thread hand-offs and the event-loop wake-ups are paid once), so under concurrency the
waiting callers' texts are embedded together. There is no timer: a caller that finds the
model idle runs at once, alone; a caller arriving while a run is under way queues, and
when that run ends everything queued (up to a budget) becomes the next run. Batching thus
never adds latency to a lone request, it only replaces queueing by sharing.

One run at a time per batcher (one ONNX session already uses every core). The caller whose
request heads the queue when the model frees up *leads* the next run: it takes the queued
requests, runs them on a worker thread and hands each caller its rows (or the run's error),
then passes the lead to the next queued request. A caller cancelled while queued leaves the
queue (passing the lead on if it had just been given it); a run itself is shielded from
cancellation (it is short, and other callers' results ride on it), the leader's own
cancellation takes effect at its next checkpoint.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np

# What a run embeds: the texts of every request in it, in order; rows in the same order.
RunFn = Callable[[list[str]], np.ndarray]


class _Request:
    """One caller's texts, waiting or running; ``done`` is set when it has rows, an error,
    or the lead."""

    __slots__ = ("done", "error", "fn", "key", "lead", "rows", "texts", "units")

    def __init__(self, key: object, fn: RunFn, texts: list[str], units: float) -> None:
        self.key = key
        self.fn = fn
        self.texts = texts
        self.units = units
        self.done = anyio.Event()
        self.rows: np.ndarray | None = None
        self.error: BaseException | None = None
        self.lead = False

    def outcome(self) -> np.ndarray:
        if self.error is not None:
            raise self.error
        assert self.rows is not None
        return self.rows


class EmbedBatcher:
    """Runs embedding requests one batch at a time, merging the requests that queue meanwhile.

    ``max_texts`` bounds the texts of one run. Requests merge only with requests of the same
    ``key`` (the embedder: a model swap never mixes two models in one run), in arrival order,
    while their summed ``units`` stay within the ``budget`` the leader passes (the first
    request always runs, whatever its size). ``on_run(units, seconds)`` is told the cost of
    every successful run. ``runs`` and ``requests`` count what ran (``requests / runs`` is
    the mean batch size).
    """

    def __init__(self, max_texts: int,
                 on_run: Callable[[float, float], None] | None = None) -> None:
        self.max_texts = max_texts
        self._on_run = on_run
        self._queue: collections.deque[_Request] = collections.deque()
        self._busy = False
        self.runs = 0
        self.requests = 0

    async def embed(self, key: object, fn: RunFn, texts: list[str], *, units: float = 0.0,
                    budget: float = float("inf")) -> np.ndarray:
        """Rows of ``fn(texts)`` (shape ``(len(texts), dims)``), computed in a shared run.

        Raises:
            Exception: whatever ``fn`` raised for the run that held these texts (every caller
                in that run gets it).
            anyio.get_cancelled_exc_class(): the caller was cancelled before it asked or while
                queued (its texts are then not embedded), or while its run was under way
                (after the run).
        """
        # A lone caller never waits below, and its run is shielded: without this checkpoint a
        # caller embedding slice after slice would never see its deadline pass.
        await anyio.lowlevel.checkpoint_if_cancelled()
        req = _Request(key, fn, texts, units)
        self._queue.append(req)
        if self._busy:
            try:
                await req.done.wait()
            except BaseException:
                self._abandon(req)
                raise
            if not req.lead:
                return req.outcome()
        else:
            self._busy = True
            req.lead = True
        batch = self._take(req, budget)
        try:
            with anyio.CancelScope(shield=True):
                await self._run(batch)
        finally:
            for other in batch:
                if other.rows is None and other.error is None:  # the run itself was killed
                    other.error = RuntimeError("the embedding run was interrupted")
                if other is not req:
                    other.done.set()
            self._hand_over()
        return req.outcome()

    def _take(self, lead: _Request, budget: float) -> list[_Request]:
        """The leader's request plus the queued ones that fit, removed from the queue."""
        self._queue.remove(lead)
        batch, texts, units = [lead], len(lead.texts), lead.units
        for other in list(self._queue):
            if other.key is not lead.key:
                continue
            if (texts + len(other.texts) > self.max_texts
                    or units + other.units > budget):
                break  # keep arrival order: a later small request does not jump this one
            self._queue.remove(other)
            batch.append(other)
            texts += len(other.texts)
            units += other.units
        return batch

    async def _run(self, batch: list[_Request]) -> None:
        """One worker-thread run of the batch's texts; each request gets its rows or error."""
        texts = [t for r in batch for t in r.texts]
        fn = batch[0].fn
        try:
            rows, seconds = await anyio.to_thread.run_sync(_timed, fn, texts)
        except Exception as exc:
            for r in batch:
                r.error = exc
            return
        self.runs += 1
        self.requests += len(batch)
        pos = 0
        for r in batch:
            r.rows = rows[pos:pos + len(r.texts)]
            pos += len(r.texts)
        if self._on_run is not None:
            self._on_run(sum(r.units for r in batch), seconds)

    def _hand_over(self) -> None:
        """Give the lead to the request now heading the queue, or mark the batcher idle."""
        if self._queue:
            nxt = self._queue[0]
            nxt.lead = True
            nxt.done.set()
        else:
            self._busy = False

    def _abandon(self, req: _Request) -> None:
        """A queued caller was cancelled: drop its request; pass the lead on if it had it."""
        if req in self._queue:
            self._queue.remove(req)
            if req.lead:
                self._hand_over()
        # else: its run is under way (or done); the leader fills and drops its rows


def _timed(fn: RunFn, texts: list[str]) -> tuple[np.ndarray, float]:
    """Embed on the worker thread; also return the model time it took."""
    started = time.perf_counter()
    rows = fn(texts)
    if len(rows) != len(texts):
        raise RuntimeError(f"the embedder returned {len(rows)} vectors for {len(texts)} texts")
    return rows, time.perf_counter() - started
