"""A probe, not the engine: evidence issue 16 had not tried, each scored against the defaults.

The LoCoMo dev palaces of ``bench/rank_cv.py`` (filled once, real model) are ranked in-process
by ``search.rank`` as the daemon ranks them, once with the defaults and once per setting of
each probe below; a probe replaces one step of the ranking for its run and puts it back after.
None of them is palaced's: the rows they printed are in docs/benchmarks.md ("Connecting the
dots", "new evidence"), each dropped or not kept. (A ``named`` probe, set questions only, went
with the set questions' spread and the room feedback it hooked into; its rows stay there.)

* ``window``: each turn embedded with its room neighbours as one text (the model reads the
  previous drawer and the drawer, or previous + drawer + next), the query's cosine with it
  added to the vector score times delta.
* ``proximity``: pairs of consecutive query words (stopwords out) found near each other in a
  candidate's text, beta times the pairs' IDF share, before the rooms are scored.
* ``roomq``: closing questions lowered in the scores the rooms are ranked by.
* ``raise``: the replies step raises a reply to its question's score less (1 - question share)
  x c x range, so a turn that mostly tells keeps its place above its reply.
* ``irregular``: irregular verb forms added to the keyword query ("go" also finds "went").

    python bench/evidence_probe.py [--work DIR] [--only window,proximity,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import rank_cv as rc
from bench.locomo import DEFAULT_DATA, DEFAULT_MODEL_DIR
from palaced.config.model import EmbedderSettings
from palaced.engine.embedder import FastEmbedder
from palaced.palace.handle import Palace
from palaced.retrieval import candidates, recall, search
from palaced.retrieval.fusion import ranking
from palaced.retrieval.replies import TAIL_CHARS, question_share
from palaced.store.lookup import context as ctx
from palaced.store.lookup import search as sql

Patch = Callable[[], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


class Query:
    """The connection, query and query vector of the ranking under way (``search.read_pool``
    wrapped: a ranking reads its pool before its hops score), for steps whose signature
    carries none of them."""

    c: Any = None
    text = ""
    qvec: Any = None

    @classmethod
    @contextlib.contextmanager
    def tracked(cls) -> Iterator[None]:
        inner = search.read_pool

        def read(c: Any, ids: Any, **kwargs: Any) -> Any:
            if kwargs.get("known") is None:  # the first hop's read
                cls.c, cls.text, cls.qvec = c, kwargs["query"], kwargs.get("qvec")
            return inner(c, ids, **kwargs)

        with patched(search, "read_pool", read):
            yield


def _spread(scores: dict[int, float]) -> float:
    return max(scores.values()) - min(scores.values()) or 1.0


_TEXTS: dict[tuple[str, int], str] = {}


def _texts(c: Any, ids: list[int]) -> dict[int, str]:
    db = c.execute("PRAGMA database_list").fetchall()[0][2]
    missing = [i for i in ids if (db, i) not in _TEXTS]
    rows = c.execute(f"SELECT id, text FROM drawers WHERE id IN ({','.join('?' * len(missing))})",
                     missing).fetchall() if missing else []
    for i, text in rows:
        _TEXTS[(db, i)] = text
    return {i: _TEXTS[(db, i)] for i in ids if (db, i) in _TEXTS}


# -- window: the model reads a turn with its neighbours -------------------------------------
_WINDOWS: dict[tuple[str, str], dict[int, np.ndarray]] = {}
EMBEDDER: list[FastEmbedder] = []


def _windows(c: Any, sides: str) -> dict[int, np.ndarray]:
    key = (c.execute("PRAGMA database_list").fetchall()[0][2], sides)
    if key not in _WINDOWS:
        text = dict(c.execute("SELECT id, text FROM drawers").fetchall())
        near = ctx.neighbours_of(c, list(text), 1)
        ids, docs = [], []
        for i, own in text.items():
            by = {off: j for j, off in near.get(i, [])}
            parts = [text[by[-1]]] if -1 in by else []
            parts.append(own)
            if sides == "both" and 1 in by:
                parts.append(text[by[1]])
            ids.append(i)
            docs.append("\n".join(parts))
        vecs = EMBEDDER[0].embed_passages(docs)
        _WINDOWS[key] = {i: v / (np.linalg.norm(v) or 1.0) for i, v in zip(ids, vecs)}
    return _WINDOWS[key]


def window(delta: float, sides: str) -> Patch:
    inner = search.with_neighbours

    def step(vector: dict[int, float], context: Any, weight: float) -> dict[int, float]:
        out = inner(vector, context, weight)
        wins, q = _windows(Query.c, sides), Query.qvec / (np.linalg.norm(Query.qvec) or 1.0)
        return {i: s + (delta * float(q @ wins[i]) if i in wins else 0.0) for i, s in out.items()}

    return lambda: patched(search, "with_neighbours", step)


# -- proximity: query words near each other --------------------------------------------------
_WORD = re.compile(r"\w+")


def _norm(word: str) -> str:
    word = word.lower().removesuffix("'s")
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def proximity(beta: float, within: int, ordered: bool = False, depth: int = 100) -> Patch:
    inner = search.apply_boosts

    def step(scores: dict[int, float], meta: Any, **kwargs: Any) -> dict[int, float]:
        c, terms = Query.c, sql.fts_terms(Query.text)
        if len(terms) >= 2 and scores:
            n = sql.drawer_count(c)
            idf = {t: math.log(1 + n / max(1, sql.text_doc_freq(c, t))) for t in terms}
            pairs = [(_norm(a), _norm(b), min(idf[a], idf[b])) for a, b in zip(terms, terms[1:])]
            total = sum(w for _, _, w in pairs) or 1.0
            top = ranking(scores)[:depth]
            spread, out = _spread(scores), dict(scores)
            for i, text in _texts(c, top).items():
                at: dict[str, list[int]] = {}
                for k, w in enumerate(_WORD.findall(text)):
                    at.setdefault(_norm(w), []).append(k)
                got = sum(w for a, b, w in pairs if a in at and b in at and any(
                    abs(x - y) <= within and (not ordered or y > x) for x in at[a] for y in at[b]))
                out[i] += beta * spread * got / total
            scores = out
        return inner(scores, meta, **kwargs)

    return lambda: patched(search, "apply_boosts", step)


# -- roomq: rooms ranked with their closing questions lowered --------------------------------
def roomq(drop: float, depth: int = 30) -> Patch:
    inner = search.room_scores

    def step(scores: dict[int, float], room_key: Any, **kwargs: Any) -> dict[str, float]:
        top = ranking(scores)[:depth]
        tails = sql.drawer_tails(Query.c, top, TAIL_CHARS)
        spread, lowered = _spread(scores), dict(scores)
        for i, (tail, length) in tails.items():
            lowered[i] -= drop * question_share(tail, length) * spread
        return inner(lowered, room_key, **kwargs)

    return lambda: patched(search, "room_scores", step)


# -- raise: a turn that mostly tells keeps its place above its reply --------------------------
def tell_aware(c_tell: float) -> Patch:
    inner = search.pass_to_replies

    def step(query: str, pool: Any, scores: dict[int, float], spread: float, drop: float,
             when_boost: float, seen: Any) -> tuple[dict[int, float], Any]:
        out, seen = inner(query, pool, scores, spread, drop, when_boost, seen)
        for i in ranking(scores)[:candidates.REPLY_CHECKED]:
            share = pool.question_share(i)
            j = pool.after.get(i) if share > 0 else None
            if j is not None and j in scores and out[j] != scores[j]:  # the step raised it
                out[j] = max(scores[j], scores[i] - (1 - share) * c_tell * spread)
        return out, seen

    return lambda: patched(search, "pass_to_replies", step)


# -- irregular: verb forms in the keyword query ----------------------------------------------
IRREGULAR = (
    "be was were been|begin began begun|break broke broken|bring brought|build built|buy bought|"
    "catch caught|choose chose chosen|come came|do did done|draw drew drawn|drink drank drunk|"
    "drive drove driven|eat ate eaten|fall fell fallen|feel felt|fight fought|find found|"
    "fly flew flown|forget forgot forgotten|get got gotten|give gave given|go went gone|"
    "grow grew grown|have had|hear heard|hold held|keep kept|know knew known|lead led|"
    "leave left|lend lent|lose lost|make made|mean meant|meet met|pay paid|ride rode ridden|"
    "ring rang rung|rise rose risen|run ran|say said|see saw seen|sell sold|send sent|"
    "shake shook shaken|shine shone|shoot shot|show showed shown|sing sang sung|sit sat|"
    "sleep slept|speak spoke spoken|spend spent|stand stood|steal stole stolen|swim swam swum|"
    "take took taken|teach taught|tell told|think thought|throw threw thrown|"
    "understand understood|wake woke woken|wear wore worn|win won|write wrote written")


def irregular() -> Patch:
    forms: dict[str, list[str]] = {}
    for group in IRREGULAR.split("|"):
        words = group.split()
        for w in words:
            forms[w] = [x for x in words if x != w]
    inner = sql.fts_terms

    def terms(query: str) -> list[str]:
        own = inner(query)
        extra = [f for w in own for f in forms.get(w, ())
                 if f not in own and f not in sql.STOPWORDS]
        return list(dict.fromkeys(own + extra))[:64]

    return lambda: patched(sql, "fts_terms", terms)


PROBES: dict[str, list[tuple[str, Patch]]] = {
    "window": [(f"previous + drawer, delta {d}", window(d, "previous")) for d in (0.25, 0.5, 1.0)]
    + [("previous + drawer + next, delta 0.25", window(0.25, "both"))],
    "proximity": [(f"beta {b}, within {w}", proximity(b, w)) for b, w in ((0.1, 3), (0.2, 3),
                                                                          (0.2, 8))]
    + [("beta 0.1, within 3, in order", proximity(0.1, 3, ordered=True))],
    "roomq": [(f"drop {d}", roomq(d)) for d in (0.1, 0.2, 0.3, 0.5)],
    "raise": [(f"c {c}", tell_aware(c)) for c in (0.02, 0.05, 0.1, 0.2)],
    "irregular": [("67 verbs", irregular())],
}


def report(label: str, r: dict[str, Any]) -> None:
    print(f"{label}\n  all: {rc.fmt(r)}", flush=True)
    for line in rc.category_rows(r):
        print(line)
    print("  per conversation, turn R@1 / R@5 / R@10: " + "  ".join(
        f"{v['turn']['recall@1']:.3f}/{v['turn']['recall@5']:.3f}/{v['turn']['recall@10']:.3f}"
        for v in r["per_conversation"].values()), flush=True)


async def main_async(work: Path, names: list[str]) -> None:
    EMBEDDER.append(FastEmbedder.load(EmbedderSettings(model_path=DEFAULT_MODEL_DIR)))
    svc = rc.services(work, EMBEDDER[0])
    built = await rc.build(work, svc, json.loads(DEFAULT_DATA.read_text("utf-8")))
    convs = []
    for name, turns, questions in built:
        p = await Palace.open(name, work / "template" / name, svc, create=False)
        qvecs = [await recall.query_vector(p, q.question) for q in questions]
        convs.append(rc.Conv(name, p, turns, questions, qvecs))
    memo = rc.Memo()
    memo.install()
    timings: list[float] = []

    def run_sync(conv: rc.Conv, params: search.RankParams) -> Any:
        return anyio.from_thread.run(
            conv.palace.read, lambda c: rc._rank_all(c, conv, memo, params, timings))

    def sync() -> None:
        report("defaults", rc.Runner(convs, memo, run_sync).score(dict(rc.DEFAULTS)))
        for probe in names:
            for label, patch in PROBES[probe]:
                memo.cache.clear()  # the probes change what the store's reads are asked
                with Query.tracked(), patch():
                    r = rc.Runner(convs, memo, run_sync).score(dict(rc.DEFAULTS))
                report(f"{probe}: {label}", r)

    try:
        await anyio.to_thread.run_sync(sync)
    finally:
        for conv in convs:
            await conv.palace.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for the palaces (reused between runs)")
    parser.add_argument("--only", default=",".join(PROBES),
                        help=f"comma-separated probes (default all: {','.join(PROBES)})")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        parser.error(f"unknown probes {unknown}; known: {list(PROBES)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="palace-evidence-"))
    anyio.run(main_async, work, names)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
