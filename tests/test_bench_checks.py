"""The adversarial bench checks, tiny bounds: the protocol fuzzer and the kill -9 check pass.

``bench/fuzz.py`` and ``bench/crash.py`` each start their own private daemon under a scratch
home; here they run as the CLI would run them, and must exit 0 and print their summaries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALACE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=100)


def test_fuzz_bounded_run_finds_nothing() -> None:
    res = _run("fuzz.py", "--frames", "300", "--seed", "1")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "frames sent" in out
    assert "INTERNAL replies (500-502)" in out
    assert "daemon alive at end" in out
    assert "RESULT: PASS" in out


def test_crash_bounded_run_loses_nothing() -> None:
    res = _run("crash.py", "--rounds", "2", "--seed", "1")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "rounds (kill -9 + restart + check)    2" in out
    assert "lost acknowledged writes              0" in out
    assert "phantom drawers                       0" in out
    assert "retried ops whose answer contradicted the final state:" in out
    assert "RESULT: PASS" in out
