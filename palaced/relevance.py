"""Relevance on a 0-1 scale, the relevance floor and query-centred excerpts (pure functions).

The ranking's fused score (``search.rank``) is relative: z-scores within one query's
candidate pool, so its values say nothing across queries or palaces and go negative. The
relevance a recall reports is absolute instead (docs/concepts.md, "What a score means"):

* ``coverage``: the share of the query's searchable words (``store.search.fts_terms``,
  stopwords removed) that occur in the drawer's text, a word matching when it equals the
  term or, for terms of 5+ letters, shares the term's first ``len - 2`` letters
  ("research" ~ "researching");
* ``cosine``: the cosine similarity of the query's embedding with the drawer's best chunk,
  clipped to [0, 1] (hybrid mode only; a drawer outside the vector pool gets the pool's
  lowest cosine, an upper bound of its own);
* relevance = ``max(cosine, coverage)`` in hybrid mode, ``coverage`` keyword-only.

Apart from the floor, recall answers "nothing relevant" when the query names things
(``topics.query_entities``) none of which any drawer mentions (``recall._unknown_names``).

The floor (``FLOOR_HYBRID``) was calibrated on the LoCoMo dev split by ``bench/floor.py``;
keyword-only recalls have no floor (``FLOOR_KEYWORD`` is 0): word coverage alone cannot
tell a topical hit from a chance word match well enough (see docs/concepts.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# Calibrated by bench/floor.py on the LoCoMo dev split: 1.7 % of gold hits under it; the
# cross-conversation questions answer "nothing relevant" 6.1 % of the time on it alone, 92.3 %
# with recall's unknown-name rule (1.8 % of gold hits flagged; docs/concepts.md).
FLOOR_HYBRID = 0.275
FLOOR_KEYWORD = 0.0
EXCERPT_CHARS = 600  # a drawer longer than this is shown as the passage around the match
MAX_WINDOWS = 400  # passages tried per drawer

# The keyword index's own word boundaries (store.search): "squash-merge" is two words there.
_WORD = re.compile(r"\w+", re.UNICODE)


def _stem(term: str) -> str:
    return term[: len(term) - 2] if len(term) >= 5 else term


def _matches(word: str, term: str, stem: str) -> bool:
    return word == term or (stem != term and word.startswith(stem))


def coverage(text: str, terms: Sequence[str], *, substring: bool = False) -> float:
    """The share of ``terms`` (lower-case query words) found in ``text``, in [0, 1]; with
    ``substring`` a term of 3+ characters also counts inside a word ("gres" in "Postgres")."""
    if not terms:
        return 0.0
    words = {w.lower() for w in _WORD.findall(text)}
    lowered = text.lower() if substring else ""
    found = 0
    for term in terms:
        stem = _stem(term)
        if (term in words or (stem != term and any(w.startswith(stem) for w in words))
                or (substring and len(term) >= 3 and term in lowered)):
            found += 1
    return found / len(terms)


def relevance(text: str, terms: Sequence[str], cosine: float | None, *,
              substring: bool = False) -> float:
    """A drawer's 0-1 relevance: ``max(clip(cosine), coverage)``; coverage alone without one
    (``substring``: words found inside others count, see ``coverage``)."""
    cov = coverage(text, terms, substring=substring)
    if cosine is None:
        return cov
    return max(min(max(cosine, 0.0), 1.0), cov)


def floor_for(hybrid: bool) -> float:
    """The relevance under which a recall drops a drawer (0: no floor)."""
    return FLOOR_HYBRID if hybrid else FLOOR_KEYWORD


def excerpt(text: str, terms: Sequence[str], limit: int = EXCERPT_CHARS) -> str | None:
    """The ``limit``-character passage of ``text`` holding the most query terms, or None
    when ``text`` is short enough to show whole.

    Windows start at line or sentence starts; ties go to the earliest. The passage is marked
    "…" where it cuts the text.
    """
    if len(text) <= limit:
        return None
    starts = [0] + [m.end() for m in re.finditer(r"\n+|(?<=[.!?])\s+", text)]
    starts = [s for s in starts if s < len(text)]
    if len(starts) > MAX_WINDOWS:  # a huge drawer: try evenly spread windows
        starts = starts[:: len(starts) // MAX_WINDOWS + 1]
    stems = [(t, _stem(t)) for t in terms]
    best, best_hits = 0, -1
    if not stems:
        starts = [0]
    for s in starts:
        window = {w.lower() for w in _WORD.findall(text[s:s + limit])}
        hits = sum(1 for t, st in stems if any(_matches(w, t, st) for w in window))
        if hits > best_hits:
            best, best_hits = s, hits
    end = min(len(text), best + limit)
    passage = text[best:end].strip()
    return ("…" if best > 0 else "") + passage + ("…" if end < len(text) else "")


def shorten(d: dict[str, Any], terms: Sequence[str]) -> dict[str, Any]:
    """``d`` (a drawer dict) with a long ``text`` replaced by its passage around the query
    terms (its start without terms), marked ``excerpt: true`` with ``chars``, the full length.
    """
    if d.get("excerpt"):
        return d
    text = str(d.get("text", ""))
    passage = excerpt(text, terms)
    if passage is None:
        return d
    return {**d, "text": passage, "excerpt": True, "chars": len(text)}
