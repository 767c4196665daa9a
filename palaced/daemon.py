"""Composition root: config -> services -> registry -> task group.

Tasks: the socket server, the background model loader, the index checkpointer, the idle
sweeper and the signal watcher. Single instance: a flock on the runtime dir's lock file; the
holder owns the socket path, so a socket of ours found there is stale and is removed.

Local security: the daemon runs with umask 077 (every file it creates is 0600, every
directory 0700), refuses a runtime directory, lock file or socket path that another uid owns
or that is a symlink (see ``palaced.paths``), and tightens an existing install at start,
reporting what it changed in ``daemon.status`` for the rest of that run.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import ByteStream, TaskStatus

from palaced import upkeep, writes
from palaced.api import need_palace
from palaced.config import DaemonConfig
from palaced.embedder import Embedder, FastEmbedder
from palaced.errors import Busy, PalaceError
from palaced.paths import (
    make_private_dirs,
    open_lock_file,
    prepare_runtime_dir,
    refuse_symlink,
    stale_socket,
    tighten_install,
)
from palaced.protocol import error_response, frame
from palaced.registry import Registry
from palaced.server import ConnectionHandler, peer_uid
from palaced.services import ModelState, Services
from palaced.specs import decode_args

log = logging.getLogger("palaced")

TICK_S = 1.0
EXPIRY_SWEEP_S = 60.0  # expired drawers leave recall at once; deleting them can wait
SHUTDOWN_GRACE_S = 10.0
PRIVATE_UMASK = 0o077  # files 0600, directories 0700, whatever umask we were started with


class AlreadyRunning(Exception):
    """Another palaced holds the lock for this runtime directory."""


class Daemon:
    """One palaced: owns the registry, services and the listening socket."""

    def __init__(self, config: DaemonConfig, *, embedder: Embedder | None = None) -> None:
        from palaced.ops import build_table
        from palaced.tokens import Tokenizer

        self.config = config
        self._embedder_override = embedder
        tokenizer = Tokenizer.load(config.tokenizer_file, config.paths.state_dir / "tiktoken")
        self.services = Services(config=config, model=ModelState(), tokenizer=tokenizer)
        self.registry = Registry(config.paths.palaces_dir, self.services)
        self.ops = build_table()
        self.started = time.monotonic()
        self.connections = 0  # normal slots in use
        self.reserve_connections = 0  # control-only slots in use (past max_connections)
        self._stop = anyio.Event()
        self._lock_fd: int | None = None
        self._in_flight = 0
        # "path (old -> new)" for every permission tightened at start; daemon.status reports
        # it for the whole run (a status consumed by a script must not hide it from a human).
        self.tightened: list[str] = []

    # -- dispatch ---------------------------------------------------------------------------
    async def dispatch(self, op_name: str, palace: str | None, raw_args: Any,
                       deadline_s: float | None) -> dict[str, Any]:
        op = self.ops.get(op_name)
        args = decode_args(op.spec, raw_args)
        if op.spec.palace == "required":
            palace = need_palace(palace)
        self._in_flight += 1
        opened = self.registry.open_palaces.get(palace) if palace else None
        if opened is not None:
            opened.in_flight += 1
        try:
            return await op.handler(self, palace, args)
        finally:
            self._in_flight -= 1
            if opened is not None:
                opened.in_flight -= 1

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- lifecycle --------------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        """Verify (or create) the runtime dir and take the single-instance lock in it.

        Raises:
            UnsafePath: the runtime dir or lock file is a symlink or another uid's.
            AlreadyRunning: another daemon holds the lock.
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
            raise AlreadyRunning(f"palaced is already running (lock {paths.lock_file})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        self.tightened.extend(notes)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    async def run(self, *, task_status: TaskStatus[Path] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped (daemon.stop, SIGTERM or SIGINT), then shut down cleanly.

        Raises:
            AlreadyRunning: another daemon owns this socket.
            UnsafePath: the runtime dir, lock file or socket path is not safely ours.
        """
        paths = self.config.paths
        os.umask(PRIVATE_UMASK)
        self._acquire_lock()
        try:
            self.tightened.extend(tighten_install(paths))
            for note in self.tightened:
                log.warning("tightened permissions other users could use: %s", note)
            make_private_dirs(paths.palaces_dir)
            # We hold the lock, so a socket of ours here is a leftover of a dead daemon;
            # anything else (a symlink, a file, another uid's socket) is refused, not removed.
            if stale_socket(paths.socket):
                with contextlib.suppress(FileNotFoundError):
                    paths.socket.unlink()
            listener = await anyio.create_unix_listener(paths.socket, mode=0o600)
            log.info("palaced %s listening on %s (pid %d)", _version(), paths.socket,
                     os.getpid())
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._load_model)
                    tg.start_soon(self._checkpointer)
                    tg.start_soon(self._signals)
                    tg.start_soon(self._serve, listener)
                    task_status.started(paths.socket)
                    await self._stop.wait()
                    log.info("shutting down")
                    # New requests now get SHUTTING_DOWN; let in-flight ones finish first.
                    with anyio.move_on_after(SHUTDOWN_GRACE_S):
                        while self._in_flight:  # noqa: ASYNC110 - a bounded drain poll
                            await anyio.sleep(0.02)
                    tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await listener.aclose()
                with anyio.CancelScope(shield=True):
                    await self.registry.aclose()
                with contextlib.suppress(FileNotFoundError):
                    paths.socket.unlink()
                log.info("stopped")
        finally:
            self._release_lock()

    async def _serve(self, listener: Any) -> None:
        limits = self.config.limits
        handler = ConnectionHandler(
            self.dispatch,
            self.ops.names,
            limits.max_frame,
            limits.request_timeout_s,
            limits.max_request_timeout_s,
            lambda: self.stopping,
            handshake_timeout_s=limits.handshake_timeout_s,
            frame_timeout_s=limits.frame_timeout_s,
            idle_timeout_s=limits.connection_idle_s,
        )
        my_uid = os.getuid()

        async def on_connect(stream: ByteStream) -> None:
            uid = peer_uid(stream)
            if uid is not None and uid not in (my_uid, 0):
                log.warning("refused a connection from uid %s", uid)
                await stream.aclose()
                return
            reserve = self.connections >= limits.max_connections
            if reserve and self.reserve_connections >= limits.reserve_connections:
                # Refuse politely rather than let thousands of idle clients starve the rest.
                with contextlib.suppress(Exception), anyio.move_on_after(1.0):
                    await stream.send(frame(error_response(None, Busy(
                        f"too many connections ({self.connections}); retry shortly"))))
                await stream.aclose()
                return
            # Past the normal limit, a connection still gets in for status and stop only.
            if reserve:
                self.reserve_connections += 1
            else:
                self.connections += 1
            try:
                await handler.serve(stream, control_only=reserve)
            except Exception:
                log.exception("connection handler crashed")
            finally:
                if reserve:
                    self.reserve_connections -= 1
                else:
                    self.connections -= 1

        await listener.serve(on_connect)

    async def _load_model(self) -> None:
        model = self.services.model
        started = time.monotonic()
        try:
            if self._embedder_override is not None:
                embedder: Embedder = self._embedder_override
            else:
                embedder = await anyio.to_thread.run_sync(
                    FastEmbedder.load, self.config.embedder, abandon_on_cancel=True)
        except PalaceError as exc:
            model.state = "unavailable"
            model.reason = exc.message
            log.warning("embedding model unavailable, keyword-only mode: %s", exc.message)
            return
        except Exception as exc:
            model.state = "unavailable"
            model.reason = f"{type(exc).__name__}: {exc}"
            log.exception("embedding model failed to load; keyword-only mode")
            return
        # Palaces opened from now on attach themselves; attach the ones already open before
        # announcing "ready", so a client that waits for ready sees consistent indexes.
        model.embedder = embedder
        for name, palace in self.registry.open_palaces.items():
            try:
                if palace.index is None and palace.mismatch is None:
                    await palace.attach(embedder)
            except Exception:
                log.exception("palace %s: attaching the model failed", name)
        model.state = "ready"
        model.reason = None
        model.load_seconds = time.monotonic() - started
        model.ready_event.set()
        log.info("embedding model ready: %s (%.2fs)", embedder.identity, model.load_seconds)

    async def _checkpointer(self) -> None:
        limits = self.config.limits
        last_sweep = time.monotonic()
        last_expiry_sweep: dict[str, float] = {}
        # A persistent failure (read-only mount, full disk) repeats every tick: log it once
        # per condition, again when the condition changes, and say when it clears.
        failing: dict[str, str] = {}

        def condition(exc: Exception) -> str:
            if isinstance(exc, PalaceError):
                return f"{exc.name}: {exc.details.get('condition') or exc.message}"
            return f"{type(exc).__name__}: {exc}"

        while True:
            await anyio.sleep(TICK_S)
            now = time.monotonic()
            open_palaces = self.registry.open_palaces
            for gone in failing.keys() - open_palaces.keys():
                del failing[gone]
            for name, palace in open_palaces.items():
                if palace.closed:
                    continue
                worked = False
                try:
                    idle = now - palace.last_write >= limits.checkpoint_idle_s
                    if palace.index_stale or (idle and palace.checkpoint_due):
                        worked = True
                        await palace.checkpoint()
                    if idle and self.services.model.ready and palace.pending_check_due():
                        worked = True
                        await writes.embed_pending(palace)
                    if idle:
                        await upkeep.maybe_decay(palace)
                        if now - last_expiry_sweep.get(name, 0.0) >= EXPIRY_SWEEP_S:
                            last_expiry_sweep[name] = now
                            worked = True
                            await upkeep.sweep_expired(palace)
                except Exception as exc:
                    cond = condition(exc)
                    if failing.get(name) == cond:
                        log.debug("palace %s: checkpoint still failing: %s", name, cond)
                    else:
                        failing[name] = cond
                        log.exception("palace %s: checkpoint failed (logged once until "
                                      "it changes or clears)", name)
                else:
                    if worked and failing.pop(name, None) is not None:
                        log.info("palace %s: checkpoint works again", name)
            if now - last_sweep > min(30.0, limits.idle_close_s):
                last_sweep = now
                await self.registry.close_idle(limits.idle_close_s)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                self.request_stop()
                return


def _version() -> str:
    from palaced import __version__

    return __version__


def setup_logging(log_file: Path, *, quiet: bool = False, level: str = "INFO") -> None:
    """Log to stderr (unless quiet) and to a rotating file in the state dir.

    The state dir is created 0700; under the daemon's umask the log files are 0600.

    Raises:
        UnsafePath: the log file is a symlink (logs are never written through one).
    """
    from logging.handlers import RotatingFileHandler

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
