"""What op handlers may reach: the registry, config, services and a few daemon facts.

Handlers get an ``OpContext``, never the daemon: the daemon builds one and wires it to the
server and the scheduler. ``InFlight`` counts the requests being served, so that shutdown can
wait for them and the scheduler learns when one ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from palaced.capture.worker import CaptureQueue
from palaced.config.settings import DaemonConfig
from palaced.engine.services import Services
from palaced.palace.registry import Registry
from palaced.store.rows.audit import UNKNOWN_AGENT, Actor


class InFlight:
    """The requests being served: a count, an event set while it is zero, and listeners told
    whenever a request ends (the scheduler: a write may have made upkeep due)."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._listeners: list[Callable[[], None]] = []

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (synchronously, so it must not block) after every request."""
        self._listeners.append(callback)

    def enter(self) -> None:
        if self.count == 0:
            self._idle = anyio.Event()
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()
        for callback in self._listeners:
            callback()

    async def wait_idle(self) -> None:
        """Return once no request is in flight (at once when none is)."""
        while self.count:
            await self._idle.wait()


@dataclass
class OpContext:
    """The daemon as op handlers see it, and who is asking: ``dispatch`` hands each request a
    copy carrying its ``agent`` and ``op`` (the rest is shared)."""

    config: DaemonConfig
    services: Services
    registry: Registry
    request_stop: Callable[[], None]
    started: float = field(default_factory=time.monotonic)  # for daemon.status's uptime
    connections: Callable[[], int] = lambda: 0  # normal connection slots in use
    # "path (old -> new)" for every permission tightened at start; daemon.status reports it
    # for the whole run (a status consumed by a script must not hide it from a human).
    tightened: list[str] = field(default_factory=list)
    in_flight: InFlight = field(default_factory=InFlight)
    # Background transcript captures; the daemon wires it (its runner needs this context).
    captures: CaptureQueue | None = None
    agent: str = UNKNOWN_AGENT  # the request's agent (protocol envelope), else UNKNOWN_AGENT
    op: str = ""

    @property
    def actor(self) -> Actor:
        """Who is changing a palace, as the audit log records it."""
        return Actor(self.agent, self.op)
