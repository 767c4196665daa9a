"""Online backup cost: how long `palace backup` takes on a large palace, and what it does to
the latency of `remember` calls made while it runs.

Starts a private palaced (real model from --model, or --keyword-only) under a scratch
PALACE_HOME. The palace of --drawers drawers is written offline, straight into its database
through palaced's store (random unit vectors stamped with the daemon's model identity, so
the daemon serves them as its own; embedding 50k drawers through the model would take
minutes and measure nothing of interest here), then opened by the daemon (which rebuilds its
vector index). Then:

* baseline: --remembers sequential `remember` calls, each a new short drawer;
* during backups: the same calls from one client while another client runs `palace backup`
  of that palace back to back (--backups of them, keep 1), only calls that started and
  ended while a backup was in flight counted.

Then `palace doctor` of that (open) palace, plain and --full, the same way. Prints backup
seconds and size, doctor seconds, and remember p50/p95/max with and without a backup or a
doctor running (and how many remembers completed per backup).

    python bench/backup.py [--drawers 50000] [--remembers 300] [--backups 5] [--keyword-only]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon

from palaced.index.vectors import to_blob
from palaced.store import Store
from palaced.store.conn.meta import claim_embedder
from palaced.store.lookup.vectors import store_vectors
from palaced.store.rows.drawers import NewDrawer, insert_drawer
from palaced.text.topics import extract_topics

WORDS = ("deploy pipeline billing staging database auth middleware search index cache "
         "gateway warehouse postgres redis kubernetes region rust go webhook queue terraform "
         "rotation oauth latency outage compliance review quarter production nightly backup "
         "alice bob carol dave erin frank grace heidi").split()


def _text(rnd: random.Random, i: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(10, 24))) + f" (note {i})"


def build(db: Path, drawers: int, identity: str | None, dims: int, seed: int = 7) -> float:
    """Write ``drawers`` drawers (with one random unit vector each when ``identity``)."""
    rnd = random.Random(seed)
    gen = np.random.default_rng(seed)
    started = time.perf_counter()
    store = Store(db, palace="big")
    try:
        if identity is not None:
            store.write(lambda c: claim_embedder(c, identity, dims))
        now = int(time.time() * 1000) - drawers * 1000
        for start in range(0, drawers, 1000):
            def tx(c: Any, start: int = start) -> None:
                for i in range(start, min(start + 1000, drawers)):
                    text = _text(rnd, i)
                    new = NewDrawer(text=text, wing=f"wing-{i % 4}", room=f"room-{i % 40}",
                                    topics=tuple(extract_topics(text)))
                    did, _ = insert_drawer(c, new, now + i * 1000)
                    if identity is not None:
                        vec = gen.standard_normal(dims).astype(np.float32)
                        store_vectors(c, did, [to_blob(vec / np.linalg.norm(vec))])
            store.write(tx)
        store.checkpoint()
    finally:
        store.close()
    return time.perf_counter() - started


def _pcts(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    return {"n": len(xs), "p50_ms": round(statistics.median(xs) * 1000, 2),
            "p95_ms": round(xs[int(0.95 * (len(xs) - 1))] * 1000, 2),
            "max_ms": round(xs[-1] * 1000, 2)}


def _while_running(d: PrivateDaemon, work: Any, tag: str
                   ) -> tuple[Any, float, list[float]]:
    """Run ``work(client)`` in a thread while this one remembers; ``(its result, its wall
    seconds, latencies of the remembers made entirely while it ran)``."""
    state: dict[str, Any] = {}

    def run() -> None:
        with d.client("bench-work") as wc:
            state["t0"] = time.perf_counter()
            state["res"] = work(wc)
            state["t1"] = time.perf_counter()

    thread = threading.Thread(target=run)
    lat: list[float] = []
    with d.client("bench") as c:
        thread.start()
        i = 0
        while thread.is_alive():
            t = time.perf_counter()
            c.remember("big", f"during {tag} note {i}")
            e = time.perf_counter()
            i += 1
            if "t0" in state and t >= state["t0"] and thread.is_alive():
                lat.append(e - t)
    thread.join()
    return state["res"], state["t1"] - state["t0"], lat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=50_000)
    ap.add_argument("--remembers", type=int, default=300)
    ap.add_argument("--backups", type=int, default=5)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = None if args.keyword_only else args.model
    d = PrivateDaemon("pal-bk-", model, DEFAULT_TIKTOKEN)
    out: dict[str, Any] = {"drawers": args.drawers, "keyword_only": model is None}
    try:
        status = d.start()
        with d.client("bench") as c:
            c.create_palace("big")
        identity = status["model"].get("identity")
        d.stop()
        palace_dir = d.home / "palaces" / "big"
        (palace_dir / "index.usearch").unlink(missing_ok=True)
        out["build_s"] = round(build(palace_dir / "palace.db", args.drawers, identity,
                                     int(status["model"].get("dims") or 384)), 1)
        out["db_mib"] = round((palace_dir / "palace.db").stat().st_size / 2**20, 1)
        d.start()
        with d.client("bench") as c:
            t0 = time.perf_counter()
            # Opens it: the vector index is rebuilt from the database (minutes on a busy box).
            info = c.call("palace.info", "big", timeout_ms=3_600_000)
            out["open_s"] = round(time.perf_counter() - t0, 1)
            assert info["drawers"] == args.drawers, info
            for i in range(20):
                c.remember("big", f"warm-up note {i}")
            base = []
            for i in range(args.remembers):
                t = time.perf_counter()
                c.remember("big", f"baseline note {i} about the {WORDS[i % len(WORDS)]}")
                base.append(time.perf_counter() - t)
        out["remember_baseline"] = _pcts(base)
        scratch = d.home / "bk"
        runs: list[dict[str, Any]] = []
        during: list[float] = []
        for b in range(args.backups):
            res, wall, lat = _while_running(
                d, lambda bc: bc.backup("big", to=scratch, keep=1)["backups"][0], f"b{b}")
            during += lat
            runs.append({"wall_s": round(wall, 2), "daemon_s": res["seconds"],
                         "mib": round(res["bytes"] / 2**20, 1), "remembers_during": len(lat)})
        out["backups"] = runs
        out["remember_during_backup"] = _pcts(during)
        for full in (False, True):
            key = "doctor_full" if full else "doctor"
            rep, wall, lat = _while_running(d, lambda bc, full=full: bc.doctor("big", full=full),
                                            key)
            assert rep["healthy"], [c for c in rep["checks"] if c["status"] != "ok"]
            out[key] = {"wall_s": round(wall, 2), "remember": _pcts(lat)}
    finally:
        d.stop()
        shutil.rmtree(d.home, ignore_errors=True)
    print(f"palace: {args.drawers} drawers, db {out.get('db_mib')} MiB "
          f"({'keyword-only' if model is None else 'with vectors'}); built offline in "
          f"{out.get('build_s')} s, opened (index rebuilt) in {out.get('open_s')} s")
    for r in out.get("backups", []):
        print(f"backup: {r['daemon_s']:.2f} s in the daemon ({r['wall_s']:.2f} s wall), "
              f"{r['mib']} MiB, {r['remembers_during']} remembers completed meanwhile")
    for key in ("doctor", "doctor_full"):
        if key in out:
            print(f"{key}: {out[key]['wall_s']:.2f} s wall")
    rows = [(k, out.get(k, {})) for k in ("remember_baseline", "remember_during_backup")]
    rows += [(f"remember_during_{k}", out[k]["remember"]) for k in ("doctor", "doctor_full")
             if k in out]
    for key, p in rows:
        print(f"{key:<28} n={p.get('n')} p50={p.get('p50_ms')} ms p95={p.get('p95_ms')} ms "
              f"max={p.get('max_ms')} ms")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
