"""Big memories: what remembering a long text costs, where that time goes, and whether one
huge drawer slows wake-up and recall.

Three parts, each printing a table:

1. **Stages of one remember**, in this process, for each size: validating the fields and
   extracting topics (``drawer_from_args``), chunking (``palaced.text.chunking``), embedding the
   chunks with the raw fastembed model (``embed_passages``, no daemon), and the SQLite write
   (drawer, full-text row, neighbour context, closets; then the vectors), against a scratch
   store holding a few neighbours in the same room.
2. **Through a private daemon** with the same model: the time ``memory.remember`` takes to
   answer, and the time until the drawer's vectors are in (``palace.info`` polled until no
   embedding is pending), against the raw embedding time of part 1. Texts over the inline
   threshold (``palaced.memory.writes.INLINE_MAX_CHUNKS``) answer once committed and are embedded in
   the background.
3. **Wake-up and recall with a huge drawer**: two palaces of the same 300 LoCoMo turns, one
   with a 150,000-character drawer more (importance 1, so it is in L1, and made of turns, so
   most queries match it); medians of ``wake_up`` and of recall (default and deep, all levels)
   for 40 queries.

Texts are LoCoMo dev turns (``{speaker} said, "{text}"``) strung together (data in
``../shared``), else synthetic sentences.

    python bench/bigmem.py [--sizes 1000,5000,20000,50000,100000,200000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "bench" / "locomo-dev.json"


def turns() -> list[str]:
    """LoCoMo dev turns as drawers would hold them, or synthetic sentences without the data."""
    if not LOCOMO.exists():
        rnd = random.Random(1)
        nouns = ["harbour", "ferry", "ledger", "crane", "tide", "market", "pilot", "keeper"]
        return [f"The {rnd.choice(nouns)} changed on day {i} after the {rnd.choice(nouns)} "
                f"meeting." for i in range(5000)]
    out: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "text" in x and "speaker" in x:
                out.append(f'{x["speaker"]} said, "{x["text"]}"')
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(LOCOMO.read_text("utf-8")))
    return out


def text_of(pool: list[str], n: int, seed: int) -> str:
    rnd = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n:
        parts.append(rnd.choice(pool))
        size += len(parts[-1]) + 1
    return " ".join(parts)[:n]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def stages(pool: list[str], sizes: list[int], model: Path) -> list[dict[str, Any]]:
    """Part 1: each stage of a remember, timed in this process."""
    from palaced.config.model import EmbedderSettings
    from palaced.engine.embedder import FastEmbedder
    from palaced.index.vectors import to_blob
    from palaced.ops.fields import drawer_from_args
    from palaced.store import Store
    from palaced.store.lookup.vectors import store_vectors
    from palaced.store.rows import drawers
    from palaced.text.chunking import chunk_text

    emb = FastEmbedder.load(EmbedderSettings(model_path=model))
    emb.embed_passages(["warm up the session"] * 4)
    store = Store(Path(tempfile.mkdtemp(prefix="bigmem-", dir="/tmp")) / "p.db")
    now = int(time.time() * 1000)
    for i in range(5):
        store.write(lambda c, i=i: drawers.insert_drawer(
            c, drawers.NewDrawer(text=f"neighbour note {i}"), now + i))
    rows = []
    for size in sizes:
        text = text_of(pool, size, seed=size)
        args = {"text": text, "wing": None, "room": None, "tags": None, "importance": 0.5,
                "source": None, "occurred_at": None, "ttl": None, "expires_at": None,
                "supersedes": None, "dedup": None}
        t = time.perf_counter()
        new = drawer_from_args(1_000_000, args, now + 10)
        t_args = time.perf_counter() - t
        t = time.perf_counter()
        chunks = chunk_text(new.text)
        t_chunk = time.perf_counter() - t
        t = time.perf_counter()
        vecs = emb.embed_passages(chunks)
        t_embed = time.perf_counter() - t
        t = time.perf_counter()
        did, _ = store.write(lambda c, new=new: drawers.insert_drawer(c, new, now + 10))
        t_insert = time.perf_counter() - t
        t = time.perf_counter()
        store.write(lambda c, did=did, vecs=vecs: store_vectors(c, did, [to_blob(v) for v in vecs]))
        t_vectors = time.perf_counter() - t
        rows.append({"chars": size, "chunks": len(chunks), "fields_topics_s": t_args,
                     "chunking_s": t_chunk, "raw_embed_s": t_embed,
                     "chunks_per_s": len(chunks) / t_embed, "insert_fts_context_s": t_insert,
                     "vectors_write_s": t_vectors})
    store.close()
    print("\n## 1. Stages of one remember (in-process)\n")
    print("| chars | chunks | fields + topics | chunking | raw embedding | chunks/s "
          "| drawer + FTS + context | vectors |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['chars']:,} | {r['chunks']} | {ms(r['fields_topics_s'])} | "
              f"{ms(r['chunking_s'])} | {ms(r['raw_embed_s'])} | {r['chunks_per_s']:.1f} | "
              f"{ms(r['insert_fts_context_s'])} | {ms(r['vectors_write_s'])} |")
    return rows


def through_daemon(pool: list[str], sizes: list[int], raw: dict[int, float],
                   d: PrivateDaemon) -> list[dict[str, Any]]:
    """Part 2: remember through the socket; answer time and time until embedded."""
    rows = []
    with d.client("bench-bigmem") as c:
        c.create_palace("big")
        for size in sizes:
            text = text_of(pool, size, seed=size)
            t = time.perf_counter()
            res = c.remember_ex("big", text, room="docs")
            answered = time.perf_counter() - t
            while c.palace_info("big")["pending_embeddings"]:
                time.sleep(0.01)
            embedded = time.perf_counter() - t
            rows.append({"chars": size, "answered_s": answered, "embedded_s": embedded,
                         "background": "pending_chunks" in res,
                         "raw_embed_s": raw.get(size)})
    print("\n## 2. memory.remember through the daemon\n")
    print("| chars | answered | vectors in | raw embedding | embedded |")
    print("|---:|---:|---:|---:|---|")
    for r in rows:
        raw_s = r["raw_embed_s"]
        print(f"| {r['chars']:,} | {ms(r['answered_s'])} | {ms(r['embedded_s'])} | "
              f"{ms(raw_s) if raw_s is not None else '-'} | "
              f"{'background' if r['background'] else 'inline'} |")
    return rows


def huge_drawer(pool: list[str], d: PrivateDaemon) -> dict[str, Any]:
    """Part 3: wake-up and recall with and without one 150k-character drawer."""
    rnd = random.Random(2)
    items = [{"text": t, "room": f"r{i % 5}", "importance": 0.8 if i % 3 == 0 else 0.5}
             for i, t in enumerate(rnd.sample(pool, 300))]
    queries = rnd.sample(pool, 40)
    out: dict[str, Any] = {}
    with d.client("bench-bigmem") as c:
        for name in ("plain", "with-huge"):
            c.create_palace(name)
            c.remember_many(name, items)
        c.remember("with-huge", text_of(pool, 150_000, seed=5), importance=1.0, room="r1")
        while c.palace_info("with-huge")["pending_embeddings"]:
            time.sleep(0.05)
        for name in ("plain", "with-huge"):
            for q in queries[:5]:
                c.recall(name, q)

            def med(fn: Any, n: int) -> float:
                times = []
                for i in range(n):
                    t = time.perf_counter()
                    fn(i)
                    times.append((time.perf_counter() - t) * 1000)
                return statistics.median(times)

            out[name] = {
                "wake_up_ms": med(lambda i, n=name: c.wake_up(n), 50),
                "recall_ms": med(lambda i, n=name: c.recall(n, queries[i]), len(queries)),
                "deep_recall_ms": med(lambda i, n=name: c.call(
                    "memory.recall", n, {"query": queries[i], "deep": True,
                                         "levels": [0, 1, 2, 3]}), len(queries)),
            }
    print("\n## 3. One 150,000-character drawer (medians)\n")
    print("| palace | wake_up | recall | deep recall (L0-L3) |")
    print("|---|---:|---:|---:|")
    for name, r in out.items():
        print(f"| {name} | {r['wake_up_ms']:.2f} ms | {r['recall_ms']:.2f} ms | "
              f"{r['deep_recall_ms']:.2f} ms |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000,20000,50000,100000,200000")
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    pool = turns()
    report: dict[str, Any] = {"stages": stages(pool, sizes, args.model_dir)}
    raw = {r["chars"]: r["raw_embed_s"] for r in report["stages"]}
    d = PrivateDaemon("palbig-", args.model_dir, DEFAULT_TIKTOKEN)
    try:
        d.start()
        report["daemon"] = through_daemon(pool, sizes, raw, d)
        report["huge_drawer"] = huge_drawer(pool, d)
    finally:
        d.stop()
        d.cleanup(False)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
