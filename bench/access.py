"""Access-aware ranking on the LoCoMo dev split (in-process).

The daemon's own code runs in this process (``Palace``, ``writes.remember_many``,
``recall.recall``, ``access.apply_touches``) with the real model: one palace per conversation,
a drawer per turn as ``bench/locomo.py`` stores them. Each palace is built once into
``--work`` and copied fresh for every measured pass, so access counts never leak between
passes. Every question is asked with ``recall`` (top_k 50) and scored like ``bench/locomo.py``
(turn R@1/5/10, session R@1/5/10 from the response's rooms then the turn ranking).

LoCoMo never asks a question twice, so "does ranking by use help or hurt" needs access
patterns. Each ranking variant (``RankParams.access_weight``) runs these passes:

* ``fresh``: nobody recalled anything before (what ``bench/locomo.py`` measures);
* ``organic``: the questions in order, the touches of each recall (its first 10 results
  above the floor, as the daemon records them) written before the next question, with the
  daemon's promotion policy: earlier questions' hits gain accesses and importance;
* ``repeat``: after the organic pass, every question asked again and scored (an agent
  asking what it asked before);
* ``gold``: before each question its gold turns are recalled ``--k`` times (the answer was
  useful before: the best case for use-aware ranking), accumulating over the questions;
* ``noise``: the same number of random non-gold turns recalled ``--k`` times instead (use
  unrelated to the question: the worst case).

The length-adaptive vector weight this script also measured (``--length``, docs/benchmarks.md,
"Length-adaptive fusion") was not kept and is gone from the ranking, and so from here.

    python bench/access.py [--work DIR] [--weights 0,0.05,0.1] [--k 5] [--promote-after N]
                           [--scenarios fresh,organic,repeat,gold,noise] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_MODEL_DIR,
    Question,
    build_drawers,
    build_questions,
    evaluate,
    session_ranking,
)
from palaced.config import settings as config_mod  # noqa: E402
from palaced.config.model import EmbedderSettings  # noqa: E402
from palaced.engine.embedder import FastEmbedder  # noqa: E402
from palaced.engine.services import ModelState, Services  # noqa: E402
from palaced.engine.tokens import Tokenizer  # noqa: E402
from palaced.memory import writes
from palaced.ops.fields import drawers_from_items  # noqa: E402
from palaced.palace.handle import Palace  # noqa: E402
from palaced.retrieval import (
    recall,  # noqa: E402
    search,
)
from palaced.wire.paths import Paths  # noqa: E402

TOP_K = 50


def services(home: Path, emb: FastEmbedder) -> Services:
    paths = Paths(home, home / "state", home / "none.toml", home / "run", home / "run" / "s")
    return Services(config=config_mod.load(paths), model=ModelState(state="ready", embedder=emb),
                    tokenizer=Tokenizer.fallback("bench"))


def use_params(params: search.RankParams) -> None:
    """Make ``params`` the ranking that ``recall.recall`` runs (whatever the model)."""
    recall.params_for = lambda _identity: params  # type: ignore[assignment]
    search.lexical_search.__defaults__ = (params, None, 0)


async def build(work: Path, svc: Services, samples: list[dict[str, Any]]
                ) -> list[tuple[str, dict[int, str], list[Question]]]:
    """One palace per conversation under ``work`` (reused when already built)."""
    out = []
    for sample in samples:
        name = "c-" + str(sample["sample_id"]).lower().replace("_", "-")
        drawers = build_drawers(sample["conversation"])
        pdir = work / "template" / name
        marker = pdir / "ids.json"
        if not marker.exists():
            shutil.rmtree(pdir, ignore_errors=True)
            p = await Palace.open(name, pdir, svc)
            items = drawers_from_items(200_000, 100_000, [d.item for d in drawers],
                                       int(time.time() * 1000))
            ids = (await writes.remember_many(p, items))["ids"]
            await p.aclose()
            marker.write_text(json.dumps(ids))
        ids = json.loads(marker.read_text())
        turns = {int(i): d.dia_id for i, d in zip(ids, drawers, strict=True)}
        out.append((name, turns, build_questions(sample)))
    return out


async def one_pass(p: Palace, turns: dict[int, str], questions: list[Question], *,
                   touch: bool, before: Any = None) -> tuple[list[list[str]], list[list[str]]]:
    """Ask every question; returns the turn rankings and session rankings."""
    ranked_turns, ranked_sessions = [], []
    for q in questions:
        if before is not None:
            await before(q)
        res = await recall.recall(p, recall.RecallRequest(query=q.question, top_k=TOP_K,
                                                          levels=(0,), budget=0))
        ranked = [turns[int(r["id"])] for r in res.results if int(r["id"]) in turns]
        rooms = [r for _, r, _ in res.rooms]
        ranked_turns.append(ranked)
        ranked_sessions.append(list(dict.fromkeys([*rooms, *session_ranking(ranked)])))
        if touch:
            await p.checkpoint()  # writes the touches this recall queued
        else:
            p._pending_touch.clear()
    return ranked_turns, ranked_sessions


async def run_scenario(work: Path, svc: Services, convs: list[Any], scenario: str, k: int,
                       seed: int) -> dict[str, Any]:
    """One scenario over every conversation on fresh copies of the palaces."""
    all_q: list[Question] = []
    all_t: list[list[str]] = []
    all_s: list[list[str]] = []
    per_conv: dict[str, Any] = {}
    rnd = random.Random(seed)
    for name, turns, questions in convs:
        pdir = work / "run" / name
        shutil.rmtree(pdir, ignore_errors=True)
        shutil.copytree(work / "template" / name, pdir)
        p = await Palace.open(name, pdir, svc, create=False)
        by_dia = {v: i for i, v in turns.items()}
        try:
            async def press(ids: list[int], p: Palace = p) -> None:
                for _ in range(k):
                    p.note_touched(ids)
                await p.checkpoint()

            async def gold(q: Question, by_dia: dict[str, int] = by_dia) -> None:
                await press([by_dia[t] for t in q.gold_turns if t in by_dia])

            async def noise(q: Question, turns: dict[int, str] = turns) -> None:
                others = [i for i, t in turns.items() if t not in q.gold_turns]
                await press(rnd.sample(others, min(len(q.gold_turns), len(others))))

            hooks = {"gold": gold, "noise": noise}
            touch = scenario != "fresh"
            t, s = await one_pass(p, turns, questions, touch=touch, before=hooks.get(scenario))
            if scenario == "repeat":
                t, s = await one_pass(p, turns, questions, touch=True)
        finally:
            await p.aclose()
        per_conv[name] = evaluate(questions, t, ranked_sessions=s)
        all_q += questions
        all_t += t
        all_s += s
    result = evaluate(all_q, all_t, ranked_sessions=all_s)
    result["per_conversation"] = per_conv
    return result


def row(label: str, r: dict[str, Any]) -> str:
    t, s = r["turn"], r["session"]
    return (f"{label:28} turn {t['recall@1']:.3f} / {t['recall@5']:.3f} / {t['recall@10']:.3f}"
            f"   session {s['recall@1']:.3f} / {s['recall@5']:.3f} / {s['recall@10']:.3f}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    emb = FastEmbedder.load(EmbedderSettings(model_path=args.model_dir))
    work = args.work or Path(tempfile.mkdtemp(prefix="palace-access-"))
    svc = services(work, emb)
    policy = svc.config.upkeep
    if args.promote_after is not None:
        policy = replace(policy, promote_after=args.promote_after)
        svc.config = replace(svc.config, upkeep=policy)
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    convs = await build(work, svc, samples)
    report: dict[str, Any] = {"k": args.k, "policy": policy.__dict__, "runs": {}}
    for weight in args.weights:
        use_params(replace(search.RankParams(), access_weight=weight))
        for promote in ((True, False) if args.no_promotion else (True,)):
            svc.config = replace(svc.config, upkeep=replace(
                policy, promote_after=policy.promote_after if promote else 0))
            for scenario in args.scenarios:
                if scenario == "fresh" and not promote:
                    continue
                label = f"w={weight:g} {scenario}" + ("" if promote else " (no promotion)")
                r = await run_scenario(work, svc, convs, scenario, args.k, args.seed)
                report["runs"][label] = r
                print(row(label, r), flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for the palaces (reused between runs)")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--weights", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.0, 0.05, 0.1])
    parser.add_argument("--k", type=int, default=5, help="recalls per pressed drawer")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--promote-after", type=int, default=None,
                        help="the [upkeep] promote_after to measure (default: the daemon's)")
    parser.add_argument("--scenarios", type=lambda s: s.split(","),
                        default=["fresh", "organic", "repeat", "gold", "noise"])
    parser.add_argument("--no-promotion", action="store_true",
                        help="also run the touched passes without promotion")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = anyio.run(main_async, args)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
