"""Store statements per recall, through the daemon's own recall path, in-process.

Builds one palace per LoCoMo conversation (as ``bench/locomo.py`` does: a drawer per turn,
``remember_many``, the real model unless ``--hash``), then asks every question with
``recall.recall`` (``top_k=50``, hits only) and counts, per recall:

* the SQL statements run on the palace's connections (an APSW exec tracer installed on
  every connection through ``apsw.connection_hooks``; statements SQLite runs inside FTS5 or
  a trigger are not counted: they are not the recall's queries);
* how many times the recall path enters ``palaced/store/search.py`` (a call into one of its
  functions from code outside it; a profiler hook on every thread).

Prints the median, p95 and max of both over all questions, and the total.

    python bench/recall_queries.py [--conversations N] [--hash] [--json OUT] [--dump OUT]

``--dump`` writes every recall's ranking (ids and rank scores), so that two trees' rankings
can be compared exactly (run the script of one tree with the other's ``PYTHONPATH``).

The data (CC BY-NC 4.0) is for benchmarking only and is never copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import apsw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR, build_drawers, build_questions  # noqa: E402
from palaced.config import settings as config_mod  # noqa: E402
from palaced.config.model import EmbedderSettings  # noqa: E402
from palaced.engine.embedder import Embedder, FastEmbedder, HashEmbedder  # noqa: E402
from palaced.engine.services import ModelState, Services  # noqa: E402
from palaced.engine.tokens import Tokenizer  # noqa: E402
from palaced.memory import writes  # noqa: E402
from palaced.ops.fields import drawers_from_items  # noqa: E402
from palaced.palace.handle import Palace  # noqa: E402
from palaced.retrieval import recall  # noqa: E402
from palaced.wire.paths import Paths  # noqa: E402

TOP_K = 50
SEARCH_FILE = str(ROOT / "palaced" / "store" / "search.py")


class Counter:
    """Statements and store-search entries since the last ``reset``."""

    def __init__(self) -> None:
        self.statements = 0
        self.entries = 0
        self.on = False

    def reset(self) -> None:
        self.statements = self.entries = 0

    def trace(self, _cursor: apsw.Cursor, _sql: str, _bindings: Any) -> bool:
        if self.on:
            self.statements += 1
        return True

    def hook(self, conn: apsw.Connection) -> None:
        conn.exec_trace = self.trace

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if (self.on and event == "call" and frame.f_code.co_filename == SEARCH_FILE
                and (frame.f_back is None or frame.f_back.f_code.co_filename != SEARCH_FILE)):
            self.entries += 1


def services(home: Path, emb: Embedder) -> Services:
    paths = Paths(home, home / "state", home / "none.toml", home / "run", home / "run" / "s")
    return Services(config=config_mod.load(paths), model=ModelState(state="ready", embedder=emb),
                    tokenizer=Tokenizer.fallback("bench"))


async def measure(args: argparse.Namespace, counter: Counter) -> dict[str, Any]:
    emb: Embedder = HashEmbedder(64) if args.hash else FastEmbedder.load(
        EmbedderSettings(model_path=args.model_dir))
    work = Path(tempfile.mkdtemp(prefix="palace-rq-"))
    svc = services(work, emb)
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    statements: list[int] = []
    entries: list[int] = []
    elapsed = 0.0
    hybrid = 0
    dumped: list[Any] = []
    for sample in samples:
        name = "c-" + str(sample["sample_id"]).lower().replace("_", "-")
        p = await Palace.open(name, work / name, svc)
        try:
            items = drawers_from_items(200_000, 100_000,
                                       [d.item for d in build_drawers(sample["conversation"])],
                                       int(time.time() * 1000))
            await writes.remember_many(p, items)
            for q in build_questions(sample):
                req = recall.RecallRequest(query=q.question, top_k=TOP_K, levels=(0,), budget=0)
                counter.reset()
                counter.on = True
                t0 = time.perf_counter()
                got = await recall.recall(p, req)
                dumped.append([q.question, [[int(r["id"]), r["rank_score"]]
                                            for r in got.results]])
                hybrid += got.hybrid
                elapsed += time.perf_counter() - t0
                counter.on = False
                statements.append(counter.statements)
                entries.append(counter.entries)
                p._pending_touch.clear()  # no access writes between questions
        finally:
            await p.aclose()

    if args.dump is not None:  # every recall's ranking, to compare two trees' exactly
        args.dump.write_text(json.dumps(dumped) + "\n", "utf-8")

    def summary(xs: list[int]) -> dict[str, float]:
        s = sorted(xs)
        return {"median": statistics.median(s), "p95": s[int(0.95 * (len(s) - 1))],
                "max": s[-1], "mean": round(statistics.fmean(s), 2), "total": sum(s)}

    return {"recalls": len(statements), "hybrid": hybrid,
            "mode": "hash" if args.hash else "model",
            "statements": summary(statements), "search_entries": summary(entries),
            "ms_per_recall_traced": round(1000 * elapsed / max(1, len(statements)), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--hash", action="store_true", help="the hashing embedder, no model")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    parser.add_argument("--dump", type=Path, default=None, metavar="OUT",
                        help="write each recall's (id, rank_score) list to OUT")
    args = parser.parse_args()
    counter = Counter()
    apsw.connection_hooks.append(counter.hook)
    threading.setprofile(counter.profile)
    sys.setprofile(counter.profile)
    try:
        report = anyio.run(measure, args, counter)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    for key in ("statements", "search_entries"):
        s = report[key]
        print(f"{key:15} per recall: median {s['median']}, p95 {s['p95']}, max {s['max']}, "
              f"mean {s['mean']}  ({report['recalls']} recalls, {report['hybrid']} hybrid, "
              f"{report['mode']})")
    print(f"ms per recall (traced, not a timing): {report['ms_per_recall_traced']}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
