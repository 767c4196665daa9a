"""A daemon whose connection slots are all taken answers BUSY; the client retries it.

BUSY comes before anything runs: at connect when the normal slots and the reserve are full,
or for a request other than status/stop on a reserve connection. The slots free up as the
daemon's handshake deadline closes silent connections, so the client retries with backoff
within its deadline instead of failing at once, and still says BUSY when the deadline ends.

The daemon runs keyword-only with tiny limits (3 slots, 2 reserve, 1 s handshake deadline).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from palace_client import Client
from palaced.wire.errors import Busy, OutcomeUnknown
from palaced.wire.protocol import DEFAULT_MAX_FRAME, PROTOCOL_VERSION, encode_response, unpack
from tests.conftest import DaemonProc
from tests.e2e.test_client_retry import _read_frame
from tests.e2e.test_connections import _daemon
from tests.support.wire import Raw

LIMITS = {"handshake_timeout_s": 1, "frame_timeout_s": 0.5, "connection_idle_s": 60,
          "max_connections": 3, "reserve_connections": 2}


@pytest.fixture(scope="module")
def small() -> Iterator[DaemonProc]:
    yield from _daemon(LIMITS)


@pytest.fixture
def with_p(small: DaemonProc) -> DaemonProc:
    """The small daemon, with a palace ``p``."""
    with small.client() as c:
        c.create_palace("p", exist_ok=True)
    return small


def _silent(d: DaemonProc, n: int) -> list[Raw]:
    """``n`` connections that never say hello (the daemon closes them after 1 s)."""
    return [Raw.connect(d.socket, hello=False) for _ in range(n)]


def _full(d: DaemonProc) -> None:
    """Wait until a new connection is refused with BUSY (every slot and the reserve taken)."""
    probe = Raw.connect(d.socket, hello=False)
    reply = probe.read()
    probe.close()
    assert reply is not None and reply["error"]["name"] == "BUSY", reply


def test_busy_at_connect_is_retried_until_a_slot_frees(with_p: DaemonProc) -> None:
    small = with_p
    silent = _silent(small, LIMITS["max_connections"] + LIMITS["reserve_connections"])
    try:
        _full(small)
        started = time.monotonic()
        with small.client() as c:
            assert c.status()["pid"] == small.pid()
            assert [p["name"] for p in c.list_palaces()] == ["p"]
        assert time.monotonic() - started < 8
    finally:
        for s in silent:
            s.close()


def test_a_request_refused_on_a_reserve_connection_is_sent_again(with_p: DaemonProc) -> None:
    small = with_p
    # The normal slots are taken: the client's connection is a reserve one, where recall is
    # answered BUSY (and not run) until the silent ones are closed.
    silent = _silent(small, LIMITS["max_connections"])
    try:
        time.sleep(0.2)  # let the daemon admit them
        with Client(small.socket, autostart=False, request_timeout=20) as c:
            assert c.status()["connections"] == LIMITS["max_connections"]  # on the reserve
            assert c.recall("p", "anything at all") == []
            assert c.status()["connections"] == 1  # since moved to a normal slot
    finally:
        for s in silent:
            s.close()


def test_busy_is_still_the_error_when_the_deadline_ends(with_p: DaemonProc) -> None:
    small = with_p
    # Handshaken idle connections keep the normal slots (their idle deadline is 60 s).
    held = [Raw.connect(small.socket) for _ in range(LIMITS["max_connections"])]
    try:
        time.sleep(0.2)
        with Client(small.socket, autostart=False, request_timeout=1.5) as c:
            assert c.status()["connections"] == LIMITS["max_connections"]
            started = time.monotonic()
            with pytest.raises(Busy) as err:
                c.list_palaces()
            took = time.monotonic() - started
        assert 1.4 <= took < 8, took
        assert err.value.name == "BUSY" and err.value.retryable
    finally:
        for s in held:
            s.close()


def test_the_capture_hook_hands_a_busy_daemon_to_its_background_delivery(
        small: DaemonProc) -> None:
    """The hook has 200 ms: on BUSY it defers to its delivery process, which retries."""
    from tests.e2e.test_capture_daemon import _has_drawers, run_hook, texts, wait_for
    from tests.support.transcripts import Session, hook_input

    s = Session(small.home / "claude" / "busy.jsonl", cwd=str(small.home / "busy-app"))
    s.exchange("Which port?", "The API listens on port 8443.")
    silent = _silent(small, LIMITS["max_connections"])
    try:
        time.sleep(0.2)  # the hook's connection gets a reserve slot: its capture is BUSY
        res, _ = run_hook(small.env, hook_input(s), "--palace", "busy")
        assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    finally:
        for sock in silent:
            sock.close()
    log = (small.home / "state" / "palace.log").read_text()
    assert "[BUSY]" not in log and "delivering in the background" in log
    wait_for(lambda: _has_drawers(small, "busy"), 60)
    assert texts(small, "busy") == ["User: Which port?\n\nAssistant: The API listens on port "
                                    "8443."]


class LostThenBusy:
    """A stand-in daemon: the first connection's first request is swallowed (its reply lost
    with the connection); every later connection is refused with BUSY, at connect
    (``stage="connect"``) or in answer to its request (``stage="request"``)."""

    def __init__(self, path: Path, stage: str) -> None:
        self.stage = stage
        self.requests: list[str] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _hello(self, conn: socket.socket) -> None:
        req = unpack(_read_frame(conn)[4:])  # type: ignore[index]
        conn.sendall(encode_response(req["id"], {
            "protocol": PROTOCOL_VERSION, "server": {"name": "fake", "pid": 0}, "ops": [],
            "max_frame": DEFAULT_MAX_FRAME, "request_timeout_s": 5.0, "request_keys": []}))

    def _accept(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                if first or self.stage == "request":
                    self._hello(conn)
                    frame_ = _read_frame(conn)
                    if frame_ is not None:
                        req = unpack(frame_[4:])
                        self.requests.append(req["op"])
                        if not first:
                            conn.sendall(encode_response(req["id"], Busy("no slot")))
                else:
                    conn.sendall(encode_response(None, Busy("too many connections")))
                first = False

    def close(self) -> None:
        self._listener.close()


@pytest.mark.parametrize("stage", ["connect", "request"])
def test_busy_after_a_lost_reply_is_an_unknown_outcome_not_busy(stage: str,
                                                                 tmp_path: Path) -> None:
    """palace.create (CONVERGE) lost its reply, so it may have run: when the retry then meets
    BUSY until its deadline, the caller must hear OUTCOME_UNKNOWN (check before repeating),
    not BUSY (which says nothing ran)."""
    server = LostThenBusy(tmp_path / "s.sock", stage)
    try:
        with Client(tmp_path / "s.sock", autostart=False, connect_timeout=0.5,
                    request_timeout=0.5) as c, pytest.raises(OutcomeUnknown):
            c.create_palace("x")
        assert server.requests[0] == "palace.create"
    finally:
        server.close()
