"""palace and MemPalace side by side, in one run, on the same data and the same model.

Data: every LoCoMo dev turn (``{speaker} said, "{text}"``, a wing per conversation, room
``session_N``) plus ``perf.py``'s synthetic drawers up to ``--drawers`` (10,000 by default);
queries: the first ``--queries`` LoCoMo questions, asked verbatim, ``top_k``/``limit`` 10.

* palace: a private palaced (the shared int8 all-MiniLM-L6-v2) under a scratch home; one
  palace filled with ``remember_many`` in batches of 1,000 (ingest drawers/s, embedding
  included); ``--single`` single ``remember`` calls (ms); recall p50/p95 through the socket.
  The daemon is stopped before MemPalace starts, so the two never share the CPU.
* MemPalace (PyPI ``mempalace``, pinned to ``MEMPALACE_VERSION``) in its own virtualenv
  (``--venv``, created with ``pip install`` when missing; never palace's), run by
  ``bench/_mempalace_runner.py`` with ``HOME`` a scratch directory, offline
  (``HF_HUB_OFFLINE=1``, chromadb telemetry off). chromadb's ONNX MiniLM embedding function
  finds the same model files copied into ``$HOME/.cache/chroma/onnx_models/all-MiniLM-L6-v2/
  onnx/`` (plus a ``vocab.txt`` written from the tokenizer's vocabulary in id order), so the
  user's cache is never touched and nothing is downloaded. Its ingest is the miner's
  ``collection.upsert`` in batches of ``DRAWER_UPSERT_BATCH_SIZE`` (1,000) on the collection
  the MCP server opens, its single add ``tool_add_drawer`` and its recall ``tool_search``
  (the MCP tools' functions), see the runner's docstring.

Printed: a table of both and the ratios (palace / MemPalace for rates, MemPalace / palace
for latencies: above 1 means palace is faster).

    python bench/mempalace_compare.py [--drawers 10000] [--queries 200] [--single 100]
                                      [--venv /work/venv-mempalace] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from locomo import DEFAULT_DATA, build_drawers, build_questions
from perf import pct, synthetic

MEMPALACE_VERSION = "3.11.0"
RUNNER = Path(__file__).resolve().parent / "_mempalace_runner.py"
CHROMA_MODEL_FILES = ("config.json", "model.onnx", "special_tokens_map.json",
                      "tokenizer_config.json", "tokenizer.json")


def dataset(data: Path, total: int, n_queries: int) -> tuple[list[dict[str, str]], list[str]]:
    samples = json.loads(data.read_text("utf-8"))
    drawers: list[dict[str, str]] = []
    questions: list[str] = []
    for sample in samples:
        wing = f"locomo-{sample['sample_id']}"
        drawers += [{"text": str(d.item["text"]), "wing": wing, "room": str(d.item["room"])}
                    for d in build_drawers(sample["conversation"], wing=wing)]
        questions += [q.question for q in build_questions(sample)]
    drawers = drawers[:total]
    drawers += [{"text": str(i["text"]), "wing": str(i["wing"]), "room": str(i["room"])}
                for i in synthetic(max(0, total - len(drawers)))]
    step = max(1, len(questions) // n_queries)  # spread over every conversation
    return drawers, questions[::step][:n_queries]


def ensure_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import mempalace.version as v; "
                            "print(v.__version__)"], capture_output=True, text=True)
    if probe.stdout.strip() != MEMPALACE_VERSION:
        subprocess.run([str(py), "-m", "pip", "install", "-q",
                        f"mempalace=={MEMPALACE_VERSION}"], check=True)
    return py


def chroma_home(model: Path) -> Path:
    """A scratch HOME whose chromadb model cache holds ``model`` (and its vocab.txt)."""
    home = Path(tempfile.mkdtemp(prefix="mpbench-", dir="/tmp"))
    dest = home / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    dest.mkdir(parents=True)
    for name in CHROMA_MODEL_FILES:
        shutil.copy(model / name, dest / name)
    vocab = json.loads((model / "tokenizer.json").read_text("utf-8"))["model"]["vocab"]
    (dest / "vocab.txt").write_text(
        "".join(f"{tok}\n" for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])),
        "utf-8")
    return home


def run_mempalace(py: Path, model: Path, drawers: list[dict[str, str]], qs: list[str],
                  single: int) -> dict[str, Any]:
    home = chroma_home(model)
    try:
        spec = home / "spec.json"
        spec.write_text(json.dumps({"drawers": drawers, "queries": qs, "single": single}))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PALACE", "MEMPALACE", "MEMPAL_", "PYTHON", "VIRTUAL_ENV"))}
        env.update(HOME=str(home), MEMPALACE_CONFIG_DIR=str(home / ".mempalace"),
                   MEMPALACE_PALACE_PATH=str(home / ".mempalace" / "palace"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", ANONYMIZED_TELEMETRY="False",
                   PATH=f"{py.parent}:{env.get('PATH', '')}")
        res = subprocess.run([str(py), str(RUNNER), str(spec), str(home / "out.json")],
                             env=env, cwd=str(home), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=3600)
        if res.returncode != 0:
            raise RuntimeError(f"MemPalace runner failed:\n{res.stderr[-3000:]}")
        progress = [ln for ln in res.stderr.splitlines() if ln.startswith("mempalace: ")]
        print("\n".join(progress[-3:]))
        out: dict[str, Any] = json.loads((home / "out.json").read_text("utf-8"))
        out["network_downloads"] = "download" in res.stderr.lower()
        return out
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_palace(model: Path, tiktoken: Path, drawers: list[dict[str, str]], qs: list[str],
               single: int) -> dict[str, Any]:
    daemon = PrivateDaemon("palcmp-", model, tiktoken)
    out: dict[str, Any] = {}
    try:
        status = daemon.start(timeout_s=180)
        out["model"] = status["model"]["state"]
        with daemon.client("compare") as c:
            c.create_palace("compare")
            c.create_palace("compare-warm")
            c.remember_many("compare-warm", drawers[:16])
            c.recall("compare-warm", "warm up", top_k=10)
            t0 = time.perf_counter()
            for s in range(0, len(drawers), 1000):
                c.remember_many("compare", drawers[s:s + 1000])
            out["ingest_drawers_per_s"] = round(len(drawers) / (time.perf_counter() - t0), 1)
            out["count"] = c.palace_info("compare")["drawers"]
            lat = []
            for i in range(single):
                d = drawers[i]
                t = time.perf_counter()
                c.remember("compare", f"{d['text']} (single {i})", wing=d["wing"],
                           room=d["room"])
                lat.append((time.perf_counter() - t) * 1000)
            out["add_drawer_ms_p50"] = round(statistics.median(lat), 2) if lat else None
            for q in qs[:5]:
                c.recall("compare", q + " (warm-up)", top_k=10)
            lat = []
            for q in qs:
                t = time.perf_counter()
                c.recall("compare", q, top_k=10)
                lat.append((time.perf_counter() - t) * 1000)
            out["recall_ms_p50"] = round(statistics.median(lat), 2)
            out["recall_ms_p95"] = round(pct(lat, 95), 2)
    finally:
        daemon.stop()
        daemon.cleanup(keep=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drawers", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--single", type=int, default=100, help="single add calls on each side")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--venv", type=Path, default=Path("/work/venv-mempalace"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drawers, qs = dataset(args.data, args.drawers, args.queries)
    py = ensure_venv(args.venv)
    t0 = time.monotonic()
    pal = run_palace(args.model, args.tiktoken, drawers, qs, args.single)
    load_p = round(os.getloadavg()[0], 1)
    print(f"palace: {pal} (load {load_p})", flush=True)
    mp = run_mempalace(py, args.model, drawers, qs, args.single)
    load_m = round(os.getloadavg()[0], 1)
    rows = [("ingest drawers/s (bulk)", "ingest_drawers_per_s", True),
            ("single add ms p50", "add_drawer_ms_p50", False),
            ("recall ms p50", "recall_ms_p50", False),
            ("recall ms p95", "recall_ms_p95", False)]
    print(f"\npalace vs MemPalace {mp.get('version')}: {len(drawers)} drawers "
          f"({sum(1 for d in drawers if d['wing'].startswith('locomo'))} LoCoMo turns), "
          f"{len(qs)} LoCoMo questions, same int8 MiniLM model; load average {load_p} "
          f"(palace) / {load_m} (MemPalace), a shared 2-core machine, "
          f"{time.monotonic() - t0:.0f} s")
    print(f"{'measure':<26}{'palace':>10}{'MemPalace':>11}{'palace faster by':>18}")
    ratios = {}
    for label, key, higher in rows:
        a, b = pal.get(key), mp.get(key)
        ratio = (a / b if higher else b / a) if a and b else None
        ratios[key] = round(ratio, 2) if ratio else None
        print(f"{label:<26}{a!s:>10}{b!s:>11}{(f'x{ratio:.1f}' if ratio else '-'):>18}")
    print(f"stored: palace {pal.get('count')}, MemPalace {mp.get('count')} drawers; "
          f"MemPalace results per query (median) {mp.get('results_per_query_median')}")
    print(f"aims: recall >= x12 faster (p50: x{ratios['recall_ms_p50']}), "
          f"ingest >= x30 faster (x{ratios['ingest_drawers_per_s']})")
    if args.json:
        args.json.write_text(json.dumps({"palace": pal, "mempalace": mp, "ratios": ratios,
                                         "loadavg": [load_p, load_m]}, indent=2))


if __name__ == "__main__":
    main()
