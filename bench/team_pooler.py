"""What a team palace pays for PgBouncer's transaction pooling, through a real daemon, one run.

One palaced with the real model serves three team palaces holding the same ``--drawers``
texts on one PostgreSQL 18 + pgvector server this script starts (``tests/support/pgserver.py``):

- ``direct``: ``[stores.direct]``, psycopg's automatic prepared statements on (a statement
  run 5 times on a connection is prepared there);
- ``unprepared``: the same server, ``pooler = "transaction"`` (no prepared statements): the
  cost of the setting alone;
- ``pgbouncer``: through a real PgBouncer in transaction mode (``tests/support/pgbouncer.py``),
  ``pooler = "transaction"``: the setting plus the extra hop.

Then ``--queries`` recalls and ``--writes`` remembers per palace, interleaved round-robin so
the shared machine's load hits the three alike. Prints p50/p95 in ms per op and palace.

    python bench/team_pooler.py [--drawers 1000] [--queries 200] [--writes 100] [--json out]

The machine is shared: compare the columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import DaemonProc, base_env, short_home
from tests.support.pgbouncer import PgBouncer
from tests.support.pgserver import PgServer, dbname_of
from tests.support.team_storm import sentence

KINDS = ("direct", "unprepared", "pgbouncer")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = random.Random(34)
    texts = [sentence(rng, "fill") for _ in range(args.drawers)]
    report: dict[str, Any] = {"drawers": args.drawers}
    home = short_home()
    with PgServer() as server:
        url = server.create_database()
        with PgBouncer(server, mode="transaction", pool_size=8) as bouncer:
            urls = {"direct": url, "unprepared": url,
                    "pgbouncer": bouncer.url(dbname_of(url))}
            (home / "config.toml").write_text("".join(
                f'[stores.{k}]\nurl = "{u}"\n'
                + ('pooler = "transaction"\n' if k != "direct" else "") + "\n"
                for k, u in urls.items()))
            d = DaemonProc(home, base_env(home))
            d.start()
            try:
                with d.client() as c:
                    for k in KINDS:
                        c.create_palace(k, store=k)
                        for i in range(0, len(texts), 250):
                            c.remember_many(k, [{"text": t} for t in texts[i:i + 250]])
                    lat: dict[str, dict[str, list[float]]] = {
                        k: {"recall": [], "remember": []} for k in KINDS}
                    for _ in range(args.queries):
                        q = texts[rng.randrange(len(texts))].split(";")[0]
                        for k in KINDS:
                            t = time.perf_counter()
                            c.recall(k, q)
                            lat[k]["recall"].append((time.perf_counter() - t) * 1000)
                    for i in range(args.writes):
                        text = sentence(rng, f"w{i}")
                        for k in KINDS:
                            t = time.perf_counter()
                            c.remember(k, text)
                            lat[k]["remember"].append((time.perf_counter() - t) * 1000)
            finally:
                d.stop()
                shutil.rmtree(home, ignore_errors=True)
    report["ms"] = {k: {op: {"p50": round(pct(v, 50), 2), "p95": round(pct(v, 95), 2)}
                        for op, v in ops.items()} for k, ops in lat.items()}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
