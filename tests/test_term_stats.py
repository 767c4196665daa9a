"""Uninformative query terms (in more than half of the drawers) are left out of BM25."""

from __future__ import annotations

from pathlib import Path

from palaced.store import Store, search
from palaced.store import drawers as m


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
