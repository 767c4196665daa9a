"""The short variant of ``bench/team_soak.py`` (issue 34): two keyword-only daemons, three
clients each, 10 s through a real PgBouncer in transaction mode with a PostgreSQL restart
half-way; the bench's own checks (every acknowledged write exactly once, forgets gone,
own recalls found, only retryable errors) must pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.daemon

REPO = Path(__file__).resolve().parents[2]


def test_short_soak_through_pgbouncer_with_a_restart(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "team_soak.py"), "--minutes", "0.17",
         "--daemons", "2", "--clients", "3", "--rooms", "2", "--model", "none",
         "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    report = json.loads(out.read_text())
    assert report["via"].startswith("pgbouncer")
    assert report["acknowledged_writes"] > 0 and report["acknowledged_forgets"] > 0
    assert report["ops"]["recall"]["n"] > 0 and "restart_s" in report
    assert not report["problems"]
    assert all(e["retryable"] for e in report["errors"])
