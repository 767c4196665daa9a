"""Descriptor exhaustion: a daemon under a low ``RLIMIT_NOFILE`` with more palaces than fit.

Each open palace holds several descriptors (lock file, SQLite writer and readers with their
WAL and shared memory): the registry keeps the open ones under a budget derived from the soft
limit (closing the least recently used idle palace), and the accept loop backs off on EMFILE
instead of letting the error end the daemon.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from palaced.config.settings import Limits
from palaced.palace.handle import INDEX_NAME
from palaced.palace.open_files import (
    SQLITE_PALACE_FDS,
    TEAM_PALACE_FDS,
    OpenPalaces,
    palace_budget,
    serve_listener,
)
from palaced.palace.registry import Registry
from tests.conftest import DaemonProc, base_env
from tests.support.inproc import InProcDaemon

LIMIT = 128  # soft = hard: raising the soft limit at start cannot help
PALACES = 40  # ~7 descriptors each: 280, twice what the limit allows


def _limited_daemon(home: Path, hard: int = LIMIT) -> DaemonProc:
    """A keyword-only palaced started with RLIMIT_NOFILE soft = LIMIT (and ``hard``)."""
    d = DaemonProc(home, base_env(home, model=False))

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))

    d.proc = subprocess.Popen(
        [sys.executable, "-m", "palaced", "run", "--quiet"], env=d.env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=lower)
    d.wait_ready(wait_model=False)
    return d


def _log(home: Path) -> str:
    return (home / "state" / "palaced.log").read_text("utf-8", "replace")


@pytest.mark.daemon
def test_recall_all_answers_for_every_palace_under_a_low_limit(home: Path) -> None:
    """40 palaces, room for a few: recall_all answers for each (opening and closing them in
    turn), nothing is skipped, and new connections still work afterwards."""
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        with d.client() as c:
            c.create_palace("p00")
            c.remember("p00", "the zebrafish notes")
    finally:
        d.stop()
    names = [f"p{i:02d}" for i in range(PALACES)]
    palaces = home / "palaces"  # copies are faster than 40 creates
    for name in names[1:]:
        shutil.copytree(palaces / "p00", palaces / name)
    d = _limited_daemon(home)
    try:
        with d.client() as c:
            res = c.recall_all("zebrafish", top_k=PALACES)
        assert res["skipped"] == []
        assert sorted(res["palaces"]) == names
        assert sorted(r["palace"] for r in res["results"]) == names
        # Again, from a fresh connection: the daemon kept descriptors for it.
        with d.client() as c:
            assert sorted(c.recall_all("zebrafish", top_k=PALACES)["palaces"]) == names
            status = c.status()
        # Never more open than the budget under this limit allows.
        assert sum(bool(p.get("open")) for p in status["palaces"]) <= palace_budget(
            LIMIT, Limits())
        # Each palace's own recall opens it again when needed.
        with d.client() as c:
            for name in (names[0], names[-1], names[0]):
                hits = c.recall(name, "zebrafish")
                assert [h["text"] for h in hits] == ["the zebrafish notes"]
        assert d.proc is not None and d.proc.poll() is None
        # No upkeep ran on a palace closed under it (the scheduler pins what it works on).
        assert "Traceback" not in _log(home), _log(home)
    finally:
        d.stop()


@pytest.mark.daemon
def test_accept_survives_emfile(home: Path) -> None:
    """More connections than descriptors: accept() fails with EMFILE; the daemon backs off
    (logging it once), keeps running and serves new connections once descriptors free up."""
    d = _limited_daemon(home)
    socks: list[socket.socket] = []
    try:
        for _ in range(LIMIT + 20):  # the kernel queues them; the daemon runs out accepting
            socks.append(d.connect())
        time.sleep(1.5)  # several accept attempts fail meanwhile
        assert d.proc is not None and d.proc.poll() is None, _log(home)
        for s in socks:
            s.close()
        socks.clear()
        deadline = time.monotonic() + 15
        while True:
            try:
                with d.client() as c:
                    assert c.status()["pid"] == d.pid()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert d.proc.poll() is None
        log = _log(home)
        assert log.count("cannot accept connections") == 1, log
    finally:
        for s in socks:
            s.close()
        d.stop()


@pytest.mark.daemon
def test_soft_limit_raised_to_the_hard_one(home: Path) -> None:
    """Started with soft 128 under a higher hard limit, the daemon raises its soft limit to
    the hard one and sizes its budget from that."""
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    assert hard > LIMIT
    d = _limited_daemon(home, hard)
    try:
        assert resource.prlimit(d.pid(), resource.RLIMIT_NOFILE) == (hard, hard)
        budget = palace_budget(hard, Limits())
        assert f"open-files limit {hard} (raised from {LIMIT}): up to {budget} palaces" in _log(
            home)
    finally:
        d.stop()


def test_budget_from_the_soft_limit() -> None:
    """The budget leaves a reserve for connections, shrinks with the limit, never below one
    palace, and a configured maximum caps it."""
    limits = Limits()
    assert palace_budget(1024, limits) < palace_budget(65536, limits)
    assert palace_budget(1024, limits) * 12 + limits.max_connections <= 1024
    assert palace_budget(16, limits) == 1
    assert palace_budget(65536, Limits(max_open_palaces=5)) == 5
    assert palace_budget(128, Limits(max_open_palaces=5000)) == palace_budget(128, limits)
    from palaced.store.conn.pg import POOL_MAX  # a team palace's pool counts

    assert TEAM_PALACE_FDS == 1 + POOL_MAX


def test_lru_closes_the_least_recently_used_idle_palace(inproc: InProcDaemon) -> None:
    """With room for two palaces, opening a third closes the least recently used idle one
    (saving its index, as an idle close does), never one with a request in flight."""
    assert inproc.daemon is not None
    registry: Registry = inproc.daemon.registry
    names = ["lru-a", "lru-b", "lru-c"]
    with inproc.client() as c:
        for name in names:
            c.create_palace(name)
            c.remember(name, f"lru drawer of {name}")

    async def run() -> None:
        old = registry.budget.max_open
        await registry.close_idle(0)
        registry.budget.max_open = 2
        try:
            a = await registry.get("lru-a")
            await anyio.sleep(0.01)
            b = await registry.get("lru-b")
            (a.dir / INDEX_NAME).unlink(missing_ok=True)
            a.begin_work()  # a request is running on a: b goes, though used later
            try:
                await registry.get("lru-c")
            finally:
                a.end_work()
            assert b.closed and not a.closed
            assert sorted(registry.open_palaces) == ["lru-a", "lru-c"]
            await registry.get("lru-b")  # now a is the least recently used idle one
            assert a.closed
            assert (a.dir / INDEX_NAME).exists()  # saved at close
            assert sorted(registry.open_palaces) == ["lru-b", "lru-c"]
            async with registry.budget.using("lru-a") as pa:  # pinned while used
                await registry.get("lru-b")
                await registry.get("lru-c")
                assert not pa.closed
        finally:
            registry.budget.max_open = old

    assert inproc._portal is not None
    inproc._portal.call(run)
    with inproc.client() as c:
        for name in names:
            assert c.recall(name, "lru drawer")


def test_upkeep_keeps_its_palace_open(inproc: InProcDaemon) -> None:
    """A palace whose upkeep is running is not closed to make room for another (before, the
    upkeep then failed on the closed database)."""
    assert inproc.daemon is not None and inproc._portal is not None
    registry: Registry = inproc.daemon.registry
    scheduler = inproc.daemon.scheduler
    with inproc.client() as c:
        for name in ("up-a", "up-b"):
            c.create_palace(name)
            c.remember(name, f"upkeep drawer of {name}")

    async def run() -> None:
        await registry.close_idle(0)
        started, release = anyio.Event(), anyio.Event()
        real = scheduler._work

        async def slow(name: str, up: Any, now: float) -> None:
            if name == "up-a":
                started.set()
                await release.wait()
            await real(name, up, now)

        old = registry.budget.max_open
        scheduler._work = slow  # type: ignore[method-assign]
        registry.budget.max_open = 1
        try:
            a = await registry.get("up-a")  # its first upkeep is due at once
            scheduler.wake()
            with anyio.fail_after(10):
                await started.wait()
            await registry.get("up-b")
            assert not a.closed
            release.set()
        finally:
            release.set()
            scheduler._work = real  # type: ignore[method-assign]
            registry.budget.max_open = old

    inproc._portal.call(run)


def _refused(code: int) -> anyio.BrokenResourceError:
    """What anyio's accept() raises for an OSError ``code``."""
    exc = anyio.BrokenResourceError()
    exc.__cause__ = OSError(code, os.strerror(code))
    return exc


class _Listener:
    """A listener whose accept() raises ``failures`` in turn, then hands out one stream."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.handed = False

    async def accept(self) -> object:
        if self.failures:
            raise self.failures.pop(0)
        if not self.handed:
            self.handed = True
            return "stream"
        await anyio.sleep_forever()
        raise AssertionError


def test_accept_loop_waits_out_enfile_and_raises_other_errors(
        caplog: pytest.LogCaptureFixture) -> None:
    """ENFILE (the system's table full) is waited out like EMFILE, warned once; any other
    accept() failure still ends the loop."""
    served: list[object] = []

    async def run(listener: _Listener) -> None:
        # Served once: stop there (the listener then waits forever) instead of at the bound.
        with anyio.move_on_after(2) as scope:
            async def handler(stream: Any) -> None:
                served.append(stream)
                scope.cancel()

            await serve_listener(listener, handler)  # type: ignore[arg-type]

    shortage = _Listener([_refused(errno.ENFILE), _refused(errno.EMFILE), _refused(errno.ENFILE)])
    with caplog.at_level(logging.INFO, logger="palaced.palace.open_files"):
        anyio.run(run, shortage)
    assert served == ["stream"]
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "cannot accept connections", "accepting connections again (3 attempts failed)"]
    with pytest.raises(BaseExceptionGroup) as raised:  # out of serve_listener's task group
        anyio.run(run, _Listener([_refused(errno.EBADF)]))
    assert raised.group_contains(anyio.BrokenResourceError)


def test_team_palaces_count_their_pool() -> None:
    """A team palace counts its lock file and connection pool against the budget (in SQLite
    palaces' worth of descriptors)."""
    from types import SimpleNamespace

    def fake(shared: bool) -> Any:
        return SimpleNamespace(storage=SimpleNamespace(shared=shared))

    open_: dict[str, Any] = {}

    async def get(name: str) -> Any:
        raise AssertionError(name)

    budget = OpenPalaces(open_, {}, get)
    budget.max_open = 2  # 24 descriptors
    open_["team"] = fake(True)
    assert not budget._full(SQLITE_PALACE_FDS)  # 9 + 12
    open_["local"] = fake(False)
    assert budget._full(TEAM_PALACE_FDS)  # 9 + 12 + 9
    del open_["team"]
    assert not budget._full(TEAM_PALACE_FDS)  # 12 + 9
