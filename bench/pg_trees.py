"""Team vs SQLite recall at scale, two code trees in ONE run: old and new code on the same palaces.

One PostgreSQL server (``tests/support/pgserver.py``), one SQLite and one team palace filled to
``--drawers`` as ``bench/pg.py --scale`` fills them (``Filler``), then the private daemon (real
model) restarted with each tree's code in turn (``PYTHONPATH``): old, new, new, old, ... for
``--rounds`` rounds, each time 20 warm-up queries, then ``--queries`` Zipfian queries asked of
both palaces in turn. Recall p50/p95 per tree and backend, and team / SQLite ratios, as JSON.

    git worktree add /tmp/old-tree main
    python bench/pg_trees.py /tmp/old-tree [--drawers 10000] [--queries 100] [--rounds 2]

The new tree is this file's own. Both trees must read the same palace schema.

``--reuse HOME --pg-url URL`` measures the palaces a ``bench/pg.py --pg-url URL --keep HOME
--scale ...,N`` run left (``big-sqlite``, ``big-team``, ``--drawers N``) instead of filling
new ones: 100k drawers are filled once, for both that run and this one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import pg  # noqa: E402
from _daemon import DEFAULT_MODEL  # noqa: E402
from perf import zipf_texts  # noqa: E402
from scale import Daemon  # noqa: E402

from tests.support.pgserver import PgServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old_tree", type=Path, help="the other tree (a worktree of the old commit)")
    ap.add_argument("--drawers", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--pg-url", help="an existing server's database (default: start one)")
    ap.add_argument("--reuse", type=Path, metavar="HOME",
                    help="the PALACE_HOME of palaces bench/pg.py --keep left (with --pg-url)")
    args = ap.parse_args()
    if args.reuse is not None and args.pg_url is None:
        ap.error("--reuse needs the --pg-url of the server holding its team palace")
    trees = {"old": str(args.old_tree.resolve()), "new": str(BENCH.parent)}
    server = None if args.pg_url else PgServer()
    url = args.pg_url or server.create_database("trees")  # type: ignore[union-attr]
    home = args.reuse or Path(tempfile.mkdtemp(prefix="paltrees-", dir="/tmp"))
    d = Daemon(home, args.model_dir)
    names = {k: f"big-{k}" for k in pg.KINDS}
    lat: dict[tuple[str, str], list[float]] = {(t, k): [] for t in trees for k in pg.KINDS}
    try:
        d.env["PYTHONPATH"] = trees["new"]
        filler = pg.Filler(args.model_dir)
        if args.reuse is None:
            d.start()
            with d.client() as c:
                for kind, name in names.items():
                    pg.create(c, name, kind, url)
                    c.remember(name, "The first drawer records the palace's model.")
            d.stop()
            for kind, name in names.items():
                store = pg.open_store(home, name, kind, url)
                try:
                    filler.fill(store, 1, args.drawers, threads=3 if kind == "team" else 1)
                finally:
                    store.close()
            pg.rebuild_sqlite_index(home, names["sqlite"])
        qs = zipf_texts(args.queries + 20, filler.words, seed=args.drawers, length=(4, 8))
        for r in range(args.rounds):
            for tree in (("old", "new") if r % 2 == 0 else ("new", "old")):
                d.env["PYTHONPATH"] = trees[tree]
                d.start()
                with d.client() as c:
                    for q in qs[:20]:
                        for kind in pg.KINDS:
                            pg.recall_ms(c, names[kind], q, {})
                    for i, q in enumerate(qs[20:]):
                        for kind in (pg.KINDS if i % 2 == 0 else pg.KINDS[::-1]):
                            lat[(tree, kind)].append(pg.recall_ms(c, names[kind], q, {}))
                d.stop()
                print(f"round {r + 1}: {tree} tree done", file=sys.stderr, flush=True)
        out: dict[str, object] = {"drawers": args.drawers,
                                  "recalls_per_tree_and_backend": len(lat[("old", "team")])}
        for t in trees:
            team, sqlite = pg.stats(lat[(t, "team")]), pg.stats(lat[(t, "sqlite")])
            out[t] = {"sqlite": sqlite, "team": team,
                      "ratio_p50": round(team["p50"] / sqlite["p50"], 2),
                      "ratio_p95": round(team["p95"] / sqlite["p95"], 2)}
        print(json.dumps(out, indent=1))
    finally:
        d.stop()
        if server is not None:
            server.close()
        if args.reuse is None:
            shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
