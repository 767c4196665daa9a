"""A probe, not the engine: how far a reranker learned from the engine's own signals goes.

The LoCoMo dev palaces of ``bench/rank_cv.py`` (filled once, real model) are ranked with the
defaults; for each question's best 50 candidates the signals the engine has are read
(``FEATURES``), and a logistic regression (numpy, L2, Newton steps on standardised features)
is fitted on four conversations and scored on the fifth, its probabilities reordering those
50. Printed: the defaults and the held-out reranking (also with the engine's first place
kept, and with its first ten kept, reordered among themselves), turn R@1 / R@5 / R@10
overall and per category, and the weights fitted on all five.
The same for the rooms (sessions): each question's best 10 rooms by the engine, reordered
by a regression over ``ROOM_FEATURES``.

    python bench/rerank_probe.py [--work DIR]

It says what the signals could still give if weighed together, and where (see
docs/benchmarks.md, "Connecting the dots"); no weight of it is used by palaced.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.access import build, services
from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR, recall_at_k
from bench.rank_cv import NOW_MS
from palaced.config.model import EmbedderSettings
from palaced.engine.embedder import FastEmbedder
from palaced.palace.handle import Palace
from palaced.retrieval import recall, search
from palaced.retrieval.replies import question_share
from palaced.retrieval.when import asks_when, states_time
from palaced.store.lookup import search as sql
from palaced.store.rows.drawers import Filters
from palaced.text import relevance

DEPTH = 50  # candidates reranked per question
KS = (1, 5, 10)
FEATURES = ("fused (z)", "log rank", "keyword (z)", "cosine (z)", "room score", "log room rank",
            "log length", "asks", "previous asks", "next asks", "closet",
            "when question", "states a time", "word coverage", "query words",
            "neighbours' keyword (z)", "neighbours' cosine (z)", "place in room")


ROOM_FEATURES = ("room score (z)", "log room rank", "candidates in it", "best drawer (z)",
                 "best 3 drawers (z)", "best cosine", "best keyword", "holds the first",
                 "in the best 5", "in the best 10", "log room size", "its first place")


def _z(values: list[float]) -> list[float]:
    a = np.asarray(values, dtype=float)
    return ((a - a.mean()) / (a.std() or 1.0)).tolist()


def _asks(text: str) -> float:
    return float(question_share(text[-400:], len(text)) > 0)


def _features(c: Any, conv: str, turns: dict[int, str], questions: list[Any],
              qvecs: list[Any], index: Any, rows_rooms: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One row per (question, candidate) of the defaults' best ``DEPTH``; one per
    (question, room) of its best 10 rooms appended to ``rows_rooms``."""
    info = {int(i): (str(r), str(t)) for i, r, t in
            c.execute("SELECT id, room, text FROM drawers ORDER BY room, occurred_ms, id")}
    prev: dict[int, int | None] = {}
    nxt: dict[int, int | None] = {}
    place: dict[int, float] = {}
    by_room: dict[str, list[int]] = defaultdict(list)
    for i, (room, _) in info.items():
        by_room[room].append(i)
    for ids in by_room.values():
        for k, i in enumerate(ids):
            prev[i] = ids[k - 1] if k else None
            nxt[i] = ids[k + 1] if k + 1 < len(ids) else None
            place[i] = k / max(1, len(ids) - 1)
    rooms, n = sql.all_rooms(c), sql.drawer_count(c)
    size = {str(room): int(k) for room, k in
            c.execute("SELECT room, count(*) FROM drawers GROUP BY room")}
    rows: list[dict[str, Any]] = []
    for qi, (q, qvec) in enumerate(zip(questions, qvecs, strict=True)):
        hits = search.lexical_search(c, q.question, Filters(), NOW_MS, search.RankParams(),
                                     None, n)
        r = search.rank(c, query=q.question, qvec=qvec, index=index, filters=Filters(),
                        now_ms=NOW_MS, rooms=rooms, lexical_hits=hits, n_docs=n)
        top = [i for i in r.order if i in turns][:DEPTH]
        if not top:
            continue
        rows_rooms.extend(_room_rows(conv, qi, q, r, top, size))
        terms = sql.fts_terms(q.question)
        room_score = {room: s for _, room, s in r.rooms}
        room_rank = {room: k for k, (_, room, _) in enumerate(r.rooms)}
        low, high = min(room_score.values()), max(room_score.values())
        floor = min(r.vector.values(), default=0.0)
        fused = _z([r.scores[i] for i in top])
        lex = dict(zip(top, _z([r.lexical.get(i, 0.0) for i in top]), strict=True))
        cos = dict(zip(top, _z([r.vector.get(i, floor) for i in top]), strict=True))
        for k, i in enumerate(top):
            room, text = info[i]
            before, after = prev[i], nxt[i]
            near = [j for j in (before, after) if j is not None]
            rows.append({"conv": conv, "q": qi, "cat": q.category, "gold": turns[i] in
                         q.gold_turns, "n_gold": len(q.gold_turns), "turn": turns[i], "f": [
                fused[k], math.log1p(k), lex[i], cos[i],
                (room_score.get(room, low) - low) / ((high - low) or 1.0),
                math.log1p(room_rank.get(room, len(room_rank))), math.log(len(text) + 1),
                _asks(text), float(before is not None and _asks(info[before][1])),
                float(after is not None and _asks(info[after][1])),
                float(i in r.closet_hits),
                float(asks_when(q.question)), float(states_time(text, q.question)),
                relevance.coverage(text, terms), float(len(terms)),
                max((lex.get(j, -3.0) for j in near), default=-3.0),
                max((cos.get(j, -3.0) for j in near), default=-3.0), place[i]]})
    return rows


def _room_rows(conv: str, qi: int, q: Any, r: Any, top: list[int],
               size: dict[str, int]) -> list[dict[str, Any]]:
    best = r.rooms[:10]
    room_z = _z([s for _, _, s in best])
    fused = dict(zip(top, _z([r.scores[i] for i in top]), strict=True))
    floor = min(r.vector.values(), default=0.0)
    out = []
    for k, (_, room, _) in enumerate(best):
        mine = [i for i in top if r.room_of.get(i, ("", ""))[1] == room]
        places = [top.index(i) for i in mine]
        out.append({"conv": conv, "q": qi, "cat": q.category, "turn": room,
                    "gold": room in q.gold_sessions, "n_gold": len(q.gold_sessions), "f": [
            room_z[k], math.log1p(k), float(len(mine)), max((fused[i] for i in mine), default=-3.0),
            sum(sorted((fused[i] for i in mine), reverse=True)[:3]) if mine else -9.0,
            max((r.vector.get(i, floor) for i in mine), default=floor),
            max((r.lexical.get(i, 0.0) for i in mine), default=0.0), float(0 in places),
            float(sum(1 for x in places if x < 5)), float(sum(1 for x in places if x < 10)),
            math.log(size.get(room, 1)), float(min(places, default=DEPTH))]})
    return out


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 25) -> np.ndarray:
    """Logistic regression weights (bias last) by Newton steps with an L2 penalty."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    reg = l2 * np.eye(len(w))
    reg[-1, -1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + reg @ w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def score(rows: list[dict[str, Any]], order: np.ndarray) -> dict[str, Any]:
    """Turn R@k overall and per category, ranking each question's rows by ``order``."""
    per_q: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for k, row in enumerate(rows):
        per_q[(row["conv"], row["q"])].append((float(order[k]), k))
    total: dict[int, list[float]] = defaultdict(list)
    by_cat: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ranked in per_q.values():
        ranked.sort(key=lambda t: -t[0])
        first = rows[ranked[0][1]]
        gold = [rows[k]["turn"] for _, k in ranked if rows[k]["gold"]]
        # Gold outside the reranked rows counts as missed: pad with placeholders.
        gold += [f"missing-{m}" for m in range(first["n_gold"] - len(gold))]
        names = [rows[k]["turn"] for _, k in ranked]
        for kk in KS:
            v = recall_at_k(names, gold, kk)
            total[kk].append(v)
            by_cat[first["cat"]][kk].append(v)
    return {"all": {kk: float(np.mean(v)) for kk, v in total.items()},
            "by_category": {c: {kk: float(np.mean(v)) for kk, v in d.items()}
                            for c, d in sorted(by_cat.items())}}


def _line(name: str, r: dict[str, Any]) -> str:
    cats = "  ".join(f"c{c} " + "/".join(f"{v[k]:.3f}" for k in KS)
                     for c, v in r["by_category"].items())
    return f"{name:10s} " + " / ".join(f"{r['all'][k]:.3f}" for k in KS) + f"   {cats}"


async def main_async(work: Path) -> None:
    emb = FastEmbedder.load(EmbedderSettings(model_path=DEFAULT_MODEL_DIR))
    svc = services(work, emb)
    built = await build(work, svc, json.loads(DEFAULT_DATA.read_text("utf-8")))
    rows: list[dict[str, Any]] = []
    rooms: list[dict[str, Any]] = []
    for name, turns, questions in built:
        p = await Palace.open(name, work / "template" / name, svc, create=False)
        try:
            qvecs = [await recall.query_vector(p, q.question) for q in questions]
            rows += await p.read(lambda c, n=name, t=turns, qs=questions, v=qvecs, i=p.index:
                                 _features(c, n, t, qs, v, i, rooms))
        finally:
            await p.aclose()
    print("turns, R@1 / R@5 / R@10:")
    _probe(rows, FEATURES, FEATURES.index("log rank"))
    print("rooms (sessions), R@1 (then R@5 and R@10 of the 10 rooms reordered):")
    _probe(rooms, ROOM_FEATURES, ROOM_FEATURES.index("log room rank"))


def _probe(rows: list[dict[str, Any]], names: tuple[str, ...], rank_column: int) -> None:
    """The defaults, the held-out regression, and its weights fitted on all five."""
    x = np.asarray([r["f"] for r in rows], dtype=float)
    y = np.asarray([r["gold"] for r in rows], dtype=float)
    conv = np.asarray([r["conv"] for r in rows])
    print(_line("defaults", score(rows, -x[:, rank_column])))
    held = np.zeros(len(rows))
    for name in sorted(set(conv)):
        train = conv != name
        mean, std = x[train].mean(0), x[train].std(0) + 1e-9
        w = fit((x[train] - mean) / std, y[train])
        held[~train] = ((x[~train] - mean) / std) @ w[:-1]
    print(_line("held out", score(rows, held)))
    # The same with the engine's first place kept (the regression orders the rest).
    first = x[:, rank_column] == 0.0
    print(_line("1st kept", score(rows, np.where(first, np.inf, held))))
    # And with the first ten kept too: the regression orders places 2-10 only, so R@1 and
    # R@10 are the engine's in every category and only R@5 can move.
    place = np.expm1(x[:, rank_column]).round()
    print(_line("2-10 only", score(rows, np.where(first, np.inf, np.where(
        place < 10, 1e6 + held, -place)))))
    mean, std = x.mean(0), x.std(0) + 1e-9
    w = fit((x - mean) / std, y)
    print("weights fitted on all five (standardised features):")
    for feature, weight in sorted(zip(names, w[:-1], strict=True), key=lambda t: -abs(t[1])):
        print(f"  {feature:24s} {weight:+.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for the palaces (reused between runs)")
    args = parser.parse_args()
    anyio.run(main_async, args.work or Path(tempfile.mkdtemp(prefix="palace-probe-")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
