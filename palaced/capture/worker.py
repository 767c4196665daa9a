"""Transcript captures in the background: one worker, requests coalesced per transcript.

A hook must return at once, so ``capture.transcript`` without ``wait`` only enqueues: the
daemon's worker task (started by the daemon beside the scheduler) runs the captures one at a
time, off the event loop's critical path (their parsing and writes run in worker threads,
their embedding in the shared embedding lanes, slice by slice with every other caller).

Requests for a transcript already waiting are merged into the waiting one; a request that
arrives while its transcript is being captured makes the worker capture it once more right
after (the running pass may have read the file before the new lines were written). Captures
of one transcript never run at the same time, whether queued or waited for
(:meth:`CaptureQueue.run_now`): each takes the transcript's lock. A failed background capture
is logged and dropped; the transcript's state is unchanged, so the next request redoes it.
A queue lost at shutdown is redone the same way.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import anyio

from palaced.capture.ingest import CaptureJob, Report
from palaced.wire.errors import PalaceError

log = logging.getLogger("palaced.capture.drawers")

Runner = Callable[[CaptureJob], Awaitable[Report]]
MAX_QUEUED = 10_000  # distinct transcripts waiting; beyond, the oldest are dropped (logged)


class CaptureQueue:
    """The background captures of one daemon (see the module docstring).

    ``runner`` does one capture (opening the palace, counting it in use, ingesting);
    ``on_done`` is told after each background capture (the scheduler: it wrote, so upkeep of
    that palace may now be due).
    """

    def __init__(self, runner: Runner, on_done: Callable[[], None] = lambda: None) -> None:
        self._runner = runner
        self._on_done = on_done
        self._queued: OrderedDict[tuple[str, str], CaptureJob] = OrderedDict()
        self._running: set[tuple[str, str]] = set()
        self._again: dict[tuple[str, str], CaptureJob] = {}
        self._locks: dict[tuple[str, str], tuple[anyio.Lock, int]] = {}
        self._wake = anyio.Event()
        self.done = 0  # background captures finished (ok or failed), for status and tests
        self.failed = 0

    @property
    def waiting(self) -> int:
        """Captures queued and not started yet."""
        return len(self._queued) + len(self._again)

    def enqueue(self, job: CaptureJob) -> str:
        """Queue ``job``; returns ``queued`` or ``coalesced`` (merged into a waiting one)."""
        key = (job.palace, job.key)
        if key in self._running:
            coalesced = key in self._again
            self._again[key] = job
            return "coalesced" if coalesced else "queued"
        if key in self._queued:
            self._queued[key] = job
            return "coalesced"
        if len(self._queued) >= MAX_QUEUED:
            dropped, _ = self._queued.popitem(last=False)
            log.warning("capture queue full: dropped the oldest request (%s %s)", *dropped)
        self._queued[key] = job
        self._wake.set()
        return "queued"

    async def run_now(self, job: CaptureJob) -> Report:
        """Capture ``job`` now (after any capture of the same transcript that is running).

        Raises:
            PalaceError: what the capture raises.
        """
        async with self._lock(job):
            return await self._runner(job)

    async def run(self) -> None:
        """The worker: run queued captures one at a time until cancelled."""
        while True:
            if not self._queued:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            key, job = self._queued.popitem(last=False)
            self._running.add(key)
            try:
                async with self._lock(job):
                    await self._run_logged(job)
            finally:
                self._running.discard(key)
                again = self._again.pop(key, None)
                if again is not None:
                    self._queued[key] = again

    async def _run_logged(self, job: CaptureJob) -> None:
        try:
            report = await self._runner(job)
        except PalaceError as exc:
            self.failed += 1
            log.warning("capture of %s into palace %s failed: %s [%s]", job.path, job.palace,
                        exc.message, exc.name)
        except Exception:
            self.failed += 1
            log.exception("capture of %s into palace %s failed", job.path, job.palace)
        else:
            if report.exchanges or report.skipped:
                log.info("captured %d exchange(s) of %s into palace %s/%s (%d skipped line(s))",
                         report.exchanges, job.path, job.palace, report.room, report.skipped)
        finally:
            self.done += 1
            self._on_done()

    def _lock(self, job: CaptureJob) -> _KeyLock:
        return _KeyLock(self._locks, (job.palace, job.key))


class _KeyLock:
    """One transcript's lock, dropped from the table when nobody holds or waits for it."""

    def __init__(self, table: dict[tuple[str, str], tuple[anyio.Lock, int]],
                 key: tuple[str, str]) -> None:
        self._table = table
        self._key = key
        lock, users = table.get(key) or (anyio.Lock(), 0)
        table[key] = (lock, users + 1)
        self._lock_obj = lock

    async def __aenter__(self) -> None:
        try:
            await self._lock_obj.acquire()
        except BaseException:
            self._release_slot()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._lock_obj.release()
        self._release_slot()

    def _release_slot(self) -> None:
        lock, users = self._table[self._key]
        if users <= 1:
            del self._table[self._key]
        else:
            self._table[self._key] = (lock, users - 1)
