"""Calibrate recall's relevance floor on the LoCoMo dev split (in-process, real model).

For each LoCoMo conversation the turns are embedded as the daemon stores them (text
``{speaker} said, "{text}"``, one chunk each: turns are short) and every question is embedded
as a query. The relevance of a turn for a question is ``palaced.relevance.relevance`` (the
daemon's own function: ``max(clipped cosine, query-word coverage)``), with the exact cosine
over all turns (the daemon's HNSW pool holds the same best cosines). Then, for a candidate
floor ``f``:

* gold hits dropped: the share of (question, gold turn) pairs whose relevance is under ``f``;
* cross-conversation "nothing relevant": each conversation's questions asked against every
  other conversation's turns (which hold nothing about them); a question answers "nothing
  relevant" when its best turn there is under ``f``. Reported overall and per pair of
  conversations (the spread).

The chosen floor is the highest on the grid that drops at most ``--max-drop`` (2 %) of gold
hits. The rule is general (one number on an absolute scale), never tuned per question.

    python bench/floor.py [--data PATH] [--model-dir DIR] [--max-drop 0.02] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR, build_drawers, build_questions  # noqa: E402
from palaced.embedder import EmbedderSettings, FastEmbedder  # noqa: E402
from palaced.relevance import relevance  # noqa: E402
from palaced.store.search import fts_terms  # noqa: E402

GRID = [round(x, 3) for x in np.arange(0.10, 0.701, 0.025)]


def best_relevance(texts: list[str], sims: np.ndarray, terms: list[str], top: int = 50
                   ) -> float:
    """The best relevance among the ``top`` turns by cosine and every turn with a query word."""
    cand = set(np.argsort(-sims)[:top].tolist())
    cand |= {i for i, t in enumerate(texts) if terms and any(w in t.lower() for w in terms)}
    return max(relevance(texts[i], terms, float(sims[i])) for i in cand)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    ap.add_argument("--max-drop", type=float, default=0.02)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    emb = FastEmbedder.load(EmbedderSettings(model_path=args.model_dir, threads=1,
                                             allow_download=False))
    data = json.loads(args.data.read_text())
    convs: list[tuple[str, list[str], list[str], np.ndarray, list[Any], np.ndarray]] = []
    for sample in data:
        ds = build_drawers(sample["conversation"])
        qs = build_questions(sample)
        texts = [str(d.item["text"]) for d in ds]
        passages = emb.embed_passages(texts)
        queries = np.stack([emb.embed_query(q.question) for q in qs])
        convs.append((str(sample["sample_id"]), [d.dia_id for d in ds], texts, passages, qs,
                      queries))
    gold: list[float] = []
    gold_of: dict[str, list[float]] = {}
    cross: dict[tuple[str, str], list[float]] = {}
    for sid, ids, texts, passages, qs, queries in convs:
        where = {d: i for i, d in enumerate(ids)}
        for q, qv in zip(qs, queries, strict=True):
            terms = fts_terms(q.question)
            sims = passages @ qv
            mine = [relevance(texts[where[g]], terms, float(sims[where[g]]))
                    for g in q.gold_turns if g in where]
            gold += mine
            gold_of.setdefault(sid, []).extend(mine)
            for sid2, _, texts2, passages2, _, _ in convs:
                if sid2 != sid:
                    cross.setdefault((sid, sid2), []).append(
                        best_relevance(texts2, passages2 @ qv, terms))
    g = np.array(gold)
    rows = []
    for f in GRID:
        per = {f"{a}->{b}": float(np.mean(np.array(v) < f)) for (a, b), v in cross.items()}
        allc = np.concatenate([np.array(v) for v in cross.values()])
        rows.append({"floor": f, "gold_dropped": float(np.mean(g < f)),
                     "cross_nothing": float(np.mean(allc < f)),
                     "spread": [min(per.values()), max(per.values())], "per_pair": per})
    ok = [r for r in rows if r["gold_dropped"] <= args.max_drop]
    chosen = ok[-1] if ok else rows[0]
    print(f"{len(g)} gold hits, {sum(len(v) for v in cross.values())} cross-conversation "
          "questions")
    print(" floor  gold dropped  cross nothing-relevant  spread over conversation pairs")
    for r in rows:
        mark = "  <- chosen" if r is chosen else ""
        print(f" {r['floor']:.3f}  {r['gold_dropped']:11.1%}  {r['cross_nothing']:22.1%}  "
              f"{r['spread'][0]:.0%}-{r['spread'][1]:.0%}{mark}")
    print(f"chosen floor {chosen['floor']:.3f}: gold dropped {chosen['gold_dropped']:.1%}, "
          f"cross-conversation nothing relevant {chosen['cross_nothing']:.1%}")
    f = chosen["floor"]
    for sid, values in gold_of.items():
        asked = [v for (a, _), vs in cross.items() if a == sid for v in vs]
        print(f"  {sid}: gold dropped {float(np.mean(np.array(values) < f)):.1%} of "
              f"{len(values)}; its questions elsewhere: nothing relevant "
              f"{float(np.mean(np.array(asked) < f)):.1%}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "chosen": chosen}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
