"""Uninformative query terms (in more than half of the drawers) are left out of BM25."""

from __future__ import annotations

from pathlib import Path

from palaced.store import Store
from palaced.store.lookup import search
from palaced.store.rows import drawers as m


def test_common_terms_are_dropped_only_in_large_palaces(tmp_path: Path) -> None:
    st = Store(tmp_path / "p.db")
    n = search.TermStats.MIN_DOCS

    def fill(c):  # type: ignore[no-untyped-def]
        for i in range(n):
            extra = " zebra" if i % 500 == 0 else ""
            m.insert_drawer(c, m.NewDrawer(text=f"common words everywhere note {i}{extra}",
                                           room=f"r{i % 7}"), 1)

    st.write(fill)
    stats = search.TermStats()
    kept = st.read(lambda c: stats.informative(c, ["common", "zebra", "everywhere"], n))
    assert kept == ["zebra"]
    # df counts rows with the term in any column (its room neighbours' context too).
    zebra_df = stats.df["zebra"]
    assert stats.df["common"] == n and n // 500 <= zebra_df < n // 2
    # Nothing informative: keep everything rather than search for nothing.
    assert st.read(lambda c: stats.informative(c, ["common", "words"], n)) == ["common", "words"]
    # Small palaces keep every term.
    assert st.read(lambda c: search.TermStats().informative(c, ["common", "zebra"], 100)) == [
        "common", "zebra"]
    # The search result is the same drawers, best first, either way.
    now = 2
    full = st.read(lambda c: search.fts_search(c, "common zebra", m.Filters(), 4, now))
    fast = st.read(lambda c: search.fts_search(c, "common zebra", m.Filters(), 4, now, stats, n))
    assert [i for i, _ in fast] == [i for i, _ in full]
    # The cache is rebuilt once the palace size moved by more than a tenth.
    stats.df["zebra"] = 10**9
    st.read(lambda c: stats.informative(c, ["zebra"], n * 2))
    assert stats.df["zebra"] == zebra_df
    st.close()


def test_common_terms_are_scored_only_beside_selective_ones(tmp_path: Path,
                                                            monkeypatch: object) -> None:
    """Long posting lists of common terms are not scored whole: the selective terms, then
    (selective) AND (common), give the drawers they return exactly the full query's BM25;
    in a query of common terms alone the rarest plays the selective part."""
    import random

    import pytest

    mp = pytest.MonkeyPatch()
    mp.setattr(search, "SPLIT_MIN_POSTINGS", 100)
    rnd = random.Random(3)
    st = Store(tmp_path / "p.db")
    n = 2_400
    rare = ["quokka", "narwhal", "axolotl"]
    often = ["harbour", "ledger", "ferry"]  # each in a third of the rows (context included)

    def fill(c):  # type: ignore[no-untyped-def]
        for i in range(n):
            words = [w for w in often if rnd.random() < 0.08]
            words += [w for w in rare if rnd.random() < 0.004]
            words += [f"filler{rnd.randint(0, 3000)}" for _ in range(rnd.randint(3, 12))]
            rnd.shuffle(words)
            m.insert_drawer(c, m.NewDrawer(text=" ".join(words) + f" note {i}",
                                           room=f"r{i % 7}"), 1 + i)

    st.write(fill)
    stats = search.TermStats()
    query = "quokka narwhal harbour ledger"
    terms = st.read(lambda c: stats.informative(c, search.fts_terms(query), n))
    assert set(stats.common(terms, n)) == {"harbour", "ledger"}

    def exact(q: str, limit: int) -> list[tuple[int, float]]:
        return st.read(lambda c: search._bm25(c, search.fts_match(search.fts_terms(q)),
                                              m.Filters(), limit, 10**13))

    fast = st.read(lambda c: search.fts_search(c, query, m.Filters(), 100, 10**13, stats, n))
    full = dict(exact(query, 10_000))
    assert [i for i, _ in fast[:10]] == [i for i, _ in exact(query, 10)]
    for did, score in fast:  # every score returned is the whole query's score
        assert score == pytest.approx(full[did])
    # Only drawers holding common terms alone are left out.
    missed = set(full) - {i for i, _ in fast}
    texts = st.read(lambda c: {d: t for d, t in c.execute("SELECT id, text FROM drawers")})
    assert all(not ({"quokka", "narwhal"} & set(texts[d].split())) for d in missed
               if full[d] > fast[-1][1])
    # With a filter (the search joins the drawers) the parts agree with the filtered query.
    room = m.Filters(room="r3")
    fast = st.read(lambda c: search.fts_search(c, query, room, 20, 10**13, stats, n))
    full_room = st.read(lambda c: search._bm25(c, search.fts_match(search.fts_terms(query)),
                                               room, 20, 10**13))
    assert fast and [i for i, _ in fast[:5]] == [i for i, _ in full_room[:5]]
    assert all(i % 7 == 4 for i, _ in fast)  # drawer i + 1 was filed in room r{i % 7}
    # Common terms alone: the rarest leads, the scores are still the whole query's.
    both = "harbour ferry"
    st.read(lambda c: stats.informative(c, search.fts_terms(both), n))
    only_common = st.read(lambda c: search.fts_search(c, both, m.Filters(), 50, 10**13,
                                                      stats, n))
    full = dict(exact(both, 10_000))
    assert [i for i, _ in only_common[:10]] == [i for i, _ in exact(both, 10)]
    assert all(score == pytest.approx(full[did]) for did, score in only_common)
    mp.undo()
    st.close()


def test_a_narrowing_without_the_selective_terms_still_finds_the_common_ones(
        tmp_path: Path) -> None:
    """A search narrowed to a room that holds none of the query's selective terms: the two
    parts find nothing there, so the whole query ranks the room's drawers of common terms
    (a split search answered nothing: keyword-only recall narrowed to that room was empty)."""
    import random

    import pytest

    mp = pytest.MonkeyPatch()
    mp.setattr(search, "SPLIT_MIN_POSTINGS", 100)
    rnd = random.Random(5)
    st = Store(tmp_path / "p.db")
    n = 2_400

    def fill(c):  # type: ignore[no-untyped-def]
        for i in range(n):
            room = "quiet" if i % 12 == 0 else "busy"
            words = ["harbour"] if rnd.random() < 0.08 else []
            if room == "busy" and i % 97 == 1:
                words.append("quokka")  # the selective term, never in the quiet room
            words += [f"filler{rnd.randint(0, 3000)}" for _ in range(rnd.randint(3, 12))]
            m.insert_drawer(c, m.NewDrawer(text=" ".join(words) + f" note {i}", room=room),
                            1 + i)

    st.write(fill)
    stats = search.TermStats()
    query = "quokka harbour"
    terms = st.read(lambda c: stats.informative(c, search.fts_terms(query), n))
    assert stats.common(terms, n) == ["harbour"]  # the search is split
    quiet = m.Filters(room="quiet")
    fast = st.read(lambda c: search.fts_search(c, query, quiet, 20, 10**13, stats, n))
    exact = st.read(lambda c: search._bm25(c, search.fts_match(terms), quiet, 20, 10**13))
    assert exact and [i for i, _ in fast] == [i for i, _ in exact]
    # Unnarrowed, the selective part holds enough drawers for a small limit: still split.
    assert st.read(lambda c: search.fts_search(c, query, m.Filters(), 5, 10**13, stats, n))
    mp.undo()
    st.close()
