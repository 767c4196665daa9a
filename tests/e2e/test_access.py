"""Access to a running daemon: only its user gets in, only through the Unix socket, and what
agents remember never reaches a log.

Complements ``test_security.py`` (which covers runtime directories, lock files and sockets
planted or symlinked by another uid, and the modes of palace's files): here another uid tries
the live socket itself, the socket's place is checked, no network listener may exist, and
every log file is searched for a remembered marker.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from palaced.wire.errors import PalaceError
from palaced.wire.protocol import HELLO_OP, frame, hello_args
from tests.conftest import DaemonProc, base_env
from tests.e2e.test_security import ATTACKER_PYTHON, ATTACKER_UID, _need_second_uid

# Run by the other uid (stdlib only): connect to the socket, send a hello frame, report.
KNOCK = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect", type(e).__name__); sys.exit(0)
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
    data = s.recv(65536)
    print("reply", len(data))
except OSError as e:
    print("io", type(e).__name__)
"""


def _knock(sock: Path) -> str:
    hello = frame({"id": 1, "op": HELLO_OP, "palace": None, "args": hello_args("x", "0")})
    res = subprocess.run([ATTACKER_PYTHON, "-I", "-c", KNOCK, str(sock), hello.hex()],
                         user=ATTACKER_UID, group=ATTACKER_UID, extra_groups=[],
                         capture_output=True, text=True, timeout=30, cwd="/")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_another_uid_cannot_use_the_socket(keyword_daemon: DaemonProc) -> None:
    _need_second_uid()
    d = keyword_daemon
    run = d.socket.parent
    # The socket is 0600 in a 0700 directory: the other uid cannot even reach it.
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(d.socket).st_mode) == 0o600
    assert stat.S_ISSOCK(os.lstat(d.socket).st_mode)
    assert _knock(d.socket) == "connect PermissionError"
    # Were both opened up by mistake, the daemon still checks the peer's uid and hangs up
    # before reading a byte: no hello answer, no op served.
    opened = {d.home: 0o755, run: 0o755, d.socket: 0o777}
    saved = {p: stat.S_IMODE(os.lstat(p).st_mode) for p in opened}
    for p, mode in opened.items():
        os.chmod(p, mode)
    try:
        assert _knock(d.socket) in ("reply 0", "io ConnectionResetError", "io BrokenPipeError")
    finally:
        for p, mode in saved.items():
            os.chmod(p, mode)
    with d.client() as c:
        assert c.status()["connections"] == 1  # still serving its owner, nothing left open
    log = (d.home / "state" / "palaced.log").read_text()
    assert f"refused a connection from uid {ATTACKER_UID}" in log


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:["):-1])
    return found


def _inodes_in(table: Path) -> set[str]:
    """The socket inodes listed in a /proc/net table (tcp, udp, unix...)."""
    # The inode column: 7th in /proc/net/unix, 10th in tcp/udp/raw (whose header line names
    # more columns than the rows have fields, so it cannot be looked up there).
    col = 6 if table.name == "unix" else 9
    rows = [ln.split() for ln in table.read_text().splitlines()[1:]]
    return {r[col] for r in rows if len(r) > col}


def _network_sockets(pid: int) -> dict[str, set[str]]:
    """The daemon's sockets found in /proc/net's network tables (tcp, udp, raw; v4 and v6),
    after checking that the method sees its Unix sockets."""
    mine = _socket_inodes(pid)
    unix = _inodes_in(Path("/proc/net/unix"))
    assert mine & unix, "the method does not see the daemon's Unix sockets"
    found = {}
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        path = Path("/proc/net") / table
        if path.exists() and mine & _inodes_in(path):
            found[table] = mine & _inodes_in(path)
    return found


@pytest.mark.daemon
def test_no_network_listener_and_no_memory_text_in_any_log(home: Path) -> None:
    marker = f"zq{uuid.uuid4().hex}"
    env = base_env(home)
    d = DaemonProc(home, env)
    # Debug level: not even debug logging may carry what agents store or ask.
    with open(home / "palaced.stderr", "wb") as err:
        d.proc = subprocess.Popen([sys.executable, "-m", "palaced", "run", "--log-level",
                                   "debug"], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=err)
    try:
        d.wait_ready()
        with d.client() as c:
            c.create_palace("secrets")
        d.cli("remember", f"the launch code is {marker}", "--palace", "secrets", check=True)
        d.cli("recall", f"what is {marker}?", "--palace", "secrets", check=True)
        with d.client() as c:
            did = c.remember("secrets", f"second secret {marker} " * 3, tags=[marker],
                             source=marker)
            c.remember_many("secrets", [{"text": f"batch secret {marker} {i}"} for i in range(3)])
            c.kg_assert("secrets", f"vault {marker}", "opens_with", marker)
            c.recall_ex("secrets", marker, budget=300, levels=[0, 1, 2, 3], deep=True)
            c.wake_up("secrets")
            c.forget("secrets", did)
            # Refused input is quoted back to the client, never into the log.
            for text in (f"{marker}\x00nul", marker * 20_000):
                with pytest.raises(PalaceError):
                    c.remember("secrets", text)
            with pytest.raises(PalaceError):
                c.call("memory.remember", "secrets", {"text": marker, marker: 1})
            # The model is loaded and a palace open: still no network socket of any kind.
            assert c.status()["model"]["state"] == "ready"
            assert _network_sockets(d.pid()) == {}
        os.kill(d.pid(), signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        # A daemon auto-started by the CLI writes its early stderr where the client says.
        d.cli("remember", f"autostart path {marker}", "--palace", "secrets", check=True)
    finally:
        d.stop()
    logs = [p for p in home.rglob("*") if p.is_file() and "palaces" not in p.parts]
    names = {p.name for p in logs}
    assert "palaced.log" in names and "palaced.stderr" in names, names
    leaks = [p for p in logs if marker.encode() in p.read_bytes()]
    assert not leaks, f"memory text in {leaks}"
    db = home / "palaces" / "secrets" / "palace.db"
    assert marker.encode() in db.read_bytes()  # the marker was stored (the search is real)
