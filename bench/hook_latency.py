"""Wall time of the Claude Code capture hook, as Claude Code runs it.

Each run is ``palace hook capture`` in a fresh process (the console script when it is on
PATH, else ``python -m palace_client``), fed a Stop hook input on stdin, timed from spawn to
exit. Two cases:

* **daemon up**: a private palaced (real model by default) serves a scratch ``PALACE_HOME``;
  the hook sends ``capture.transcript`` (queued) and exits;
* **daemon down**: a scratch home whose runtime directory is a regular file, so nothing
  listens and no daemon can start there: the hook finds no socket, starts its detached
  delivery process (which fails and logs) and exits. This is the path a hook takes when the
  daemon is not running, without a daemon coming up between runs.

The hook's budget is 200 ms (``palace_client.hooks.capture.BUDGET_S``).

    python bench/hook_latency.py [--runs 40] [--keyword-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon, private_env

from tests.support.transcripts import Session, hook_input


def hook_argv() -> list[str]:
    exe = shutil.which("palace")
    return [exe, "hook", "capture"] if exe else [sys.executable, "-m", "palace_client",
                                                  "hook", "capture"]


def time_runs(env: dict[str, str], stdin: str, runs: int, argv: list[str] | None = None
              ) -> list[float]:
    """Wall milliseconds of ``runs`` hook processes; each must exit 0 and print nothing."""
    argv = argv or hook_argv()
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        res = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True,
                             timeout=30)
        out.append((time.perf_counter() - started) * 1000)
        if res.returncode != 0 or res.stdout or res.stderr:
            raise RuntimeError(f"hook failed: {res.returncode} {res.stdout!r} {res.stderr!r}")
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 1), "p95_ms": round(pct(values, 95), 1),
            "max_ms": round(max(values), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = None if args.keyword_only else DEFAULT_MODEL
    daemon = PrivateDaemon("pal-hook-", model, DEFAULT_TIKTOKEN)
    down_home = Path(tempfile.mkdtemp(prefix="pal-hookdown-", dir="/tmp"))
    try:
        daemon.start()
        s = Session(daemon.home / "claude" / "bench.jsonl", cwd=str(daemon.home / "bench-app"))
        for i in range(20):
            s.exchange(f"question {i} about the bench app", f"answer {i}: it is fine.")
        env = {**daemon.env, "PATH": os.environ.get("PATH", "")}
        env.pop("CLAUDE_PROJECT_DIR", None)
        time_runs(env, hook_input(s), 3)  # warm the page cache
        up = time_runs(env, hook_input(s), args.runs)
        # The floor: starting the same interpreter (site and all) to do nothing.
        floor = time_runs(env, "", args.runs, [sys.executable, "-c", "pass"])
        with daemon.client("bench-hook") as c:
            drawers = c.palace_info("bench-app")["drawers"]
        (down_home / "run").write_text("not a directory\n")
        down_env = {**private_env(down_home, None, None), "PATH": os.environ.get("PATH", "")}
        down = time_runs(down_env, hook_input(s), args.runs)
        log = (down_home / "state" / "palace.log").read_text().splitlines()
    finally:
        daemon.stop()
        shutil.rmtree(daemon.home, ignore_errors=True)
        shutil.rmtree(down_home, ignore_errors=True)
    report = {"runs": args.runs, "command": " ".join([*hook_argv()[:1], "hook", "capture"]),
              "daemon_up": summary(up), "daemon_down": summary(down),
              "python_start": summary(floor),
              "drawers_captured": drawers, "log_lines_when_down": len(log)}
    print(f"palace hook capture, {args.runs} runs each (budget 200 ms)")
    for case in ("daemon_up", "daemon_down", "python_start"):
        r = report[case]
        print(f"  {case.replace('_', ' '):12} p50 {r['p50_ms']:6.1f} ms   p95 {r['p95_ms']:6.1f} ms"
              f"   max {r['max_ms']:6.1f} ms")
    print(f"  drawers captured while up: {drawers}; log lines while down: {len(log)} "
          "(hook + deferred delivery)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
