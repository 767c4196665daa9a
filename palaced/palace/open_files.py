"""File descriptors: the daemon's open-files limit, the budget of open palaces, and accepting
connections through a shortage.

Every open palace holds descriptors (its lock file, SQLite connections with their WAL and
shared memory; a team palace its pool's sockets), every connection one. Under the usual soft
limit of 1024, ~145 open palaces used to exhaust it: opens failed (``recall_all`` skipped the
palaces), and ``accept()`` failing with EMFILE ended the daemon. So the daemon raises its soft
limit to the hard one at start (``raise_open_files_limit``), keeps the open palaces under a
budget derived from it (``palace_budget``, ``OpenPalaces``: opening one more closes the least
recently used idle one), and its accept loop (``serve_listener``) waits out a shortage.
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketListener

from palaced.config.settings import Limits
from palaced.palace.handle import Palace
from palaced.store import MAX_READERS

log = logging.getLogger("palaced.palace.open_files")

# Descriptors an open SQLite palace may hold: its lock file, the writer's database and WAL,
# the shared-memory file, and up to MAX_READERS readers with a database and WAL each (with
# the one reader of a quiet palace, the 7 measured).
SQLITE_PALACE_FDS = 4 + 2 * MAX_READERS
# A team palace: its lock file and up to palaced.store.conn.pg.POOL_MAX (8) pooled connections to
# its server (not imported: psycopg loads only for team palaces).
TEAM_PALACE_FDS = 1 + 8
# What the daemon holds besides palaces and connections: stdio, log files, the listener, the
# daemon lock, the event loop's own, the model and tokenizer files while they are read.
DAEMON_FDS = 64
# The soft limit tried when the hard one is unlimited (macOS refuses more than OPEN_MAX,
# 10240, as a soft limit); an unlimited soft limit is counted as this much.
NOFILE_UNLIMITED = 10240
# accept() failing for want of descriptors or memory: the connection waits in the kernel's
# queue, and a descriptor freed by a closing connection or palace lets it in. Retried after a
# back-off doubling from the first to the second value (seconds); warned at most once per
# ACCEPT_WARN_EVERY_S, not per attempt.
SHORTAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_BACKOFF_S = (0.05, 1.0)
ACCEPT_WARN_EVERY_S = 300.0


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; ``(soft before, soft now)``, an
    unlimited one counted as ``NOFILE_UNLIMITED``.

    The hard limit is what the administrator allows; the soft one is often left at 1024.
    Never raises: a limit the kernel refuses is left as it is.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = soft
    for want in (hard, NOFILE_UNLIMITED):
        if soft == resource.RLIM_INFINITY or want == resource.RLIM_INFINITY or want <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):  # above the kernel's maximum (nr_open, OPEN_MAX)
            continue
        now = want
        break

    def counted(n: int) -> int:
        return NOFILE_UNLIMITED if n == resource.RLIM_INFINITY else n

    return counted(soft), counted(now)


def palace_budget(soft_limit: int, limits: Limits) -> int:
    """How many SQLite palaces may be open at once under an open-files limit of
    ``soft_limit``: what the limit leaves after a reserve for the daemon and its connections
    (at most half of it), at ``SQLITE_PALACE_FDS`` each, capped by ``max_open_palaces`` when
    set; at least one."""
    reserve = min(DAEMON_FDS + limits.max_connections + limits.reserve_connections,
                  soft_limit // 2)
    fit = max((soft_limit - reserve) // SQLITE_PALACE_FDS, 1)
    return min(fit, limits.max_open_palaces) if limits.max_open_palaces else fit


def _fds(palace: Palace) -> int:
    """Descriptors ``palace`` may hold (a team palace's pool counts)."""
    return TEAM_PALACE_FDS if palace.storage.shared else SQLITE_PALACE_FDS


async def close_logged(palace: Palace) -> None:
    """Close ``palace``, logging a failure instead of raising it."""
    try:
        await palace.aclose()
    except Exception:
        log.exception("closing palace %s failed", palace.name)


class OpenPalaces:
    """The budget of a registry's open palaces: at most ``max_open`` SQLite palaces' worth
    of descriptors (None: no budget) unless every open one is in use.

    It works on the registry's own ``open_`` map and per-name ``locks`` (held while a palace
    opens, closes, or is backed up or restored), and opens through its ``get``.
    """

    def __init__(self, open_: dict[str, Palace], locks: dict[str, anyio.Lock],
                 get: Callable[[str], Awaitable[Palace]]) -> None:
        self.max_open: int | None = None
        self._open = open_
        self._locks = locks
        self._get = get
        # Names a request is using (``pin``): never closed to make room, even before open.
        self._pins: Counter[str] = Counter()
        self._over = False  # warned once until back under the budget

    def pin(self, name: str | None) -> None:
        """Mark palace ``name`` as used by a request (None: no palace) until ``unpin``: it is
        not closed to make room meanwhile, whether or not it is open yet."""
        if name is not None:
            self._pins[name] += 1

    def unpin(self, name: str | None) -> None:
        """End one ``pin`` of ``name``."""
        if name is not None:
            self._pins[name] -= 1
            if self._pins[name] <= 0:
                del self._pins[name]

    @asynccontextmanager
    async def using(self, name: str, *, passing: bool = False) -> AsyncIterator[Palace]:
        """The open palace ``name`` (opened if needed), pinned while the block runs.

        With ``passing`` (a pass over every palace, as ``memory.recall_all`` makes), a palace
        this call had to open is closed again afterwards when no other would fit: the pass
        then opens each palace in turn instead of pushing out the palaces in use.

        Raises:
            What the registry's ``get`` raises.
        """
        self.pin(name)
        try:
            was_open = name in self._open
            palace = await self._get(name)
            yield palace
        finally:
            self.unpin(name)
        if passing and not was_open and self._full(SQLITE_PALACE_FDS):
            await self._close_if_idle(palace, "after a pass over every palace", quiet=True)

    def _full(self, need: int) -> bool:
        """Whether a palace holding ``need`` more descriptors would pass the budget."""
        if self.max_open is None:
            return False
        held = sum(_fds(p) for p in self._open.values())
        return held + need > self.max_open * SQLITE_PALACE_FDS

    async def make_room(self, team: bool) -> None:
        """Close the least recently used idle palaces until one more (a ``team`` palace or a
        SQLite one) fits the budget. When every open palace is in use, the palace is opened
        past the budget (warned once until back under it): the reserve is there for that,
        and refusing would fail a request that the descriptors may well allow."""
        need = TEAM_PALACE_FDS if team else SQLITE_PALACE_FDS
        for palace in sorted(self._open.values(), key=lambda p: p.last_used):
            if not self._full(need):
                break
            await self._close_if_idle(palace, "the least recently used")
        full = self._full(need)
        if full and not self._over:
            log.warning("every one of the %d open palaces is in use: opening one more past "
                        "the budget of %s (limits.max_open_palaces, the open-files limit)",
                        len(self._open), self.max_open)
        self._over = full

    async def _close_if_idle(self, palace: Palace, why: str, *, quiet: bool = False) -> None:
        """Close ``palace`` (saving its index, as an idle close does) unless a request,
        upkeep, a pin, a write, a re-embedding, or an open, close, backup or restore of it is
        under way. ``why`` goes to the log (at debug level when ``quiet``)."""
        name = palace.name
        lock = self._locks.setdefault(name, anyio.Lock())
        try:
            lock.acquire_nowait()  # waiting could deadlock with the holder: leave it be
        except anyio.WouldBlock:
            return
        try:
            if (self._open.get(name) is palace and palace.in_flight == 0
                    and not self._pins[name] and not palace.write_lock.locked()
                    and not palace.reembed_lock.locked()):
                del self._open[name]
                await close_logged(palace)
                log.log(logging.DEBUG if quiet else logging.INFO,
                        "closed palace %s (%s) to stay within %s open palaces", name, why,
                        self.max_open)
        finally:
            lock.release()


def _shortage(exc: BaseException) -> bool:
    """Whether an accept() failure is a shortage of descriptors or memory (anyio reports the
    OSError as the cause of a BrokenResourceError)."""
    return any(isinstance(err, OSError) and err.errno in SHORTAGE_ERRNOS
               for err in (exc, exc.__cause__))


async def serve_listener(listener: SocketListener,
                         handler: Callable[[ByteStream], Coroutine[Any, Any, None]]) -> None:
    """Accept connections on ``listener`` and serve each with ``handler`` in its own task,
    until cancelled.

    An accept() failing with EMFILE, ENFILE, ENOBUFS or ENOMEM is retried after a short
    back-off (``ACCEPT_BACKOFF_S``) rather than ending the daemon, which would also lose the
    unsaved indexes: descriptors come back as connections and palaces close.

    Raises:
        anyio.BrokenResourceError, OSError: the listener failed otherwise.
    """
    delay = 0.0
    warned_at = -ACCEPT_WARN_EVERY_S
    failures = 0
    async with anyio.create_task_group() as tg:
        while True:
            try:
                stream = await listener.accept()
            except (anyio.BrokenResourceError, OSError) as exc:
                if not _shortage(exc):
                    raise
                failures += 1
                if time.monotonic() - warned_at >= ACCEPT_WARN_EVERY_S:
                    warned_at = time.monotonic()
                    log.warning("cannot accept connections: %s (the open-files limit, "
                                "`ulimit -n`, is too low for the connections and palaces "
                                "open); retrying until descriptors free up",
                                exc.__cause__ or exc)
                delay = min(max(delay * 2, ACCEPT_BACKOFF_S[0]), ACCEPT_BACKOFF_S[1])
                await anyio.sleep(delay)
                continue
            if failures:
                log.info("accepting connections again (%d attempts failed)", failures)
                delay, failures = 0.0, 0
            tg.start_soon(handler, stream)
