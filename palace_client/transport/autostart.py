"""Starting palaced on demand, and saying at once why it did not start.

The daemon is started through a small launcher (a throwaway ``python -S``, stdlib only) that
starts it in a new session and waits, on a pipe whose write end only the daemon holds, until
the daemon either says it is listening (``palaced run --ready-fd``) or exits. A daemon that
exits early (a bad config file, an unsafe path) closes the pipe at once, so the launcher
reports its exit status within milliseconds, and the client quotes the end of its stderr
instead of polling a socket that will never appear.

The launcher exits as soon as it knows: the daemon is then orphaned and reparented to init.
Were it the client's own child, it would linger as the client's zombie after it exits, for as
long as the client process lives.

The daemon's stdout and stderr go to ``Paths.stderr_log`` (0600, in the state directory),
which survives the launcher, so whatever it prints before its log is set up stays readable.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from palaced.wire.errors import DaemonStartFailed, DaemonUnreachable
from palaced.wire.paths import Paths
from palaced.wire.private import make_private_dirs

T = TypeVar("T")

# argv: wait_s, then the daemon's command line (``--ready-fd N`` is appended). Prints one line:
# "ready", "exited CODE" or "starting" (still starting when wait_s ran out).
_LAUNCHER = """\
import os, select, subprocess, sys
wait_s = float(sys.argv[1])
r, w = os.pipe()
daemon = subprocess.Popen([*sys.argv[2:], "--ready-fd", str(w)], start_new_session=True,
                          close_fds=True, pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=2)
os.close(w)
readable = select.select([r], [], [], wait_s)[0]
if not readable:
    print("starting")
elif os.read(r, 16):
    print("ready")
else:
    try:
        print("exited", daemon.wait(5))
    except subprocess.TimeoutExpired:
        print("starting")
"""
# Beyond this the stderr log is emptied before the next start (it only grows by start-up
# failures and crashes, but a crash loop must not fill the disk).
STDERR_LOG_MAX = 1 << 20
TAIL_LINES = 20
TAIL_BYTES = 4096


@dataclass(frozen=True)
class Started:
    """What the launcher saw: ``ready`` (listening), ``exited`` (with ``code``; 0 means
    another daemon already owns the socket) or ``starting`` (neither within the wait)."""

    state: str
    code: int | None = None
    said: str = ""  # the end of its stderr, for ``exited`` (why it left the socket alone)


def _open_stderr_log(path: Path) -> tuple[int | None, int]:
    """The stderr log opened for appending (0600, no symlink followed) and its size, or
    ``(None, 0)`` when it cannot be opened (the daemon is started anyway)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None, 0
    size = os.fstat(fd).st_size
    if size > STDERR_LOG_MAX:
        os.ftruncate(fd, 0)
        size = 0
    return fd, size


def stderr_tail(path: Path, offset: int) -> str:
    """The last lines written to ``path`` after ``offset`` (at most TAIL_LINES lines and
    TAIL_BYTES bytes); "" when there are none or the file cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        start = offset if offset <= size else 0
        start = max(start, size - TAIL_BYTES)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, TAIL_BYTES)
    finally:
        os.close(fd)
    lines = [ln.rstrip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return "\n".join(lines[-TAIL_LINES:])


def describe_status(code: int) -> str:
    """``"status 2"``, or ``"signal SIGSEGV"`` for a negative (signal) return code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def daemon_env() -> dict[str, str]:
    """The client's environment with its path settings made absolute (the daemon runs
    from ``/``)."""
    env = dict(os.environ)
    for key in ("PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "PALACE_EMBED_MODEL_PATH",
                "PALACE_TIKTOKEN_FILE"):
        if env.get(key):
            env[key] = os.path.abspath(os.path.expanduser(env[key]))
    return env


def start_daemon(paths: Paths, wait_s: float) -> Started:
    """Start palaced detached and wait up to ``wait_s`` until it listens or exits.

    Raises:
        DaemonStartFailed: it exited with a non-zero status before listening; the message
            has the status and the end of its stderr, ``details`` the log's path.
        DaemonUnreachable: the launcher could not be run.
    """
    make_private_dirs(paths.state_dir)
    log = paths.stderr_log
    fd, offset = _open_stderr_log(log)
    daemon_cmd = [sys.executable, "-m", "palaced", "run", "--quiet"]
    try:
        launcher = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCHER, f"{wait_s:.3f}", *daemon_cmd],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=fd if fd is not None else subprocess.DEVNULL, close_fds=True,
            env=daemon_env(), cwd="/", timeout=wait_s + 10, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise DaemonUnreachable(f"cannot start palaced: {exc}",
                                details={"stderr_log": str(log)}) from None
    finally:
        if fd is not None:
            os.close(fd)
    words = launcher.stdout.decode("ascii", "replace").split()
    if launcher.returncode != 0 or not words:
        raise DaemonUnreachable(
            f"cannot start palaced: its launcher failed ({describe_status(launcher.returncode)})"
            f"; see {log}", details={"stderr_log": str(log)})
    if words[0] != "exited":
        return Started(words[0])
    code = int(words[1])
    tail = stderr_tail(log, offset) if fd is not None else ""
    if code == 0:
        return Started("exited", 0, tail)
    said = f":\n{tail}" if tail else " without a word on stderr"
    raise DaemonStartFailed(
        f"palaced exited with {describe_status(code)} before it answered{said}\n"
        f"(its stderr is kept in {log}; `palaced check-config` checks the config file)",
        details={"status": code, "stderr_log": str(log), "stderr_tail": tail,
                 "socket": str(paths.socket)})


def lock_holder(lock_file: Path) -> int | None:
    """The pid of the daemon holding ``lock_file`` (it writes its pid there), 0 when a
    process holds it without having written a pid, None when nobody holds it.

    Probed with a shared lock released at once, which conflicts with no other probe.
    """
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return 0  # not ours to judge (a symlink, another uid's): the daemon says why
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            return None
        try:
            return int(os.read(fd, 64).decode().strip())
        except (OSError, ValueError):
            return 0
    finally:
        os.close(fd)  # closing drops the probe's lock, if it got one


def start_and_wait(paths: Paths, start_timeout: float, attempt: Callable[[], T],
                   absent: tuple[type[BaseException], ...]) -> T:
    """Start the daemon, then ``attempt()`` to connect until it succeeds, within
    ``start_timeout``; ``absent`` are the errors of a socket nobody serves yet.

    When the daemon started defers to another that holds the socket's lock (it exits 0), and
    that one lets go of the lock without serving the socket (it failed, or was stopping), a
    daemon is started again at once rather than waited for in vain.

    Raises:
        DaemonStartFailed: a daemon it started exited with a non-zero status (at once).
        DaemonUnreachable: nothing answered within ``start_timeout``; when our daemon
            deferred to a lock holder, the message names the lock and quotes its words.
    """
    deadline = time.monotonic() + start_timeout
    # "exited" (0) means another daemon holds this socket's lock (it may still be starting),
    # "starting" that ours did not listen in time.
    started = start_daemon(paths, start_timeout)
    delay = 0.01
    probed = time.monotonic()
    last: BaseException | None = None
    while True:
        try:
            return attempt()
        except absent as exc:
            last = exc
        now = time.monotonic()
        if now >= deadline:
            break
        if started.state == "exited" and now - probed >= 0.25:
            probed = now
            if lock_holder(paths.lock_file) is None:
                started = start_daemon(paths, deadline - now)
                continue
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    where = f"see {paths.log_file} and {paths.stderr_log}"
    if started.state == "exited":
        holder = lock_holder(paths.lock_file)
        who = f"pid {holder}" if holder else "another process"
        said = f"; it said:\n{started.said}" if started.said else ""
        raise DaemonUnreachable(
            f"started palaced, but it exited at once: {who} holds the lock {paths.lock_file} "
            f"and did not answer on {paths.socket} within {start_timeout:g}s ({last}); "
            f"{where}{said}",
            details={"socket": str(paths.socket), "lock": str(paths.lock_file),
                     "lock_holder": holder, "log": str(paths.log_file),
                     "stderr_log": str(paths.stderr_log), "stderr_tail": started.said})
    raise DaemonUnreachable(
        f"started palaced but it did not answer on {paths.socket} within "
        f"{start_timeout:g}s ({last}); {where}",
        details={"socket": str(paths.socket), "log": str(paths.log_file),
                 "stderr_log": str(paths.stderr_log)})
