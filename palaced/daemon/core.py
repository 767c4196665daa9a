"""Composition root: config -> services -> registry -> ops context -> scheduler -> server.

The daemon wires those together and runs them in one task group: the socket server, the
background model loader (``model_loader``), the upkeep scheduler (``scheduler``), the
background re-embedding after a model change (``reembed``), the background transcript
captures (``capture_queue``) and the signal watcher. Single instance: a flock on the runtime
dir's lock file; the holder owns the socket path, so a socket of ours found there is stale and
is removed.

Local security: the daemon runs with umask 077 (every file it creates is 0600, every
directory 0700), refuses a runtime directory, lock file or socket path that another uid owns
or that is a symlink (see ``palaced.wire.private``), and tightens an existing install at start,
reporting what it changed in ``daemon.status`` for the rest of that run.

Under a service manager (``palaced.daemon.activation``) the daemon serves the listening socket it is
handed instead of binding one, never unlinks that path (the manager owns it), and takes the
lock over from an on-demand daemon that clients can no longer reach; it reports READY=1,
STATUS=, WATCHDOG=1 and STOPPING=1 to systemd (``palaced.daemon.notify``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
from collections.abc import Callable
from functools import partial
from logging.handlers import RotatingFileHandler
from pathlib import Path

import anyio
from anyio.abc import SocketListener, TaskStatus

from palaced import __version__
from palaced.capture.worker import CaptureQueue
from palaced.config.settings import DaemonConfig
from palaced.daemon.activation import inherited_listener, socket_in_use
from palaced.daemon.notify import Notifier
from palaced.daemon.scheduler import Scheduler
from palaced.daemon.server import ConnectionHandler, Gate
from palaced.engine.embedder import Embedder
from palaced.engine.services import ModelState, Services
from palaced.engine.tokens import Tokenizer
from palaced.maintenance.backup import sweep_partials
from palaced.maintenance.model_loader import load_model
from palaced.maintenance.reembed import Reembedder
from palaced.ops.capture import run_capture
from palaced.ops.context import OpContext
from palaced.ops.table import TABLE, dispatch
from palaced.palace.open_files import palace_budget, raise_open_files_limit, serve_listener
from palaced.palace.registry import Registry
from palaced.wire.private import (
    make_private_dirs,
    open_lock_file,
    prepare_runtime_dir,
    refuse_symlink,
    stale_socket,
    tighten_install,
)

log = logging.getLogger("palaced")

SHUTDOWN_GRACE_S = 10.0
# How long a socket-activated daemon waits for an on-demand daemon it asked to stop: its
# grace period plus saving indexes and closing databases.
TAKEOVER_TIMEOUT_S = SHUTDOWN_GRACE_S + 20.0
PRIVATE_UMASK = 0o077  # files 0600, directories 0700, whatever umask we were started with


class AlreadyRunning(Exception):
    """Another palaced holds the lock for this runtime directory."""


class Daemon:
    """One palaced: builds the parts and runs them until stopped.

    ``embedder`` replaces the configured model (tests: ``embedder.HashEmbedder``);
    ``notifier`` the one made from ``NOTIFY_SOCKET``; ``on_ready`` is called once the socket
    listens (``palaced run --ready-fd``).
    """

    def __init__(self, config: DaemonConfig, *, embedder: Embedder | None = None,
                 notifier: Notifier | None = None,
                 on_ready: Callable[[], None] | None = None) -> None:
        self.config = config
        self._embedder_override = embedder
        self.notifier = notifier or Notifier.from_environ()
        self._on_ready = on_ready
        limits = config.limits
        self.services = Services(config=config, model=ModelState(),
                                 tokenizer=Tokenizer.fallback("loading"))
        self.registry = Registry(config.paths.palaces_dir, self.services)
        self._stop = anyio.Event()
        self.ctx = OpContext(config, self.services, self.registry, self.request_stop,
                             connections=lambda: self.gate.connections)
        self.scheduler = Scheduler(self.registry, self.services.model, limits, config.retention)
        self.reembedder = Reembedder(self.registry, self.services)
        self.ctx.in_flight.listen(self.scheduler.wake)
        self.captures = CaptureQueue(partial(run_capture, self.ctx), on_done=self.scheduler.wake)
        self.ctx.captures = self.captures
        self.handler = ConnectionHandler(
            partial(dispatch, self.ctx),
            TABLE.names,
            limits.max_frame,
            limits.request_timeout_s,
            limits.max_request_timeout_s,
            lambda: self.stopping,
            handshake_timeout_s=limits.handshake_timeout_s,
            frame_timeout_s=limits.frame_timeout_s,
            idle_timeout_s=limits.connection_idle_s,
            data_dir=str(config.paths.data_dir),
        )
        self.gate = Gate(self.handler, limits.max_connections, limits.reserve_connections)
        self._lock_fd: int | None = None
        # (st_dev, st_ino) of the socket file we bound: only that file is ours to unlink.
        self._bound: tuple[int, int] | None = None

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- lifecycle --------------------------------------------------------------------------
    def _acquire_lock(self) -> tuple[int, list[str]] | None:
        """Verify (or create) the runtime dir and try the single-instance lock in it.

        Returns the locked fd and the permission notes, or None when another process holds
        the lock.

        Raises:
            UnsafePath: the runtime dir or lock file is a symlink or another uid's.
        """
        paths = self.config.paths
        dir_fd, notes = prepare_runtime_dir(paths.runtime_dir, private=paths.private_runtime)
        try:
            fd = open_lock_file(dir_fd, paths.runtime_dir, paths.lock_file.name)
        finally:
            os.close(dir_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd, notes

    async def _lock(self, *, take_over: bool) -> None:
        """Take the single-instance lock and write our pid into it.

        With ``take_over`` (we serve the socket a service manager handed us) a daemon holding
        the lock cannot be reached by clients any more, since the manager owns the path: it is
        asked to stop (SIGTERM) and its lock awaited.

        Raises:
            UnsafePath: the runtime dir or lock file is a symlink or another uid's.
            AlreadyRunning: another daemon holds the lock (and keeps it, with ``take_over``).
        """
        lock_file = self.config.paths.lock_file
        got = self._acquire_lock()
        if got is None and take_over:
            holder = _lock_holder(lock_file)
            log.warning("palaced (pid %s), not started by the service manager, holds %s: "
                        "asking it to stop so that this daemon serves the managed socket",
                        holder, lock_file)
            if holder is not None:
                with contextlib.suppress(OSError):
                    os.kill(holder, signal.SIGTERM)
            with anyio.move_on_after(TAKEOVER_TIMEOUT_S):
                while got is None:
                    await anyio.sleep(0.1)
                    got = self._acquire_lock()
        if got is None:
            raise AlreadyRunning(f"palaced is already running (lock {lock_file})")
        fd, notes = got
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self.ctx.tightened.extend(notes)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    def load_tokenizer(self) -> None:
        """Start loading the tokenizer in the background (``Services.load_tokenizer``).

        Called once the socket listens: parsing cl100k_base is ~0.2 s of pure Python holding
        the GIL, which, started earlier, slowed the start-up's own work by as much (time to
        the first answered hello 378 -> 236 ms, bench/scale.py "ready").
        """
        self.services.load_tokenizer(partial(Tokenizer.load, self.config.tokenizer_file,
                                             self.config.paths.state_dir / "tiktoken"))

    async def run(self, *, task_status: TaskStatus[Path] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped (daemon.stop, SIGTERM or SIGINT), then shut down cleanly.

        Raises:
            AlreadyRunning: another daemon owns this socket.
            UnsafePath: the runtime dir, lock file or socket path is not safely ours.
            ActivationError: a service manager handed over a socket palaced cannot serve.
        """
        paths = self.config.paths
        os.umask(PRIVATE_UMASK)
        self._budget_open_files()
        inherited = inherited_listener(paths.socket)
        try:
            await self._lock(take_over=inherited is not None)
        except BaseException:
            if inherited is not None:
                inherited.close()
            raise
        try:
            tightened = self.ctx.tightened
            tightened.extend(tighten_install(paths))
            for note in tightened:
                log.warning("tightened permissions other users could use: %s", note)
            make_private_dirs(paths.palaces_dir)
            # We hold the lock: staging/trash dirs of a killed daemon's create/delete are ours.
            await anyio.to_thread.run_sync(self.registry.sweep_leftovers)
            await anyio.to_thread.run_sync(sweep_partials, self.config.backup_dir)
            listener = await self._listen(inherited)
            self.load_tokenizer()
            how = "socket handed over by the service manager" if inherited else "socket"
            log.info("palaced %s serving the %s %s (pid %d)", __version__, how, paths.socket,
                     os.getpid())
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._load_model)
                    tg.start_soon(self.scheduler.run)
                    tg.start_soon(self.reembedder.run)
                    tg.start_soon(self.captures.run)
                    tg.start_soon(self._signals)
                    tg.start_soon(serve_listener, listener, self.gate)
                    tg.start_soon(self._watchdog)
                    # Non-blocking datagram sends: fine on the event loop.
                    self.notifier.ready(f"serving {paths.socket} (model loading)")
                    task_status.started(paths.socket)
                    if self._on_ready is not None:
                        self._on_ready()
                    await self._stop.wait()
                    log.info("shutting down")
                    self.notifier.stopping()
                    # New requests now get SHUTTING_DOWN; let in-flight ones finish first.
                    with anyio.move_on_after(SHUTDOWN_GRACE_S):
                        await self.ctx.in_flight.wait_idle()
                    tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await listener.aclose()
                with anyio.CancelScope(shield=True):
                    await self.registry.aclose()
                self._unlink_socket()
                log.info("stopped")
        finally:
            self._release_lock()

    def _budget_open_files(self) -> None:
        """Raise the open-files limit (``raise_open_files_limit``) and size the registry's
        budget of open palaces from it."""
        before, soft = raise_open_files_limit()
        budget = self.registry.budget
        budget.max_open = palace_budget(soft, self.config.limits)
        raised = f" (raised from {before})" if soft != before else ""
        log.info("open-files limit %d%s: up to %d palaces open at once", soft, raised,
                 budget.max_open)

    async def _listen(self, inherited: socket.socket | None) -> SocketListener:
        """The listener: the handed-over socket, or a new one bound at the socket path.

        Raises:
            UnsafePath: something that is not a socket of ours is at the path.
            AlreadyRunning: another process listens there (a service manager's socket).
        """
        path = self.config.paths.socket
        if inherited is not None:
            return await SocketListener.from_socket(inherited)
        # We hold the lock, so a socket of ours here is a leftover of a dead daemon, unless
        # a service manager (palaced.socket) listens on it: then it is not ours to replace.
        # Anything else (a symlink, a file, another uid's socket) is refused, not removed.
        if stale_socket(path):
            if socket_in_use(path):
                raise AlreadyRunning(f"{path} is served by a service manager's socket (the "
                                     "palaced.socket unit or a LaunchAgent): not replacing it")
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        listener = await anyio.create_unix_listener(path, mode=0o600)
        st = os.lstat(path)
        self._bound = (st.st_dev, st.st_ino)
        return listener

    def _unlink_socket(self) -> None:
        """Remove the socket file we bound, and nothing else: not a service manager's, nor
        one that replaced ours at the path."""
        if self._bound is None:
            return
        path = self.config.paths.socket
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == self._bound:
                path.unlink()

    async def _load_model(self) -> None:
        await load_model(self.services.model, self.config.embedder, self.registry,
                         embedder=self._embedder_override)
        model = self.services.model
        state = "hybrid recall" if model.ready else f"keyword-only: {model.reason}"
        self.notifier.status(f"serving {self.config.paths.socket} ({state})")

    async def _watchdog(self) -> None:
        """``WATCHDOG=1`` at half the deadline while the event loop runs (with WatchdogSec=)."""
        interval = self.notifier.watchdog_interval_s
        if interval is None:
            return
        while True:
            self.notifier.watchdog()
            await anyio.sleep(interval)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                self.request_stop()
                return


def setup_logging(log_file: Path, *, quiet: bool = False, level: str = "INFO") -> None:
    """Log to stderr (unless quiet) and to a rotating file in the state dir.

    The state dir is created 0700; under the daemon's umask the log files are 0600.

    Raises:
        UnsafePath: the log file is a symlink (logs are never written through one).
    """
    root = logging.getLogger()
    root.setLevel(level)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for h in list(root.handlers):
        root.removeHandler(h)
    make_private_dirs(log_file.parent)
    refuse_symlink(log_file)
    fh = RotatingFileHandler(log_file, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
    fh.setFormatter(fmt)
    root.addHandler(fh)
    if not quiet:
        sh = logging.StreamHandler()
        sh.setFormatter(fmt)
        root.addHandler(sh)


def _lock_holder(lock_file: Path) -> int | None:
    """The pid the lock holder wrote into ``lock_file``; None when unreadable."""
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return int(os.read(fd, 64).decode().strip())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
