"""The daemon's C heap (``palaced/daemon/heap.py``): with glibc's mmap threshold pinned,
freed large buffers go back to the system instead of staying resident as heap holes (the
soak's RSS climb, ``bench/soak.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from palace_client import Client
from tests.conftest import DaemonProc

pytestmark = pytest.mark.daemon  # each test runs a Python process or a daemon

# After one freed 16 MiB mapping (glibc then raises its dynamic threshold to 16 MiB), 64
# buffers of 1 MiB with a small live allocation after each are freed: how many MB of RSS
# stay. The small ones pin the freed buffers' holes when those came from the heap.
SCENARIO = """
import sys
import time
from palaced.daemon import heap

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024

tuned = heap.M_MMAP_THRESHOLD in heap.tune() if sys.argv[1] == "tune" else False
trimmer = heap.start_trimmer(0.05) if sys.argv[1] == "trim" else None
big = bytearray(16 << 20)
del big
base = rss_mb()
buffers, kept = [], []
for i in range(64):
    buffers.append(bytearray(1 << 20))
    kept.append(bytes(1000 + i))
del buffers
if trimmer is not None:
    time.sleep(0.5)
print(tuned or trimmer is not None, rss_mb() - base)
"""


def _retained(mode: str, **env: str) -> tuple[bool, int]:
    """(whether tune() set the threshold, MB still resident) of the scenario."""
    done = subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True,
                          text=True, timeout=60, check=True, env={**os.environ, **env})
    tuned, kept = done.stdout.split()
    return tuned == "True", int(kept)


def test_freed_large_buffers_leave_no_resident_holes() -> None:
    assert _retained("plain")[1] >= 48  # glibc's default: the 64 MB stay resident
    tuned, kept = _retained("tune")
    assert tuned
    assert kept <= 8


def test_the_trimmer_gives_freed_heap_pages_back() -> None:
    """Small allocations churned by SQLite's page caches leave free pages inside the heap
    that no threshold helps with; the trimmer thread hands them back."""
    started, kept = _retained("trim")
    assert started
    assert kept <= 8


def test_a_threshold_the_user_set_is_kept() -> None:
    tuned, kept = _retained("tune", MALLOC_MMAP_THRESHOLD_="33554432")
    assert not tuned
    assert kept >= 48  # the user's 32 MiB threshold: the buffers come from the heap


def test_status_reports_sqlite_heap(keyword_daemon: DaemonProc) -> None:
    """``daemon.status`` says how much of the daemon's memory is SQLite's (its page caches
    fill up to 16 MB per connection): the soak judges RSS without it."""
    with Client(keyword_daemon.socket, autostart=False) as c:
        before = c.status()["sqlite_mb"]
        c.create_palace("heap")
        c.remember_many("heap", [{"text": f"note {i} " + "word " * 200} for i in range(200)])
        c.recall("heap", "note word")
        after = c.status()["sqlite_mb"]
    assert isinstance(before, float) and isinstance(after, float)
    assert after > before
