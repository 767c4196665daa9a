"""The daemon core in-process, for fast op-behaviour tests.

``InProcDaemon`` builds the real composition (``palaced.daemon.core.Daemon``: services, registry, op
context and table, scheduler, connection handler) with the hashing embedder instead of the
model, and runs its event loop in a background thread (an anyio blocking portal). Each
connection is a socketpair: the daemon's own ``ConnectionHandler`` serves one end, the real
synchronous client (``palace_client``) or a raw test socket speaks on the other. So the
framing, envelope and argument decoding, dispatch and handlers are all the real ones; what is
left out is the listening socket and its connection gate, the lock, auto-start, signals and the
real model, which the real-daemon tests in ``conftest.py`` keep covering.

It offers what tests use of ``conftest.DaemonProc``: ``client()`` and ``connect()``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
from anyio.abc import UNIXSocketStream

from palace_client import Client
from palace_client.transport.connection import Connection
from palaced.config import settings as config_mod
from palaced.daemon.core import Daemon
from palaced.engine.embedder import Embedder, HashEmbedder
from palaced.maintenance.model_loader import load_model
from palaced.wire.paths import Paths


class InProcClient(Client):
    """A ``palace_client.Client`` whose connections are socketpairs into an InProcDaemon."""

    def __init__(self, daemon: InProcDaemon) -> None:
        super().__init__(daemon.home / "run" / "palaced.sock", autostart=False,
                         client_name="tests")
        self._daemon = daemon

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self._daemon.connect(), "tests")
        return self._conn


class InProcDaemon:
    """A daemon core running in a background thread (see the module docstring)."""

    def __init__(self, home: Path, *, tokenizer_file: Path | None = None,
                 embedder: Embedder | None = None) -> None:
        self.home = home
        self._tokenizer_file = tokenizer_file
        self._embedder = embedder or HashEmbedder(64)
        self._stack = contextlib.ExitStack()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._tasks: list[Future[Any]] = []
        self.daemon: Daemon | None = None

    def start(self) -> None:
        """Build the core, load the (hashing) model and start the scheduler."""
        self._portal = self._stack.enter_context(
            anyio.from_thread.start_blocking_portal(backend="asyncio"))
        self.daemon = self._portal.call(self._build)
        self._tasks.append(self._portal.start_task_soon(self.daemon.scheduler.run))
        self._tasks.append(self._portal.start_task_soon(self.daemon.reembedder.run))
        self._tasks.append(self._portal.start_task_soon(self.daemon.captures.run))

    async def _build(self) -> Daemon:
        home = self.home
        paths = Paths(home, home / "state", home / "config.toml", home / "run",
                      home / "run" / "palaced.sock")
        cfg = replace(config_mod.load(paths), tokenizer_file=self._tokenizer_file)
        paths.palaces_dir.mkdir(parents=True, exist_ok=True)
        daemon = Daemon(cfg, embedder=self._embedder)
        daemon.load_tokenizer()  # what run() does once its socket listens
        await load_model(daemon.services.model, cfg.embedder, daemon.registry,
                         embedder=self._embedder)
        return daemon

    def stop(self) -> None:
        """Cancel the scheduler and every connection, close the palaces, end the thread."""
        for task in self._tasks:
            task.cancel()
        if self._portal is not None and self.daemon is not None:
            self._portal.call(self.daemon.registry.aclose)
        self._stack.close()

    def connect(self) -> socket.socket:
        """A connected socket served by the daemon's ConnectionHandler (no hello sent yet)."""
        assert self._portal is not None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.settimeout(30)
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(self._portal.start_task_soon(self._serve, theirs))
        return ours

    async def _serve(self, sock: socket.socket) -> None:
        assert self.daemon is not None
        stream = await UNIXSocketStream.from_socket(sock)
        await self.daemon.handler.serve(stream)

    def client(self, autostart: bool = False) -> Client:
        return InProcClient(self)

    def call(self, op: str, palace: str | None = None,
             args: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request on a fresh connection."""
        with self.client() as c:
            return c.call(op, palace, args)


@contextlib.contextmanager
def inproc_daemon(home: Path, **kwargs: Any) -> Iterator[InProcDaemon]:
    d = InProcDaemon(home, **kwargs)
    d.start()
    try:
        yield d
    finally:
        d.stop()
