"""Palace at scale: a synthetic palace of N drawers, then ready time, cold open, recall,
remember, memory, disk and the first recall after a kill -9, through a real daemon.

The palace is built without the model, in this process, through the store layer
(``palaced.store``: ``insert_drawer`` + ``store_vectors`` in transactions of 2,000 drawers,
so every drawer gets its full-text row, neighbour context and closets exactly as a remember
would), with Zipfian texts (``perf.py --vocabulary zipf``) and synthetic unit vectors:
clustered around 256 random centres, so the HNSW graph is built over data with some
structure, as real embeddings have. The palace claims the real model's identity, so the
daemon serves it in hybrid mode. Its vector index is then built and saved with
``palaced.index.vectors.open_index`` (the daemon's own code), and that build is timed: it is what a
first open without a usable index file costs.

Then, against a private ``palaced`` with the real model (``--model-dir``):

* **ready**: exec of ``python -m palaced run`` to the first answered ``daemon.hello``, and to
  the model being ready;
* **cold open**: the first request to the palace (``palace.info``) after a clean restart with
  the model ready, i.e. opening SQLite and loading the saved index;
* **recall** p50/p95 through the socket, query embedding included (every query distinct),
  and **remember** p95 (one short drawer per request, embedded inline);
* **RSS** of the daemon (VmRSS and its peak VmHWM) and **disk bytes per drawer** (every file
  of the palace directory after a clean stop);
* **kill -9**: ``--kill-writes`` remembers after a clean restart (the index file is then
  current), ``SIGKILL``, restart, and the first recall of that palace (open + index
  recovery + recall), with the daemon's account of the recovery when it gives one
  (``palace.info`` ``index_load``).

    python bench/scale.py --drawers 100000 [--queries 200] [--kill-writes 500] [--home DIR]
                          [--bulk] [--follow-index] [--resume] [--json out.json]

``--home DIR`` keeps the scratch ``PALACE_HOME`` and reuses a palace already built there for
the same ``--drawers`` (building 100k drawers takes a few minutes on 2 cores); delete its
``index.usearch`` to time the index build again. For a million drawers: ``--bulk`` writes
each drawer in its final state (``bulk_batch``: the store layer's rows without rewriting
neighbour contexts drawer by drawer), ``--follow-index`` builds the vector index in a second
process alongside the fill (``follow_index``), ``--resume`` goes on with an interrupted
build. Every number printed is a
median or percentile of this run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, launch, pid_alive, private_env
from perf import pct, zipf_texts, zipf_vocabulary

PALACE = "scale"
DIMS = 384
IDENTITY = "fastembed:sentence-transformers/all-MiniLM-L6-v2:384"
BUILD_BATCH = 2_000
FOLLOW_ROWS = 10_000


def synthetic_vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """Unit vectors clustered around ``centres`` (a stand-in for real embeddings)."""
    pick = rng.integers(0, len(centres), size=n)
    vecs = centres[pick] + 0.6 * rng.standard_normal((n, DIMS)).astype(np.float32) / np.sqrt(DIMS)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


def follow_index(home: Path, done: Any, out: Any) -> None:
    """Build the vector index alongside the fill (a second process): add the vectors the
    palace holds above the index's watermark, in id order, in reads of ``FOLLOW_ROWS`` (a
    short snapshot each, so the fill's WAL is not held back), until the fill is ``done``
    and nothing is left; then save it with the daemon's ``save_index``. The file is the one
    a rebuild makes (``index_file.build_index``: the same vectors added in the same order),
    ready when the fill ends instead of long after."""
    from palaced.index.vector_file import save_index
    from palaced.index.vectors import VectorIndex
    from palaced.palace.handle import DB_NAME, INDEX_NAME
    from palaced.store import Store
    pdir = home / "palaces" / PALACE
    store = Store(pdir / DB_NAME, palace=PALACE)
    index = VectorIndex(DIMS)

    def step(c: Any) -> int:
        return index.add_rows((int(v), bytes(b)) for v, b in c.execute(
            "SELECT id, vec FROM vectors WHERE id > ? ORDER BY id LIMIT ?",
            (index.watermark, FOLLOW_ROWS)))

    t0 = time.perf_counter()
    while True:
        finished = done.is_set()  # read before the step: nothing is missed after it
        added = store.read(step)
        if finished and added == 0:
            break
        if added == 0:
            time.sleep(1.0)
    t1 = time.perf_counter()
    save_index(index, store, pdir / INDEX_NAME)
    store.close()
    out.put({"index_follow_s": round(t1 - t0, 1), "index_save_s":
             round(time.perf_counter() - t1, 1), "vectors": len(index)})


ROOMS = 200  # drawer i is filed in room-{i % ROOMS} of wing-{i % 4}, in the order of i


class Texts:
    """The text of drawer ``i`` of a build (each batch's texts generated once, on demand)."""

    def __init__(self, words: list[str], n: int) -> None:
        self.words, self.n = words, n
        self._batches: dict[int, list[str]] = {}

    def __call__(self, i: int) -> str:
        b = i - i % BUILD_BATCH
        if b not in self._batches:
            if len(self._batches) > 4:
                self._batches.pop(min(self._batches))
            self._batches[b] = zipf_texts(min(BUILD_BATCH, self.n - b), self.words, seed=b + 1)
        return f"{self._batches[b][i - b]} (note {i})"


def bulk_batch(c: Any, start: int, count: int, n: int, text: Texts, vecs: np.ndarray,
               base: int) -> None:
    """``--bulk``: insert drawers ``start..start+count`` in their final state directly.

    ``drawers.insert_drawer`` + ``store_vectors`` write each drawer and then rewrite the FTS
    context of its two room neighbours before it (``refresh_around``): at a million drawers
    that rewriting is most of the build. Drawers are filed in a fixed order (drawer ``i`` in
    room ``i % ROOMS``, ``ROOMS`` drawers apart), so each drawer's final context, the text of
    its ``CONTEXT_NEIGHBOURS`` room neighbours on each side, is known up front and written
    once; the context vectors are computed once the fill is done. The rows are those ``insert_drawer`` + ``store_vectors`` leave (the same statements
    and values, ``tests/project/test_bench_checks.py`` compares both builds); only the FTS5 index's
    internal segments differ (written once here, rewritten there).
    """
    from palaced.index.vectors import to_blob
    from palaced.store.lookup.context import CONTEXT_NEIGHBOURS, date_words
    from palaced.store.rows.drawers import content_hash
    from palaced.text.reldates import resolved_date_words

    offsets = [k * ROOMS for k in range(-CONTEXT_NEIGHBOURS, CONTEXT_NEIGHBOURS + 1) if k]
    for j in range(count):
        i = start + j
        body, wing, room, now = text(i), f"wing-{i % 4}", f"room-{i % ROOMS}", base + i * 60_000
        did = int(c.execute(
            "INSERT INTO drawers(text, wing, room, tags, importance, source, created_ms, "
            "updated_ms, occurred_ms, content_hash, expires_ms, ttl_ms, kind, chunks) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
            (body, wing, room, "[]", 0.5, None, now, now, now, content_hash(wing, room, body),
             None, None, "drawer", None)).fetchall()[0][0])
        context = "\n".join(text(i + o) for o in offsets if 0 <= i + o < n)
        dates = f"{date_words(now)} {resolved_date_words(body, now)}".rstrip()
        c.execute("INSERT INTO drawers_fts(rowid, text, context, dates) VALUES(?,?,?,?)",
                  (did, body, context, dates))
        c.execute("INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?,?,?)",
                  (did, 0, to_blob(vecs[j])))
        c.execute("UPDATE drawers SET embedded = 1, chunks = ? WHERE id = ?", (1, did))


def build(home: Path, n: int, model_dir: Path, follow: bool = False,
          bulk: bool = False) -> dict[str, Any]:
    """Build palace ``scale`` of ``n`` drawers under ``home``; returns build timings.

    Resumes an interrupted build: drawer ``i`` always gets the same text (each batch of
    ``BUILD_BATCH`` is seeded by its start) and each batch commits whole, so the drawers
    already stored are kept and the build goes on from their count. With ``follow`` the
    vector index is built alongside (``follow_index``) instead of after the fill.
    """
    from palaced.index.vectors import to_blob
    from palaced.palace.handle import DB_NAME, IDENTITY_NAME, IDENTITY_TEMPLATE
    from palaced.store import Store
    from palaced.store.conn.meta import claim_embedder
    from palaced.store.lookup.vectors import store_vectors
    from palaced.store.rows import drawers

    pdir = home / "palaces" / PALACE
    pdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (pdir / IDENTITY_NAME).write_text(IDENTITY_TEMPLATE.format(name=PALACE), "utf-8")
    store = Store(pdir / DB_NAME, palace=PALACE)
    store.write(lambda c: claim_embedder(c, IDENTITY, DIMS))
    first = int(store.read(lambda c: c.execute("SELECT count(*) FROM drawers").fetchall()[0][0]))
    if first % BUILD_BATCH:
        raise SystemExit(f"{pdir} holds {first} drawers, not whole batches: delete it")
    if first:
        print(f"  resuming after {first:,} drawers", flush=True)
    words = zipf_vocabulary(model_dir)
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((256, DIMS)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    base = 1_600_000_000_000
    follower = None
    if follow:
        ctx = mp.get_context("spawn")
        fill_done, result = ctx.Event(), ctx.Queue()
        follower = ctx.Process(target=follow_index, args=(home, fill_done, result))
        follower.start()
    text = Texts(words, n)
    if first:  # the texts are reproducible: check the last one stored
        last = store.read(lambda c: c.execute(
            "SELECT text FROM drawers WHERE id = (SELECT max(id) FROM drawers)").fetchall())
        if last[0][0] != text(first - 1):
            raise SystemExit(f"{pdir} was built with other texts: delete it")
    t0 = time.perf_counter()
    for start in range(first, n, BUILD_BATCH):
        count = min(BUILD_BATCH, n - start)
        vecs = synthetic_vectors(count, np.random.default_rng((5, start)), centres)
        if bulk:
            store.write(lambda c, start=start, count=count, vecs=vecs: bulk_batch(
                c, start, count, n, text, vecs, base))
            done = start + count
            if done % 20_000 == 0 or done == n:
                rate = (done - first) / (time.perf_counter() - t0)
                print(f"  built {done:,} drawers ({rate:,.0f}/s, bulk)", flush=True)
            continue
        texts = zipf_texts(count, words, seed=start + 1)

        def tx(c: Any, start: int = start, texts: list[str] = texts,
               vecs: np.ndarray = vecs) -> None:
            for j, text in enumerate(texts):
                i = start + j
                new = drawers.NewDrawer(text=f"{text} (note {i})", wing=f"wing-{i % 4}",
                                        room=f"room-{i % 200}")
                did, created = drawers.insert_drawer(c, new, base + i * 60_000)
                if created:
                    store_vectors(c, did, [to_blob(vecs[j])])

        store.write(tx)
        done = start + count
        if done % 20_000 == 0 or done == n:
            rate = (done - first) / (time.perf_counter() - t0)
            print(f"  built {done:,} drawers ({rate:,.0f}/s)", flush=True)
    if bulk and first:
        # Drawers stored before the resume had neighbours only up to it: their context now.
        from palaced.store.lookup.context import CONTEXT_NEIGHBOURS, refresh_context

        ids = range(max(0, first - CONTEXT_NEIGHBOURS * ROOMS) + 1, first + 1)
        store.write(lambda c: [refresh_context(c, did) for did in ids])
    if bulk:  # the context vectors, as the store layer's writes leave them, in one pass
        from palaced.store.lookup.context import rebuild_context_vectors

        store.write(rebuild_context_vectors)
    insert_s = time.perf_counter() - t0
    timings = {"insert_s": round(insert_s, 1), "drawers_per_s": round((n - first) / insert_s),
               "resumed_after": first}
    if follower is not None:
        fill_done.set()
        print("  fill done; the index follower finishes", flush=True)
        timings.update(result.get())
        follower.join()
        timings["index_ready_after_fill_s"] = round(time.perf_counter() - t0 - insert_s, 1)
    store.checkpoint()
    store.close()
    (home / f".built-{n}").write_text("ok")
    if follower is None:
        timings.update(build_index(home))
    return timings


def build_index(home: Path) -> dict[str, Any]:
    """Rebuild and save the palace's vector index with the daemon's own code; timed."""
    from palaced.palace.handle import DB_NAME, INDEX_NAME
    from palaced.store import Store
    try:
        from palaced.index.vector_file import open_index
    except ImportError:  # palaced before index_file.py
        from palaced.index.vectors import open_index  # type: ignore[no-redef]
    pdir = home / "palaces" / PALACE
    store = Store(pdir / DB_NAME, palace=PALACE)
    t1 = time.perf_counter()
    index, _ = open_index(store, pdir / INDEX_NAME, DIMS, rebuild=True)
    index_s = time.perf_counter() - t1
    store.close()
    return {"index_build_s": round(index_s, 1), "vectors": len(index)}


def hello_ok(sock: Path) -> bool:
    """One raw ``daemon.hello`` round trip (what a client does first)."""
    from palaced.wire import protocol

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(sock))
            s.sendall(protocol.encode_request(1, protocol.HELLO_OP, None,
                                              protocol.hello_args("bench", "0")))
            head = b""
            while len(head) < 4:
                part = s.recv(4 - len(head))
                if not part:
                    return False
                head += part
            return True
    except OSError:
        return False


class Daemon:
    """The private daemon of this run (our child)."""

    def __init__(self, home: Path, model_dir: Path) -> None:
        self.home = home
        self.env = private_env(home, model_dir, DEFAULT_TIKTOKEN)
        self.sock = home / "run" / "palaced.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> dict[str, float]:
        """Start; returns seconds to the first hello and to the model being ready."""
        t0 = time.perf_counter()
        self.proc = launch(self.env, self.home / "palaced.stderr")
        while not hello_ok(self.sock):
            if self.proc.poll() is not None:
                raise RuntimeError(f"palaced exited with {self.proc.returncode}")
            time.sleep(0.002)
        t_hello = time.perf_counter() - t0
        cpu_hello = self.cpu_ms()
        with self.client() as c:
            while c.status()["model"]["state"] == "loading":
                time.sleep(0.01)
        return {"hello_ms": round(t_hello * 1000, 1), "hello_daemon_cpu_ms": round(cpu_hello),
                "model_ready_ms": round((time.perf_counter() - t0) * 1000, 1)}

    def client(self) -> Any:
        from palace_client import Client

        return Client(self.sock, autostart=False, client_name="bench-scale")

    def cpu_ms(self) -> float:
        """CPU time the daemon used so far (all threads): per-request work that a loaded
        machine does not inflate the way it inflates wall time."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> dict[str, float]:
        assert self.proc is not None
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            # RssFile is mapped files (the index file while it loads, the keyword engine's
            # postings): page cache the kernel can reclaim; RssAnon is the daemon's own.
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=300)
        self.proc = None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=60)
        self.proc = None


def wait_keywords(c: Any, timeout: float = 3_600) -> dict[str, Any]:
    """The palace's keyword engine state once it is no longer loading or building (the
    first searches start it; FTS5 answers meanwhile), with how long that was waited for."""
    t = time.perf_counter()
    deadline = t + timeout
    state: dict[str, Any] = {}
    while time.perf_counter() < deadline:
        state = c.palace_info(PALACE).get("keywords") or {}
        if not state.get("building"):
            break
        time.sleep(0.2)
    return {**state, "waited_s": round(time.perf_counter() - t, 1)}


def timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--remembers", type=int, default=100)
    ap.add_argument("--kill-writes", type=int, default=500,
                    help="remembers between the last clean save and the kill -9")
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--home", type=Path, help="keep and reuse this scratch PALACE_HOME")
    ap.add_argument("--follow-index", action="store_true",
                    help="build the vector index alongside the fill (for 1M drawers)")
    ap.add_argument("--bulk", action="store_true",
                    help="insert drawers in their final state (no neighbour rewrites)")
    ap.add_argument("--resume", action="store_true",
                    help="go on with an interrupted build in --home instead of starting over")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="palscale-", dir="/tmp"))
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    out: dict[str, Any] = {"drawers": args.drawers}
    if not (home / f".built-{args.drawers}").exists():
        if not args.resume:
            shutil.rmtree(home / "palaces", ignore_errors=True)
        print(f"building {args.drawers:,} drawers in {home}", flush=True)
        out["build"] = build(home, args.drawers, args.model_dir, follow=args.follow_index,
                             bulk=args.bulk)
    elif not (home / "palaces" / PALACE / "index.usearch").exists():
        print("rebuilding the vector index", flush=True)
        out["build"] = build_index(home)
    d = Daemon(home, args.model_dir)
    words = zipf_vocabulary(args.model_dir)
    qtexts = zipf_texts(args.queries + 20, words, seed=int(time.time()), length=(4, 8))
    try:
        # Ready and cold open, twice each (medians when repeated by hand).
        ready, opens = [], []
        for _ in range(2):
            ready.append(d.start())
            with d.client() as c:
                cpu0 = d.cpu_ms()
                info, ms = timed(lambda c=c: c.palace_info(PALACE))
                opens.append({"ms": round(ms, 1), "daemon_cpu_ms": round(d.cpu_ms() - cpu0)})
            d.stop()
        out["ready"] = ready
        out["cold_open_ms"] = opens
        out["cold_open_index_load"] = info.get("index_load")
        d.start()
        with d.client() as c:
            c.palace_info(PALACE)
            for q in qtexts[:20]:
                c.recall(PALACE, q)
            out["keywords"] = wait_keywords(c)
            cpu0 = d.cpu_ms()
            lat = [timed(lambda q=q: c.recall(PALACE, q))[1] for q in qtexts[20:]]
            out["recall_ms"] = {"p50": round(statistics.median(lat), 1),
                                "p95": round(pct(lat, 95), 1),
                                "daemon_cpu_mean": round((d.cpu_ms() - cpu0) / len(lat), 1)}
            rnd = random.Random(int(time.time()))
            cpu0 = d.cpu_ms()
            rem = [timed(lambda i=i: c.remember(
                PALACE, f"bench remember {i}: {' '.join(rnd.choices(words[:3000], k=12))}"))[1]
                for i in range(args.remembers)]
            out["remember_ms"] = {"p50": round(statistics.median(rem), 1),
                                  "p95": round(pct(rem, 95), 1),
                                  "daemon_cpu_mean": round((d.cpu_ms() - cpu0) / len(rem), 1)}
            out["rss_mb"] = d.rss_mb()
        d.stop()
        pdir = home / "palaces" / PALACE
        size = sum(f.stat().st_size for f in pdir.iterdir() if f.is_file())
        n_now = args.drawers + args.remembers
        out["disk"] = {"bytes_per_drawer": round(size / n_now),
                       "files": {f.name: f.stat().st_size for f in pdir.iterdir()
                                 if f.is_file()}}
        # kill -9 after writes beyond the last save.
        d.start()
        with d.client() as c:
            c.palace_info(PALACE)
            t = time.perf_counter()
            for i in range(args.kill_writes):
                c.remember(PALACE, f"written before the crash {i}: "
                           f"{' '.join(rnd.choices(words[:3000], k=12))}")
            out["kill_writes_s"] = round(time.perf_counter() - t, 1)
        d.kill9()
        restart = d.start()
        with d.client() as c:
            # A long deadline: before replay, this first request waited for a full rebuild.
            res, ms = timed(lambda c=c: c.call("memory.recall", PALACE, {
                "query": "written before the crash"}, timeout_ms=3_600_000))
            info = c.palace_info(PALACE)
            _, ms_later = timed(lambda c=c: c.recall(PALACE, "written before the crash"))
            out["after_kill9_keywords"] = wait_keywords(c)
        out["after_kill9"] = {"restart": restart, "first_recall_ms": round(ms, 1),
                              "second_recall_ms": round(ms_later, 1),
                              "mode": res["mode"], "index_load": info.get("index_load"),
                              "index": info["index"], "vectors": info["vectors"],
                              "consistent": info["consistent"]}
        d.stop()
    finally:
        with contextlib.suppress(Exception):
            if d.proc is not None and pid_alive(d.proc.pid):
                d.stop()
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
