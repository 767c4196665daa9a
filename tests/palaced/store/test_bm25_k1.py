"""BM25's k1 set through FTS5's column weights (``search.bm25_weights``): FTS5 fixes k1 at 1.2,
and every weight scaled by s is BM25 with k1 / s, each score times one constant; the keyword
engine's file records the weights its impacts were built with."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from palaced.index import keyword_file as kf
from palaced.index.keyword_engine import tokens
from palaced.palace.directory import KEYWORDS_NAME
from palaced.store import Store
from palaced.store.lookup import search
from palaced.store.rows import drawers as m
from tests.conftest import DaemonProc

HERONS = 9  # fillers that also say "heron": its IDF then is what makes k1 decide


def fillers() -> list[str]:
    return [*(f"filler note {i} about the weather" + (" heron" if i < HERONS else "")
              for i in range(40)),
            *(f"quokka seen near the lake {i}" for i in range(3))]


REPEATS = "quokka quokka quokka quokka ran"  # one query word, said four times
BOTH = "quokka and heron ran here"  # both query words, once each


def filled(path: Path) -> tuple[Store, int, int]:
    st = Store(path)
    out: list[int] = []

    def fill(c) -> None:  # type: ignore[no-untyped-def]
        # A room each: no neighbours, so the context column is empty.
        for i, text in enumerate(fillers()):
            m.insert_drawer(c, m.NewDrawer(text=text, room=f"f{i}"), 1)
        for text in (REPEATS, BOTH):
            out.append(m.insert_drawer(c, m.NewDrawer(text=text, room=text[:8]), 1)[0])

    st.write(fill)
    return st, out[0], out[1]


def reference(st: Store, query: str, k1: float, b: float = 0.75) -> dict[int, float]:
    """BM25 with ``k1`` written out (FTS5's IDF and row length: every column's tokens)."""
    rows = st.read(lambda c: c.execute(
        "SELECT rowid, text, context, dates FROM drawers_fts").fetchall())
    docs = {}
    for rowid, *cols in rows:
        freq: dict[str, float] = {}
        length = 0
        for col, weight in zip(cols, search.COLUMN_WEIGHTS, strict=True):
            toks = tokens(col or "")
            length += len(toks)
            for t in toks:
                freq[t] = freq.get(t, 0.0) + weight
        docs[int(rowid)] = (freq, length)
    avgdl = sum(n for _, n in docs.values()) / len(docs)
    scores: dict[int, float] = {}
    for word in search.fts_terms(query):
        (term,) = tokens(word, query=True)
        df = sum(term in f for f, _ in docs.values())
        idf = max(math.log((len(docs) - df + 0.5) / (df + 0.5)), 1e-6)
        for i, (f, n) in docs.items():
            if term in f:
                tf = f[term]
                scores[i] = scores.get(i, 0.0) + idf * tf * (k1 + 1) / (
                    tf + k1 * (1 - b + b * n / avgdl))
    return scores


def test_fts5_with_the_weights_is_bm25_with_k1(tmp_path: Path) -> None:
    st, _, _ = filled(tmp_path / "p.db")
    try:
        assert search.BM25_K1 < search.FTS5_K1
        for query in ("quokka heron", "weather heron lake", "filler quokka", "note 3"):
            got = dict(st.read(lambda c, q=query: search.fts_search(c, q, m.Filters(), 100, 2)))
            want = reference(st, query, search.BM25_K1)
            assert set(got) == set(want)
            # One constant for every drawer: (FTS5_K1 + 1) / (BM25_K1 + 1).
            ratio = (search.FTS5_K1 + 1) / (search.BM25_K1 + 1)
            for i, score in got.items():
                assert score == pytest.approx(ratio * want[i], rel=1e-9)
    finally:
        st.close()


def test_a_word_said_again_counts_less_than_another_word(tmp_path: Path) -> None:
    """k1 decides between a drawer that repeats the rarer query word and one that holds
    both: FTS5's own k1 (1.2) puts the repeats first, BM25_K1 the drawer with both."""
    st, repeats, both = filled(tmp_path / "p.db")
    try:
        def top(weights: tuple[float, ...]) -> int:
            saved = search.BM25_WEIGHTS
            search.BM25_WEIGHTS = weights
            try:
                return st.read(lambda c: search.fts_search(c, "quokka heron", m.Filters(), 5,
                                                           2))[0][0]
            finally:
                search.BM25_WEIGHTS = saved

        assert top(search.bm25_weights(k1=search.FTS5_K1)) == repeats
        assert top(search.BM25_WEIGHTS) == both
        assert top(search.bm25_weights()) == both
    finally:
        st.close()
    with pytest.raises(ValueError):
        search.bm25_weights(k1=0)


def test_recall_ranks_with_k1_through_the_daemon(keyword_daemon: DaemonProc) -> None:
    with keyword_daemon.client() as c:
        c.create_palace("k1")
        c.remember_many("k1", [{"text": t, "room": f"f{i}"} for i, t in enumerate(fillers())])
        repeats, both = c.remember_many("k1", [{"text": REPEATS, "room": "a"},
                                               {"text": BOTH, "room": "b"}])
        ids = [r["id"] for r in c.recall("k1", "quokka heron", top_k=5)]
        assert ids[0] == both and repeats in ids


def test_an_engine_file_of_other_weights_is_rebuilt(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    st, _, _ = filled(tmp_path / "p.db")
    try:
        base = st.read(kf.build)
    finally:
        st.close()
    path = tmp_path / KEYWORDS_NAME
    kf.save(base, path)
    assert kf.load(path).build_id == base.build_id
    # Impacts of other column weights (another k1) would rank unlike FTS5: unusable.
    monkeypatch.setattr(kf, "BM25_WEIGHTS", search.bm25_weights(k1=search.FTS5_K1))
    with pytest.raises(kf.Unusable, match="other BM25 weights"):
        kf.load(path)
