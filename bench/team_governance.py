"""What governance costs on a team palace against a local one, through a real daemon, one run.

One keyword-only palaced (no model: the numbers are the trash, the log and the policy, not
embedding) serves a local palace and a team palace on a PostgreSQL 18 + pgvector server this
script starts (``tests/support/pgserver.py``, the tests' server on a Unix socket). For each: ``n``
remembers, forgets into the trash, restores, audit reads (an agent glob: GLOB on SQLite, a
regular expression on PostgreSQL), policy reads (cached for a local palace, read per request
for a team palace: ``palaced/memory/policy.py``) and remembers under a policy. Prints p50/p95 in ms
per op and kind.

    python bench/team_governance.py [--n 60] [--json out.json]

The machine is shared: compare the two rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import DaemonProc, base_env, short_home
from tests.support.pgserver import PgServer

OPS = ("remember", "forget", "restore", "audit", "policy", "remember+policy")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def run_kind(c: Any, kind: str, url: str, n: int) -> dict[str, dict[str, float]]:
    """p50/p95 of each op on a new palace of ``kind`` (``local`` or ``team``)."""
    name = f"{kind}-{uuid.uuid4().hex[:6]}"
    c.create_palace(name, store=url if kind == "team" else None)
    lat: dict[str, list[float]] = {op: [] for op in OPS}
    ids = []
    for i in range(n):
        ms, did = timed(lambda i=i: c.remember(name, f"memory {i} {uuid.uuid4().hex}"))
        lat["remember"].append(ms)
        ids.append(did)
    for did in ids:
        lat["forget"].append(timed(lambda d=did: c.forget(name, d))[0])
    for did in ids:
        lat["restore"].append(timed(lambda d=did: c.restore_drawer(name, d))[0])
    for _ in range(n):
        lat["audit"].append(timed(lambda: c.audit(name, agent="user:*", limit=20))[0])
        lat["policy"].append(timed(lambda: c.policy(name))[0])
    c.set_policy(name, "write", ["user:*", "mcp:*"])
    for i in range(n):
        lat["remember+policy"].append(timed(lambda i=i: c.remember(
            name, f"policy memory {i} {uuid.uuid4().hex}"))[0])
    c.delete_palace(name, purge=kind == "team")
    return {op: {"p50": round(statistics.median(v), 2), "p95": round(pct(v, 95), 2)}
            for op, v in lat.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="ops of each kind per palace")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with PgServer() as pg:
        url = pg.create_database()
        home = short_home()
        d = DaemonProc(home, base_env(home, model=False))
        d.start(wait_model=False)
        try:
            with d.client() as c:
                for kind in ("local", "team"):
                    results[kind] = run_kind(c, kind, url, args.n)
        finally:
            d.stop()
            shutil.rmtree(home, ignore_errors=True)
    print(f"{'op (ms)':<16}" + "".join(f"{k + ' p50/p95':>20}" for k in results))
    for op in OPS:
        print(f"{op:<16}" + "".join(
            f"{results[k][op]['p50']:>12.2f} /{results[k][op]['p95']:>6.2f}" for k in results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
