"""Exact against graph search in the vector index (``palaced.index.vectors``), by index size.

For each size N: N unit vectors in 64 clusters (384 dims, notes that read alike), added to a
``VectorIndex`` of palace's parameters (half floats, connectivity 16, expansion 128 / 64).
Reported per N: the time of one usearch search (k = 200, the over-fetch of a recall's pool of
100) walking the graph and scanning exactly, p50 over 300 queries each, and how many of the
vectors the graph walk misses when searched for with themselves (of at most 2,000 sampled).
``EXACT_SEARCH_MAX`` is where exact stops being nearly free.

    python bench/exact_search.py [--sizes 1000 10000 20000 50000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from palaced.index.vectors import EXACT_SEARCH_MAX, new_usearch

DIMS, K, QUERIES, SAMPLE = 384, 200, 300, 2_000


def measure(n: int, rng: np.random.Generator) -> dict[str, Any]:
    """Timings and self-misses of one index of ``n`` clustered vectors."""
    centres = rng.standard_normal((64, DIMS)).astype(np.float32)
    vecs = centres[rng.integers(0, 64, n)] + 0.3 * rng.standard_normal((n, DIMS)).astype(
        np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = new_usearch(DIMS)
    index.add(np.arange(n, dtype=np.uint64), vecs)
    queries = vecs[rng.integers(0, n, QUERIES)]
    out: dict[str, Any] = {"vectors": n}
    for label, exact in (("graph_ms", False), ("exact_ms", True)):
        times = []
        for q in queries:
            start = time.perf_counter()
            index.search(q, K, exact=exact)
            times.append((time.perf_counter() - start) * 1000)
        out[label] = round(statistics.median(times), 3)
    sample = range(0, n, max(1, n // SAMPLE))
    out["graph_self_misses"] = sum(
        1 for i in sample if i not in set(index.search(vecs[i], K).keys.tolist()))
    out["sampled"] = len(sample)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 20_000, 50_000])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    rows = [measure(n, rng) for n in args.sizes]
    print(f"EXACT_SEARCH_MAX = {EXACT_SEARCH_MAX:,}")
    for r in rows:
        print(f"{r['vectors']:>7,} vectors: graph {r['graph_ms']:.3f} ms, exact "
              f"{r['exact_ms']:.3f} ms p50; the graph misses {r['graph_self_misses']} of "
              f"{r['sampled']} vectors searched for with themselves")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
