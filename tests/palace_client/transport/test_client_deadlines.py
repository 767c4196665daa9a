"""Every client exchange has a deadline: a daemon that accepts and never answers (the hello
included), or answers the hello and then goes silent, fails the call with a typed error in
the documented time, never hangs it."""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import palace_client.transport.connection as connection
from palace_client import Client
from palaced.wire.errors import ClientError, DaemonUnreachable, OutcomeUnknown, Timeout
from tests.conftest import base_env, short_home
from tests.support.inproc import InProcDaemon


class FakeDaemon:
    """A socket that accepts, answers the hello only if told to, and never anything else.

    ``requests`` collects the envelopes it read; ``accepted`` is set at each accept.
    """

    def __init__(self, path: Path, *, hello: dict[str, Any] | None) -> None:
        self.path = path
        self.hello = hello
        self.requests: list[dict[str, Any]] = []
        self.accepted = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(conn)
            self.accepted.set()
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        try:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                body = conn.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL)
                req = msgpack.unpackb(body, raw=False)
                self.requests.append(req)
                if req["op"] == "daemon.hello" and self.hello is not None:
                    reply = msgpack.packb({"id": req["id"], "ok": True, "result": self.hello})
                    conn.sendall(struct.pack(">I", len(reply)) + reply)
        except OSError:
            return

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()


HELLO = {"protocol": 1, "server": {"name": "fake", "version": "0", "pid": 1}, "ops": [],
         "max_frame": 1 << 20, "request_timeout_s": 120.0, "max_request_timeout_s": 3600.0}


@pytest.fixture
def home() -> Iterator[Path]:
    import shutil

    path = short_home()
    (path / "run").mkdir(mode=0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def silent(home: Path) -> Iterator[FakeDaemon]:
    fake = FakeDaemon(home / "run" / "palaced.sock", hello=None)
    yield fake
    fake.close()


@pytest.fixture
def mute(home: Path) -> Iterator[FakeDaemon]:
    """Answers the hello (with a short default deadline), then nothing."""
    fake = FakeDaemon(home / "run" / "palaced.sock",
                      hello={**HELLO, "request_timeout_s": 0.4})
    yield fake
    fake.close()


def test_a_silent_daemon_fails_the_handshake_within_the_connect_timeout(
        silent: FakeDaemon) -> None:
    client = Client(silent.path, autostart=False, connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(DaemonUnreachable, match=r"did not answer the handshake within 0\.5s"):
        client.status()
    assert 0.4 < time.monotonic() - started < 3
    assert [r["op"] for r in silent.requests] == ["daemon.hello"]


@pytest.mark.daemon
def test_the_cli_fails_on_a_silent_daemon_within_palace_connect_timeout(
        silent: FakeDaemon, home: Path) -> None:
    env = {**base_env(home, model=False), "PALACE_SOCKET": str(silent.path),
           "PALACE_CONNECT_TIMEOUT": "0.7"}
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "palace_client", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 5
    assert res.returncode == 3, res.stderr
    error = json.loads(res.stdout)["error"]
    assert error["name"] == "DAEMON_UNREACHABLE"
    assert error["details"]["timeout_s"] == 0.7


def test_a_mute_daemon_times_out_reads_and_makes_other_writes_unknown(
        mute: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "REPLY_GRACE_S", 0.2)
    client = Client(mute.path, autostart=False)
    # A read: the daemon's stated deadline (0.4 s) plus the grace, then TIMEOUT, not resent.
    started = time.monotonic()
    with pytest.raises(Timeout) as timed_out:
        client.call("memory.list", "p")
    took = time.monotonic() - started
    assert 0.5 < took < 3, took
    assert timed_out.value.retryable and timed_out.value.details["client_deadline"] is True
    # A write that may not be resent: its outcome is unknown.
    with pytest.raises(OutcomeUnknown):
        client.call("memory.prune", "p", {"threshold": 0.1})
    # An idempotent write (SAFE) may be sent again: TIMEOUT.
    with pytest.raises(Timeout):
        client.call("memory.remember", "p", {"text": "x"})
    ops = [r["op"] for r in mute.requests]
    assert ops.count("memory.list") == 1 and ops.count("memory.prune") == 1  # none resent
    assert ops.count("memory.remember") == 1


def test_a_request_timeout_is_sent_and_waited_for(mute: FakeDaemon,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "REPLY_GRACE_S", 0.2)
    monkeypatch.setenv("PALACE_REQUEST_TIMEOUT", "0.3")
    client = Client(mute.path, autostart=False)
    assert client.request_timeout == 0.3
    with pytest.raises(Timeout):
        client.call("daemon.status")
    with pytest.raises(Timeout, match=r"within 1\.2s"):  # an explicit timeout_ms wins
        client.call("memory.list", "p", timeout_ms=1000)
    sent = [r.get("timeout_ms") for r in mute.requests if r["op"] != "daemon.hello"]
    assert sent == [300, 1000]


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", "1e10", "604801"])
def test_bad_timeout_variables_are_client_errors(value: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALACE_CONNECT_TIMEOUT", value)
    with pytest.raises(ClientError, match=r"PALACE_CONNECT_TIMEOUT must be a number of seconds "
                       rf"> 0 and <= 604800, got '{value}'"):
        Client("/nonexistent.sock", autostart=False)
    monkeypatch.delenv("PALACE_CONNECT_TIMEOUT")
    monkeypatch.setenv("PALACE_REQUEST_TIMEOUT", value)
    with pytest.raises(ClientError, match="PALACE_REQUEST_TIMEOUT must be"):
        Client("/nonexistent.sock", autostart=False)
    monkeypatch.delenv("PALACE_REQUEST_TIMEOUT")
    explicit = -1.0 if value in ("abc", "0") else float(value)  # 0 means "not given"
    with pytest.raises(ClientError, match="request_timeout must be a number of seconds"):
        Client("/nonexistent.sock", autostart=False, request_timeout=explicit)


def test_a_daemon_stating_an_endless_deadline_still_gets_a_bounded_wait(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadline of inf (or 1e20 s) in the hello once failed every call, `daemon stop`
    included, with an OverflowError from the socket: the client waits at most MAX_WAIT_S."""
    fake = FakeDaemon(home / "run" / "palaced.sock",
                      hello={**HELLO, "request_timeout_s": float("inf"),
                             "max_request_timeout_s": 1e20})
    try:
        monkeypatch.setattr(connection, "MAX_WAIT_S", 0.3)  # a week, in the product
        monkeypatch.setattr(connection, "REPLY_GRACE_S", 0.2)
        client = Client(fake.path, autostart=False)
        for timeout_ms in (None, 10**15):
            started = time.monotonic()
            with pytest.raises(Timeout, match=r"within 0\.5s"):
                client.call("daemon.status", timeout_ms=timeout_ms)
            assert time.monotonic() - started < 3
    finally:
        fake.close()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.daemon
def test_ctrl_c_while_waiting_is_exit_130_without_a_traceback(silent: FakeDaemon,
                                                             home: Path) -> None:
    env = {**base_env(home, model=False), "PALACE_SOCKET": str(silent.path),
           "PALACE_CONNECT_TIMEOUT": "60"}
    # A shell starts a background job with SIGINT ignored, and the child would inherit
    # that: the CLI gets Python's own Ctrl-C handling whoever started the test run.
    proc = subprocess.Popen([sys.executable, "-m", "palace_client", "status", "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    assert silent.accepted.wait(30)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "palace: error: interrupted" in err
    assert json.loads(out)["error"]["message"] == "interrupted"


def test_the_daemon_states_its_deadlines_in_the_hello(inproc: InProcDaemon) -> None:
    with inproc.client() as client:
        info = client.server_info
        assert (info["request_timeout_s"], info["max_request_timeout_s"]) == (120.0, 3600.0)
        conn = client._connection()
        grace = connection.REPLY_GRACE_S
        assert conn.deadline_s(None) == 120.0 + grace
        assert conn.deadline_s(2_000) == 2.0 + grace
        assert conn.deadline_s(10**10) == 3600.0 + grace  # the daemon caps it
        assert client.call("palace.list") == {"palaces": []}
