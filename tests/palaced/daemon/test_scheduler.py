"""The upkeep scheduler and the in-flight count, in-process: work happens at its deadlines or
when a request wakes the scheduler, never by polling; shutdown waits on an event."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from palaced.config import settings as config_mod
from palaced.daemon.core import Daemon
from palaced.daemon.scheduler import Scheduler
from palaced.engine.embedder import HashEmbedder
from palaced.maintenance.model_loader import load_model
from palaced.ops.context import InFlight
from palaced.ops.table import dispatch
from palaced.wire.paths import Paths

pytestmark = pytest.mark.anyio


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Daemon]:
    """A daemon core with the hashing model loaded and short upkeep deadlines."""
    paths = Paths(tmp_path, tmp_path / "state", tmp_path / "config.toml", tmp_path / "run",
                  tmp_path / "run" / "palaced.sock")
    cfg = config_mod.load(paths)
    cfg = replace(cfg, limits=replace(cfg.limits, checkpoint_idle_s=0.2, idle_close_s=0.6))
    paths.palaces_dir.mkdir(parents=True)
    d = Daemon(cfg, embedder=HashEmbedder(64))
    await load_model(d.services.model, cfg.embedder, d.registry, embedder=HashEmbedder(64))
    try:
        yield d
    finally:
        await d.registry.aclose()


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    runs: list[float] = []
    real = Scheduler.run_due

    async def counted(self: Scheduler) -> float:
        runs.append(time.monotonic())
        return await real(self)

    monkeypatch.setattr(Scheduler, "run_due", counted)
    return runs


async def test_checkpoint_and_idle_close_happen_at_their_deadlines(
        core: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _count_runs(monkeypatch)
    async with anyio.create_task_group() as tg:
        tg.start_soon(core.scheduler.run)
        await dispatch(core.ctx, "palace.create", "p", {})
        await dispatch(core.ctx, "memory.remember", "p", {"text": "otters hold hands"})
        palace = core.registry.open_palaces["p"]
        assert palace.checkpoint_due  # the new vector is not saved yet
        with anyio.fail_after(5):
            while palace.checkpoint_due:  # noqa: ASYNC110 - watching, the scheduler drives
                await anyio.sleep(0.02)
        # Saved once idle for checkpoint_idle_s (not at the close); closed once unused for
        # idle_close_s.
        assert not palace.closed and time.monotonic() - palace.last_write >= 0.2
        with anyio.fail_after(5):
            while not palace.closed:  # noqa: ASYNC110 - as above
                await anyio.sleep(0.02)
        assert "p" not in core.registry.open_palaces
        assert time.monotonic() - palace.last_used >= 0.6
        # Nothing is open any more: the scheduler sleeps until woken, it does not tick.
        await anyio.sleep(0.1)
        before = len(runs)
        await anyio.sleep(1.2)
        assert len(runs) == before
        tg.cancel_scope.cancel()
    # A few runs per deadline and per request, nowhere near one per second per palace: a
    # run is due when requested (2 requests), on the model's readiness, at the checkpoint
    # and sweep deadlines, and at the idle close.
    assert len(runs) <= 12, runs


async def test_writes_that_never_pause_still_get_the_index_saved(
        core: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an idle moment the checkpoint never comes; the index is saved anyway once
    SAVE_INTERVAL_S passed, so a kill -9 replays a bounded stretch of writes."""
    from palaced.palace import handle as palace_mod

    monkeypatch.setattr(palace_mod, "SAVE_INTERVAL_S", 0.5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(core.scheduler.run)
        await dispatch(core.ctx, "palace.create", "p", {})
        palace = core.registry.open_palaces["p"]
        saved_at = palace.last_save
        assert palace.index is not None
        i = 0
        with anyio.fail_after(10):
            while palace.last_save == saved_at:
                # A write every 50 ms: never idle for checkpoint_idle_s (0.2 s).
                await dispatch(core.ctx, "memory.remember", "p", {"text": f"otter note {i}"})
                core.scheduler.wake()
                i += 1
                await anyio.sleep(0.05)
        assert time.monotonic() - palace.last_write < 0.2  # saved while writes went on
        assert palace.last_save - saved_at >= 0.5 and i >= 5
        assert palace.index.unsaved < i
        tg.cancel_scope.cancel()


async def test_a_request_wakes_the_scheduler(core: Daemon) -> None:
    woken: list[int] = []
    core.ctx.in_flight.listen(lambda: woken.append(core.ctx.in_flight.count))
    await dispatch(core.ctx, "palace.create", "q", {})
    await dispatch(core.ctx, "memory.recall", "q", {"query": "anything"})
    assert woken == [0, 0]


async def test_decay_is_due_once_a_day_and_read_from_the_palace(core: Daemon) -> None:
    from palaced.memory import upkeep

    await dispatch(core.ctx, "palace.create", "d", {})
    await dispatch(core.ctx, "memory.remember", "d", {"text": "a note to decay"})
    calls: list[Any] = []
    real = upkeep.decay

    async def counted(palace: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(palace.name)
        return await real(palace, **kwargs)

    sched = core.scheduler
    mp = pytest.MonkeyPatch()
    mp.setattr(upkeep, "decay", counted)
    try:
        await anyio.sleep(0.25)  # idle past checkpoint_idle_s
        await sched.run_due()
        assert calls == ["d"]
        # Due again only a day later: more runs decay nothing.
        for up in sched._palaces.values():
            up.not_before = 0.0
        await anyio.sleep(0.25)
        await sched.run_due()
        assert calls == ["d"]
        due = sched._palaces["d"].decay_due_ms
        assert due is not None and due - time.time() * 1000 > upkeep.DECAY_INTERVAL_MS - 60_000
    finally:
        mp.undo()


async def test_in_flight_waits_on_an_event() -> None:
    flights = InFlight()
    ended: list[int] = []
    flights.listen(lambda: ended.append(flights.count))
    await flights.wait_idle()  # nothing in flight: returns at once
    flights.enter()
    flights.enter()
    done = anyio.Event()

    async def waiter() -> None:
        await flights.wait_idle()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        flights.leave()
        await anyio.sleep(0.05)
        assert not done.is_set()
        flights.leave()
        with anyio.fail_after(1):
            await done.wait()
    assert ended == [1, 0]


async def test_writes_that_never_pause_still_get_the_index_compacted(
        core: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an idle moment the idle-time rebuild never comes; once the index holds as many
    tombstones as live vectors it is rebuilt anyway, so the vectors of removed drawers do not
    pile up in memory (``bench/soak.py``)."""
    from palaced.palace import handle as palace_mod

    monkeypatch.setattr(palace_mod, "COMPACT_MIN_DEAD", 4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(core.scheduler.run)
        await dispatch(core.ctx, "palace.create", "p", {})
        palace = core.registry.open_palaces["p"]
        for i in range(4):
            await dispatch(core.ctx, "memory.remember", "p", {"text": f"kept otter {i}"})
        assert palace.index is not None and palace.index_load is not None
        assert palace.index_load.how != "rebuilt"
        i = 0
        with anyio.fail_after(10):
            while palace.index_load.how != "rebuilt":
                # A remember and a forget every 50 ms: never idle for checkpoint_idle_s.
                did = (await dispatch(core.ctx, "memory.remember", "p",
                                      {"text": f"passing otter {i}"}))["id"]
                await dispatch(core.ctx, "memory.forget", "p", {"id": did})
                core.scheduler.wake()
                i += 1
                await anyio.sleep(0.05)
        assert time.monotonic() - palace.last_write < 0.2  # rebuilt while writes went on
        assert i >= 4 and palace.index.dead < 4 and len(palace.index) == 4
        tg.cancel_scope.cancel()
