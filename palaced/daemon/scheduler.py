"""Upkeep of the open palaces: one task driven by deadlines and wake-ups, never by polling.

For every open palace it

* checkpoints (flushes recall touches, saves the vector index, folds the WAL) once
  ``checkpoint_idle_s`` passed without a write, and when vectors added under writes that
  never pause are due a save anyway (``Palace.save_due_at``: what a kill -9 would have to
  replay stays bounded);
* rebuilds the vector index (``compaction.compact``, in the background: writes go on) once idle
  when tombstones pile up, at once when it lacks vectors or holds as many tombstones as live
  vectors (``Palace.compaction_pressing``: writes that never pause);
* embeds drawers stored without vectors once the model is ready: those of keyword-only
  periods once idle, long texts a remember left to the background at once; in a task of its
  own per palace, so the other upkeep goes on meanwhile;
* decays weights once a day (``DECAY_INTERVAL_MS``) while idle; when the palace last decayed is
  read from the palace, so ``memory.decay`` and earlier runs of the daemon count;
* ages what has a lifetime (``_age``): moves expired drawers to the trash, and keeps the trash
  and the audit log within ``config.Retention`` (``audit.retention``); once idle after writes,
  and then at the next deadline the palace holds (the next drawer to expire, the oldest trash
  or audit entry outliving its keep period), so each happens on time;
* closes it once nobody used it for ``idle_close_s``;
* sets aside (and closes, without writing) a palace whose directory was deleted under it.

Between runs the scheduler sleeps until the earliest of those deadlines, or until woken:
after every request (a write may have made work due, a recall queues touches, a use moves the
idle close) and when the model becomes ready. A failure is logged once per condition, again
when the condition changes, and once more when it clears.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import anyio
from anyio.abc import TaskGroup

from palaced.config.settings import Limits, Retention
from palaced.engine.services import ModelState
from palaced.maintenance import compaction
from palaced.memory import audit, upkeep, writes
from palaced.palace.handle import Palace
from palaced.palace.registry import Registry
from palaced.wire.errors import PalaceError

log = logging.getLogger("palaced")

# Upkeep still due right after it ran (it failed, or its cause did not clear: a stale index
# while no model is loaded, a read-only disk) is retried this much later, never spun on.
RETRY_S = 1.0


@dataclass
class _Upkeep:
    """What the scheduler knows of one open palace."""

    palace: Palace
    not_before: float = 0.0  # monotonic: no run before this (RETRY_S after one that failed)
    decay_due_ms: int | None = None  # epoch ms of the next decay; None: ask the palace
    # Ageing: the palace's write_counter when it last ran (another value: run once idle), and
    # the epoch ms at which it is next due regardless (None: only a write makes it due).
    aged_counter: int = -1
    age_due_ms: int | None = None
    failing: str | None = None  # the condition last logged as failing
    running: set[str] = field(default_factory=set)  # its long jobs running in the background


def _condition(exc: Exception) -> str:
    if isinstance(exc, PalaceError):
        return f"{exc.name}: {exc.details.get('condition') or exc.message}"
    return f"{type(exc).__name__}: {exc}"


def _wall_ms() -> int:
    return int(time.time() * 1000)


class Scheduler:
    """Runs the upkeep of every open palace of ``registry`` (see the module docstring)."""

    def __init__(self, registry: Registry, model: ModelState, limits: Limits,
                 retention: Retention | None = None) -> None:
        self._registry = registry
        self._model = model
        self._limits = limits
        self._retention = retention or Retention()
        self._palaces: dict[str, _Upkeep] = {}
        self._wake = anyio.Event()
        self._tasks: TaskGroup | None = None  # where long jobs run in the background (run())

    def wake(self) -> None:
        """Re-examine every open palace now (cheap; safe to call after every request)."""
        self._wake.set()

    async def run(self) -> None:
        """Run until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            tg.start_soon(self._wake_when_model_ready)
            while True:
                # A fresh event before the work: a wake-up during it is not lost.
                self._wake = anyio.Event()
                delay = await self.run_due()
                with anyio.move_on_after(delay):
                    await self._wake.wait()

    async def _wake_when_model_ready(self) -> None:
        await self._model.ready_event.wait()
        self.wake()

    async def run_due(self) -> float:
        """Run whatever upkeep is due now; seconds until the next deadline (inf if none)."""
        # A palace whose directory was deleted under the daemon must get no more upkeep: a
        # checkpoint would write its index into whatever now sits at that path.
        await self._registry.evict_vanished()
        now = time.monotonic()
        open_ = self._registry.open_palaces
        for gone in [n for n, up in self._palaces.items() if open_.get(n) is not up.palace]:
            del self._palaces[gone]
        next_at = math.inf
        for name, palace in open_.items():
            if palace.closed:
                continue
            up = self._palaces.get(name)
            if up is None:
                up = self._palaces[name] = _Upkeep(palace)
            if self._next_run(up, now) <= now:
                palace.begin_work()  # not closed to make room for another while it works
                try:
                    await self._work(name, up, now)
                finally:
                    palace.end_work()
                after = time.monotonic()
                if self._next_run(up, after) <= after:
                    # Still due: the work failed or its cause did not clear. Retry, never spin.
                    up.not_before = after + RETRY_S
            next_at = min(next_at, self._next_run(up, time.monotonic()))
        idle_s = self._limits.idle_close_s
        closing = [p.last_used + idle_s for p in open_.values()
                   if p.in_flight == 0 and not p.closed]
        # Palaces in use are left out: the end of their request wakes the scheduler.
        if closing and min(closing) < now:
            await self._registry.close_idle(idle_s)
            return 0.0  # look again at once: the other palaces' deadlines still stand
        next_at = min([next_at, *closing])
        return max(next_at - time.monotonic(), 0.0)

    def _next_run(self, up: _Upkeep, now: float) -> float:
        """The monotonic time at which the palace next has upkeep due."""
        palace = up.palace
        idle_at = palace.last_write + self._limits.checkpoint_idle_s
        due = [math.inf]
        if "compact" not in up.running:
            if palace.index_stale:
                due.append(now)
            elif palace.compaction_due:
                due.append(now if palace.compaction_pressing else idle_at)
        due.append(palace.save_due_at())
        if palace.checkpoint_due:
            due.append(idle_at)
        if self._model.ready and palace.pending_check_due() and "embed" not in up.running:
            due.append(now if palace.embed_soon else idle_at)
        if up.decay_due_ms is None:
            due.append(idle_at)
        else:
            due.append(max(idle_at, now + (up.decay_due_ms - _wall_ms()) / 1000))
        if up.aged_counter != palace.write_counter:
            due.append(idle_at)
        elif up.age_due_ms is not None:
            due.append(max(idle_at, now + (up.age_due_ms - _wall_ms()) / 1000))
        return max(min(due), up.not_before)

    async def _work(self, name: str, up: _Upkeep, now: float) -> None:
        """Run the palace's due upkeep; logs failures (once per condition), never raises."""
        palace = up.palace
        worked = False
        try:
            idle = now - palace.last_write >= self._limits.checkpoint_idle_s
            stale = palace.index_stale and "compact" not in up.running
            if stale or (idle and palace.checkpoint_due) or palace.save_due_at() <= now:
                worked = True
                await palace.checkpoint()
            if ((palace.index_stale or idle or palace.compaction_pressing)
                    and palace.compaction_due):
                worked = True
                await self._start(name, up, "compact", partial(compaction.compact, palace))
            if ((idle or palace.embed_soon) and self._model.ready
                    and palace.pending_check_due()):
                worked = True
                palace.embedding_started()
                await self._start(name, up, "embed",
                                  partial(writes.embed_pending, palace, background=True))
            if idle:
                await self._decay_if_due(up)
                if self._age_due(up):
                    worked = True
                    await self._age(up)
        except Exception as exc:
            # A persistent failure (read-only mount, full disk) repeats on every run: log it
            # once per condition, again when the condition changes, and say when it clears.
            cond = _condition(exc)
            if up.failing == cond:
                log.debug("palace %s: checkpoint still failing: %s", name, cond)
            else:
                up.failing = cond
                log.exception("palace %s: checkpoint failed (logged once until it changes or "
                              "clears)", name)
        else:
            if worked and up.failing is not None:
                up.failing = None
                log.info("palace %s: checkpoint works again", name)

    async def _start(self, name: str, up: _Upkeep, job: str,
                     work: Callable[[], Awaitable[object]]) -> None:
        """Run a long job (embedding, compaction) in the background, one of a kind per
        palace at a time, so the scheduler goes on with the other palaces meanwhile."""
        if job in up.running:
            return
        up.running.add(job)
        if self._tasks is None:  # not inside run(): do it now
            await self._background(name, up, job, work)
        else:
            self._tasks.start_soon(self._background, name, up, job, work)

    async def _background(self, name: str, up: _Upkeep, job: str,
                          work: Callable[[], Awaitable[object]]) -> None:
        palace = up.palace
        palace.begin_work()  # not closed for idleness while it works
        try:
            await work()
        except Exception as exc:
            # Retried RETRY_S later; logged once per condition, like the other upkeep.
            up.not_before = time.monotonic() + RETRY_S
            cond = _condition(exc)
            if up.failing != cond:
                up.failing = cond
                log.exception("palace %s: background %s failed (logged once until it changes "
                              "or clears)", name, job)
        finally:
            palace.end_work()
            up.running.discard(job)
            self.wake()

    @staticmethod
    def _age_due(up: _Upkeep) -> bool:
        """Whether the palace was written since it last aged, or its next deadline passed."""
        return (up.aged_counter != up.palace.write_counter
                or (up.age_due_ms is not None and _wall_ms() >= up.age_due_ms))

    async def _age(self, up: _Upkeep) -> None:
        """Move expired drawers to the trash, bound the trash and the audit log, and note
        when this is next due.

        Raises:
            StorageError: SQLite failed (it is retried RETRY_S later).
        """
        palace = up.palace
        await upkeep.sweep_expired(palace, keep_ms=self._retention.trash_keep_ms)
        counter = palace.write_counter  # the sweep's own writes need no second run
        deadlines = [await audit.retention(palace, self._retention),
                     await upkeep.next_expiry_ms(palace)]
        up.age_due_ms = min((d for d in deadlines if d is not None), default=None)
        up.aged_counter = counter

    async def _decay_if_due(self, up: _Upkeep) -> None:
        """Decay the palace if it last decayed a DECAY_INTERVAL_MS ago or never.

        Raises:
            StorageError: SQLite failed.
        """
        now_ms = _wall_ms()
        if up.decay_due_ms is not None and now_ms < up.decay_due_ms:
            return
        # Asked of the palace, not remembered here only: memory.decay may have run meanwhile.
        last = await upkeep.last_decay_ms(up.palace)
        if now_ms - last >= upkeep.DECAY_INTERVAL_MS:
            # Looked at again under the write lock: a restore may have set it meanwhile.
            last = int((await upkeep.decay(
                up.palace, unless_since_ms=now_ms - upkeep.DECAY_INTERVAL_MS + 1))["decay_ms"])
        up.decay_due_ms = last + upkeep.DECAY_INTERVAL_MS
