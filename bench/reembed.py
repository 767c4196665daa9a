"""The background re-embedding after a model change: how long it takes, what it costs others.

A palace of ``--drawers`` drawers is made under one model (the shared MiniLM files configured
as ``thenlper/gte-large``, another identity), then the daemon restarts with the default model
and re-embeds it in the background. Meanwhile a second palace, already on the new model, is
recalled (hybrid) and written to without pause; the same recalls and writes are timed again
once the pass is over. Prints the pass's duration and rate, and the latencies during and
after it.

    python bench/reembed.py [--drawers 2000] [--model DIR] [--no-traffic]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon, stop_daemon

WORDS = ("deploy staging database payment gateway invoice alice bob kafka queue retry "
         "timeout cache index budget meeting friday release branch review incident").split()


def text(i: int) -> str:
    pick = [WORDS[(i * k + k) % len(WORDS)] for k in (3, 5, 7, 11, 13, 17)]
    return f"note {i}: the {pick[0]} of the {pick[1]} needs a {pick[2]} before {pick[3]}, " \
           f"says {pick[4]} about {pick[5]}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def timed(values: list[float], fn: Any) -> None:
    started = time.perf_counter()
    fn()
    values.append((time.perf_counter() - started) * 1000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drawers", type=int, default=2000)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--no-traffic", action="store_true",
                    help="only time the pass: no recalls or writes beside it")
    args = ap.parse_args()
    d = PrivateDaemon("pal-reembed-", args.model, DEFAULT_TIKTOKEN)
    try:
        d.env["PALACE_EMBED_MODEL"] = "thenlper/gte-large"
        d.start()
        with d.client("bench") as c:
            c.create_palace("moving")
            for start in range(0, args.drawers, 500):
                c.remember_many("moving", [{"text": text(i)} for i in
                                           range(start, min(start + 500, args.drawers))])
        assert d.proc is not None
        stop_daemon(d.proc, d.sock)

        del d.env["PALACE_EMBED_MODEL"]
        started = time.monotonic()
        d.start()
        during: dict[str, list[float]] = {"recall": [], "remember": []}
        after: dict[str, list[float]] = {"recall": [], "remember": []}
        with d.client("bench") as c:
            c.create_palace("live")
            c.remember_many("live", [{"text": text(10_000 + i)} for i in range(200)])
            i = 0
            while True:
                moving = next(p for p in c.status()["palaces"] if p["name"] == "moving")
                if moving["reembedding"] is None:
                    break
                if args.no_traffic:
                    time.sleep(0.2)
                    continue
                timed(during["recall"], lambda: c.recall("live", text(i % 200)))
                if i % 5 == 0:
                    timed(during["remember"], lambda: c.remember("live", f"{text(i)} #{i}"))
                i += 1
            seconds = time.monotonic() - started
            for j in range(max(len(during["recall"]), 50)):
                timed(after["recall"], lambda: c.recall("live", text(j % 200)))
                if j % 5 == 0:
                    timed(after["remember"], lambda: c.remember("live", f"{text(j)} after {j}"))
            info = c.palace_info("moving")
        assert info["consistent"] and info["embedder"].endswith("all-MiniLM-L6-v2:384")
        print(f"re-embedded {args.drawers} drawers in the background in {seconds:.1f} s "
              f"(from the daemon's start, model load included): "
              f"{args.drawers / seconds:.0f} drawers/s")
        for kind in () if args.no_traffic else ("recall", "remember"):
            a, b = during[kind], after[kind]
            print(f"{kind:8s} on another palace: during the pass p50 {statistics.median(a):.1f} "
                  f"ms p95 {pct(a, .95):.1f} ms (n={len(a)}); after it p50 "
                  f"{statistics.median(b):.1f} ms p95 {pct(b, .95):.1f} ms (n={len(b)})")
        return 0
    finally:
        if d.proc is not None:
            stop_daemon(d.proc, d.sock)
        shutil.rmtree(d.home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
