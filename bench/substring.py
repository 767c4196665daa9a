"""What the substring fallback costs: disk, ingest and the time of a keyword miss (in-process).

Two keyword-only palaces of the same N drawers (Zipfian English texts, ``bench/perf.py``'s
generator, plus one "Postgres" drawer in a hundred), filled with ``writes.remember_many``:
one as palace builds it (the trigram index ``drawers_trigram`` kept by triggers), one with
the trigram triggers and table dropped before ingest. Reported per N:

* the database size after a checkpoint and VACUUM, with and without the trigram index;
* ingest drawers/s of both, the same batches sent to both in turn (the order alternating),
  so that the load of a shared machine falls on both alike, and the ratio of their times;
* the keyword half of recall (``search.lexical_search``) p50/p95 over 200 runs for:
  a word hit (BM25 answers; the fallback never runs), a miss of both searches
  ("zqxjv": BM25 then the trigram lookup), a substring hit that no word matches
  ("ostgre", ~1 % of the drawers) and a common substring ("ing", most drawers: the scan
  bound ``SUBSTRING_SCAN`` applies), each with the fallback on and off.

    python bench/substring.py [--drawers 10000 100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.perf import DEFAULT_MODEL, zipf_texts, zipf_vocabulary  # noqa: E402
from palaced.config import settings as config_mod  # noqa: E402
from palaced.engine.services import ModelState, Services  # noqa: E402
from palaced.engine.tokens import Tokenizer  # noqa: E402
from palaced.memory import writes
from palaced.ops.fields import drawers_from_items  # noqa: E402
from palaced.palace.handle import Palace  # noqa: E402
from palaced.retrieval import search  # noqa: E402
from palaced.store.rows.drawers import Filters  # noqa: E402
from palaced.wire.paths import Paths  # noqa: E402

QUERIES = {"word hit": "postgres", "miss": "zqxjv", "substring hit": "ostgre",
           "common substring": "ing"}
RUNS = 200
BATCH = 2_000


def texts(n: int) -> list[str]:
    words = zipf_vocabulary(DEFAULT_MODEL)
    rnd = random.Random(5)
    out = zipf_texts(n, words)
    return [t + " on Postgres 16" if rnd.random() < 0.01 else t for t in out]


async def open_pair(home: Path, svc: Services, n: int) -> tuple[Palace, Palace]:
    """The palace as built (trigram index) and one without its trigram triggers and table."""
    with_tri = await Palace.open(f"p{n}-1", home / f"p{n}-1", svc)
    without = await Palace.open(f"p{n}-0", home / f"p{n}-0", svc)

    def drop(c: Any) -> None:
        for t in ("insert", "delete", "update"):
            c.execute(f"DROP TRIGGER drawers_trigram_{t}")
        c.execute("DROP TABLE drawers_trigram")

    without.store.write(drop)
    return with_tri, without


async def fill(pair: tuple[Palace, Palace], items: list[str]) -> tuple[float, float]:
    """The same batches into both palaces, interleaved (the order alternating per batch) so
    that a shared machine's load falls on both alike; seconds spent on each."""
    now = int(time.time() * 1000)
    spent = [0.0, 0.0]
    for n, i in enumerate(range(0, len(items), BATCH)):
        batch = drawers_from_items(200_000, 100_000,
                                   [{"text": t} for t in items[i:i + BATCH]], now)
        for k in ((0, 1) if n % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            await writes.remember_many(pair[k], batch)
            spent[k] += time.perf_counter() - start
    return spent[0], spent[1]


def size_mb(p: Palace) -> float:
    p.store.write(lambda c: None)
    p.store.checkpoint()
    p.store._writer.execute("VACUUM")  # a bench measuring the file
    p.store.checkpoint()
    return round(p.store.path.stat().st_size / 1e6, 2)


def timings(p: Palace, fallback: bool) -> dict[str, dict[str, float]]:
    params = replace(search.RankParams(), substring_fallback=fallback)
    out: dict[str, dict[str, float]] = {}
    for label, query in QUERIES.items():
        runs, hits = [], 0
        for _ in range(RUNS):
            start = time.perf_counter()
            got = p.store.read(lambda c, q=query: search.lexical_search(
                c, q, Filters(), int(time.time() * 1000), params))
            runs.append((time.perf_counter() - start) * 1000)
            hits = len(got.hits)
        runs.sort()
        out[label] = {"p50_ms": round(statistics.median(runs), 3),
                      "p95_ms": round(runs[int(len(runs) * 0.95) - 1], 3), "hits": hits}
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="palace-substring-"))
    paths = Paths(home, home / "state", home / "none.toml", home / "run", home / "run" / "s")
    svc = Services(config=config_mod.load(paths), model=ModelState(state="unavailable"),
                   tokenizer=Tokenizer.fallback("bench"))
    report: dict[str, Any] = {}
    for n in args.drawers:
        items = texts(n)
        pair = await open_pair(home, svc, n)
        with_s, without_s = await fill(pair, items)
        row: dict[str, Any] = {
            "with_trigram": {"ingest_per_s": round(n / with_s, 1), "db_mb": size_mb(pair[0])},
            "without": {"ingest_per_s": round(n / without_s, 1), "db_mb": size_mb(pair[1])},
            "ingest_time_ratio": round(with_s / without_s, 3),
            "fallback_on": timings(pair[0], True),
            "fallback_off": timings(pair[0], False),
        }
        for p in pair:
            await p.aclose()
        report[str(n)] = row
        print(json.dumps({n: row}, indent=1), flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--drawers", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = anyio.run(main_async, args)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
