"""Auto-start detaches the daemon, and `palace daemon stop` returns as soon as it exits."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DaemonProc, base_env, short_home

# A client that auto-starts the daemon, reports the daemon's pid, then stays alive.
LONG_LIVED_CLIENT = """
import sys, time
from palace_client import Client
c = Client(client_name="long-lived")
print(c.status()["pid"], flush=True)
time.sleep(120)
"""


def _ppid(pid: int) -> int:
    out = subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.strip())


def _exited(pid: int) -> bool:
    """No such process, or one that has exited and waits to be reaped (a zombie)."""
    res = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return res.returncode != 0 or res.stdout.strip().startswith(("Z", "X"))


@pytest.fixture
def fresh() -> Iterator[DaemonProc]:
    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    yield d
    # Not d.stop(): an orphaned daemon may stay a zombie of init here, which it waits out.
    with contextlib.suppress(OSError, ValueError):
        pid = d.pid()
        if not _exited(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while not _exited(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    shutil.rmtree(path, ignore_errors=True)


def test_autostarted_daemon_is_detached_and_stop_is_quick(fresh: DaemonProc) -> None:
    client = subprocess.Popen([sys.executable, "-c", LONG_LIVED_CLIENT], env=fresh.env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None
        pid = int(client.stdout.readline())
        assert pid == fresh.pid()
        assert _ppid(pid) != client.pid  # not the client's child: never its zombie
        started = time.monotonic()
        res = fresh.cli("daemon", "stop", "--json")
        took = time.monotonic() - started
        assert res.returncode == 0, res.stderr
        assert '"stopped": true' in res.stdout
        assert took < 5, f"daemon stop took {took:.1f}s"
        assert _exited(pid)
        assert client.poll() is None  # the client that started it is still running
    finally:
        client.kill()
        client.wait()


@pytest.mark.daemon
def test_stop_returns_when_the_daemon_is_left_a_zombie(home: Path) -> None:
    # This test process starts the daemon and does not reap it while `stop` runs, like a
    # long-lived client that spawned it: the exited daemon is a zombie until reaped.
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        assert d.proc is not None
        started = time.monotonic()
        res = d.cli("daemon", "stop")
        took = time.monotonic() - started
        assert res.returncode == 0, res.stderr
        assert f"pid {d.proc.pid}) stopped" in res.stdout
        assert took < 5, f"daemon stop took {took:.1f}s"
        assert d.proc.wait(timeout=5) == 0
    finally:
        d.stop()
