"""What recall keeps between requests (``palaced/retrieval/recall_caches.py``): the drawer count BM25's
informative-word test uses is exact every RECOUNT_WRITES writes and follows inserts between
counts without scanning (a count costs ~10 ms at a million drawers)."""

from __future__ import annotations

from pathlib import Path

from palaced.retrieval.recall_caches import RECOUNT_WRITES, RecallCaches
from palaced.store import Store
from palaced.store.rows import drawers as m


def _add(store: Store, first: int, n: int) -> None:
    store.write(lambda c: [m.insert_drawer(c, m.NewDrawer(text=f"drawer number {i}"), 1000)
                           for i in range(first, first + n)])


def test_the_count_follows_inserts_and_is_exact_again_after_recount_writes(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "palace.db")
    try:
        caches = RecallCaches()
        _add(store, 0, 10)
        assert store.read(lambda c: caches.drawers(1, c)) == 10
        _add(store, 10, 5)
        assert store.read(lambda c: caches.drawers(2, c)) == 15  # estimated: 10 + 5 new ids
        store.write(lambda c: c.execute("DELETE FROM drawers WHERE id <= 3"))
        # A deletion is not seen until the next exact count...
        assert store.read(lambda c: caches.drawers(3, c)) == 15
        # ...which comes RECOUNT_WRITES writes after the last one.
        assert store.read(lambda c: caches.drawers(1 + RECOUNT_WRITES, c)) == 12
        # The same counter is answered from the cache, whatever the table holds now.
        _add(store, 15, 2)
        assert store.read(lambda c: caches.drawers(1 + RECOUNT_WRITES, c)) == 12
        assert store.read(lambda c: caches.drawers(2 + RECOUNT_WRITES, c)) == 14
    finally:
        store.close()
