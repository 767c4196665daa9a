"""What recall keeps between requests for one open palace (``caches_of``).

Values stamped with the palace's ``write_counter`` (L1, rooms, the drawer count) are stale
after any write; ``term_stats`` keeps itself roughly current; the word maps of long drawers
(``text_map``) never go stale, a drawer's text being immutable and its id never reused.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import apsw
from cachetools import LRUCache

from palaced.palace.handle import Palace
from palaced.store.lookup.search import TermStats, drawer_count, drawer_top
from palaced.text import relevance

# Word maps of long drawers kept per open palace, in characters of text mapped (a map takes
# ~1.4 MB per 150k characters, so ~37 MB at most): a recall that shows a 150k-character
# drawer scans it once (30-85 ms), not every time (bench/bigmem.py).
TEXT_MAPS_CHARS = 4_000_000

# Writes between exact drawer counts (see ``RecallCaches.drawers``). A count scans an index:
# ~10 ms of CPU at a million drawers, paid by the first recall after every write before.
RECOUNT_WRITES = 200


@dataclass
class RecallCaches:
    """What recall keeps between requests for one open palace.

    Values are stamped with the palace's ``write_counter`` when read: any write since makes
    them stale. ``term_stats`` keeps itself roughly current (see ``TermStats``).
    """

    l1: tuple[int, list[dict[str, Any]]] | None = None
    rooms: tuple[int, list[tuple[str, str]]] | None = None
    # (counter, whether any conflict is open): most palaces have none, and then recall
    # reads no conflict at all
    conflicts: tuple[int, bool] | None = None
    # (counter, drawers now, counter of the last exact count, highest id then, count then)
    doc_count: tuple[int, int, int, int, int] | None = None
    term_stats: TermStats = field(default_factory=TermStats)
    # Keyed by drawer id: a drawer's text never changes and ids are never reused, so a map
    # stays right for as long as the drawer exists. Read hops run in parallel: locked.
    text_maps: LRUCache[int, relevance.TextMap] = field(default_factory=lambda: LRUCache(
        maxsize=TEXT_MAPS_CHARS, getsizeof=lambda m: m.size))
    maps_lock: threading.Lock = field(default_factory=threading.Lock)

    def drawers(self, counter: int, conn: apsw.Connection) -> int:
        """How many drawers the palace holds at write ``counter``, for BM25's N.

        Counted exactly at least every RECOUNT_WRITES writes; in between, the last count plus
        the drawers added since (their ids only grow). Drawers deleted since are not taken
        off until the next count: N only decides which words are informative (``TermStats``),
        and a few per cent do not move that.
        """
        known = self.doc_count
        if known is not None and known[0] == counter:
            return known[1]
        if known is None or not 0 <= counter - known[2] < RECOUNT_WRITES:
            n = drawer_count(conn)
            self.doc_count = (counter, n, counter, drawer_top(conn), n)
            return n
        n = known[4] + max(0, drawer_top(conn) - known[3])
        self.doc_count = (counter, n, *known[2:])
        return n

    def l1_valid(self, counter: int) -> list[dict[str, Any]] | None:
        return self.l1[1] if self.l1 is not None and self.l1[0] == counter else None

    def text_map(self, drawer_id: int, text: str) -> relevance.TextMap | None:
        """The word map of a long drawer's text (None for a text shown whole)."""
        if len(text) <= relevance.EXCERPT_CHARS:
            return None
        with self.maps_lock:
            found = self.text_maps.get(drawer_id)
        if found is None or found.length != len(text):
            found = relevance.TextMap(text)
            with self.maps_lock:
                self.text_maps[drawer_id] = found
        return found


# Keyed by the handle, so the caches live exactly as long as the open palace.
_caches: weakref.WeakKeyDictionary[Palace, RecallCaches] = weakref.WeakKeyDictionary()


def caches_of(palace: Palace) -> RecallCaches:
    caches = _caches.get(palace)
    if caches is None:
        caches = _caches[palace] = RecallCaches()
    return caches
