"""Memoirs in recall: recall latency with ~500 concepts in L2 vs none, on the same palace.

Starts a private palaced (real model from --model-dir, or --keyword-only) under a scratch
PALACE_HOME and fills one palace with N synthetic drawers (``perf.synthetic``). Then, for each
of --rounds rounds, on that same palace:

1. recall --queries distinct queries with no memoir (the baseline): half of them name a
   concept (that does not exist yet), as in step 3;
2. create --memoirs memoirs holding --concepts concepts in all (names of two words, definitions
   of 12-20 words from the drawers' vocabulary, 2 labels each) and about 2 links per concept,
   timing the writes;
3. recall --queries other distinct queries of the same shapes with the memoirs;
4. delete the memoirs (one transaction each), back to the baseline.

Every query is distinct (the query vector cache never hits) and recalls use the defaults
(levels 0, 2, 3; budget 1500), so L2 runs in each. Short phases in many rounds keep the two
phases under the same machine load (a shared 2-core machine drifts by 2x within minutes). It
prints recall p50/p95 in both phases (medians over rounds), how many recalls showed concepts in
L2, the memoir write, search and inspect latencies, and, free of that noise, the added work
itself: ``store.concept_links.concepts_for_recall`` (what a recall's read hop runs for L2)
timed in-process over the same concepts and query shapes.

    python bench/memoir.py [--drawers 10000] [--concepts 500] [--rounds 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from perf import OBJECTS, QUALIFIERS, SUBJECTS, VERBS, pct, queries, synthetic

from palace_client import Client

ADJECTIVES = ["amber", "brisk", "cobalt", "dusty", "eager", "frozen", "gentle", "hollow",
              "ivory", "jolly", "keen", "lunar", "mellow", "nimble", "opal", "polar", "quiet",
              "rapid", "silent", "tidal", "umber", "vivid", "woolly", "young", "zesty"]
NOUNS = ["anchor", "beacon", "cipher", "dynamo", "engine", "falcon", "garden", "harbor",
         "island", "jigsaw", "kernel", "lantern", "meadow", "nexus", "orchard", "prism",
         "quarry", "relay", "signal", "tunnel", "utopia", "vortex", "willow", "yonder", "zephyr"]
RELATIONS = ["part_of", "depends_on", "related_to", "refines", "caused_by", "instance_of"]
WORDS = " ".join([*SUBJECTS, *VERBS, *OBJECTS, *QUALIFIERS]).split()


def concepts(n: int, memoirs: int, seed: int = 5) -> list[dict[str, Any]]:
    """``n`` synthetic concepts spread over ``memoirs`` memoirs (unique two-word names)."""
    rnd = random.Random(seed)
    names = [f"{a} {b}" for a in ADJECTIVES for b in NOUNS]
    rnd.shuffle(names)
    return [{"memoir": f"memoir-{i % memoirs}", "name": names[i],
             "definition": " ".join(rnd.choices(WORDS, k=rnd.randint(12, 20))),
             "labels": [f"domain:{rnd.choice(NOUNS)}", f"team:{rnd.choice(ADJECTIVES)}"]}
            for i in range(n)]


def mixed(cs: list[dict[str, Any]], n: int, seed: int) -> list[str]:
    """``n`` distinct queries of ``perf.queries``' shape, half of them naming a concept
    (``how does the <name> handle <query>``): the same shapes with and without memoirs."""
    qs = queries(n, seed=1000 + seed)
    named = random.Random(seed).sample(cs, n // 2)
    return [f"how does the {x['name']} handle {q}" for x, q in zip(named, qs, strict=False)] + qs[
        n // 2:]


def timed_recalls(c: Client, qs: list[str]) -> tuple[list[float], int]:
    """Recall latencies (ms) of ``qs`` and how many recalls had concepts in L2."""
    lat, with_concepts = [], 0
    for q in qs:
        t = time.perf_counter()
        res = c.recall_ex("bench", q, top_k=10)
        lat.append((time.perf_counter() - t) * 1000)
        items = [i for s in res["sections"] if s["level"] == 2 for i in s["items"]]
        with_concepts += any(i.get("kind") == "concept" for i in items)
    return lat, with_concepts


def build(c: Client, cs: list[dict[str, Any]], memoirs: int, seed: int) -> dict[str, float]:
    """Create the memoirs, concepts and ~2 links per concept; per-write latencies (ms)."""
    rnd = random.Random(seed)
    add, link = [], []
    for m in range(memoirs):
        c.memoir_create("bench", f"memoir-{m}", description=f"synthetic memoir {m}")
    for x in cs:
        t = time.perf_counter()
        c.memoir_add_concept("bench", x["memoir"], x["name"], x["definition"],
                             labels=x["labels"])
        add.append((time.perf_counter() - t) * 1000)
    by_memoir: dict[str, list[str]] = {}
    for x in cs:
        by_memoir.setdefault(x["memoir"], []).append(x["name"])
    for x in cs:
        peers = [n for n in by_memoir[x["memoir"]] if n != x["name"]]
        for other in rnd.sample(peers, k=min(2, len(peers))):
            t = time.perf_counter()
            c.memoir_link("bench", x["memoir"], x["name"], rnd.choice(RELATIONS), other,
                          weight=round(rnd.random(), 2))
            link.append((time.perf_counter() - t) * 1000)
    return {"add_concept_ms_p50": statistics.median(add), "link_ms_p50": statistics.median(link)}


def direct_cost(cs: list[dict[str, Any]], memoirs: int, n: int) -> dict[str, float]:
    """p50 (ms) of the L2 concept lookup alone, on a scratch database holding ``cs``."""
    from palaced.store import Store
    from palaced.store.knowledge import concepts as store_concepts
    from palaced.store.knowledge import memoirs as store_memoirs
    from palaced.store.knowledge.concept_links import concepts_for_recall

    with tempfile.TemporaryDirectory(prefix="palmemoir-direct-") as tmp:
        store = Store(Path(tmp) / "palace.db")

        def fill(c: Any) -> None:
            for m in range(memoirs):
                store_memoirs.create_memoir(c, f"memoir-{m}", now_ms=0)
            for x in cs:
                store_concepts.add_concept(c, x["memoir"], x["name"], x["definition"],
                                           labels=x["labels"], now_ms=0)

        store.write(fill)
        qs = mixed(cs, 2 * n, seed=999)
        out: dict[str, float] = {}
        for label, part in (("named", qs[:n]), ("generic", qs[n:])):
            lat = []
            for q in part:
                t = time.perf_counter()
                store.read(lambda c, q=q: concepts_for_recall(c, q, 3))
                lat.append((time.perf_counter() - t) * 1000)
            out[f"direct_{label}_ms_p50"] = round(statistics.median(lat), 3)
        store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--drawers", type=int, default=10_000)
    ap.add_argument("--concepts", type=int, default=500)
    ap.add_argument("--memoirs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=60, help="recalls per phase and round")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # A SIGTERM still stops the private daemon (the ``finally`` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.concepts > len(ADJECTIVES) * len(NOUNS):
        sys.exit(f"at most {len(ADJECTIVES) * len(NOUNS)} concepts")

    d = PrivateDaemon("palmemoir-", None if args.keyword_only else args.model_dir,
                      DEFAULT_TIKTOKEN)
    out: dict[str, Any] = {"drawers": args.drawers, "concepts": args.concepts,
                           "memoirs": args.memoirs, "queries": args.queries,
                           "rounds": args.rounds, "keyword_only": args.keyword_only}
    try:
        status = d.start()
        out["mode"] = status["model"]["state"]
        with d.client("bench-memoir") as c:
            c.create_palace("bench")
            items = synthetic(args.drawers)
            t0 = time.perf_counter()
            for start in range(0, len(items), 1000):
                c.remember_many("bench", items[start:start + 1000])
            out["ingest_s"] = round(time.perf_counter() - t0, 1)
            cs = concepts(args.concepts, args.memoirs)
            for q in queries(5, seed=99):  # warm-up: lazy imports, page cache
                c.recall("bench", q, top_k=10)
            rounds: list[dict[str, float]] = []
            for r in range(args.rounds):
                base, _ = timed_recalls(c, mixed(cs, args.queries, seed=2 * r))
                writes = build(c, cs, args.memoirs, seed=r)
                with_m, shown = timed_recalls(c, mixed(cs, args.queries, seed=2 * r + 1))
                t = time.perf_counter()
                for x in cs[:50]:
                    c.memoir_search("bench", x["name"].split()[1])
                search_ms = (time.perf_counter() - t) * 1000 / 50
                t = time.perf_counter()
                for x in cs[:50]:
                    c.memoir_inspect("bench", x["memoir"], x["name"], depth=2)
                inspect_ms = (time.perf_counter() - t) * 1000 / 50
                for m in range(args.memoirs):
                    c.memoir_delete("bench", f"memoir-{m}")
                rounds.append({"base_p50": statistics.median(base), "base_p95": pct(base, 95),
                               "memoir_p50": statistics.median(with_m),
                               "memoir_p95": pct(with_m, 95), "shown": shown,
                               "search_ms": search_ms, "inspect_ms": inspect_ms, **writes})
                print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                      rounds[-1].items()), flush=True)
        for key in rounds[0]:
            out[key] = round(statistics.median(x[key] for x in rounds), 2)
        # Paired by round (both phases under the same load): robust to the machine's drift.
        out["p50_added_ms"] = round(statistics.median(
            x["memoir_p50"] - x["base_p50"] for x in rounds), 2)
    finally:
        d.stop()
        d.cleanup(keep=False)
    out.update(direct_cost(cs, args.memoirs, args.queries))
    print(f"{args.drawers} drawers, {args.concepts} concepts in {args.memoirs} memoirs, "
          f"{args.queries} distinct recalls per phase, {args.rounds} rounds ({out.get('mode')})")
    print(f"  recall p50 without memoirs     {out['base_p50']:8.1f} ms  "
          f"(p95 {out['base_p95']:.1f})")
    print(f"  recall p50 with memoirs in L2  {out['memoir_p50']:8.1f} ms  "
          f"(p95 {out['memoir_p95']:.1f})")
    print(f"  added by memoirs, paired/round {out['p50_added_ms']:8.1f} ms  (median of the "
          "rounds' p50 differences)")
    print(f"  recalls showing a concept      {out['shown']:8.0f} of {args.queries} "
          f"(half the queries name one)")
    print(f"  memoir add_concept p50         {out['add_concept_ms_p50']:8.1f} ms")
    print(f"  memoir link p50                {out['link_ms_p50']:8.1f} ms")
    print(f"  memoir search mean             {out['search_ms']:8.1f} ms")
    print(f"  memoir inspect depth 2 mean    {out['inspect_ms']:8.1f} ms")
    print(f"  L2 concept lookup, in-process  {out['direct_generic_ms_p50']:8.2f} ms p50 "
          f"(queries naming a concept {out['direct_named_ms_p50']:.2f} ms)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
