"""Socket activation and sd_notify, with the real ``systemd-socket-activate``.

``systemd-socket-activate -l PATH --fdname=palaced`` binds and listens on PATH, waits for the
first connection, then execs palaced with the socket as fd 3 and ``LISTEN_PID``/``LISTEN_FDS``/
``LISTEN_FDNAMES`` set, as systemd does for ``palaced.socket``. The notification socket is a
datagram socket the test binds. Debian's ``systemd`` package provides the tool (``.ci/run``
installs it when missing); without it these tests fail rather than skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from palace_client import Client
from palaced.daemon.activation import (
    ActivationError,
    check_listener,
    socket_in_use,
    systemd_listener,
)
from palaced.daemon.notify import Notifier, notify_address
from tests.conftest import REPO, TIKTOKEN_FILE, DaemonProc, base_env

ACTIVATE = shutil.which("systemd-socket-activate") or "/usr/bin/systemd-socket-activate"


def _need_activate() -> None:
    assert os.access(ACTIVATE, os.X_OK), (
        "systemd-socket-activate is missing: install Debian's systemd package "
        "(apt-get install --no-install-recommends systemd); .ci/run does")


class NotifySocket:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def wait_for(self, line: str, timeout: float = 30) -> list[str]:
        """Every message received until one holds ``line``; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while not any(line in m.splitlines() for m in self.messages):
            left = deadline - time.monotonic()
            assert left > 0, f"no {line!r} within {timeout}s; got {self.messages}"
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue
        return self.messages

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify(home: Path) -> Iterator[NotifySocket]:
    n = NotifySocket(home / "notify")
    yield n
    n.close()


def activate(home: Path, listen: Path, *extra_env: str) -> subprocess.Popen[bytes]:
    """palaced under systemd-socket-activate, listening on ``listen``, keyword-only."""
    _need_activate()
    env = [f"PALACE_HOME={home}", "PALACE_EMBED_MODEL=none",
           f"PALACE_TIKTOKEN_FILE={TIKTOKEN_FILE}", f"PYTHONPATH={REPO}", *extra_env]
    cmd = [ACTIVATE, "-l", str(listen), "--fdname=palaced",
           *(arg for e in env for arg in ("-E", e)),
           sys.executable, "-m", "palaced", "run", "--quiet"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd="/")
    deadline = time.monotonic() + 10
    while not _listening(listen):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "systemd-socket-activate did not listen"
        time.sleep(0.02)
    return proc


def _listening(path: Path) -> bool:
    """Whether a socket listens at ``path``, without connecting (a connection would start
    the daemon): the path exists from bind() on, but a connect before listen() is refused.
    /proc/net/unix marks a listening socket with __SO_ACCEPTCON (flags 00010000)."""
    if not path.exists():
        return False
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == str(path) and int(fields[3], 16) & 0x10000:
            return True
    return False


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


@pytest.mark.daemon
def test_first_client_is_served_by_the_activated_daemon(home: Path,
                                                        notify: NotifySocket) -> None:
    sock = home / "run" / "palaced.sock"
    sock.parent.mkdir(mode=0o700)
    proc = activate(home, sock, f"NOTIFY_SOCKET={notify.path}", "WATCHDOG_USEC=400000")
    inode = sock.stat().st_ino
    try:
        # The daemon is exec'd only now, on this connection, which waits in the queue.
        with Client(sock, autostart=False, client_name="tests") as c:
            status = c.status()
            assert c.server_info["server"]["pid"] == proc.pid
            c.create_palace("act")
            c.remember("act", "socket activation works")
        assert status["pid"] == proc.pid  # systemd-socket-activate execs palaced in place
        assert status["socket"] == str(sock)
        messages = notify.wait_for("READY=1")
        ready = next(m for m in messages if "READY=1" in m.splitlines())
        assert f"MAINPID={proc.pid}" in ready.splitlines()
        assert any(line.startswith("STATUS=serving") for line in ready.splitlines())
        notify.wait_for("WATCHDOG=1")
        notify.wait_for(f"STATUS=serving {sock} (keyword-only: embedding disabled by "
                        "configuration (keyword-only))")
        # No second bind: the file is the one systemd-socket-activate made.
        assert sock.stat().st_ino == inode
        with Client(sock, autostart=False) as c:
            c.stop_daemon()
        assert proc.wait(timeout=60) == 0
        lines = [line for m in notify.wait_for("STOPPING=1") for line in m.splitlines()]
        assert lines.index("READY=1") < lines.index("STOPPING=1")
        # The manager's socket outlives the daemon: never unlinked by it.
        assert sock.exists() and sock.stat().st_ino == inode
    finally:
        _stop(proc)


@pytest.mark.daemon
def test_activated_daemon_takes_over_from_an_on_demand_daemon(home: Path) -> None:
    """An on-demand daemon holds the lock; systemd then owns the path. The activated daemon
    asks the old one to stop, serves, and the old one leaves the new socket file alone."""
    old = DaemonProc(home, base_env(home, model=False))
    old.start(wait_model=False)
    old_pid = old.pid()
    sock = old.socket
    sock.unlink()  # what systemd does before it binds palaced.socket
    proc = activate(home, sock)
    inode = sock.stat().st_ino
    try:
        with Client(sock, autostart=False) as c:
            assert c.status()["pid"] == proc.pid
        assert old.proc is not None and old.proc.wait(timeout=60) == 0
        assert old_pid != proc.pid
        assert sock.exists() and sock.stat().st_ino == inode  # the old daemon did not unlink it
        with Client(sock, autostart=False) as c:
            assert c.status()["pid"] == proc.pid
    finally:
        _stop(proc)
        old.stop()


@pytest.mark.daemon
def test_on_demand_daemon_leaves_a_managed_socket_alone(home: Path) -> None:
    """``palaced run`` started by hand while the manager listens on the path exits 0 without
    replacing the socket; the manager's daemon then serves."""
    sock = home / "run" / "palaced.sock"
    sock.parent.mkdir(mode=0o700)
    proc = activate(home, sock)
    inode = sock.stat().st_ino
    try:
        direct = subprocess.run([sys.executable, "-m", "palaced", "run", "--quiet"],
                                env=base_env(home, model=False), capture_output=True,
                                text=True, timeout=60, cwd="/")
        assert direct.returncode == 0, direct.stderr
        assert "served by a service manager's socket" in direct.stderr
        assert sock.stat().st_ino == inode
        with Client(sock, autostart=False) as c:
            assert c.status()["pid"] == proc.pid
    finally:
        _stop(proc)


def test_a_socket_on_another_path_is_refused(home: Path) -> None:
    other = home / "elsewhere.sock"
    proc = activate(home, other)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(other))  # triggers the exec
        assert proc.wait(timeout=60) == 2
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert f"listens on {other}, but clients connect to {home}/run/palaced.sock" in err
        s.close()
        assert not (home / "run" / "palaced.sock").exists()  # and no socket of its own
    finally:
        _stop(proc)


# -- unit tests of the pieces ------------------------------------------------------------------
def test_listen_variables_for_another_pid_are_dropped_not_used() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "palaced",
           "OTHER": "x"}
    assert systemd_listener(env) is None
    assert env == {"OTHER": "x"}  # removed, so no child inherits them
    assert systemd_listener({}) is None
    assert systemd_listener({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) is None


def test_malformed_listen_variables_are_an_activation_error() -> None:
    with pytest.raises(ActivationError, match="malformed"):
        systemd_listener({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "two"})
    with pytest.raises(ActivationError, match="none is named 'palaced'"):
        systemd_listener({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2",
                          "LISTEN_FDNAMES": "a:b"})


def test_check_listener_refuses_the_wrong_kind_of_socket(home: Path) -> None:
    path = home / "x.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dgram:
        with pytest.raises(ActivationError, match="not an AF_UNIX stream socket"):
            check_listener(dgram, path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(path))
        with pytest.raises(ActivationError, match="not listening"):
            check_listener(bound, path)
        assert not socket_in_use(path)  # bound, not listening: a connect is refused
        bound.listen()
        check_listener(bound, path)
        assert socket_in_use(path)
        with pytest.raises(ActivationError, match="clients connect to"):
            check_listener(bound, home / "y.sock")


def test_notifier_sends_to_an_abstract_socket_and_pops_its_variables() -> None:
    name = f"palace-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        receiver.settimeout(5)
        env = {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "3000000",
               "WATCHDOG_PID": str(os.getpid())}
        n = Notifier.from_environ(env)
        assert env == {}
        assert n.watchdog_interval_s == 1.5
        assert n.ready("serving x")
        assert receiver.recv(4096).decode().splitlines() == [
            "READY=1", "STATUS=serving x", f"MAINPID={os.getpid()}"]
        assert n.stopping()
        assert receiver.recv(4096).decode().splitlines() == ["STOPPING=1",
                                                             "STATUS=shutting down"]


def test_notifier_without_a_socket_or_with_a_foreign_watchdog_does_nothing(home: Path) -> None:
    assert not Notifier.from_environ({}).ready("x")
    assert notify_address("vsock:2:1") is None and notify_address("") is None
    foreign = Notifier.from_environ({"NOTIFY_SOCKET": str(home / "n"), "WATCHDOG_USEC": "1000",
                                     "WATCHDOG_PID": "1"})
    assert foreign.watchdog_interval_s is None
    # Nobody listens at that path: the send fails quietly.
    assert not foreign.ready("x")


def test_a_root_listener_is_checked_after_the_hello_on_macos_only(
        monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """launchd (root) listens on a LaunchAgent's socket: on macOS the client lets the hello
    through and then checks the process that answered; elsewhere root's listener is refused."""
    from palace_client.transport import peer
    from palaced.wire.errors import UntrustedDaemon

    monkeypatch.setattr(peer, "socket_peer_uid", lambda sock: 0)
    monkeypatch.setattr(peer.os, "geteuid", lambda: 1000)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        with pytest.raises(UntrustedDaemon, match="runs as uid 0"):
            peer.verify_server(s, home / "x.sock")
        monkeypatch.setattr(peer.sys, "platform", "darwin")
        assert peer.verify_server(s, home / "x.sock") is True
        # After the hello: the kernel's peer pid must be a process we may signal.
        monkeypatch.setattr(peer, "_darwin_peer_pid", lambda sock: os.getpid())
        peer.verify_launchd_daemon(s, home / "x.sock")
        monkeypatch.setattr(peer, "_darwin_peer_pid", lambda sock: None)
        with pytest.raises(UntrustedDaemon, match="only the hello was sent"):
            peer.verify_launchd_daemon(s, home / "x.sock")
