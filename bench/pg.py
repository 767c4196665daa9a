"""Team palace (PostgreSQL + pgvector) against a local SQLite palace, side by side in one run.

One private ``palaced`` with the real model (``--model-dir``) serves two palaces of each kind:
a local one (SQLite + usearch) and a team one (``palace create NAME --store URL``) on a
PostgreSQL 18 + pgvector server that this script starts on a Unix socket
(``tests/support/pgserver.py``, the tests' server: fsync off, so the numbers are PostgreSQL's work,
not a disk's flush latency; ``--pg-url`` uses another server instead).

1. **ingest**: the same ``--drawers`` short synthetic drawers (``perf.py``'s texts) through
   ``remember_many`` in batches of 250, the two palaces filled in turn batch by batch (so a
   load spike on this shared machine hits both), real model embedding included;
   drawers/s per backend.
2. **recall** p50/p95 through the socket on those palaces, query embedding included, every
   query distinct, the two palaces asked in turn.
3. **scale**: recall p50/p95 at 10k and at 100k drawers (``--scale``). The bulk is written
   without the model through the store layer, by ``remember_many``'s write path
   (``write_batch``: per transaction of 2,000 drawers, each drawer's ``insert_drawer`` +
   ``store_vectors`` without its room context, then ``refresh_around`` once for the batch:
   full-text rows and postings, vectors, context columns and context vectors, the team
   palace's pgvector HNSW index maintained as rows arrive; the team palace in 3 threads, one
   per third of the rooms) with Zipfian texts and clustered synthetic unit vectors, into
   both palaces, daemon stopped, each timed (``*_fill_s``); the SQLite palace's usearch
   index is then rebuilt with the daemon's code (``scale.build_index``). Each palace got one
   real ``remember`` first, so the daemon recorded its model its own way. Queries are Zipfian
   texts of the same vocabulary, through the socket with the real model.
   The fill before this one wrote drawer by drawer with each drawer's room context
   (``insert_drawer`` rewrote its neighbours' context per drawer: 7-129 drawers/s on the
   team palace); the rows stored are the same (``tests/project/test_bench_checks.py``
   compares both, ids aside), only the drawers' ``chunks`` column is set at insert as
   ``remember_many`` sets it (then by ``store_vectors`` alike) and a batch's context is
   written once instead of rewritten drawer by drawer.
4. **LoCoMo** (``--locomo``): ``bench/locomo.py``'s run, once into local palaces and once into
   team palaces, turn and session R@1/5/10 side by side.

    python bench/pg.py [--drawers 3000] [--queries 200] [--scale 10000,100000] [--locomo]
                       [--conversations N] [--pg-url URL] [--keep HOME] [--json out.json]

Every number is a median or percentile of this run; the machine is shared, so compare the
two columns of one run, not runs. With ``--pg-url URL --keep HOME`` the palaces stay (the
server's database and ``HOME``): ``bench/pg_trees.py --reuse HOME`` times old and new code on
them, ``bench/pg_explain.py --home HOME`` profiles the team palace's recall statements.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from _daemon import DEFAULT_MODEL  # noqa: E402
from perf import pct, queries, synthetic, zipf_texts, zipf_vocabulary  # noqa: E402
from scale import BUILD_BATCH, DIMS, Daemon, synthetic_vectors  # noqa: E402

from tests.support.pgserver import PgServer  # noqa: E402

KINDS = ("sqlite", "team")
INGEST_BATCH = 250
ROOMS = 200


def create(client: Any, name: str, kind: str, url: str) -> None:
    """A local palace, or a team palace in the database at ``url``."""
    client.create_palace(name, store=url if kind == "team" else None)


def stats(lat: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(lat), 1), "p95": round(pct(lat, 95), 1)}


def timed_ms(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def recall_ms(c: Any, name: str, q: str, errors: dict[str, int]) -> float:
    """One recall's latency; a failed one (e.g. STORE_UNAVAILABLE past the statement
    timeout) counts in ``errors`` and still enters the latencies with the time it took."""
    from palaced.wire.errors import PalaceError

    t = time.perf_counter()
    try:
        c.recall(name, q)
    except PalaceError as exc:
        errors[exc.name] = errors.get(exc.name, 0) + 1
    return (time.perf_counter() - t) * 1000


# -- 1, 2: ingest and recall through the daemon --------------------------------------------
def ingest_and_recall(d: Daemon, url: str, n: int, n_queries: int) -> dict[str, Any]:
    items = synthetic(n)
    names = {k: f"ing-{k}" for k in KINDS}
    seconds = dict.fromkeys(KINDS, 0.0)
    with d.client() as c:
        for kind, name in names.items():
            create(c, name, kind, url)
        for b, start in enumerate(range(0, n, INGEST_BATCH)):
            batch = items[start:start + INGEST_BATCH]
            order = KINDS if b % 2 == 0 else KINDS[::-1]
            for kind in order:
                seconds[kind] += timed_ms(
                    lambda kind=kind, batch=batch: c.remember_many(names[kind], batch)) / 1000
        qs = queries(n_queries + 10, seed=23)
        errors: dict[str, dict[str, int]] = {k: {} for k in KINDS}
        for q in qs[:10]:  # warm-up: first queries pay lazy imports, pools, page cache
            for kind in KINDS:
                recall_ms(c, names[kind], q, {})
        lat: dict[str, list[float]] = {k: [] for k in KINDS}
        for i, q in enumerate(qs[10:]):
            for kind in (KINDS if i % 2 == 0 else KINDS[::-1]):
                lat[kind].append(recall_ms(c, names[kind], q, errors[kind]))
        counts = {k: c.palace_info(names[k])["drawers"] for k in KINDS}
    return {k: {"drawers": counts[k], "ingest_drawers_per_s": round(n / seconds[k], 1),
                "recall_ms": stats(lat[k]), "recall_errors": errors[k]} for k in KINDS}


# -- 3: scale -------------------------------------------------------------------------------
class Filler:
    """Writes synthetic drawers straight into a palace's store (daemon stopped)."""

    def __init__(self, model_dir: Path) -> None:
        self.words = zipf_vocabulary(model_dir)
        self.rng = np.random.default_rng(5)
        centres = self.rng.standard_normal((256, DIMS)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)

    def fill(self, store: Any, start: int, end: int, threads: int = 1,
             batch: int = BUILD_BATCH) -> float:
        """Drawers ``start``..``end`` into ``store`` by ``remember_many``'s write path; returns
        drawers/s. Per transaction of ``batch`` drawers: each drawer's row, full-text
        row and vectors (``insert_drawer`` and ``store_vectors`` with ``context=False``),
        then the room context of the new drawers and their neighbours once
        (``refresh_around``), as ``palaced.memory.writes`` does. With ``threads`` > 1 (a team
        palace: PostgreSQL takes concurrent writers), each thread writes the drawers of its
        own rooms, so their neighbour-context updates never touch the same rows."""
        base = 1_600_000_000_000
        t0 = time.perf_counter()
        for s in range(start, end, batch):
            count = min(batch, end - s)
            texts = zipf_texts(count, self.words, seed=s + 1)
            vecs = synthetic_vectors(count, self.rng, self.centres)
            parts = [[(s + j, t, vecs[j]) for j, t in enumerate(texts)
                      if ((s + j) % ROOMS) % threads == part] for part in range(threads)]
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda part: store.write(
                    lambda c, part=part: write_batch(c, part, base)), parts))
            if (s + count) % 20_000 == 0 or s + count == end:
                rate = (s + count - start) / (time.perf_counter() - t0)
                print(f"    filled {s + count:,} ({rate:,.0f} drawers/s)", file=sys.stderr,
                      flush=True)
        return (end - start) / (time.perf_counter() - t0)


def write_batch(c: Any, batch: list[tuple[int, str, Any]], base: int) -> list[int]:
    """``(i, text, vector)`` drawers into the store in this transaction as ``remember_many``
    writes them (``palaced.memory.writes._insert_sync``): drawer ``i`` filed in
    ``room-{i % ROOMS}`` of ``wing-{i % 4}`` at ``base + i`` minutes; the new ids."""
    from palaced.index.vectors import to_blob
    from palaced.store.lookup.vectors import store_vectors
    from palaced.store.rows import drawers

    new_ids: list[int] = []
    for i, text, vec in batch:
        new = drawers.NewDrawer(text=f"{text} (note {i})", wing=f"wing-{i % 4}",
                                room=f"room-{i % ROOMS}")
        did, created = drawers.insert_drawer(c, new, base + i * 60_000, chunks=1,
                                             context=False)
        if created:
            store_vectors(c, did, [to_blob(vec)], context=False)
            new_ids.append(did)
    drawers.refresh_around(c, new_ids)
    return new_ids


def open_store(home: Path, name: str, kind: str, url: str) -> Any:
    if kind == "team":
        from palaced.store.conn.pg import PgStore
        from palaced.store.schema.pg import schema_name

        return PgStore(url, schema_name(name), palace=name)
    from palaced.palace.handle import DB_NAME
    from palaced.store import Store
    return Store(home / "palaces" / name / DB_NAME, palace=name)


def rebuild_sqlite_index(home: Path, name: str) -> float:
    """The SQLite palace's usearch index rebuilt and saved with the daemon's code; seconds."""
    from palaced.index.vector_file import open_index
    from palaced.palace.handle import DB_NAME, INDEX_NAME
    from palaced.store import Store
    pdir = home / "palaces" / name
    store = Store(pdir / DB_NAME, palace=name)
    t = time.perf_counter()
    open_index(store, pdir / INDEX_NAME, DIMS, rebuild=True)
    store.close()
    return time.perf_counter() - t


def scale(d: Daemon, home: Path, url: str, sizes: list[int], n_queries: int,
          model_dir: Path, fill_threads: int) -> dict[str, Any]:
    names = {k: f"big-{k}" for k in KINDS}
    filler = Filler(model_dir)
    with d.client() as c:
        for kind, name in names.items():
            create(c, name, kind, url)
            c.remember(name, "The first drawer records the palace's model.")
    have = 1
    out: dict[str, Any] = {}
    for size in sizes:
        d.stop()
        row: dict[str, Any] = {}
        for kind, name in names.items():
            store = open_store(home, name, kind, url)
            try:
                rate = filler.fill(store, have, size,
                                   threads=fill_threads if kind == "team" else 1)
                row[f"{kind}_fill_drawers_per_s"] = round(rate)
                row[f"{kind}_fill_s"] = round((size - have) / rate, 1)
            finally:
                store.close()
        row["sqlite_index_build_s"] = round(rebuild_sqlite_index(home, names["sqlite"]), 1)
        have = size
        d.start()
        qs = zipf_texts(n_queries + 20, filler.words, seed=size, length=(4, 8))
        with d.client() as c:
            for q in qs[:20]:
                for kind in KINDS:
                    recall_ms(c, names[kind], q, {})
            errors: dict[str, dict[str, int]] = {k: {} for k in KINDS}
            lat: dict[str, list[float]] = {k: [] for k in KINDS}
            for i, q in enumerate(qs[20:]):
                for kind in (KINDS if i % 2 == 0 else KINDS[::-1]):
                    lat[kind].append(recall_ms(c, names[kind], q, errors[kind]))
            for kind in KINDS:
                row[kind] = {"drawers": c.palace_info(names[kind])["drawers"],
                             "recall_ms": stats(lat[kind]), "recall_errors": errors[kind]}
        out[str(size)] = row
        print(f"  scale {size:,}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return out


# -- 4: LoCoMo ------------------------------------------------------------------------------
def locomo(url: str, conversations: int | None) -> dict[str, Any]:
    import locomo as lm

    out = {}
    for kind in KINDS:
        report = lm.run(lm.DEFAULT_DATA, top_k=lm.DEFAULT_TOP_K, conversations=conversations,
                        wait_embed_s=600.0, requested_mode="default",
                        store=url if kind == "team" else None)
        out[kind] = {"turn": report["turn"], "session": report["session"],
                     "mode": report["mode"], "questions": report["questions"],
                     "ingest_drawers_per_s": report["ingest"]["drawers_per_s"],
                     "recall_ms": report["recall_latency_ms"]}
    return out


def table(report: dict[str, Any]) -> str:
    lines = [f"{'':34}{'sqlite':>14}{'team (pg)':>14}"]

    def row(label: str, get: Callable[[dict[str, Any]], Any]) -> None:
        lines.append(f"{label:34}" + "".join(f"{get(report_kind)!s:>14}"
                                             for report_kind in kinds))

    ing = report["ingest_recall"]
    kinds = [ing[k] for k in KINDS]
    row(f"ingest drawers/s ({ing['sqlite']['drawers']})", lambda r: r["ingest_drawers_per_s"])
    row("recall p50 ms", lambda r: r["recall_ms"]["p50"])
    row("recall p95 ms", lambda r: r["recall_ms"]["p95"])
    row("recall errors", lambda r: sum(r["recall_errors"].values()))
    for size, block in report.get("scale", {}).items():
        kinds = [block[k] for k in KINDS]
        row(f"bulk fill drawers/s to {int(size):,}", lambda r, b=block: b.get(
            f"{'sqlite' if r is b['sqlite'] else 'team'}_fill_drawers_per_s"))
        row(f"recall p50 ms at {int(size):,}", lambda r: r["recall_ms"]["p50"])
        row(f"recall p95 ms at {int(size):,}", lambda r: r["recall_ms"]["p95"])
        row(f"recall errors at {int(size):,}", lambda r: sum(r["recall_errors"].values()))
    if "locomo" in report:
        kinds = [report["locomo"][k] for k in KINDS]
        for level in ("turn", "session"):
            for k in (1, 5, 10):
                row(f"LoCoMo {level} R@{k}", lambda r, level=level, k=k:
                    f"{r[level][f'recall@{k}']:.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--scale", default="10000,100000",
                    help="comma-separated palace sizes for recall at scale ('' to skip)")
    ap.add_argument("--fill-threads", type=int, default=3,
                    help="writer threads of the team palace's bulk fill")
    ap.add_argument("--locomo", action="store_true", help="also LoCoMo through both kinds")
    ap.add_argument("--conversations", type=int, default=None)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--pg-url", help="an existing server's database (default: start one)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path,
                    help="a new directory kept as the scratch PALACE_HOME (with --pg-url, "
                         "the palaces stay for bench/pg_trees.py --reuse or a profile)")
    args = ap.parse_args()

    server = None if args.pg_url else PgServer()
    home = args.keep or Path(tempfile.mkdtemp(prefix="palpg-", dir="/tmp"))
    home.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"drawers": args.drawers, "queries": args.queries}
    d = Daemon(home, args.model_dir)
    try:
        if server is not None:
            url = server.create_database("bench")
            report["pg_server_start_s"] = round(server.start_seconds, 2)
        else:
            url = args.pg_url
        d.start()
        print("ingest and recall...", file=sys.stderr, flush=True)
        report["ingest_recall"] = ingest_and_recall(d, url, args.drawers, args.queries)
        sizes = [int(s) for s in args.scale.split(",") if s.strip()]
        if sizes:
            print(f"scale {sizes}...", file=sys.stderr, flush=True)
            report["scale"] = scale(d, home, url, sizes, args.queries, args.model_dir,
                                    args.fill_threads)
        if args.locomo:
            print("LoCoMo...", file=sys.stderr, flush=True)
            import os

            os.environ.update(d.env)
            report["locomo"] = locomo(url, args.conversations)
    finally:
        d.stop()
        if server is not None:
            server.close()
        if args.keep is None:
            shutil.rmtree(home, ignore_errors=True)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
