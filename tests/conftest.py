"""Shared fixtures: real palaced processes on real Unix sockets in temp dirs.

The real model and tiktoken file come from ``../shared`` beside the repo (tests only; the
product never needs it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .support.pgserver import PgServer, dbname_of

if TYPE_CHECKING:  # the daemon core (numpy, apsw...) loads in the tests that use it, not in
    # pytest's controller process, which runs no test
    from palaced.engine.embedder import FastEmbedder

    from .support.inproc import InProcDaemon

# pytest caches a test module's assertion-rewritten code in __pycache__ only when bytecode may
# be written; under PYTHONDONTWRITEBYTECODE (set on these machines) every run and every xdist
# worker rewrote all the test modules again: 6 of a worker's 8.5 s of collection.
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MODEL_DIR = SHARED / "models" / "all-MiniLM-L6-v2-onnx-int8"
TIKTOKEN_FILE = SHARED / "data" / "tiktoken" / "cl100k_base.tiktoken"

_SCRUB = ("PALACE", "PALACE_SOCKET", "PALACE_CONFIG", "PALACE_EMBED_MODEL",
          "PALACE_EMBED_MODEL_PATH", "PALACE_TIKTOKEN_FILE", "PALACE_HOME")


# --- Markers derived from what a test uses (docs/development.md, "Test loops") -------------
#
# ``daemon``: it runs palace's processes (a real palaced, the CLI, the MCP bridge, a bench
# script): a fixture in its closure returns a ``DaemonProc``, or its module says
# ``pytestmark = pytest.mark.daemon``. ``pg``: it needs the real PostgreSQL (a fixture in its
# closure returns a ``PgServer``, or a parameter picks the ``team``/``pg`` backend). ``model``:
# it loads the real embedding model in-process (a second of CPU; a fixture in its closure
# returns a ``FastEmbedder``: ``real_embedder``). ``unit``: everything else that is not
# ``slow``, in-process only: ``pytest -m unit`` is the inner loop. ``_guarded_popen_init``
# fails a unit test that starts a process of palace's, PostgreSQL's, Python's or node's, and
# ``_guard_model_files`` one that reads the real model's files, so the markers cannot drift.
# ``slow`` stays hand-set.
_KIND_TYPES = {"daemon": ("DaemonProc",), "pg": ("PgServer",), "model": ("FastEmbedder",)}
_UNIT_SPAWN_WORDS = ("palace", "postgres", "initdb", "pg_ctl", "python", "node", "npx")
_in_unit_test = False


def _derived_kinds(item: pytest.Item) -> set[str]:
    kinds = {m.name for m in item.iter_markers() if m.name in _KIND_TYPES}
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            annotation = str(getattr(fixturedef.func, "__annotations__", {}).get("return", ""))
            kinds.update(kind for kind, names in _KIND_TYPES.items()
                         if any(name in annotation for name in names))
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(v in ("team", "pg") for v in callspec.params.values()):
        kinds.add("pg")  # the parametrised backend is PostgreSQL (the `store` fixture's "team")
    return kinds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kinds = _derived_kinds(item)
        for kind in sorted(kinds):
            item.add_marker(getattr(pytest.mark, kind))
        if not kinds and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.unit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _in_unit_test
    _in_unit_test = item.get_closest_marker("unit") is not None


def pytest_runtest_teardown(item: pytest.Item) -> None:
    global _in_unit_test
    _in_unit_test = False


_original_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self: subprocess.Popen[bytes], args: object, *rest: object,
                        **kwargs: object) -> None:
    if _in_unit_test:
        argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
        head = " ".join([os.path.basename(argv[0]) if argv else "", *argv[1:3]])
        if any(word in head for word in _UNIT_SPAWN_WORDS):
            pytest.fail(f"a test marked unit started {head!r}: give its module "
                        "`pytestmark = pytest.mark.daemon` (or use a DaemonProc fixture)")
    _original_popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]


subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[assignment,method-assign]


def _guard_model_files(event: str, args: tuple[object, ...]) -> None:
    """An audit hook: a test marked unit that opens a file of the real model fails (fastembed
    and palace's embedder read its JSON files through Python, onnxruntime the weights)."""
    if _in_unit_test and event == "open" and args and isinstance(args[0], (str, os.PathLike)) \
            and os.fspath(args[0]).startswith(str(MODEL_DIR)):
        pytest.fail(f"a test marked unit loaded the real model ({os.fspath(args[0])}): take it "
                    "from the `real_embedder` fixture, which marks the test `model`")


sys.addaudithook(_guard_model_files)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile palace once, as ``pip install`` does for an installed package: under
    ``PYTHONDONTWRITEBYTECODE`` (set on these machines) an editable checkout has no ``.pyc``
    files, and each of the suite's hundreds of daemon and CLI processes would compile
    every module it imports again (~0.35 s of CPU per daemon start)."""
    import compileall

    for package in ("palaced", "palace_client"):
        compileall.compile_dir(REPO / package, quiet=1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def base_env(home: Path, *, model: bool = True) -> dict[str, str]:
    """An environment for a daemon/CLI rooted at ``home``."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PALACE_HOME"] = str(home)
    env["PALACE_TIKTOKEN_FILE"] = str(TIKTOKEN_FILE)
    if model:
        env["PALACE_EMBED_MODEL_PATH"] = str(MODEL_DIR)
    else:
        env["PALACE_EMBED_MODEL"] = "none"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class DaemonProc:
    """A palaced process started by a test."""

    home: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.home / "run" / "palaced.sock"

    def start(self, wait_model: bool = True, timeout: float = 30) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "palaced", "run", "--quiet"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.wait_ready(wait_model=wait_model, timeout=timeout)

    def wait_ready(self, *, wait_model: bool = True, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"palaced exited with {self.proc.returncode}: {err}")
            if self.socket.exists():
                try:
                    with self.client(autostart=False) as c:
                        state = c.status()["model"]["state"]
                    if not wait_model or state != "loading":
                        return
                except Exception:
                    pass
            time.sleep(0.05)
        raise TimeoutError("palaced did not become ready")

    def client(self, autostart: bool = False):  # type: ignore[no-untyped-def]
        from palace_client import Client

        return Client(self.socket, autostart=autostart, client_name="tests")

    def connect(self) -> socket.socket:
        """A raw socket connected to the daemon (no hello sent yet)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(self.socket))
        return s

    def cli(self, *args: str, input: str | None = None, check: bool = False
            ) -> subprocess.CompletedProcess[str]:
        """Run the ``palace`` CLI against this daemon's root."""
        res = subprocess.run(
            [sys.executable, "-m", "palace_client", *args],
            env=self.env, input=input, capture_output=True, text=True, timeout=120,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"palace {args} failed ({res.returncode}): {res.stderr}")
        return res

    def pid(self) -> int:
        return int((self.home / "run" / "palaced.lock").read_text().strip())

    def kill9(self) -> None:
        """SIGKILL the daemon and reap it (no shutdown code runs)."""
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        if self.proc is not None and self.proc.pid == pid:
            self.proc.wait(timeout=30)
            self.proc = None  # the next daemon is auto-started by a client
        else:
            _wait_gone(pid)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            # Possibly auto-started by a client: stop through the lock's pid.
            try:
                os.kill(self.pid(), signal.SIGTERM)
                _wait_gone(self.pid())
            except (OSError, ValueError):
                pass
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wait_gone(pid: int, timeout: float = 30) -> None:
    """Wait until process ``pid`` is gone; TimeoutError if it outlives ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise TimeoutError(f"pid {pid} still alive")


def short_home() -> Path:
    # Unix socket paths are limited to ~100 bytes: keep the root short.
    return Path(tempfile.mkdtemp(prefix="pal-", dir="/tmp"))


@pytest.fixture
def home() -> Iterator[Path]:
    import shutil

    path = short_home()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProc]:
    """A fresh palaced with the real model, stopped at teardown."""
    d = DaemonProc(home, base_env(home))
    d.start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[DaemonProc]:
    """One palaced with the real model shared by a module's tests (use distinct palaces)."""
    import shutil

    path = short_home()
    d = DaemonProc(path, base_env(path))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def keyword_daemon(home: Path) -> Iterator[DaemonProc]:
    """A palaced started without any model (keyword-only)."""
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def shared_keyword_daemon() -> Iterator[DaemonProc]:
    """One keyword-only palaced shared by a module's tests: for tests that need a real daemon
    but only an empty palace, give each test a palace of its own (``fresh_name``) instead of
    a daemon of its own (~0.5 s of CPU each)."""
    import shutil

    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


def fresh_name(prefix: str = "p") -> str:
    """A palace name no other test of a shared daemon uses."""
    import uuid

    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def real_embedder() -> FastEmbedder:
    """The real model from ``../shared`` loaded in-process once per run, as the daemon loads
    it: for tests of the embedder itself (the tests using it are marked ``model``, not
    ``unit``)."""
    from palaced.config.model import EmbedderSettings
    from palaced.engine.embedder import FastEmbedder

    return FastEmbedder.load(EmbedderSettings(model_path=MODEL_DIR))


@pytest.fixture(scope="module")
def inproc() -> Iterator[InProcDaemon]:
    """The daemon core in-process with the hashing embedder (see ``tests/support/inproc.py``),
    shared by a module's tests (use distinct palaces): for op behaviour that needs no real model,
    transport, auto-start, concurrency or crash."""
    import shutil

    from .support.inproc import inproc_daemon

    path = short_home()
    with inproc_daemon(path, tokenizer_file=TIKTOKEN_FILE) as d:
        yield d
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL 18 + pgvector server for the whole run (``tests/support/pgserver.py``),
    started on first use (about a second) and stopped at the end. Tests that stop or kill a
    server use ``pg_private`` instead."""
    with PgServer() as server:
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The libpq URL of a fresh database (with the vector extension) on the shared server,
    dropped after the test."""
    pg_server.start()  # a no-op unless an earlier test left it stopped
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(dbname_of(url))


@pytest.fixture
def pg_private() -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own, for stopping, restarting and killing it."""
    with PgServer() as server:
        yield server


@pytest.fixture(params=["local", "team"])
def store(request: pytest.FixtureRequest) -> str | None:
    """The ``store`` argument of ``palace.create`` for an op-level test run on both backends:
    None (a local SQLite palace), then the URL of a fresh PostgreSQL database (a team
    palace, issue 15)."""
    if request.param == "local":
        return None
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="session")
def agent_bin_dir() -> Path:
    """The ``node_modules/.bin`` of the real agent binaries pinned in tests/agents/ (Claude
    Code, Codex CLI, Gemini CLI, Copilot CLI), installed once by ``npm ci`` into a cache keyed by the lock
    file (``tests/support/agents.py``). Fails, never skips, without node and npm."""
    from .support.agents import AgentsUnavailable, install_agents

    try:
        bin_dir, seconds = install_agents()
    except AgentsUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    if seconds:
        print(f"\nagent binaries installed by npm ci in {seconds:.1f} s", file=sys.stderr)
    return bin_dir
