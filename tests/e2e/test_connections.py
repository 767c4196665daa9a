"""Stuck connections: deadlines for handshakes and frames, idle close, and the owner's reserve.

Daemons here run keyword-only with short limits from config.toml, so each deadline is seen
within a second or two; margins are generous because the machine is shared.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProc, base_env, short_home
from tests.support.wire import Raw

TIGHT = {"handshake_timeout_s": 1, "frame_timeout_s": 0.5, "connection_idle_s": 1,
         "max_connections": 4, "reserve_connections": 2}
# Long idle timeout: held connections stay put while the CLI runs beside them.
HELD = {"handshake_timeout_s": 1, "frame_timeout_s": 0.5, "connection_idle_s": 60,
        "max_connections": 3, "reserve_connections": 2}


def _daemon(limits: dict[str, Any]) -> Iterator[DaemonProc]:
    home = short_home()
    body = "".join(f"{k} = {v}\n" for k, v in limits.items())
    (home / "config.toml").write_text(f"[limits]\n{body}")
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def tight() -> Iterator[DaemonProc]:
    yield from _daemon(TIGHT)


@pytest.fixture
def held() -> Iterator[DaemonProc]:
    yield from _daemon(HELD)


@pytest.fixture
def tight_own() -> Iterator[DaemonProc]:
    """A tight daemon of the test's own (the test stops it)."""
    yield from _daemon(TIGHT)


def _status(d: DaemonProc) -> dict[str, Any]:
    with d.client() as c:
        return c.status()


def test_half_sent_frames_are_cut_off_at_the_frame_deadline(tight: DaemonProc) -> None:
    """A started frame must finish within frame_timeout_s (0.5 s), header or body."""
    for partial in (b"\x00\x00", struct.pack(">I", 100) + b"\x81\xa2id"):
        raw = Raw.connect(tight.socket)
        raw.s.sendall(partial)
        started = time.monotonic()
        reply = raw.read()
        assert reply is not None and reply["error"]["name"] == "TIMEOUT", reply
        assert reply["error"]["details"]["stage"] == "frame"
        assert raw.read() is None  # then the connection is closed
        elapsed = time.monotonic() - started
        assert 0.4 <= elapsed < 4.0, elapsed
        raw.close()
    assert _status(tight)["connections"] == 1  # only the status call itself


def test_a_connection_without_handshake_is_closed(tight: DaemonProc) -> None:
    raw = Raw.connect(tight.socket, hello=False)
    started = time.monotonic()
    reply = raw.read()
    assert reply is not None and reply["error"]["name"] == "TIMEOUT", reply
    assert reply["error"]["details"]["stage"] == "handshake"
    assert raw.read() is None
    assert 0.8 <= time.monotonic() - started < 5.0
    raw.close()


def test_idle_connections_close_and_clients_reconnect_transparently(
        tight: DaemonProc) -> None:
    raw = Raw.connect(tight.socket)
    client = tight.client()
    first_pid = client.status()["pid"]
    started = time.monotonic()
    # The daemon closes the idle connection silently (no stray envelope to misread) ...
    assert raw.read() is None
    assert 0.8 <= time.monotonic() - started < 5.0
    raw.close()
    time.sleep(0.3)  # the client's connection went idle at the same time
    assert client._conn is not None  # still holds the connection the daemon closed
    # ... and the next call on the closed connection reconnects without an error.
    st = client.status()
    assert st["pid"] == first_pid and st["connections"] == 1
    client.close()


def test_stop_from_a_client_whose_connection_went_idle(tight_own: DaemonProc) -> None:
    client = tight_own.client()
    client.status()
    time.sleep(TIGHT["connection_idle_s"] + 0.8)  # the daemon has closed that connection
    client.stop_daemon()
    assert tight_own.proc is not None and tight_own.proc.wait(timeout=30) == 0


def test_reserve_lets_status_and_stop_through_when_every_slot_is_stuck(
        held: DaemonProc) -> None:
    # Every normal slot is held by a handshaken client that went silent.
    stuck = [Raw.connect(held.socket) for _ in range(HELD["max_connections"])]
    started = time.monotonic()
    r = held.cli("status", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["connections"] == HELD["max_connections"]
    assert time.monotonic() - started < 10
    # A reserve connection runs control ops only: anything else is BUSY, then closed.
    extra = Raw.connect(held.socket)
    assert extra.call("daemon.status")["ok"]
    reply = extra.call("palace.list")
    assert reply["error"]["name"] == "BUSY" and reply["error"]["retryable"] is True
    assert "daemon.status" in reply["error"]["details"]["allowed"]
    assert extra.read() is None
    extra.close()
    # With the reserve full too, the next connection is refused at once.
    reserve = [Raw.connect(held.socket) for _ in range(HELD["reserve_connections"])]
    over = Raw.connect(held.socket, hello=False)
    reply = over.read()
    assert reply is not None and reply["error"]["name"] == "BUSY"
    over.close()
    for s in reserve:
        s.close()
    time.sleep(0.2)  # let the daemon see the reserve connections close
    # The CLI waits for the pid to vanish: reap the daemon (our child) while it waits.
    stop = subprocess.Popen([sys.executable, "-m", "palace_client", "daemon", "stop", "--json"],
                            env=held.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert held.proc is not None and held.proc.wait(timeout=30) == 0
    out, err = stop.communicate(timeout=30)
    assert stop.returncode == 0 and json.loads(out)["stopped"] is True, err
    for s in stuck:
        assert s.read() is None  # the daemon went away with them
        s.close()


@pytest.mark.daemon
def test_connection_limits_are_checked_and_shown(home: Path) -> None:
    env = base_env(home, model=False)
    cmd = [sys.executable, "-m", "palaced", "check-config"]
    (home / "config.toml").write_text("[limits]\nframe_timeout_s = 2.5\n")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    limits = json.loads(r.stdout)["limits"]
    assert limits["frame_timeout_s"] == 2.5
    assert (limits["handshake_timeout_s"], limits["connection_idle_s"],
            limits["reserve_connections"]) == (5.0, 300.0, 8)
    for bad in ("connection_idle_s = 0", "handshake_timeout_s = -1",
                "reserve_connections = -2", "frame_timeout_s = \"soon\""):
        (home / "config.toml").write_text(f"[limits]\n{bad}\n")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "config.toml:2: [limits]" in r.stderr, (bad, r.stderr)
        assert "Traceback" not in r.stderr
        assert bad.split()[0] in r.stderr
