"""The second hop of a recall: entities the first hits name, searched for in turn.

A question whose answer is spread over two memories ("Where is Alice's employer based?":
"Alice works at Zephyrcorp" / "Zephyrcorp opened its office in Lisbon") has a first hop the
query's words find and a second hop that shares no word with the query, only a name with the
first hop. ``hop_terms`` picks those names: the entities (``topics.query_entities``) of the
best few drawers of the first pass that the query does not name, rare enough in the palace
to say something (in at most a tenth of its drawers), best by how many of those drawers name
them times their IDF. ``search.rank`` runs BM25 for them and folds the result into its
keyword list with weight ``RankParams.hop_weight``; a hop that finds no such name changes
nothing (measured: docs/benchmarks.md, "Connecting the dots").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from palaced.store.lookup.search import fts_terms
from palaced.text.topics import query_entities

HOP_FROM = 3  # the first pass's best drawers whose names are followed
HOP_TERMS = 8  # names followed at most
MAX_DF_SHARE = 0.1  # a name in more than this share of the drawers says little
# Names are read from a drawer's first this many characters: a 200k-character drawer would
# take ~150 ms to read whole, and recall's hits are mostly short.
HOP_CHARS = 2_000


@lru_cache(maxsize=1024)
def _names(text: str) -> frozenset[str]:
    # Memoised: the same best drawers come back query after query, and reading a drawer's
    # names is ~1 ms (most of the hop's cost).
    return frozenset(fts_terms(" ".join(query_entities(text))))


def hop_names(query: str, texts: Sequence[str]) -> Counter[str]:
    """The search words of the names ``texts`` mention and ``query`` does not, each with
    how many of ``texts`` name it: the words ``hop_terms`` weighs (digits and words under
    three letters left out). Never raises."""
    asked = set(fts_terms(query))
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(w for w in _names(text[:HOP_CHARS])
                      if w not in asked and len(w) >= 3 and not w.isdigit())
    return counts


def hop_terms(query: str, texts: Sequence[str], doc_freq: Callable[[str], int],
              n_docs: int, limit: int = HOP_TERMS) -> list[str]:
    """The search words of the names ``texts`` mention and ``query`` does not, best first.

    ``doc_freq(word)`` is how many drawers hold ``word`` (asked for each of ``hop_names``);
    ``n_docs`` the palace's drawer count. Words in none or in more than ``MAX_DF_SHARE`` of
    the drawers, digits and words under three letters are left out. Never raises
    (``doc_freq``'s own errors aside).
    """
    if n_docs <= 0:
        return []
    scored = []
    for word, count in hop_names(query, texts).items():
        df = doc_freq(word)
        if 0 < df <= MAX_DF_SHARE * n_docs:
            scored.append((count * math.log(n_docs / df), word))
    scored.sort(key=lambda sw: (-sw[0], sw[1]))
    return [w for _, w in scored[:limit]]
