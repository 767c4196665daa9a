"""The vector side of the ranking (issue 33), in-process on ``bench/rank_cv.py``'s palaces.

``probe``: where the vector side's gold turns go in palace's ranking ("why does mpnet add
little"). For every LoCoMo dev question: the exact cosine ranking of all the conversation's drawers
(the ``vectors`` table, no index), the palace's ranking (``search.rank`` with the model's
defaults, as ``bench/rank_cv.py`` calls it), the keyword list alone, and a plain hybrid
(RRF, k=60, of the keyword hits and the exact cosines: the harness issue 33 quotes). Prints
turn R@1/5/10 of each and how many gold turns the exact cosine top 10 holds that the
palace's top 10 loses (and the reverse), where those lost ones rank in the palace's fusion,
and the vector list's depth against where the gold turns sit in the cosine ranking.

``cv``: ``bench/rank_cv.py`` (its arguments, ``--sweep``, ``--fit``, ``--set``) with
experiments on the vector side as knobs of its own, not the engine's: ``fform`` the
fusion's form (0 the engine's weighted z-scores; 1 weighted reciprocal ranks, k=60; 2
weighted min-max scaled scores; 3 weighted linear ranks, 1 - rank / list length: a drawer a
list misses gets 0 in 1-3; 4 the engine's, but the vector scores standardised by the mean
and stdev of the query's scores over the whole palace instead of over the list),
``f4w`` form 4 at that vector weight (0: ``fform`` and ``vector`` as they are; so that
``--sweep f4w`` lets each fold choose between the engine's fusion and form 4), ``vdepth``
the vector list's depth (0: ``RankParams.pool``) and ``rescore`` (1: every
keyword hit gets its exact cosine too, so it joins the vector list instead of taking the
list's floor). ``cv --query-words`` embeds the query's searchable words alone
(``fts_terms``: stopwords dropped, lower case) instead of the question.

    python bench/rank_vec.py probe --work DIR [--model mpnet --model-dir DIR] [--dump out.json]
    python bench/rank_vec.py cv --sweep vdepth --work DIR [--model mpnet --model-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import rank_cv as rc
from bench.access import build, services
from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR, evaluate
from palaced.config.model import EmbedderSettings
from palaced.engine.embedder import FastEmbedder
from palaced.palace.handle import Palace
from palaced.retrieval import recall, search
from palaced.retrieval.fusion import fuse, normalize
from palaced.retrieval.params import RankParams, params_for
from palaced.store.lookup import search as sql
from palaced.store.lookup.context_vectors import STORED, mean_vectors
from palaced.store.rows.drawers import Filters
from palaced.wire.vocab import DEFAULT_MODEL


def rrf(*lists: list[int], k: float = 60.0) -> list[int]:
    """Reciprocal-rank fusion of id lists, best first."""
    score: dict[int, float] = {}
    for ids in lists:
        for r, i in enumerate(ids):
            score[i] = score.get(i, 0.0) + 1.0 / (k + r + 1)
    return sorted(score, key=lambda i: (-score[i], i))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    emb = FastEmbedder.load(EmbedderSettings(model_name=args.model, model_path=args.model_dir))
    params = params_for(emb.identity)
    svc = services(args.work, emb)
    samples = json.loads(args.data.read_text("utf-8"))
    built = await build(args.work, svc, samples)
    out: dict[str, Any] = {"identity": emb.identity}
    rows: list[dict[str, Any]] = []
    for name, turns, questions in built:
        p = await Palace.open(name, args.work / "template" / name, svc, create=False)
        try:
            qtexts = [q.question for q in questions]
            qvecs = [await recall.query_vector(p, t) for t in qtexts]

            def go(c: Any, turns: dict[int, str] = turns, questions: Any = questions,
                   qvecs: Any = qvecs, p: Palace = p) -> list[dict[str, Any]]:
                vecs = [(int(d), np.frombuffer(bytes(b), dtype="<f4")) for d, b in c.execute(
                    "SELECT drawer_id, vec FROM vectors ORDER BY drawer_id, chunk")]
                ids = np.array([d for d, _ in vecs])
                matrix = np.stack([v for _, v in vecs])
                n_docs = sql.drawer_count(c)
                rooms = sql.all_rooms(c)
                res = []
                for q, qv in zip(questions, qvecs, strict=True):
                    cos = matrix @ qv
                    order = np.argsort(-cos, kind="stable")
                    dense = list(dict.fromkeys(int(ids[j]) for j in order))
                    hits = search.lexical_search(c, q.question, Filters(), rc.NOW_MS, params,
                                                 None, n_docs)
                    r = search.rank(c, query=q.question, qvec=qv, index=p.index,
                                    filters=Filters(), now_ms=rc.NOW_MS, params=params,
                                    rooms=rooms, lexical_hits=hits, n_docs=n_docs)
                    kw = [i for i, _ in hits.hits]
                    res.append({"q": q, "turns": turns, "dense": dense, "palace": r.order,
                                "keyword": kw, "rrf": rrf(kw, dense[: params.pool])})
                return res
            rows += await p.read(go)
        finally:
            await p.aclose()
    report(rows, params.pool)
    if args.dump is not None:
        args.dump.write_text(json.dumps([
            {"question": r["q"].question, "category": r["q"].category,
             "gold": list(r["q"].gold_turns),
             **{w: [r["turns"][i] for i in r[w][:10] if i in r["turns"]]
                for w in ("dense", "keyword", "palace")}} for r in rows]) + "\n", "utf-8")
    return out


def report(rows: list[dict[str, Any]], pool: int) -> None:
    qs = [r["q"] for r in rows]
    for what in ("dense", "keyword", "rrf", "palace"):
        ranked = [[r["turns"][i] for i in r[what][:50] if i in r["turns"]] for r in rows]
        t = evaluate(qs, ranked)["turn"]
        print(f"{what:8s} turn R@1/5/10 {t['recall@1']:.3f} / {t['recall@5']:.3f} / "
              f"{t['recall@10']:.3f}")
    lost = kept = won = 0
    lost_pos: list[int] = []
    gold_dense_rank: list[int] = []
    by_cat: Counter[int] = Counter()
    for r in rows:
        back = {v: k for k, v in r["turns"].items()}
        gold = {back[g] for g in r["q"].gold_turns if g in back}
        d10 = set(r["dense"][:10])
        p10 = set(r["palace"][:10])
        pos = {i: n for n, i in enumerate(r["palace"])}
        dpos = {i: n for n, i in enumerate(r["dense"])}
        for g in gold:
            gold_dense_rank.append(dpos.get(g, 10**6))
            if g in d10 and g not in p10:
                lost += 1
                by_cat[r["q"].category] += 1
                lost_pos.append(pos.get(g, 10**6))
            elif g in d10:
                kept += 1
            elif g in p10:
                won += 1
    print(f"gold in cosine top 10: {lost + kept}; of those lost by palace's top 10: {lost} "
          f"(by category {dict(sorted(by_cat.items()))}); in palace's top 10 but not the "
          f"cosine's: {won}")
    print("  palace rank of those lost: median "
          f"{statistics.median(lost_pos) if lost_pos else 0}, beyond 50: "
          f"{sum(p >= 50 for p in lost_pos)}, not a candidate: {sum(p >= 10**6 for p in lost_pos)}")
    g = gold_dense_rank
    print(f"gold turns by cosine rank: <10 {sum(x < 10 for x in g)}, <{pool} "
          f"{sum(x < pool for x in g)}, <200 {sum(x < 200 for x in g)}, all {len(g)}")


class VectorSide:
    """The ``cv`` experiments' state (``set_knobs`` sets it per configuration) and the
    patches of ``search.fuse`` and ``search.rank`` that apply it."""

    def __init__(self) -> None:
        self.form = 0
        self.depth = 0
        self.rescore = False
        self.nvec = 0.5
        self.stats = (0.0, 1.0)
        self.fuse = fuse
        self.rank = search.rank
        self.vectors: dict[int, tuple[list[int], np.ndarray, np.ndarray]] = {}

    def install(self) -> None:
        setattr(search, "fuse", self.fused)  # noqa: B010 - not re-exported by search
        search.rank = self.ranked

    def fused(self, lexical: dict[int, float], vector: dict[int, float], *,
              lexical_weight: float, vector_weight: float) -> dict[int, float]:
        if self.form == 4 and vector:
            mu, sd = self.stats
            lz, lfloor = normalize(lexical) if lexical else ({}, 0.0)
            vfloor = (min(vector.values()) - mu) / sd
            return {i: (lexical_weight * lz.get(i, lfloor) if lexical else 0.0)
                    + vector_weight * ((vector[i] - mu) / sd if i in vector else vfloor)
                    for i in (*lexical, *vector)}
        if self.form in (0, 4):
            return self.fuse(lexical, vector, lexical_weight=lexical_weight,
                             vector_weight=vector_weight)
        out: dict[int, float] = {}
        for scores, w in ((lexical, lexical_weight), (vector, vector_weight)):
            if not scores:
                continue
            order = sorted(scores, key=lambda i: -scores[i])
            if self.form == 1:
                part = {i: 1.0 / (61 + r) for r, i in enumerate(order)}
            elif self.form == 2:
                low, high = min(scores.values()), max(scores.values())
                part = {i: (v - low) / (high - low or 1.0) for i, v in scores.items()}
            else:
                part = {i: 1.0 - r / len(order) for r, i in enumerate(order)}
            for i, v in part.items():
                out[i] = out.get(i, 0.0) + w * v
        for i in (*lexical, *vector):
            out.setdefault(i, 0.0)
        return out

    def palace(self, c: Any, index: Any) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Every drawer's id, own (mean chunk) vector and context vector (zero if none)."""
        key = id(index)
        if key not in self.vectors:
            ids = [int(r[0]) for r in c.execute("SELECT id FROM drawers")]
            own = mean_vectors(c, ids)
            ctxv = {int(i): np.frombuffer(bytes(b), dtype=STORED).astype(np.float32)
                    for i, b in c.execute("SELECT drawer_id, vec FROM context_vectors")}
            keep = [i for i in ids if i in own]
            zero = np.zeros_like(own[keep[0]])
            self.vectors[key] = (keep, np.stack([own[i] for i in keep]),
                                 np.stack([ctxv.get(i, zero) for i in keep]))
        return self.vectors[key]

    def ranked(self, c: Any, **kw: Any) -> search.Ranking:
        qvec, index = kw.get("qvec"), kw.get("index")
        if qvec is None or index is None:
            return self.rank(c, **kw)
        if self.form == 4:
            _, own, ctxm = self.palace(c, index)
            s = own @ qvec + self.nvec * (ctxm @ qvec)
            self.stats = (float(s.mean()), float(s.std()) or 1.0)
        if self.depth or self.rescore:
            found = search.vector_search(c, index, qvec, kw["filters"],
                                         self.depth or kw["params"].pool, kw["now_ms"])
            if self.rescore:
                ids, own, _ = self.palace(c, index)
                have = dict(found)
                row = {i: n for n, i in enumerate(ids)}
                extra = [(i, float(own[row[i]] @ qvec)) for i, _ in kw["lexical_hits"].hits
                         if i not in have and i in row]
                found = sorted([*found, *extra], key=lambda kv: -kv[1])
            kw["vector_hits"] = found
        return self.rank(c, **kw)


SIDE = VectorSide()
KNOBS = {"fform": [0.0, 1.0, 2.0, 3.0, 4.0], "vdepth": [50.0, 100.0, 150.0, 200.0, 300.0],
         "rescore": [0.0, 1.0], "f4w": [0.0, 0.4, 0.5, 0.6, 0.7]}


def cv(argv: list[str]) -> int:
    """``bench/rank_cv.py`` with the ``KNOBS`` added (defaults: the engine's ranking)."""
    rc.GRIDS.update(KNOBS)
    rc.DEFAULTS.update(fform=0.0, vdepth=0.0, rescore=0.0, f4w=0.0)
    set_knobs = rc.set_knobs

    def with_side(knobs: dict[str, float]) -> RankParams:
        SIDE.form, SIDE.depth = int(knobs["fform"]), int(knobs["vdepth"])
        SIDE.rescore, SIDE.nvec = bool(knobs["rescore"]), knobs["nvec"]
        if knobs["f4w"]:  # form 4 at this vector weight; 0: the knobs as they are
            SIDE.form = 4
            knobs = {**knobs, "vector": knobs["f4w"]}
        params: RankParams = set_knobs(knobs)
        return params
    rc.set_knobs = with_side
    SIDE.install()
    if "--query-words" in argv:  # the query vector of the keyword side's words alone
        argv = [a for a in argv if a != "--query-words"]
        embed = recall.query_vector

        async def words_only(palace: Palace, query: str) -> np.ndarray | None:
            return await embed(palace, " ".join(sql.fts_terms(query)))
        rc.recall.query_vector = words_only  # type: ignore[attr-defined]
    sys.argv = [sys.argv[0], *argv]
    return rc.main()


def main() -> int:
    if sys.argv[1:2] == ["cv"]:
        return cv(sys.argv[2:])
    if sys.argv[1:2] == ["probe"]:
        del sys.argv[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dump", type=Path, default=None,
                        help="write each question's top 10 turns of each ranking (JSON)")
    anyio.run(main_async, parser.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
