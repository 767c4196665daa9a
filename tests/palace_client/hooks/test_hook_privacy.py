"""The capture hook's deferred delivery keeps the request off its command line.

With the daemon down, the hook starts a detached process that starts the daemon and delivers
the request. Every local user can read a process's argv (``ps``, ``/proc/PID/cmdline``) for as
long as it runs, and the request names the project, the transcript and the session: it must
reach that process another way (a pipe on its stdin).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from palace_client.api.slug import palace_name_for
from tests.conftest import DaemonProc, base_env, short_home
from tests.e2e.test_capture_daemon import _has_drawers, run_hook, texts, wait_for
from tests.support.transcripts import Session, hook_input


@pytest.fixture
def cold_home() -> Iterator[Path]:
    path = short_home()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _deliverers(home: Path) -> list[int]:
    """The pids of the hook's delivery processes of ``home`` (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"palace_client.hooks.capture" in cmdline and f"PALACE_HOME={home}".encode() in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.daemon
def test_the_deferred_delivery_gets_its_request_on_a_pipe_not_on_its_command_line(
        cold_home: Path) -> None:
    env = base_env(cold_home, model=False)
    project = cold_home / "work" / "zircon-ledger-7f3"
    project.mkdir(parents=True)
    session_id = f"sess-{uuid.uuid4()}"
    s = Session(cold_home / "claude" / "quartz-transcript-19.jsonl", session_id=session_id,
                cwd=str(project))
    s.exchange("Where do invoices go?", "Invoices go to the billing queue, nightly.")
    palace = palace_name_for(project)
    # A lock held by no daemon keeps the delivery waiting (its daemon defers to the holder),
    # so that its command line can be read while it runs.
    run = cold_home / "run"
    run.mkdir(mode=0o700)
    fd = os.open(run / "palaced.lock", os.O_RDWR | os.O_CREAT, 0o600)
    d = DaemonProc(cold_home, env)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res, _ = run_hook(env, hook_input(s))
        assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
        deadline = time.monotonic() + 30
        while not (pids := _deliverers(cold_home)):
            assert time.monotonic() < deadline, "no delivery process started"
            time.sleep(0.02)
        (pid,) = pids
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert cmdline.split(b"\0")[-3:] == [b"palace_client.hooks.capture", b"--deliver", b""], cmdline
        for secret in (palace, "zircon", str(s.path), "quartz-transcript", session_id):
            assert secret.encode() not in cmdline, (secret, cmdline)
        # Let go of the lock: the delivery sees it free, starts the daemon and delivers.
        os.close(fd)
        fd = -1
        wait_for(lambda: d.socket.exists(), 60)
        d.wait_ready(wait_model=False, timeout=60)
        wait_for(lambda: _has_drawers(d, palace), 60)
        assert texts(d, palace) == ["User: Where do invoices go?\n\nAssistant: Invoices go to "
                                    "the billing queue, nightly."]
    finally:
        if fd >= 0:
            os.close(fd)
        if d.socket.exists():
            d.stop()
