"""Keyword search at scale: the exact BM25 query against the daemon's two-part search
(``palaced.store.lookup.search.fts_search``: common terms scored only beside selective ones, the
rarest leading a query of common terms alone) and the keyword engine (``palaced.palace.keywords``:
numpy postings with FTS5's impacts, MaxScore top-k), in-process on a palace database, no
daemon. The engine is built first (build time, file size, cold load and RSS are printed);
with ``--overlay N``, N Zipfian drawers are then written (the database is changed: use a
copy) and the engine searched again through its overlay.

Two checks, each printing one line per search:

* **Zipf queries** (``--db``): 120 queries of 4-8 Zipfian words (``perf.py``) against a
  palace database such as the one ``bench/scale.py --home DIR`` builds
  (``DIR/palaces/scale/palace.db``): latency p50/p95, and how much of the exact search's
  top 10 and top 100 the two-part search keeps.
* **LoCoMo needles** (``--needles N``): the 2,760 LoCoMo dev turns spread evenly among Zipfian
  filler drawers up to N drawers in all (built once into ``--needles-db``), then the 999
  questions: BM25 turn recall@1/5/10 of each search (a filler or another conversation's turn
  taking a place counts as a miss) and latency.

Both searches drop the terms found in more than half of the drawers first, as the daemon does.

    python bench/bm25_scale.py --db /tmp/scale/palaces/scale/palace.db
    python bench/bm25_scale.py --needles 100000 --needles-db /tmp/needles100k.db
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo
from _daemon import DEFAULT_MODEL
from perf import pct, zipf_texts, zipf_vocabulary

from palaced.index import keyword_engine as ke
from palaced.index import keyword_file as kf
from palaced.retrieval.search import engine_search
from palaced.store import Store
from palaced.store.lookup import search
from palaced.store.rows import drawers as m
from palaced.text.timeparse import parse_when

FAR_FUTURE_MS = 10**13  # "now" for the filters: nothing has expired


def exact(st: Store, stats: search.TermStats, query: str, n_docs: int, limit: int,
          filters: m.Filters | None = None) -> list[tuple[int, float]]:
    """The whole query's BM25 over every posting (what fts_search did before the split)."""
    def run(c: Any) -> list[tuple[int, float]]:
        terms = stats.informative(c, search.fts_terms(query), n_docs)
        return search._bm25(c, search.fts_match(terms), filters or m.Filters(), limit,
                            FAR_FUTURE_MS)

    return st.read(run)


def two_part(st: Store, stats: search.TermStats, query: str, n_docs: int, limit: int
             ) -> list[tuple[int, float]]:
    return st.read(lambda c: search.fts_search(c, query, m.Filters(), limit, FAR_FUTURE_MS,
                                               stats, n_docs))


def engine(st: Store, eng: ke.KeywordEngine, query: str, limit: int
           ) -> list[tuple[int, float]]:
    """The keyword engine's top ``limit`` (what recall's keyword half runs in a large palace)."""
    def run(c: Any) -> list[tuple[int, float]]:
        return engine_search(c, eng, query, m.Filters(), limit, FAR_FUTURE_MS) or []

    return st.read(run)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_engine(st: Store, db: Path) -> tuple[ke.KeywordEngine, dict[str, Any]]:
    """Build the engine, save it beside the database, load it back (cold: page cache
    dropped is not possible here, so "load" is the mmap and header parse)."""
    before = rss_mb()
    t = time.perf_counter()
    base = st.read(kf.build)
    build_s = time.perf_counter() - t
    path = db.with_name(db.name + ".keywords")
    size = kf.save(base, path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del base
    t = time.perf_counter()
    eng = ke.KeywordEngine(kf.load(path))
    load_ms = (time.perf_counter() - t) * 1000
    out = {"build_s": build_s, "file_bytes": size, "bytes_per_drawer": size / max(
        1, eng.base.n_rows), "load_ms": load_ms, "rss_before_mb": before,
        "peak_rss_mb": peak, "terms": len(eng.base.keys), "postings": len(eng.base.docs)}
    print(f"engine: built in {build_s:.1f} s ({eng.base.n_rows:,} rows, {out['terms']:,} "
          f"terms, {out['postings']:,} postings), file {size / 1e6:.1f} MB "
          f"({out['bytes_per_drawer']:.0f} B/drawer), load {load_ms:.1f} ms, peak RSS "
          f"{peak:.0f} MB")
    return eng, out


def timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


def cpu_ms(fn: Any) -> tuple[Any, float]:
    """``fn()`` and the CPU milliseconds of this thread it took (steadier than wall time on
    a shared machine)."""
    t = time.thread_time()
    out = fn()
    return out, (time.thread_time() - t) * 1000


def zipf_check(db: Path, model: Path, overlay: int = 0) -> dict[str, Any]:
    st = Store(db)
    n_docs = st.read(search.drawer_count)
    stats = search.TermStats()
    eng, built = open_engine(st, db)
    vocab = zipf_vocabulary(model)
    queries = zipf_texts(140, vocab, seed=11, length=(4, 8))
    for q in queries[:20]:  # warm the page cache and the term statistics
        exact(st, stats, q, n_docs, 200)
        engine(st, eng, q, 200)
    out: dict[str, Any] = {"drawers": n_docs, "engine_build": built}
    out["base"] = _zipf_round(st, stats, eng, queries[20:], n_docs, "")
    # Narrowed searches: FTS5 joins the filter; the engine over-fetches and keeps the matching
    # drawers, leaving the search to FTS5 when too few match (``search.engine_search``).
    for key, narrow in (("wing_filter", m.Filters(wing="wing-1")),
                        ("room_filter", m.Filters(wing="wing-1", room="room-1"))):
        fts_lat, eng_lat, same, served = [], [], [], 0
        for q in queries[20:]:
            want, t_fts = cpu_ms(lambda q=q, f=narrow: st.read(lambda c: search.fts_search(
                c, q, f, 200, FAR_FUTURE_MS, stats, n_docs)))
            (by_engine, got), t_eng = cpu_ms(lambda q=q, f=narrow: st.read(
                lambda c: _narrowed(c, eng, stats, q, f, n_docs)))
            served += by_engine
            fts_lat.append(t_fts)
            eng_lat.append(t_eng)
            best = exact(st, stats, q, n_docs, 10, narrow)  # the exact narrowed top 10
            same.append(len({i for i, _ in got[:10]} & {i for i, _ in best})
                        / len(best) if best else float(not got))
        out[key] = {"fts5_ms": {"p50": statistics.median(fts_lat), "p95": pct(fts_lat, 95)},
                    "engine_ms": {"p50": statistics.median(eng_lat), "p95": pct(eng_lat, 95)},
                    "engine_served": served, "queries": len(eng_lat),
                    "exact_top10_kept": statistics.mean(same)}
        print(f"narrowed ({narrow.wing}{'/' + narrow.room if narrow.room else ''}), CPU ms "
              f"p50/p95: FTS5 {statistics.median(fts_lat):.1f} / {pct(fts_lat, 95):.1f}, "
              f"engine (FTS5 when it leaves it) {statistics.median(eng_lat):.1f} / "
              f"{pct(eng_lat, 95):.1f}; engine served {served} of {len(eng_lat)}; the exact "
              f"top 10 kept {statistics.mean(same):.1%}")
    out["rss_after_queries_mb"] = rss_mb()
    if overlay:
        rows = zipf_texts(overlay, vocab, seed=23)

        for start in range(0, overlay, 1_000):  # like remembers: small transactions
            st.write(lambda c, s=start: tx_slice(c, rows, s))
        n_docs = st.read(search.drawer_count)
        stats = search.TermStats()
        _, apply_ms = cpu_ms(lambda: st.read(eng.refresh))
        print(f"overlay: {overlay:,} drawers written since the build ({eng.changed:,} rows "
              f"changed, contexts included), first search applies the log: {apply_ms:.0f} ms")
        out["overlay"] = {"written": overlay, "changed": eng.changed, "apply_ms": apply_ms,
                          **_zipf_round(st, stats, eng, queries[20:], n_docs, "overlay ")}
    st.close()
    return out


def _narrowed(c: Any, eng: ke.KeywordEngine, stats: search.TermStats, query: str,
              narrow: m.Filters, n_docs: int) -> tuple[bool, list[tuple[int, float]]]:
    """A narrowed keyword search as ``search.lexical_search`` runs it: on the engine, else
    on FTS5; and whether the engine served it."""
    hits = engine_search(c, eng, query, narrow, 200, FAR_FUTURE_MS)
    if hits is not None:
        return True, hits
    return False, search.fts_search(c, query, narrow, 200, FAR_FUTURE_MS, stats, n_docs)


def tx_slice(c: Any, rows: list[str], start: int) -> None:
    for i in range(start, min(start + 1_000, len(rows))):
        m.insert_drawer(c, m.NewDrawer(text=f"{rows[i]} (late {i})", wing=f"wing-{i % 4}",
                                       room=f"room-{i % 200}"), 1_700_000_000_000 + i)


def _zipf_round(st: Store, stats: search.TermStats, eng: ke.KeywordEngine,
                queries: list[str], n_docs: int, label: str) -> dict[str, Any]:
    lat: dict[str, list[float]] = {"exact": [], "two-part": [], "engine": []}
    kept: dict[str, dict[int, list[float]]] = {"two-part": {10: [], 100: []},
                                               "engine": {10: [], 100: []}}
    for q in queries:
        full, t_full = cpu_ms(lambda q=q: exact(st, stats, q, n_docs, 200))
        fast, t_fast = cpu_ms(lambda q=q: two_part(st, stats, q, n_docs, 200))
        eng_hits, t_eng = cpu_ms(lambda q=q: engine(st, eng, q, 200))
        lat["exact"].append(t_full)
        lat["two-part"].append(t_fast)
        lat["engine"].append(t_eng)
        for name, got in (("two-part", fast), ("engine", eng_hits)):
            for k in (10, 100):
                want = {i for i, _ in full[:k]}
                kept[name][k].append(len(want & {i for i, _ in got[:k]}) / max(1, len(want)))
    out: dict[str, Any] = {"queries": len(queries)}
    for name, values in lat.items():
        out[f"{name}_ms"] = {"p50": statistics.median(values), "p95": pct(values, 95)}
    for name in kept:
        out[f"{name}_kept"] = {k: statistics.mean(v) for k, v in kept[name].items()}
    print(f"{label}Zipf queries, {n_docs:,} drawers, {len(queries)} queries, CPU ms p50/p95: "
          + "; ".join(f"{n} {out[f'{n}_ms']['p50']:.1f} / {out[f'{n}_ms']['p95']:.1f}"
                      for n in lat)
          + "; exact top-10/100 kept: "
          + "; ".join(f"{n} {out[f'{n}_kept'][10]:.3f} / {out[f'{n}_kept'][100]:.3f}"
                      for n in kept))
    return out


def build_needles(db: Path, n: int, model: Path) -> dict[tuple[int, str], int]:
    """LoCoMo dev turns spread evenly among Zipfian filler; ``{(conversation, dia_id): id}``."""
    data = json.loads(locomo.DEFAULT_DATA.read_text("utf-8"))
    needles = []
    for conv, sample in enumerate(data):
        for d in locomo.build_drawers(sample["conversation"]):
            occurred = parse_when(str(d.item["occurred_at"]), now_ms=0)
            needles.append(((conv, d.dia_id), m.NewDrawer(
                text=str(d.item["text"]), wing=f"locomo-{conv}", room=str(d.item["room"]),
                occurred_ms=occurred)))
    ids_file = db.with_name(db.name + ".ids.json")
    if db.exists() and ids_file.exists():
        return {(int(c), t): int(i) for c, t, i in json.loads(ids_file.read_text("utf-8"))}
    st = Store(db)
    filler = zipf_texts(n - len(needles), zipf_vocabulary(model), seed=1)
    every = len(filler) // len(needles)
    order: list[tuple[str, Any]] = []
    for k in range(len(needles)):
        order += [("filler", t) for t in filler[k * every:(k + 1) * every]]
        order.append(("needle", k))
    order += [("filler", t) for t in filler[len(needles) * every:]]
    ids: dict[tuple[int, str], int] = {}
    for start in range(0, len(order), 5_000):
        def tx(c: Any, start: int = start) -> None:
            for j, (kind, x) in enumerate(order[start:start + 5_000]):
                i = start + j
                if kind == "filler":
                    m.insert_drawer(c, m.NewDrawer(text=f"{x} (note {i})", wing=f"wing-{i % 4}",
                                                   room=f"room-{i % 200}"),
                                    1_600_000_000_000 + i)
                else:
                    key, new = needles[x]
                    ids[key] = m.insert_drawer(c, new, 1_600_000_000_000 + i)[0]

        st.write(tx)
    st.close()
    ids_file.write_text(json.dumps([[c, t, i] for (c, t), i in ids.items()]))
    return ids


def needles_check(db: Path, n: int, model: Path) -> dict[str, Any]:
    ids = build_needles(db, n, model)
    turn_of = {i: key for key, i in ids.items()}
    data = json.loads(locomo.DEFAULT_DATA.read_text("utf-8"))
    st = Store(db)
    n_docs = st.read(search.drawer_count)
    stats = search.TermStats()
    eng, _ = open_engine(st, db)
    names = ("exact", "two-part", "engine")
    recall: dict[str, dict[int, list[float]]] = {s: {1: [], 5: [], 10: []} for s in names}
    lat: dict[str, list[float]] = {s: [] for s in names}

    def by_engine(st: Store, stats: search.TermStats, query: str, n_docs: int, limit: int
                  ) -> list[tuple[int, float]]:
        return engine(st, eng, query, limit)

    for conv, sample in enumerate(data):
        for q in locomo.build_questions(sample):
            if not q.gold_turns:
                continue
            for name, fn in (("exact", exact), ("two-part", two_part), ("engine", by_engine)):
                hits, ms = cpu_ms(lambda fn=fn, q=q: fn(st, stats, q.question, n_docs, 100))
                lat[name].append(ms)
                ranked = [turn_of.get(i) for i, _ in hits]
                for k in (1, 5, 10):
                    found = {t[1] for t in ranked[:k] if t is not None and t[0] == conv}
                    recall[name][k].append(len(found & set(q.gold_turns)) / len(q.gold_turns))
    st.close()
    out: dict[str, Any] = {"drawers": n_docs, "questions": len(lat["exact"])}
    for name in names:
        r = {k: statistics.mean(v) for k, v in recall[name].items()}
        out[name] = {"recall": r, "p50_ms": statistics.median(lat[name]),
                     "p95_ms": pct(lat[name], 95)}
        print(f"LoCoMo needles among {n_docs:,} drawers, {out['questions']} questions, {name}: "
              f"BM25 turn R@1/5/10 {r[1]:.3f} / {r[5]:.3f} / {r[10]:.3f}; p50 "
              f"{out[name]['p50_ms']:.1f} ms p95 {out[name]['p95_ms']:.1f} ms")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, help="a palace database for the Zipf queries")
    ap.add_argument("--needles", type=int, default=0, help="drawers of the needle palace")
    ap.add_argument("--needles-db", type=Path, default=Path("/tmp/palace-needles.db"))
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--overlay", type=int, default=0,
                    help="drawers written after the engine's build (changes --db: use a copy)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report: dict[str, Any] = {}
    if args.db is not None:
        report["zipf"] = zipf_check(args.db, args.model_dir, args.overlay)
    if args.needles:
        report["needles"] = needles_check(args.needles_db, args.needles, args.model_dir)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
