"""Auto-start fails fast: a daemon that exits at start is reported at once, with its words;
and concurrent creates of one palace agree on who created it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import DaemonProc, base_env, short_home


def _palace(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "palace_client", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def cold() -> Iterator[DaemonProc]:
    """A home with no daemon running; whatever a test starts there is stopped after it."""
    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    yield d
    with contextlib.suppress(OSError, ValueError):
        pid = d.pid()
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    shutil.rmtree(path, ignore_errors=True)


def test_a_daemon_that_exits_at_start_fails_the_call_at_once_with_its_words(
        cold: DaemonProc) -> None:
    config = cold.home / "config.toml"
    config.write_text('[embedder]\nthreads = "two"\n')
    started = time.monotonic()
    res = cold.cli("status", "--json")
    took, done = time.monotonic() - started, time.time()
    log = cold.home / "state" / "palaced-stderr.log"
    # Reported within moments of the daemon's last words (written as it exited), and nowhere
    # near the 20 s a client waits for a daemon that is still starting. Both bounds leave room
    # for a loaded machine: unloaded, the whole call takes about half a second.
    assert done - log.stat().st_mtime < 2, f"reported {done - log.stat().st_mtime:.1f}s late"
    assert took < 10, f"the call took {took:.1f}s"
    assert res.returncode == 3, res.stderr
    error = json.loads(res.stdout)["error"]
    assert error["name"] == "DAEMON_START_FAILED" and error["retryable"] is False
    assert error["details"]["status"] == 2
    where = f"{config}:2: [embedder] threads must be an integer, got the string 'two'"
    assert where in error["message"] and where in error["details"]["stderr_tail"]
    # The daemon's stderr went to a log that exists, is private, and is named.
    assert Path(error["details"]["stderr_log"]) == log
    assert str(log) in error["message"]
    assert where in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "palace: error: palaced exited with status 2" in res.stderr
    assert "Traceback" not in res.stderr + log.read_text()
    # The quoted tail is this start's, not an older one's.
    config.write_text("[embedder]\nmodle = 'x'\n")
    error = json.loads(cold.cli("status", "--json").stdout)["error"]
    assert "did you mean 'model'?" in error["details"]["stderr_tail"]
    assert "threads" not in error["details"]["stderr_tail"]
    # Fixed, the next call starts it.
    config.unlink()
    res = cold.cli("status", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["pid"] == cold.pid()


def test_concurrent_cold_creates_start_one_daemon_and_create_once(cold: DaemonProc) -> None:
    procs = [_palace(cold.env, "create", "race", "--exist-ok", "--json") for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err for _, err in outs]
    created = [json.loads(out)["created"] for out, _ in outs]
    assert created.count(True) == 1, created
    pids = {json.loads(cold.cli("status", "--json", check=True).stdout)["pid"]}
    assert pids == {cold.pid()}


def test_concurrent_creates_on_a_running_daemon_create_once(keyword_daemon: DaemonProc
                                                            ) -> None:
    procs = [_palace(keyword_daemon.env, "create", "race", "--exist-ok", "--json")
             for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outs]
    created = [json.loads(out)["created"] for out, _ in outs]
    assert created.count(True) == 1, created
    assert {json.loads(out)["path"] for out, _ in outs} == {
        str(keyword_daemon.home / "palaces" / "race")}


def test_a_daemon_that_never_listens_fails_the_call_after_the_start_timeout(
        cold: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock is held by a process that serves nothing: the daemon a client starts finds
    it taken and exits 0 (another daemon "owns" the socket), so the client waits for that one
    until its start timeout, then says where to look."""
    from palace_client.connection import connect
    from palaced.errors import DaemonStartFailed, DaemonUnreachable
    from palaced.paths import resolve

    for key, value in cold.env.items():
        monkeypatch.setenv(key, value)
    paths = resolve()
    paths.runtime_dir.mkdir(mode=0o700)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        started = time.monotonic()
        with pytest.raises(DaemonUnreachable) as err:
            connect(paths, start_timeout=1.5)
        took = time.monotonic() - started
        # The daemon it started (perhaps still importing, on a loaded machine) finds the lock
        # taken and says so where the message points.
        deadline = time.monotonic() + 60
        while "already running" not in paths.stderr_log.read_text():
            assert time.monotonic() < deadline, paths.stderr_log.read_text()
            time.sleep(0.1)
    finally:
        os.close(fd)
    assert not isinstance(err.value, DaemonStartFailed)
    assert 1.5 <= took < 10, took
    assert "did not answer" in err.value.message
    assert str(paths.log_file) in err.value.message
    assert str(paths.stderr_log) in err.value.message
