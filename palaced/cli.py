"""The daemon's own command line: ``palaced run|check-config|print-paths``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable

import typer

from palaced.wire.helptext import plain_help

app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="palaced: the machine-wide palace memory daemon.")


def _print_version(value: bool) -> None:
    """``--version``: print the daemon's version and exit (starts nothing)."""
    if value:
        from palaced import __version__

        typer.echo(f"palaced {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context,
             version: bool = typer.Option(False, "--version", callback=_print_version,
                                          is_eager=True, help="Print the version and exit."),
             ) -> None:
    if ctx.invoked_subcommand is None:
        # Plain values: called directly, run() would get typer's OptionInfo defaults.
        run(quiet=False, log_level="INFO", ready_fd=None)


def _ready_signal(fd: int | None) -> Callable[[], None] | None:
    """What tells the launcher on ``fd`` that the daemon listens: one line, then close.

    The launcher may be gone (its client was interrupted): a failed write is no error.
    """
    if fd is None:
        return None
    try:
        # The daemon's own children must not hold the pipe open: its closing is how the
        # launcher learns that the daemon exited.
        os.set_inheritable(fd, False)
    except OSError:
        return None

    def ready() -> None:
        with contextlib.suppress(OSError):
            os.write(fd, b"ready\n")
        with contextlib.suppress(OSError):
            os.close(fd)

    return ready


@app.command()
def run(
    quiet: bool = typer.Option(False, "--quiet", help="Log to the log file only."),
    log_level: str = typer.Option("INFO", "--log-level"),
    ready_fd: int | None = typer.Option(
        None, "--ready-fd", min=0,
        help="Write 'ready' to this file descriptor once listening, then close it (clients "
        "that start the daemon wait on it)."),
) -> None:
    """Run the daemon in the foreground until SIGTERM/SIGINT or `palace daemon stop`.

    Exits 0 when another daemon already runs, 2 on a bad config file, an unsafe path (a
    runtime dir, lock, socket or log path that is a symlink or another user's) or a socket
    handed over by systemd or launchd that is not the clients' socket.
    """
    import logging

    taken = _lock_taken()
    if taken is not None:
        typer.echo(f"palaced: palaced is already running (lock {taken})", err=True)
        raise typer.Exit(0)

    from palaced.config import settings as config_mod
    from palaced.wire.errors import PalaceError, UnsafePath

    level = log_level.upper()
    if level not in logging.getLevelNamesMapping():
        typer.echo(f"palaced: --log-level must be one of DEBUG, INFO, WARNING, ERROR, got "
                   f"{log_level!r}", err=True)
        raise typer.Exit(2)
    on_ready = _ready_signal(ready_fd)
    # The config first (it creates nothing): a bad file is reported before the daemon's
    # heavy imports, so a client waiting on this start learns why sooner.
    try:
        cfg = config_mod.load()
    except PalaceError as exc:
        typer.echo(f"palaced: {exc.message}", err=True)
        raise typer.Exit(2) from None

    import anyio

    from palaced.daemon import heap
    from palaced.daemon.activation import ActivationError
    from palaced.daemon.core import PRIVATE_UMASK, AlreadyRunning, Daemon, setup_logging

    # Before anything is created (log, state dir): palace's files are for this user only.
    os.umask(PRIVATE_UMASK)
    try:
        setup_logging(cfg.paths.log_file, quiet=quiet, level=level)
    except PalaceError as exc:
        typer.echo(f"palaced: {exc.message}", err=True)
        raise typer.Exit(2) from None
    heap.tune()  # before the model's and the palaces' buffers: freed ones go back at once
    heap.start_trimmer()
    try:
        anyio.run(Daemon(cfg, on_ready=on_ready).run, backend="asyncio")
    except AlreadyRunning as exc:
        typer.echo(f"palaced: {exc}", err=True)
        raise typer.Exit(0) from None
    except (UnsafePath, ActivationError) as exc:
        message = exc.message if isinstance(exc, UnsafePath) else str(exc)
        logging.getLogger("palaced").error("%s", message)
        if quiet:  # the log handler above did not print it
            typer.echo(f"palaced: {message}", err=True)
        raise typer.Exit(2) from None


def _lock_taken() -> str | None:
    """The lock file if another daemon holds this root's single-instance lock (else None),
    asked before importing
    anything heavy: after a crash, every client that finds the socket dead starts a daemon;
    the losers of that race now exit in a tenth of a second, not after half a second of
    imports each (32 clients: ~18 CPU-seconds per crash on two cores).

    Only a lock held exclusively counts, probed with a shared lock that conflicts with no other
    probe. A daemon whose own lock attempt meets a probe gives up, but the prober saw the lock
    free and goes on to take it, so one daemon always starts. Not used when a service manager
    hands over the socket (that daemon takes over from a running one) nor on macOS (launchd's
    handover is only known later); any doubt answers None: the daemon's own checks decide.
    """
    import fcntl
    import os
    import sys

    if sys.platform == "darwin" or "LISTEN_FDS" in os.environ:
        return None
    from palaced.wire.paths import resolve

    lock = resolve().lock_file
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return str(lock)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


@app.command("print-paths")
def print_paths() -> None:
    """Print the resolved data, state, config, runtime and socket paths."""
    from palaced.wire.paths import resolve

    p = resolve()
    typer.echo(json.dumps({
        "data_dir": str(p.data_dir), "palaces_dir": str(p.palaces_dir),
        "state_dir": str(p.state_dir), "config_file": str(p.config_file),
        "runtime_dir": str(p.runtime_dir), "socket": str(p.socket), "log_file": str(p.log_file),
        "stderr_log": str(p.stderr_log),
    }, indent=2))


@app.command("check-config")
def check_config() -> None:
    """Check the config file and print the effective settings.

    Exits 2 with one line per problem (file:line, what is wrong, the closest known key for a
    misspelt one): the same check and message that stop `palaced run`.
    """
    from dataclasses import asdict

    from palaced.config import settings as config_mod
    from palaced.wire.errors import PalaceError

    try:
        cfg = config_mod.load()
    except PalaceError as exc:
        typer.echo(f"palaced: {exc.message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(asdict(cfg), indent=2, default=str))


plain_help(app)


def main() -> None:
    app(prog_name="palaced")


if __name__ == "__main__":
    main()
