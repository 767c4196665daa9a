"""What the trash, the audit log and the policy cost, in-process (one Palace, the hashing
embedder at 384 dimensions, no daemon): remember with its audit entry, forget into the trash,
restore, the policy check, listing the trash, reading and trimming a large audit log.

    python bench/governance.py [--drawers 2000] [--audit 100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from palaced.config.settings import Retention, load  # noqa: E402
from palaced.engine.embedder import HashEmbedder  # noqa: E402
from palaced.engine.services import ModelState, Services  # noqa: E402
from palaced.engine.tokens import Tokenizer  # noqa: E402
from palaced.memory import (
    audit,  # noqa: E402
    policy,
    trash,
    writes,
)
from palaced.palace.handle import Palace, now_ms  # noqa: E402
from palaced.store.rows import audit as audit_sql  # noqa: E402
from palaced.store.rows import drawers as m  # noqa: E402
from palaced.wire.paths import Paths  # noqa: E402

ME = audit_sql.Actor("bench", "bench")
KEEP = 30 * 86_400_000


async def timed(n: int, fn: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    """p50/p95 in ms of ``n`` calls ``fn(i)``."""
    took = []
    for i in range(n):
        start = time.perf_counter()
        await fn(i)
        took.append((time.perf_counter() - start) * 1000)
    took.sort()
    return {"p50_ms": round(statistics.median(took), 3),
            "p95_ms": round(took[int(len(took) * 0.95) - 1], 3)}


async def run(drawers: int, entries: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pal-bench-") as tmp:
        root = Path(tmp)
        paths = Paths(root, root / "state", root / "config.toml", root / "run", root / "s.sock")
        services = Services(config=load(paths),
                            model=ModelState(state="ready", embedder=HashEmbedder(384)),
                            tokenizer=Tokenizer.fallback("bench"))
        p = await Palace.open("bench", root / "palaces" / "bench", services)
        out: dict[str, Any] = {"drawers": drawers, "audit_entries": entries}
        try:
            ids: list[int] = []

            async def remember(i: int) -> None:
                new = m.NewDrawer(text=f"note {i}: the service number {i} runs on host h{i}",
                                  room=f"r{i % 20}")
                ids.append(int((await writes.remember(p, new, dedup=False, actor=ME))["id"]))

            out["remember"] = await timed(drawers, remember)
            half = ids[: drawers // 2]
            out["forget_to_trash"] = await timed(len(half), lambda i: trash.forget(
                p, half[i], ME, keep_ms=KEEP))
            out["trash_list_50"] = await timed(50, lambda i: trash.list_trash(
                p, keep_ms=KEEP, limit=50, offset=0))
            out["restore"] = await timed(len(half) // 2, lambda i: trash.restore(
                p, half[i], ME, keep_ms=KEEP))
            out["policy_check"] = await timed(1000, lambda i: policy.require(p, ME, "write"))

            def fill(c: Any) -> None:
                ts = now_ms()
                for i in range(entries):
                    audit_sql.append(c, audit_sql.Actor(f"agent-{i % 7}", "memory.remember"),
                                     "created", ts, drawer_ids=[i])

            start = time.perf_counter()
            await p.write(lambda: p.store.write(fill))
            out["audit_append_us"] = round((time.perf_counter() - start) * 1e6 / entries, 2)
            out["audit_page_50"] = await timed(50, lambda i: audit.entries(p, limit=50))
            out["audit_filtered_page"] = await timed(20, lambda i: audit.entries(
                p, agent="agent-3", op="memory.*", since_ms=0, limit=50))
            start = time.perf_counter()
            await audit.retention(p, Retention(audit_max_entries=entries // 2))
            out["audit_trim_half_ms"] = round((time.perf_counter() - start) * 1000, 1)
        finally:
            await p.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=2000)
    ap.add_argument("--audit", type=int, default=100_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = anyio.run(run, args.drawers, args.audit)
    for key, value in result.items():
        print(f"{key:22} {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
