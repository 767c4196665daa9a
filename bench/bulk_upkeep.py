"""What bulk upkeep costs, in-process (one Palace, the hashing embedder at 384 dimensions, so
every drawer has a vector; no daemon): a bulk forget of N drawers by room as a dry run and for
real, restoring its batch, and a merge of duplicate pairs.

    python bench/bulk_upkeep.py [--drawers 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from palaced.config.settings import load  # noqa: E402
from palaced.engine.embedder import HashEmbedder  # noqa: E402
from palaced.engine.services import ModelState, Services  # noqa: E402
from palaced.engine.tokens import Tokenizer  # noqa: E402
from palaced.memory import bulk, writes  # noqa: E402
from palaced.palace.handle import Palace  # noqa: E402
from palaced.store.rows import audit as audit_sql  # noqa: E402
from palaced.store.rows import drawers as m  # noqa: E402
from palaced.wire.paths import Paths  # noqa: E402

ME = audit_sql.Actor("bench", "bench")
KEEP = 30 * 86_400_000
BATCH = 2_000  # drawers per remember_many


async def run(drawers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pal-bench-") as tmp:
        root = Path(tmp)
        paths = Paths(root, root / "state", root / "config.toml", root / "run", root / "s.sock")
        services = Services(config=load(paths),
                            model=ModelState(state="ready", embedder=HashEmbedder(384)),
                            tokenizer=Tokenizer.fallback("bench"))
        p = await Palace.open("bench", root / "palaces" / "bench", services)
        out: dict[str, Any] = {"drawers": drawers}
        try:
            start = time.perf_counter()
            for at in range(0, drawers, BATCH):
                items = [m.NewDrawer(text=f"note {i}: the worker {i} restarts on host h{i % 97}",
                                     room="old" if i % 2 == 0 else "keep")
                         for i in range(at, min(drawers, at + BATCH))]
                # The other room as big again: the selection reads past what it keeps.
                await writes.remember_many(p, items, dedup=False, actor=ME)
            out["remember_s"] = round(time.perf_counter() - start, 2)
            sel = bulk.Selection(room="old")
            big = drawers  # max_drawers: confirm the whole room

            start = time.perf_counter()
            dry = await bulk.forget_many(p, sel, ME, keep_ms=KEEP, max_drawers=big,
                                         dry_run=True)
            out["dry_run_s"] = round(time.perf_counter() - start, 3)
            start = time.perf_counter()
            real = await bulk.forget_many(p, sel, ME, keep_ms=KEEP, max_drawers=big)
            out["forget_s"] = round(time.perf_counter() - start, 3)
            assert dry["matched"] == real["forgotten"] == real["matched"], (dry, real)
            out["forgotten"] = real["forgotten"]
            start = time.perf_counter()
            back = await bulk.restore_batch(p, real["batch"], ME, keep_ms=KEEP)
            out["restore_s"] = round(time.perf_counter() - start, 3)
            out["restored"] = len(back["restored"])
            assert out["restored"] == out["forgotten"] and not back["conflicts"]
            pairs = [(4 * i + 1, 4 * i + 3) for i in range(100)]  # drawers of "keep"
            start = time.perf_counter()
            for a, b in pairs:
                await bulk.merge(p, [a, b], ME, keep_ms=KEEP)
            out["merge_pair_ms"] = round((time.perf_counter() - start) * 1000 / len(pairs), 2)
        finally:
            await p.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=20_000,
                    help="drawers stored, half of them in the room forgotten")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = anyio.run(run, args.drawers)
    for key, value in result.items():
        print(f"{key:16} {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
