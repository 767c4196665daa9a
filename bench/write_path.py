"""The write path alone: ``writes.remember_many`` in-process with hashed vectors (no model).

A palace in a scratch directory takes 4,000 drawers in batches of 100 (20 rooms, in time
order), and the script prints drawers per second and the share of the time spent keeping
the context vectors (``store.context_vectors.refresh``); then the same drawers remembered
without a model are given their vectors by the background path (``writes.embed_pending``).
Embedding, which dominates a real daemon's ingest, is left out on purpose: this is what the
store itself costs.

    python bench/write_path.py [--drawers N] [--batch N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.access import services
from palaced.engine.embedder import HashEmbedder
from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.store.lookup import context_vectors
from palaced.store.rows import drawers as m


async def run(n: int, batch: int) -> None:
    spent = {"calls": 0, "s": 0.0}
    refresh = context_vectors.refresh

    def timed(*args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        refresh(*args, **kwargs)
        spent["s"] += time.perf_counter() - start
        spent["calls"] += 1

    context_vectors.refresh = timed  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="palace-writes-"))
    p = await Palace.open("w", tmp / "w", services(tmp, HashEmbedder(384)))  # type: ignore[arg-type]
    items = [m.NewDrawer(text=f"turn {i} about topic {i % 37} and things {i * 7 % 101}",
                         room=f"s{i // 200}", occurred_ms=1_700_000_000_000 + i * 1000)
             for i in range(n)]
    svc = services(tmp, None)  # type: ignore[arg-type]
    svc.model.embedder, svc.model.state = None, "unavailable"
    later = await Palace.open("later", tmp / "later", svc)
    try:
        start = time.perf_counter()
        for k in range(0, n, batch):
            await writes.remember_many(p, items[k:k + batch])
        _report(f"{n} drawers in batches of {batch}", n, time.perf_counter() - start, spent)
        for k in range(0, n, batch):
            await writes.remember_many(later, items[k:k + batch])
        spent.update(calls=0, s=0.0)
        svc.model.embedder, svc.model.state = HashEmbedder(384), "ready"
        await later.attach(svc.model.embedder)
        start = time.perf_counter()
        done = await writes.embed_pending(later)
        _report(f"{done} pending drawers embedded", done, time.perf_counter() - start, spent)
    finally:
        await p.aclose()
        await later.aclose()
        context_vectors.refresh = refresh


def _report(what: str, n: int, took: float, spent: dict[str, Any]) -> None:
    print(f"{what}: {took:.2f} s = {n / took:.0f} drawers/s; context vectors refreshed "
          f"{spent['calls']} times, {spent['s']:.2f} s ({100 * spent['s'] / took:.1f} %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--drawers", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    anyio.run(run, args.drawers, args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
