"""Foundation performance: ingest rate, recall latency through the socket, CLI wall time.

Starts a private palaced (real model from --model-dir, or keyword-only with --keyword-only)
under a scratch PALACE_HOME, fills a palace with N short synthetic drawers via remember_many,
then measures recall p50/p95 (query embedding included: every query is distinct so the query
vector cache never hits) and the `palace recall` CLI wall time.

    python bench/perf.py --drawers 10000 [--json out.json]
    python bench/perf.py --drawers 2000 --models minilm,mpnet  # one daemon per model, in turn

``--models`` measures each model of the catalog (``palaced/wire/models.py``) named, one after
the other in the same run: its shared copy (``../shared/models``) or ``NAME=DIR``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx-int8"
SHARED_MODELS = {"minilm": DEFAULT_MODEL,
                 "mpnet": REPO.parent / "shared" / "models" / "all-mpnet-base-v2-onnx-int8"}
DEFAULT_TIKTOKEN = REPO.parent / "shared" / "data" / "tiktoken" / "cl100k_base.tiktoken"

SUBJECTS = ["the deploy pipeline", "our billing service", "the staging database", "Alice",
            "the auth middleware", "the search index", "Bob", "the mobile app", "the cache",
            "the nightly backup", "the API gateway", "Carol", "the data warehouse"]
VERBS = ["depends on", "was migrated to", "fails when", "is owned by", "talks to",
         "was rewritten in", "is monitored by", "must never touch", "replaced", "scales with"]
OBJECTS = ["Postgres 16", "a Redis cluster", "Kubernetes", "the EU region", "Rust", "Go",
           "a retrying webhook queue", "S3 lifecycle rules", "feature flags", "gRPC",
           "the on-call rotation", "Terraform", "a 5 minute TTL", "OAuth device flow"]
QUALIFIERS = ["since March", "after the outage", "on Fridays", "for compliance",
              "because of latency", "per the design review", "until Q3", "in production"]


def synthetic(n: int, seed: int = 7) -> list[dict[str, object]]:
    rnd = random.Random(seed)
    items = []
    for i in range(n):
        text = (f"{rnd.choice(SUBJECTS)} {rnd.choice(VERBS)} {rnd.choice(OBJECTS)} "
                f"{rnd.choice(QUALIFIERS)} (note {i})")
        items.append({"text": text, "room": f"room-{i % 40}", "wing": f"wing-{i % 4}"})
    return items


def zipf_vocabulary(model_dir: Path, size: int = 20_000, seed: int = 3) -> list[str]:
    """English words from the model's WordPiece vocabulary, in a shuffled rank order."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text("utf-8"))["model"]["vocab"]
    words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3)
    random.Random(seed).shuffle(words)
    return words[:size]


def zipf_texts(n: int, words: list[str], seed: int = 7, length: tuple[int, int] = (8, 20)
               ) -> list[str]:
    """Texts whose word frequencies follow Zipf's law (s = 1.1), as natural text does."""
    rnd = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 1.1 for rank in range(len(words))]
    # Accumulated once: ``choices(weights=...)`` would redo it for every text (a third of a
    # scale.py build's time); the draws are the same.
    cum = list(itertools.accumulate(weights))
    return [" ".join(rnd.choices(words, cum_weights=cum, k=rnd.randint(*length)))
            for _ in range(n)]


def queries(n: int, seed: int = 11) -> list[str]:
    rnd = random.Random(seed)
    return [f"what does {rnd.choice(SUBJECTS)} {rnd.choice(VERBS)} {rnd.choice(QUALIFIERS)} "
            f"#{i}" for i in range(n)]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))
    return values[k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--drawers", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--cli-runs", type=int, default=15)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--models", default=None, metavar="NAME[=DIR],...",
                    help="measure each of these catalog models in turn (minilm, mpnet: the "
                         "shared copies unless =DIR is given)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--vocabulary", choices=["small", "zipf"], default="small",
                    help="small: ~60 content words, every query term hits thousands of "
                         "drawers (worst case for BM25); zipf: 20k English words with natural "
                         "(Zipfian) frequencies")
    args = ap.parse_args()
    if args.models is None:
        out = measure(args, None, args.model_dir)
    else:
        out = {"models": {}}
        for spec in filter(None, args.models.split(",")):
            name, _, path = spec.partition("=")
            model_dir = Path(path) if path else SHARED_MODELS[name]
            out["models"][name] = measure(args, name, model_dir)
            print(json.dumps({name: out["models"][name]}), flush=True)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


def measure(args: argparse.Namespace, model: str | None, model_dir: Path) -> dict[str, object]:
    """One private daemon with ``model`` (None: the default) from ``model_dir``: its figures."""
    home = Path(tempfile.mkdtemp(prefix="palbench-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALACE")}
    env["PALACE_HOME"] = str(home)
    env["PALACE_TIKTOKEN_FILE"] = str(DEFAULT_TIKTOKEN)
    if args.keyword_only:
        env["PALACE_EMBED_MODEL"] = "none"
    else:
        env["PALACE_EMBED_MODEL_PATH"] = str(model_dir)
        if model is not None:
            env["PALACE_EMBED_MODEL"] = model
    os.environ.clear()
    os.environ.update(env)
    from palace_client import Client

    proc = subprocess.Popen([sys.executable, "-m", "palaced", "run", "--quiet"], env=env)
    out: dict[str, object] = {"drawers": args.drawers, "keyword_only": args.keyword_only,
                              "vocabulary": args.vocabulary}
    try:
        # No auto-start here: the daemon measured is the one this script started.
        with Client(client_name="bench", autostart=False) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if c.status()["model"]["state"] != "loading":
                        break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
            out["model"] = c.status()["model"].get("identity")
            c.create_palace("bench")
            if args.vocabulary == "zipf":
                words = zipf_vocabulary(model_dir)
                items = [{"text": t, "room": f"room-{i % 40}", "wing": f"wing-{i % 4}"}
                         for i, t in enumerate(zipf_texts(args.drawers, words))]
                qtexts = zipf_texts(args.queries * 2, words, seed=11, length=(4, 8))
            else:
                items = synthetic(args.drawers)
                qtexts = queries(args.queries * 2)
            t0 = time.perf_counter()
            for start in range(0, len(items), 1000):
                c.remember_many("bench", items[start:start + 1000])
            ingest_s = time.perf_counter() - t0
            out["ingest_drawers_per_s"] = round(args.drawers / ingest_s, 1)
            info = c.palace_info("bench")
            out["consistent"] = info["consistent"]
            # Warm-up (first query pays lazy imports and page cache).
            for q in queries(5, seed=99):
                c.recall("bench", q, top_k=10)
            lat = []
            for q in qtexts[: args.queries]:
                t = time.perf_counter()
                c.recall("bench", q, top_k=10)
                lat.append((time.perf_counter() - t) * 1000)
            out["recall_ms_p50"] = round(statistics.median(lat), 2)
            out["recall_ms_p95"] = round(pct(lat, 95), 2)
            qs = qtexts[args.queries: args.queries + 50]
            for q in qs:
                c.recall("bench", q, top_k=10)
            lat_c = []
            for q in qs:
                t = time.perf_counter()
                c.recall("bench", q, top_k=10)
                lat_c.append((time.perf_counter() - t) * 1000)
            out["recall_repeat_query_ms_p50"] = round(statistics.median(lat_c), 2)
        palace_bin = shutil.which("palace")
        cmd = [palace_bin] if palace_bin else [sys.executable, "-m", "palace_client"]
        wall = []
        for i in range(args.cli_runs):
            t = time.perf_counter()
            subprocess.run([*cmd, "recall", f"billing webhook retries {i}", "--palace", "bench",
                            "-k", "5"], env=env, check=True, capture_output=True)
            wall.append((time.perf_counter() - t) * 1000)
        out["cli_recall_wall_ms_p50"] = round(statistics.median(wall), 1)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        out["python_startup_ms"] = round((time.perf_counter() - t) * 1000, 1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
