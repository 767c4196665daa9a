"""A private palaced for the bench scripts: scratch home, environment, start, wait, kill, stop.

Shared by ``soak.py``, ``fuzz.py`` and ``crash.py`` (run as ``python bench/<script>.py``, so
this directory is on ``sys.path``). Everything stays under one scratch ``PALACE_HOME`` in
``/tmp`` (short, so the Unix socket path fits), and only the daemon started here (or
auto-started by a client of that home) is ever signalled.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from palace_client import Client
from palaced.wire.errors import PalaceError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx-int8"
DEFAULT_TIKTOKEN = REPO.parent / "shared" / "data" / "tiktoken" / "cl100k_base.tiktoken"
SHUTDOWN_LIMIT_S = 30.0


def private_env(home: Path, model: Path | None, tiktoken: Path | None) -> dict[str, str]:
    """This process's environment without PALACE_* settings, rooted at ``home``.

    ``model`` None means keyword-only (``PALACE_EMBED_MODEL=none``).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALACE")}
    env["PALACE_HOME"] = str(home)
    if model is None:
        env["PALACE_EMBED_MODEL"] = "none"
    else:
        env["PALACE_EMBED_MODEL_PATH"] = str(model.resolve())
    if tiktoken is not None and tiktoken.exists():
        env["PALACE_TIKTOKEN_FILE"] = str(tiktoken.resolve())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def compile_sources() -> None:
    """Byte-compile palace's modules, as ``pip install`` does for an installed package.

    An editable checkout under ``PYTHONDONTWRITEBYTECODE`` (set on these machines) has no
    ``.pyc`` files, so every start would compile ~200 modules first: ~550 instead of ~200 ms
    of imports, a cost no installed daemon pays.
    """
    import compileall

    for package in ("palaced", "palace_client"):
        compileall.compile_dir(REPO / package, quiet=1)


def launch(env: dict[str, str], stderr_file: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m palaced run --quiet`` with ``env``; stdout/stderr go to a file.

    The sources are byte-compiled first (``compile_sources``), so start-up times are an
    installed daemon's."""
    compile_sources()
    with open(stderr_file, "ab") as err:
        return subprocess.Popen([sys.executable, "-m", "palaced", "run", "--quiet"], env=env,
                                cwd="/", stdin=subprocess.DEVNULL, stdout=err, stderr=err)


def wait_ready(proc: subprocess.Popen[bytes] | None, sock: Path, timeout_s: float,
               client_name: str = "bench-ready") -> dict[str, Any]:
    """Poll ``daemon.status`` until the model is no longer loading; returns the status.

    ``proc`` (when the daemon is our child) is watched for an early exit.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"palaced exited with {proc.returncode} during start")
        try:
            with Client(sock, autostart=False, client_name=client_name) as c:
                status = c.status()
            if status["model"]["state"] != "loading":
                return status
        except (PalaceError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"palaced not ready within {timeout_s:.0f}s")
        time.sleep(0.1)


def stop_daemon(proc: subprocess.Popen[bytes], sock: Path) -> dict[str, Any]:
    """SIGTERM; the daemon must exit 0 within SHUTDOWN_LIMIT_S and remove its socket."""
    t_stop = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc: int | None = proc.wait(timeout=SHUTDOWN_LIMIT_S)
    except subprocess.TimeoutExpired:
        rc = None
        proc.kill()
        proc.wait()
    return {"exit_code": rc, "seconds": round(time.monotonic() - t_stop, 2),
            "socket_removed": not sock.exists(), "killed": rc is None}


def scan_log(log_file: Path) -> list[str]:
    """The ERROR and CRITICAL lines of a daemon log."""
    if not log_file.exists():
        return []
    lines = log_file.read_text("utf-8", errors="replace").splitlines()
    return [ln for ln in lines if " ERROR " in ln or " CRITICAL " in ln]


def add_daemon_args(ap: argparse.ArgumentParser) -> None:
    """``--model``, ``--tiktoken``, ``--keep-home`` and ``--json`` of the bench checks."""
    ap.add_argument("--model", type=Path, default=None,
                    help="embedding model directory (default: keyword-only)")
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN,
                    help="cl100k_base.tiktoken file for exact token counts")
    ap.add_argument("--keep-home", action="store_true",
                    help="keep the scratch PALACE_HOME even on PASS")
    ap.add_argument("--json", type=Path, help="also write the full report here")


def all_drawers(client: Client, palace: str) -> list[dict[str, Any]]:
    """Every drawer of ``palace``, newest first, through ``memory.list`` pages."""
    out: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = client.drawers(palace, limit=1000, offset=offset)
        out.extend(page["drawers"])
        offset = page["next_offset"]
    return out


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; reaps it when it is an exited child of ours (a daemon a client
    auto-started from this process is one, and would otherwise linger as a zombie)."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PrivateDaemon:
    """One scratch ``PALACE_HOME`` and the palaced serving it.

    The daemon may be our child (``start``) or auto-started by a client of this home; its
    pid is read from the runtime lock file either way.
    """

    def __init__(self, prefix: str, model: Path | None, tiktoken: Path | None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.env = private_env(self.home, model, tiktoken)
        self.sock = self.home / "run" / "palaced.sock"
        self.lock = self.home / "run" / "palaced.lock"
        self.log_file = self.home / "state" / "palaced.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def adopt_env(self) -> None:
        """Make this process's environment the private one (so clients that auto-start a
        daemon start it under this home)."""
        os.environ.clear()
        os.environ.update(self.env)

    def start(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Start the daemon as our child and wait until it answers; returns its status."""
        self.proc = launch(self.env, self.home / "palaced.stderr")
        return wait_ready(self.proc, self.sock, timeout_s)

    def client(self, name: str, *, autostart: bool = False) -> Client:
        return Client(self.sock, autostart=autostart, client_name=name)

    def pid(self) -> int | None:
        """The pid in the lock file when that process is alive, else None."""
        try:
            pid = int(self.lock.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def _reap(self, pid: int, timeout_s: float) -> bool:
        """Wait for ``pid`` to end (reaping it when it is our child); True if it did."""
        if self.proc is not None and self.proc.pid == pid:
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            self.proc = None
            return True
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        return not pid_alive(pid)

    def kill9(self) -> int | None:
        """SIGKILL the running daemon (no shutdown code runs); returns its pid."""
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._reap(pid, 30.0)
        return pid

    def stop(self) -> dict[str, Any]:
        """SIGTERM the running daemon, SIGKILL after SHUTDOWN_LIMIT_S; then any straggler."""
        out = self._stop_running()
        self.stop_stragglers()
        return out

    def _stop_running(self) -> dict[str, Any]:
        if self.proc is not None and self.proc.poll() is None:
            out = stop_daemon(self.proc, self.sock)
            self.proc = None
            return out
        pid = self.pid()
        if pid is None:
            return {"exit_code": None, "running": False}
        t0 = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        killed = not self._reap(pid, SHUTDOWN_LIMIT_S)
        if killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._reap(pid, 10.0)
        return {"exit_code": None, "seconds": round(time.monotonic() - t0, 2),
                "socket_removed": not self.sock.exists(), "killed": killed}

    def stragglers(self) -> list[int]:
        """Pids of ``palaced`` processes of this scratch home still alive (Linux /proc).

        A client that auto-started a daemon just before the stop leaves one that takes the
        lock only after the stopped daemon released it; it would serve a deleted home forever.
        """
        mine = f"PALACE_HOME={self.home}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if b"palaced" in (proc / "cmdline").read_bytes() and mine in (
                        proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def stop_stragglers(self) -> None:
        """SIGTERM (then SIGKILL) every straggler of this home."""
        for pid in self.stragglers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._reap(pid, SHUTDOWN_LIMIT_S):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._reap(pid, 10.0)

    def log_errors(self) -> list[str]:
        return scan_log(self.log_file)

    def cleanup(self, keep: bool) -> None:
        """Delete the scratch home unless ``keep`` (then print where it is)."""
        if keep:
            print(f"scratch home kept: {self.home} (daemon log: {self.log_file})")
        else:
            shutil.rmtree(self.home, ignore_errors=True)
