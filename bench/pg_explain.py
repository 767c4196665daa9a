"""Where a team recall's time goes in PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS)`` of every
statement of real recalls, through the daemon.

Takes a team palace that ``bench/pg.py --pg-url URL --keep HOME --scale ...`` left (``big-team``
under ``HOME``, on the server of ``URL``, a ``tests/support/pgserver.py`` server whose log is
``postgres.log`` beside its socket). Turns on ``auto_explain`` for the palace's database
(``ALTER DATABASE ... SET``: every statement of a new session, its plan with actual times and
buffers, into the server's log), starts the daemon of ``HOME`` (real model) with this tree
(or ``--tree``'s),
asks ``--warm`` recalls, then ``--queries`` recalls (the Zipfian queries ``bench/pg.py`` asks
at that size), reads the plans those logged and puts the database's settings back.

Prints per kind of statement (BM25, vector search, room neighbours, ...) how many ran, their
execution ms (median and sum per recall) and buffers, the recall's wall time for comparison
(inflated by EXPLAIN ANALYZE's clock reads, as the statements' are), and with ``--plans DIR``
writes one full plan of each kind there.

    python bench/pg_explain.py --pg-url URL --home HOME [--palace big-team] [--queries 20]
                               [--tree OLD_TREE] [--plans DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from _daemon import DEFAULT_MODEL  # noqa: E402
from perf import zipf_texts, zipf_vocabulary  # noqa: E402
from scale import Daemon  # noqa: E402

from palaced.wire.errors import PalaceError  # noqa: E402

# A statement's kind, by a fragment only its SQL holds (first match wins).
KINDS = (
    ("bm25", "WITH q AS (SELECT DISTINCT u.lexeme"),
    ("vector search", "<=>"),
    ("room neighbours", "(SELECT x.id FROM drawers x WHERE x.wing"),
    ("doc freqs", "count(DISTINCT p.rowid)"),
    ("context vectors", "context_vectors"),
    ("snapshot settings", "set_config"),
)
ENTRY = re.compile(r"LOG:  duration: ([0-9.]+) ms  plan:\n(.*?)(?=\n\S|\Z)", re.S)


def kind_of(sql: str) -> str:
    for name, fragment in KINDS:
        if fragment in sql:
            return name
    return " ".join(sql.split())[:60]


def buffers(plan: str) -> int:
    """Shared buffers (hit + read) of the plan's top node."""
    m = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan)
    return sum(int(v) for v in re.findall(r"=(\d+)", m.group(1))) if m else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-url", required=True)
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--palace", default="big-team")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tree", type=Path, default=BENCH.parent,
                    help="the code tree the daemon runs (default: this one)")
    ap.add_argument("--plans", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import psycopg

    url = urlparse(args.pg_url)
    db = url.path.lstrip("/")
    log = Path(parse_qs(url.query)["host"][0]) / "postgres.log"
    settings = {"session_preload_libraries": "auto_explain",
                "auto_explain.log_min_duration": "0", "auto_explain.log_analyze": "on",
                "auto_explain.log_buffers": "on", "auto_explain.log_timing": "on"}
    # EXPLAIN ANALYZE slows statements past the default 5 s timeout: a longer one while
    # this runs, in a config file of the home's own (put back after).
    config = args.home / "config.toml"
    made = not config.exists()
    if made:
        config.write_text("[team]\nstatement_timeout_s = 120\n")
    d = Daemon(args.home, args.model_dir)
    d.env["PYTHONPATH"] = str(args.tree.resolve())
    with psycopg.connect(args.pg_url, autocommit=True) as admin:
        for key, value in settings.items():
            admin.execute(f'ALTER DATABASE "{db}" SET {key} = \'{value}\'')
        try:
            d.start()
            with d.client() as c:
                size = int(c.palace_info(args.palace)["drawers"])
                words = zipf_vocabulary(args.model_dir)
                qs = zipf_texts(args.queries + args.warm, words, seed=size, length=(4, 8))
                for q in qs[:args.warm]:
                    try:  # the first counts the statistics: past the timeout, under EXPLAIN
                        c.recall(args.palace, q)
                    except PalaceError as exc:
                        print(f"warm-up recall: {exc.name}", file=sys.stderr)
                time.sleep(0.5)
                start = log.stat().st_size
                wall = []
                for q in qs[args.warm:]:
                    t = time.perf_counter()
                    c.recall(args.palace, q)
                    wall.append((time.perf_counter() - t) * 1000)
                time.sleep(1.0)  # the last plans reach the log
        finally:
            d.stop()
            for key in settings:
                admin.execute(f'ALTER DATABASE "{db}" RESET {key}')
            if made:
                config.unlink()
    text = log.read_bytes()[start:].decode(errors="replace")
    by: dict[str, list[tuple[float, int, str]]] = {}
    for m in ENTRY.finditer(text):
        plan = m.group(2)
        sql = plan.split("Query Text:", 1)[-1]
        by.setdefault(kind_of(sql), []).append((float(m.group(1)), buffers(plan), plan))
    out: dict[str, Any] = {"drawers": size, "recalls": len(wall),
                           "recall_wall_ms": {"p50": round(statistics.median(wall), 1),
                                              "mean": round(statistics.mean(wall), 1)},
                           "statements": {}}
    total = sum(ms for rows in by.values() for ms, _, _ in rows)
    print(f"{size:,} drawers, {len(wall)} recalls, wall p50 {statistics.median(wall):.1f} ms "
          f"(mean {statistics.mean(wall):.1f}), statements {total / len(wall):.1f} ms per recall")
    print(f"{'statement':40}{'per recall':>11}{'ms p50':>9}{'ms/recall':>11}{'share':>7}"
          f"{'buffers p50':>13}")
    for name, rows in sorted(by.items(), key=lambda kv: -sum(r[0] for r in kv[1])):
        ms = [r[0] for r in rows]
        row = {"count_per_recall": round(len(rows) / len(wall), 2),
               "ms_p50": round(statistics.median(ms), 2),
               "ms_per_recall": round(sum(ms) / len(wall), 2),
               "share": round(sum(ms) / total, 3),
               "buffers_p50": int(statistics.median(r[1] for r in rows))}
        out["statements"][name] = row
        print(f"{name[:40]:40}{row['count_per_recall']:>11}{row['ms_p50']:>9}"
              f"{row['ms_per_recall']:>11}{row['share']:>7.1%}{row['buffers_p50']:>13}")
        if args.plans is not None:
            args.plans.mkdir(parents=True, exist_ok=True)
            slow = sorted(rows, key=lambda r: r[0])[len(rows) // 2]
            safe = re.sub(r"\W+", "_", name)[:40]
            (args.plans / f"{safe}.txt").write_text(f"-- {slow[0]} ms (median)\n{slow[2]}\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
