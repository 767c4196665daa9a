"""Calibrate recall's relevance floor on the LoCoMo dev split (in-process, real model).

For each LoCoMo conversation the turns are embedded as the daemon stores them (text
``{speaker} said, "{text}"``, one chunk each: turns are short) and every question is embedded
as a query. The relevance of a turn for a question is ``palaced.text.relevance.relevance`` (the
daemon's own function: ``max(clipped cosine, query-word coverage)``), with the exact cosine
over all turns (the daemon's HNSW pool holds the same best cosines). Then, for a candidate
floor ``f``:

* gold hits dropped: the share of (question, gold turn) pairs whose relevance is under ``f``;
* cross-conversation "nothing relevant": each conversation's questions asked against every
  other conversation's turns (which hold nothing about them); a question answers "nothing
  relevant" when its best turn there is under ``f``. Reported overall and per pair of
  conversations (the spread).

Each is measured with the floor alone (``none``) and combined with a rule on the names the
question asks about (``palaced.text.topics.query_entities``: "Caroline", "Postgres", "config.py"),
looked up in the palace: the question answers "nothing relevant" (and all its gold hits count
as flagged) when the rule fires, whatever the floor. Variants:

* ``all/fts``, recall's rule: fires when the question names something and *no* name is
  mentioned by any turn, looked up with the daemon's own ``store.search.mentioned`` (FTS5 on
  an in-memory ``drawers_fts``: case-insensitive, Porter-stemmed, so possessives and plurals
  fold);
* ``any/fts``: fires when *some* name is not mentioned;
* ``all/exact``: as ``all``, whole lower-case words without stemming;
* ``all/case``: as ``all``, whole words spelled as in the question (case-sensitive).

Per variant the chosen floor is the highest on the grid that drops at most ``--max-drop``
(2 %) of gold hits; per-conversation rates are printed at it and at the daemon's 0.275. The
rules are general (one number on an absolute scale; names looked up as they are), never
tuned per question.

    python bench/floor.py [--data PATH] [--model-dir DIR] [--max-drop 0.02] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import apsw
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR, build_drawers, build_questions  # noqa: E402
from palaced.config.model import EmbedderSettings  # noqa: E402
from palaced.engine.embedder import FastEmbedder  # noqa: E402
from palaced.store.lookup.search import fts_terms, mentioned  # noqa: E402
from palaced.store.schema.sqlite import V1  # noqa: E402
from palaced.text.relevance import relevance  # noqa: E402
from palaced.text.topics import query_entities  # noqa: E402

GRID = [round(x, 3) for x in np.arange(0.10, 0.701, 0.025)]


def best_relevance(texts: list[str], sims: np.ndarray, terms: list[str], top: int = 50
                   ) -> float:
    """The best relevance among the ``top`` turns by cosine and every turn with a query word."""
    cand = set(np.argsort(-sims)[:top].tolist())
    cand |= {i for i, t in enumerate(texts) if terms and any(w in t.lower() for w in terms)}
    return max(relevance(texts[i], terms, float(sims[i])) for i in cand)


def _fts(texts: list[str]) -> apsw.Connection:
    """An in-memory ``drawers_fts`` over ``texts``, with the daemon's own DDL."""
    conn = apsw.Connection(":memory:")
    conn.execute(next(s for s in V1 if "VIRTUAL TABLE drawers_fts" in s))
    with conn:
        conn.executemany("INSERT INTO drawers_fts(text, context, dates) VALUES (?, '', '')",
                         [(t,) for t in texts])
    return conn


def _surface(query: str, name: str) -> str:
    """``name`` (a normalised entity) as the query spells it, for the case-sensitive variant."""
    m = re.search(re.escape(name).replace(r"\ ", r"\s+"), query, re.IGNORECASE)
    return m.group() if m else name


class Palace:
    """One conversation as a palace: its turns for the name lookups of each variant."""

    def __init__(self, texts: list[str]) -> None:
        self.conn = _fts(texts)
        self.blob = "\n".join(texts)
        self.lower = self.blob.lower()

    def known(self, variant: str, query: str, names: list[str]) -> set[str]:
        if variant.endswith("exact"):  # case-insensitive whole words, no stemming
            return {n for n in names if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", self.lower)}
        if variant.endswith("case"):  # as the query spells it, whole words
            return {n for n in names if re.search(
                rf"(?<!\w){re.escape(_surface(query, n))}(?!\w)", self.blob)}
        return mentioned(self.conn, names)  # the daemon's lookup: FTS, case-folded, stemmed


# variant -> (rule, lookup): "all" fires when the query names something and no name is known,
# "any" when some name is unknown.
VARIANTS = ("none", "all/fts", "any/fts", "all/exact", "all/case")


def fires(variant: str, palace: Palace, query: str, names: list[str]) -> bool:
    if variant == "none" or not names:
        return False
    known = palace.known(variant, query, names)
    return not known if variant.startswith("all") else len(known) < len(names)


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
    palaces = {sid: Palace(texts) for sid, _, texts, _, _, _ in convs}
    # gold: (conversation, relevance, {variant: rule fired}); cross likewise per pair.
    gold: list[tuple[str, float, dict[str, bool]]] = []
    cross: list[tuple[str, str, float, dict[str, bool]]] = []
    n_q = n_named = 0
    for sid, ids, texts, passages, qs, queries in convs:
        where = {d: i for i, d in enumerate(ids)}
        for q, qv in zip(qs, queries, strict=True):
            terms = fts_terms(q.question)
            names = query_entities(q.question)
            n_q += 1
            n_named += bool(names)
            sims = passages @ qv
            own = {v: fires(v, palaces[sid], q.question, names) for v in VARIANTS}
            gold += [(sid, relevance(texts[where[g]], terms, float(sims[where[g]])), own)
                     for g in q.gold_turns if g in where]
            for sid2, _, texts2, passages2, _, _ in convs:
                if sid2 != sid:
                    other = {v: fires(v, palaces[sid2], q.question, names) for v in VARIANTS}
                    cross.append((sid, sid2, best_relevance(texts2, passages2 @ qv, terms),
                                  other))
    print(f"{len(gold)} gold hits, {len(cross)} cross-conversation questions; "
          f"{n_named / n_q:.1%} of the {n_q} dev questions name an entity")
    report: dict[str, Any] = {}
    for v in VARIANTS:
        report[v] = _variant(v, gold, cross, args.max_drop)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def _variant(v: str, gold: list[tuple[str, float, dict[str, bool]]],
             cross: list[tuple[str, str, float, dict[str, bool]]], max_drop: float
             ) -> dict[str, Any]:
    """Print and return one variant's floor grid, its chosen floor and per-conversation rates."""
    g_rel = np.array([r for _, r, _ in gold])
    g_fire = np.array([f[v] for _, _, f in gold])
    c_rel = np.array([r for _, _, r, _ in cross])
    c_fire = np.array([f[v] for _, _, _, f in cross])
    pairs = [f"{a}->{b}" for a, b, _, _ in cross]
    rows = []
    for f in GRID:
        flagged = g_fire | (g_rel < f)
        nothing = c_fire | (c_rel < f)
        per = {p: float(np.mean([n for n, q in zip(nothing, pairs, strict=True) if q == p]))
               for p in dict.fromkeys(pairs)}
        rows.append({"floor": f, "gold_dropped": float(np.mean(flagged)),
                     "cross_nothing": float(np.mean(nothing)),
                     "spread": [min(per.values()), max(per.values())], "per_pair": per})
    ok = [r for r in rows if r["gold_dropped"] <= max_drop]
    chosen = ok[-1] if ok else rows[0]
    print(f"\n== rule {v}: names rule alone flags {float(np.mean(g_fire)):.1%} of gold hits, "
          f"answers nothing relevant for {float(np.mean(c_fire)):.1%} of cross questions")
    print(" floor  gold dropped  cross nothing-relevant  spread over conversation pairs")
    for r in rows:
        if r["floor"] > 0.55:
            continue
        mark = "  <- chosen" if r is chosen else ""
        print(f" {r['floor']:.3f}  {r['gold_dropped']:11.1%}  {r['cross_nothing']:22.1%}  "
              f"{r['spread'][0]:.0%}-{r['spread'][1]:.0%}{mark}")
    f = chosen["floor"]
    for at in sorted({f, 0.275}):
        print(f" at floor {at:.3f}:")
        for sid in dict.fromkeys(s for s, _, _ in gold):
            mine = [(r < at) or fi[v] for s, r, fi in gold if s == sid]
            asked = [(r < at) or fi[v] for a, _, r, fi in cross if a == sid]
            print(f"  {sid}: gold dropped {float(np.mean(mine)):.1%} of {len(mine)}; its "
                  f"questions elsewhere: nothing relevant {float(np.mean(asked)):.1%}")
    return {"rows": rows, "chosen": chosen}


if __name__ == "__main__":
    raise SystemExit(main())
