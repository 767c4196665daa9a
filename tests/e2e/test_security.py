"""Local attackers (another uid on the same machine) get nothing from palace.

1. A runtime directory or socket another uid planted is refused: the daemon will not start
   in it, and a client checks the server's uid (peer credentials) before sending a byte.
2. Symlinks at the runtime path, the lock file or the socket path are refused, never
   followed, chmod-ed or written through.
3. Palace's files are private (directories 0700, files 0600) whatever the umask, and an
   existing install is tightened on start, which ``status`` reports.

The cross-user tests need a second uid: as root (here and in CI) a child process switches to
an unused uid with ``subprocess``'s ``user=``/``group=`` (no passwd entry needed). Elsewhere
they skip, saying so. The attacker child runs the system's stdlib-only Python, since the
project's venv may not be readable by that uid.
"""

from __future__ import annotations

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

from tests.conftest import DaemonProc, base_env, short_home

ATTACKER_UID = 54321
ATTACKER_PYTHON = "/usr/bin/python3"


def _need_second_uid() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as a second uid (os.setuid); the suite runs "
                    "as root in CI")
    if not os.access(ATTACKER_PYTHON, os.X_OK):
        pytest.skip(f"no system python at {ATTACKER_PYTHON} for the other uid to run")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _palaced(env: dict[str, str], timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run ``palaced run --quiet`` expecting it to refuse and exit (a hang is a failure)."""
    try:
        return subprocess.run([sys.executable, "-m", "palaced", "run", "--quiet"], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("palaced started (it should have refused the unsafe path)")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palace_client", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def _stop_daemon_in(runtime: Path) -> None:
    """Stop a daemon that the unfixed code may have started in ``runtime``."""
    try:
        pid = int((runtime / "palaced.lock").read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


class Victim:
    """A palace root whose socket falls back to ``/tmp/palace-<uid>-<digest>``.

    A PALACE_HOME too long for a socket path puts the runtime dir straight in /tmp, exactly
    like the default ``/tmp/palace-<uid>`` (used when ``/run/user/<uid>`` is missing) but
    unique to this test, so planting things there cannot disturb anything else.
    """

    def __init__(self) -> None:
        self.base = short_home()
        self.home = self.base / ("h" * 100)
        self.env = base_env(self.home, model=False)
        out = subprocess.run([sys.executable, "-m", "palaced", "print-paths"], env=self.env,
                             capture_output=True, text=True, timeout=60, check=True)
        self.runtime = Path(json.loads(out.stdout)["runtime_dir"])
        assert self.runtime.parent == Path("/tmp"), self.runtime
        self.socket = self.runtime / "palaced.sock"

    def cleanup(self) -> None:
        if self.runtime.is_dir() and not self.runtime.is_symlink():
            _stop_daemon_in(self.runtime)
        if self.runtime.is_symlink():
            self.runtime.unlink()
        shutil.rmtree(self.runtime, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def victim() -> Iterator[Victim]:
    v = Victim()
    yield v
    v.cleanup()


# A fake palaced run by the attacker: it creates the victim's runtime dir 0777, listens on
# the victim's socket path and records every byte a client sends it.
FAKE_SERVER = r"""
import os, socket, sys
runtime, log = sys.argv[1], os.path.join(sys.argv[1], "got")
os.mkdir(runtime)
os.chmod(runtime, 0o777)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(os.path.join(runtime, "palaced.sock"))
os.chmod(os.path.join(runtime, "palaced.sock"), 0o777)
srv.listen(8)
open(log, "wb").close()
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    conn.settimeout(5)
    try:
        data = conn.recv(65536)
    except OSError:
        data = b""
    with open(log, "ab") as f:
        f.write(data)
    conn.close()
"""


@pytest.fixture
def fake_server(victim: Victim) -> Iterator[Path]:
    """The attacker's server on the victim's socket path; yields the file of what it got."""
    _need_second_uid()
    proc = subprocess.Popen([ATTACKER_PYTHON, "-I", "-c", FAKE_SERVER, str(victim.runtime)],
                            user=ATTACKER_UID, group=ATTACKER_UID, extra_groups=[],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == b"ready", proc.stderr.read() if proc.stderr else line
        assert os.stat(victim.socket).st_uid == ATTACKER_UID
        yield victim.runtime / "got"
    finally:
        proc.kill()
        proc.wait()


# -- 1. a runtime dir / server of another uid ----------------------------------------------------
@pytest.mark.daemon
def test_client_sends_nothing_to_a_server_of_another_uid(victim: Victim,
                                                         fake_server: Path) -> None:
    r = _cli(victim.env, "remember", "my secret launch code", "--palace", "work")
    assert r.returncode != 0
    assert "UNTRUSTED_DAEMON" in r.stderr and f"uid {ATTACKER_UID}" in r.stderr, r.stderr
    assert str(victim.socket) in r.stderr
    r = _cli(victim.env, "recall", "launch code", "--palace", "work")
    assert r.returncode != 0 and "UNTRUSTED_DAEMON" in r.stderr, r.stderr
    from palace_client import Client
    from palaced.wire.errors import UntrustedDaemon

    with pytest.raises(UntrustedDaemon) as info:
        Client(victim.socket, autostart=False).status()
    assert info.value.details["server_uid"] == ATTACKER_UID
    # Not a byte reached the fake server: no hello, and certainly no secret.
    time.sleep(0.2)
    assert fake_server.read_bytes() == b""


@pytest.mark.daemon
def test_daemon_refuses_a_runtime_dir_of_another_uid(victim: Victim) -> None:
    _need_second_uid()
    os.mkdir(victim.runtime)
    os.chown(victim.runtime, ATTACKER_UID, ATTACKER_UID)
    os.chmod(victim.runtime, 0o777)
    r = _palaced(victim.env)
    assert r.returncode == 2
    assert str(victim.runtime) in r.stderr and f"owned by uid {ATTACKER_UID}" in r.stderr
    assert "PALACE_SOCKET" in r.stderr  # says what to do
    st = os.lstat(victim.runtime)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ATTACKER_UID, 0o777)
    assert os.listdir(victim.runtime) == []
    # The client says why at once instead of auto-starting a daemon that waits in vain.
    started = time.monotonic()
    r = _cli(victim.env, "status")
    assert r.returncode != 0 and "UNSAFE_PATH" in r.stderr, r.stderr
    assert f"owned by uid {ATTACKER_UID}" in r.stderr
    assert time.monotonic() - started < 15
    assert os.listdir(victim.runtime) == []


@pytest.mark.daemon
def test_daemon_tightens_its_own_loose_runtime_dir(victim: Victim) -> None:
    """A runtime dir that is ours but 0777 (an old umask) is made 0700 and reported."""
    os.mkdir(victim.runtime)
    os.chmod(victim.runtime, 0o777)
    d = DaemonProc(victim.home, victim.env)
    d.proc = subprocess.Popen([sys.executable, "-m", "palaced", "run", "--quiet"],
                              env=victim.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        _wait_socket(victim.socket, d)
        assert _mode(victim.runtime) == 0o700
        st = json.loads(_cli(victim.env, "status", "--json").stdout)
        assert f"{victim.runtime} (0777 -> 0700)" in st["tightened"]["paths"]
    finally:
        d.stop()


def _wait_socket(sock: Path, d: DaemonProc, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.proc is not None and d.proc.poll() is not None:
            err = d.proc.stderr.read().decode() if d.proc.stderr else ""
            raise AssertionError(f"palaced exited: {err}")
        if sock.exists():
            return
        time.sleep(0.05)
    raise TimeoutError("no socket")


@pytest.mark.daemon
@pytest.mark.parametrize("kind", ["symlink", "file", "foreign-socket"])
def test_daemon_refuses_what_is_not_its_socket(home: Path, kind: str) -> None:
    """Something at the socket path that is not our socket is refused, not unlinked."""
    precious = home / "precious.txt"
    precious.write_text("keep me")
    run = home / "run"
    run.mkdir(mode=0o700)
    sock = run / "palaced.sock"
    if kind == "symlink":
        sock.symlink_to(precious)
    elif kind == "file":
        sock.write_text("notes the user pointed PALACE_SOCKET at")
    else:
        _need_second_uid()
        import socket as socketlib

        s = socketlib.socket(socketlib.AF_UNIX)
        s.bind(str(sock))
        s.close()
        os.chown(sock, ATTACKER_UID, ATTACKER_UID)
    before = os.lstat(sock)
    r = _palaced(base_env(home, model=False))
    assert r.returncode == 2 and str(sock) in r.stderr, r.stderr
    after = os.lstat(sock)
    assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode,
                                                           before.st_uid)
    assert precious.read_text() == "keep me"


# -- 2. symlinks are never followed --------------------------------------------------------------
@pytest.mark.daemon
def test_daemon_refuses_a_symlinked_runtime_dir(victim: Victim) -> None:
    public = victim.base / "public"
    public.mkdir()
    os.chmod(public, 0o755)
    victim.runtime.symlink_to(public)
    if os.geteuid() == 0:
        os.lchown(victim.runtime, ATTACKER_UID, ATTACKER_UID)  # as another user would plant it
    r = _palaced(victim.env)
    assert r.returncode == 2 and str(victim.runtime) in r.stderr and "symlink" in r.stderr
    # Nothing was done through the link: no chmod, no lock, no socket.
    assert _mode(public) == 0o755 and os.listdir(public) == []
    assert victim.runtime.is_symlink()
    r = _cli(victim.env, "status")
    assert r.returncode != 0 and "symlink" in r.stderr, r.stderr
    assert _mode(public) == 0o755 and os.listdir(public) == []


@pytest.mark.daemon
def test_daemon_refuses_a_symlinked_lock_file(home: Path) -> None:
    """The lock is truncated and gets our pid: a link there must not reach its target."""
    precious = home / "precious.txt"
    precious.write_text("keep me")
    run = home / "run"
    run.mkdir(mode=0o700)
    (run / "palaced.lock").symlink_to(precious)
    r = _palaced(base_env(home, model=False))
    assert r.returncode == 2 and "palaced.lock" in r.stderr and "symlink" in r.stderr
    assert precious.read_text() == "keep me"
    assert not (run / "palaced.sock").exists()


# -- 3. private files ----------------------------------------------------------------------------
def _start(home: Path, umask: int = 0o022) -> DaemonProc:
    d = DaemonProc(home, base_env(home, model=False))
    d.proc = subprocess.Popen([sys.executable, "-m", "palaced", "run", "--quiet"], env=d.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, umask=umask)
    d.wait_ready(wait_model=False)
    return d


def _palace_files(home: Path) -> list[Path]:
    return [p for p in (home / "palaces" / "vault").iterdir()
            if p.is_file() and not p.is_symlink()]


@pytest.mark.daemon
def test_new_install_is_private_whatever_the_umask(home: Path) -> None:
    os.chmod(home, 0o755)  # like the directory holding ~/.local/share/palace
    root = home / "palace-root"
    d = _start(root, umask=0o022)
    try:
        d.cli("create", "vault", check=True)
        d.cli("remember", "the vault code is 1234", "--palace", "vault", check=True)
        files = {p.name: _mode(p) for p in _palace_files(root)}
        assert {"palace.db", "palace.db-wal", "identity.txt"} <= set(files), files
        assert set(files.values()) == {0o600}, files
        for directory in (root, root / "palaces", root / "palaces" / "vault", root / "state",
                          root / "run"):
            assert _mode(directory) == 0o700, directory
        assert _mode(root / "state" / "palaced.log") == 0o600
        st = json.loads(d.cli("status", "--json", check=True).stdout)
        assert st["tightened"] == {"count": 0, "paths": []}  # fresh: nothing to tighten
        if os.geteuid() == 0 and os.access(ATTACKER_PYTHON, os.X_OK):
            # Another local user cannot read the database (it could before: 0644 in 0755).
            db = root / "palaces" / "vault" / "palace.db"
            r = subprocess.run([ATTACKER_PYTHON, "-I", "-c",
                                f"print(open({str(db)!r}, 'rb').read()[:16])"],
                               user=ATTACKER_UID, group=ATTACKER_UID, extra_groups=[],
                               capture_output=True, text=True, timeout=30, cwd="/")
            assert r.returncode != 0 and "PermissionError" in r.stderr, r.stdout
    finally:
        d.stop()


@pytest.mark.daemon
def test_an_auto_started_install_has_nothing_to_tighten(home: Path) -> None:
    # The client that auto-starts the daemon creates its log (for the daemon's early stderr):
    # 0600 too, so a fresh install never reports a tightening it caused itself.
    env = base_env(home / "auto", model=False)
    res = subprocess.run([sys.executable, "-m", "palace_client", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: os.umask(0o022))
    d = DaemonProc(home / "auto", env)
    try:
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["tightened"] == {"count": 0, "paths": []}
        assert _mode(home / "auto" / "state" / "palaced.log") == 0o600
    finally:
        d.stop()


@pytest.mark.daemon
def test_existing_install_is_tightened_on_start_and_status_says_so(home: Path) -> None:
    d = _start(home)
    try:
        d.cli("create", "vault", check=True)
        d.cli("remember", "the vault code is 1234", "--palace", "vault", check=True)
    finally:
        d.stop()
    (home / "config.toml").write_text("[limits]\nidle_close_s = 600\n")
    outside = home.parent / f"{home.name}-outside.txt"
    outside.write_text("not palace's")
    os.chmod(outside, 0o644)
    vault = home / "palaces" / "vault"
    (vault / "link").symlink_to(outside)
    # An install made by an older palace under umask 022.
    for directory in (home, home / "palaces", vault, home / "state"):
        os.chmod(directory, 0o755)
    loose = [*_palace_files(home), home / "config.toml", home / "state" / "palaced.log"]
    for f in loose:
        os.chmod(f, 0o644)
    try:
        d = _start(home)
        try:
            for directory in (home, home / "palaces", vault, home / "state"):
                assert _mode(directory) == 0o700, directory
            for f in loose:
                assert _mode(f) == 0o600, f
            assert _mode(outside) == 0o644  # the symlink was skipped, not followed
            st = json.loads(d.cli("status", "--json", check=True).stdout)
            assert st["tightened"]["count"] == len(loose) + 4
            assert f"{vault / 'palace.db'} (0644 -> 0600)" in st["tightened"]["paths"]
            human = d.cli("status", check=True).stdout
            assert f"security made {len(loose) + 4} paths private" in human, human
        finally:
            d.stop()
        d = _start(home)  # already private: the next run has nothing to report
        try:
            st = json.loads(d.cli("status", "--json", check=True).stdout)
            assert st["tightened"] == {"count": 0, "paths": []}
            assert "security" not in d.cli("status", check=True).stdout
        finally:
            d.stop()
    finally:
        outside.unlink()


def test_a_client_of_another_store_is_told_instead_of_using_it(keyword_daemon: DaemonProc,
                                                               tmp_path: Path) -> None:
    # The default socket does not depend on HOME but the data directory does: a client whose
    # data directory differs from the daemon's must hear so, not read another store.
    from palace_client.transport.connection import connect
    from palaced.wire.errors import DataDirMismatch
    from palaced.wire.paths import Paths

    d = keyword_daemon
    theirs = Paths(tmp_path / "other-data", tmp_path / "state", tmp_path / "config.toml",
                   d.socket.parent, d.socket)
    with pytest.raises(DataDirMismatch) as err:
        connect(theirs, autostart=False, check_store=True)
    assert str(d.home) in err.value.message and str(tmp_path / "other-data") in err.value.message
    ours = Paths(d.home, tmp_path / "state", tmp_path / "config.toml", d.socket.parent,
                 d.socket)
    conn = connect(ours, autostart=False, check_store=True)
    assert conn.server_info["server"]["data_dir"] == str(d.home)
    conn.close()
    # An explicit socket means "that daemon": no check.
    connect(theirs, autostart=False).close()
