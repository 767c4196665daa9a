"""Regression guard: recall and ingest as ratios to yardsticks measured in the same run.

Absolute milliseconds on a shared two-core machine swing by 2x with the load; a ratio to
work that does not depend on palace's code, measured right beside it on the same machine,
swings far less. The guard alternates the two finely, so that load drifts hit both sides
alike: ingest in chunks of ``CHUNK`` drawers (the raw embedder on a chunk's texts, then
palace on the same chunk), recall query by query (the yardsticks on a query, then palace's
recall of it). On the same texts:

* yardstick ``embed``: the raw embedder (fastembed + onnxruntime, loaded here, in this
  process, its ONNX session without thread spinning; texts sorted by length, batches of
  16) embedding the drawers' texts: texts/s;
  and embedding each query alone: ms;
* yardstick ``fts``: a raw SQLite FTS5 table (apsw, in memory) holding the same texts,
  answering each query's words OR-ed, best 100 by bm25: ms;
* palace: a private palaced (real model) under a scratch ``PALACE_HOME``; per round a fresh
  palace filled with ``remember_many`` (drawers/s) and then recalled with every query
  (``top_k=10``, each query distinct, ms).

Ratios (per chunk or query, their median in a round, the median over the rounds):

* ``ingest``: raw embedder seconds / palace ``remember_many`` seconds on the same chunk, i.e.
  palace drawers/s over raw embedder texts/s (higher is better; below 1 is what storage,
  FTS, context, closets and the HNSW index cost beyond the embedding);
* ``recall``: palace recall time / (raw query embedding + raw FTS5 query) on the same query
  (lower is better; above 1 is ranking, vector search, fusion, the socket and
  serialisation).

``bench/guard-baseline.json`` holds the committed ratios and a tolerance; a ratio worse than
its baseline by more than the tolerance is a regression: the verdict line says
``VERDICT: REGRESSION`` and the exit status is 1 (``VERDICT: PASS``, 0 otherwise). After a
deliberate change (or on a different kind of machine), ``--write-baseline`` rewrites the
file from this run. ``--quick`` is the reduced run the test suite uses (fewer drawers and
queries, one round): its verdict is only indicative.

    python bench/guard.py [--rounds 3] [--drawers 200] [--queries 50] [--quick]
                          [--baseline bench/guard-baseline.json] [--write-baseline]
                          [--model DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from perf import queries, synthetic

BASELINE = Path(__file__).resolve().parent / "guard-baseline.json"
DEFAULT_TOLERANCE = 0.35
# name -> (direction, what it is); "higher": a drop is a regression, "lower": a rise is.
RATIOS = {
    "ingest": ("higher", "palace remember_many drawers/s / raw embedder texts/s"),
    "recall": ("lower", "palace recall / (raw query embedding + raw FTS5 query)"),
}
CHUNK = 40  # drawers per alternation of raw embedder and palace ingest
_WORD = re.compile(r"\w+")


class Yardsticks:
    """The raw embedder and a raw FTS5 table over the same texts, in this process."""

    def __init__(self, model_dir: Path, texts: list[str]) -> None:
        import apsw
        from fastembed import TextEmbedding

        self.model = TextEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2",
                                   specific_model_path=str(model_dir), local_files_only=True)
        self._no_spinning()
        list(self.model.embed(["warm up"]))
        self.texts = texts
        self.db = apsw.Connection(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
        with self.db:
            self.db.executemany("INSERT INTO t(text) VALUES (?)", [(t,) for t in texts])

    def _no_spinning(self) -> None:
        """The ONNX session rebuilt with thread spinning off, as the daemon runs it: with
        spinning, two busy-waiting threads on a loaded two-core machine make the yardstick
        swing by several times (measured 20 texts/s and 90 ms a query at load 18)."""
        import onnxruntime as ort

        wrapper = self.model.model
        old = wrapper.model
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        wrapper.model = ort.InferenceSession(old._model_path, sess_options=so,
                                             providers=old.get_providers())

    def embed_seconds(self, texts: list[str]) -> float:
        """Seconds to embed ``texts``, sorted by length, 16 at a time."""
        ordered = sorted(texts, key=len)
        t0 = time.perf_counter()
        for s in range(0, len(ordered), 16):
            list(self.model.embed(ordered[s:s + 16], batch_size=16))
        return time.perf_counter() - t0

    def query_seconds(self, q: str) -> tuple[float, float]:
        """Seconds to embed ``q`` alone, and to answer its words OR-ed from FTS5."""
        t0 = time.perf_counter()
        next(iter(self.model.query_embed([q])))
        t1 = time.perf_counter()
        match = " OR ".join(f'"{w}"' for w in _WORD.findall(q.lower()))
        self.db.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ? ORDER BY bm25(t) "
                        "LIMIT 100", (match,)).fetchall()
        return t1 - t0, time.perf_counter() - t1


def run(args: argparse.Namespace) -> dict[str, Any]:
    items = synthetic(args.drawers)
    texts = [str(i["text"]) for i in items]
    qtexts = queries(args.queries * args.rounds, seed=23)
    yard = Yardsticks(args.model, texts)
    daemon = PrivateDaemon("palguard-", args.model, args.tiktoken)
    rounds: list[dict[str, float]] = []
    try:
        status = daemon.start(timeout_s=180)
        if status["model"]["state"] != "ready":
            raise RuntimeError(f"model not ready in the daemon: {status['model']}")
        with daemon.client("guard") as c:
            c.create_palace("guard-warm")
            c.remember_many("guard-warm", items[:32])
            for q in queries(5, seed=99):
                c.recall("guard-warm", q, top_k=10)
            for r in range(args.rounds):
                qs = qtexts[r * args.queries:(r + 1) * args.queries]
                name = f"guard-{r}"
                c.create_palace(name)
                raw_s = pal_s = 0.0
                chunk_ratios = []
                for s in range(0, len(items), CHUNK):
                    part = items[s:s + CHUNK]
                    t_raw = yard.embed_seconds([str(i["text"]) for i in part])
                    t0 = time.perf_counter()
                    c.remember_many(name, part)
                    t_pal = time.perf_counter() - t0
                    raw_s, pal_s = raw_s + t_raw, pal_s + t_pal
                    chunk_ratios.append(t_raw / t_pal)
                q_ratios, emb, fts, rec_ms = [], [], [], []
                for q in qs:
                    t_emb, t_fts = yard.query_seconds(q)
                    t0 = time.perf_counter()
                    c.recall(name, q, top_k=10)
                    t_rec = time.perf_counter() - t0
                    emb.append(t_emb * 1000)
                    fts.append(t_fts * 1000)
                    rec_ms.append(t_rec * 1000)
                    q_ratios.append(t_rec / (t_emb + t_fts))
                rounds.append({
                    "embed_texts_per_s": len(items) / raw_s,
                    "palace_drawers_per_s": len(items) / pal_s,
                    "query_embed_ms": statistics.median(emb),
                    "fts_ms": statistics.median(fts),
                    "palace_recall_p50_ms": statistics.median(rec_ms),
                    "ingest": statistics.median(chunk_ratios),
                    "recall": statistics.median(q_ratios)})
                c.delete_palace(name)
    finally:
        daemon.stop()
        daemon.cleanup(keep=False)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    return {"rounds": rounds, "median": med, "loadavg_1m": round(os.getloadavg()[0], 1),
            "drawers": args.drawers, "queries": args.queries, "quick": args.quick}


def verdict(result: dict[str, Any], baseline: dict[str, Any] | None
            ) -> tuple[bool, list[str]]:
    """Whether every ratio is within tolerance of its baseline; lines for the table."""
    ok = True
    lines = []
    tol = float(baseline.get("tolerance", DEFAULT_TOLERANCE)) if baseline else DEFAULT_TOLERANCE
    for name, (direction, what) in RATIOS.items():
        now = result["median"][name]
        base = baseline["ratios"].get(name) if baseline else None
        if base is None:
            lines.append(f"{name:<8}{now:>9.3f}{'-':>10}{'-':>14}  no baseline  ({what})")
            continue
        limit = base * (1 - tol) if direction == "higher" else base * (1 + tol)
        bad = now < limit if direction == "higher" else now > limit
        ok = ok and not bad
        rel = "≥" if direction == "higher" else "≤"
        lines.append(f"{name:<8}{now:>9.3f}{base:>10.3f}{rel + f'{limit:.3f}':>14}  "
                     f"{'REGRESSED' if bad else 'ok':<10}({what})")
    return ok, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--drawers", type=int, default=200)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--quick", action="store_true",
                    help="reduced run for the tests: 1 round, 64 drawers, 15 queries")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--baseline", type=Path, default=BASELINE)
    ap.add_argument("--tolerance", type=float, default=None,
                    help=f"with --write-baseline (default: kept, else {DEFAULT_TOLERANCE})")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.drawers, args.queries = 1, 64, 15
    t0 = time.monotonic()
    result = run(args)
    baseline = (json.loads(args.baseline.read_text("utf-8"))
                if args.baseline.exists() else None)
    print(f"guard: {args.rounds} round(s), {args.drawers} drawers, {args.queries} queries, "
          f"load average {result['loadavg_1m']}, {time.monotonic() - t0:.0f} s")
    print(f"{'round':<7}{'embed/s':>9}{'palace/s':>10}{'q-embed':>9}{'fts5':>8}"
          f"{'recall':>9}{'ingest':>9}{'recall':>9}")
    print(f"{'':<7}{'texts':>9}{'drawers':>10}{'ms':>9}{'ms':>8}{'p50 ms':>9}"
          f"{'ratio':>9}{'ratio':>9}")
    for i, r in enumerate([*result["rounds"], result["median"]]):
        label = "median" if i == len(result["rounds"]) else str(i + 1)
        print(f"{label:<7}{r['embed_texts_per_s']:>9.1f}{r['palace_drawers_per_s']:>10.1f}"
              f"{r['query_embed_ms']:>9.2f}{r['fts_ms']:>8.3f}{r['palace_recall_p50_ms']:>9.2f}"
              f"{r['ingest']:>9.3f}{r['recall']:>9.3f}")
    ok, lines = verdict(result, baseline)
    tol = baseline.get("tolerance", DEFAULT_TOLERANCE) if baseline else DEFAULT_TOLERANCE
    print(f"\n{'ratio':<8}{'now':>9}{'baseline':>10}{'limit':>14}  (tolerance {tol:.0%})")
    for ln in lines:
        print(ln)
    if args.write_baseline:
        tolerance = args.tolerance if args.tolerance is not None else tol
        args.baseline.write_text(json.dumps({
            "ratios": {k: round(result["median"][k], 4) for k in RATIOS},
            "tolerance": tolerance,
            "measured": {"date": datetime.now(UTC).strftime("%Y-%m-%d"),
                         "loadavg_1m": result["loadavg_1m"], "rounds": args.rounds,
                         "drawers": args.drawers, "queries": args.queries,
                         "median": {k: round(v, 3) for k, v in result["median"].items()}},
        }, indent=2) + "\n")
        print(f"baseline written to {args.baseline}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    note = " (quick mode: indicative only)" if args.quick else ""
    print(f"VERDICT: {'PASS' if ok else 'REGRESSION'}{note}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
