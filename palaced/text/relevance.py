"""Relevance on a 0-1 scale, the relevance floor and query-centred excerpts (pure functions).

The ranking's fused score (``search.rank``) is relative: z-scores within one query's
candidate pool, so its values say nothing across queries or palaces and go negative. The
relevance a recall reports is absolute instead (docs/concepts.md, "What a score means"):

* ``coverage``: the share of the query's searchable words (``store.lookup.search.fts_terms``,
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
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

# Calibrated by bench/floor.py on the LoCoMo dev split: 1.7 % of gold hits under it; the
# cross-conversation questions answer "nothing relevant" 6.1 % of the time on it alone, 92.3 %
# with recall's unknown-name rule (1.8 % of gold hits flagged; docs/concepts.md).
FLOOR_HYBRID = 0.275
FLOOR_KEYWORD = 0.0
EXCERPT_CHARS = 600  # a drawer longer than this is shown as the passage around the match

# The keyword index's own word boundaries (store.lookup.search): "squash-merge" is two words there.
_WORD = re.compile(r"\w+", re.UNICODE)
# Where an excerpt may start: after a line break or a sentence end.
_STARTS = re.compile(r"\n+|(?<=[.!?])\s+")


def _stem(term: str) -> str:
    return term[: len(term) - 2] if len(term) >= 5 else term


def _found(term: str, vocabulary: Sequence[str]) -> bool:
    """Whether a word of the sorted ``vocabulary`` matches ``term``: equal, or for terms of
    5+ letters starting with the term minus its last two letters. One binary search."""
    stem = _stem(term)
    i = bisect_left(vocabulary, stem)
    if i == len(vocabulary):
        return False
    word = vocabulary[i]
    return word == term if stem == term else word.startswith(stem)


class TextMap:
    """A text's words with their offsets and the places an excerpt may start, computed in
    one pass. Coverage and excerpts then cost what the query's terms match, not what the
    text holds: recall keeps the maps of long drawers (``recall``) so a 200k-character
    drawer is scanned once, not on every recall that shows it.
    """

    __slots__ = ("_at", "_starts", "length", "vocabulary")

    def __init__(self, text: str) -> None:
        lowered = text.lower()
        at: dict[str, list[int]] = {}
        if len(lowered) == len(text):  # offsets of the lowered text are the text's
            for m in _WORD.finditer(lowered):
                at.setdefault(m.group(), []).append(m.start())
        else:  # a few characters change length when lowered ("İ"): lower word by word
            for m in _WORD.finditer(text):
                at.setdefault(m.group().lower(), []).append(m.start())
        self.length = len(text)
        self._at = at
        self.vocabulary = sorted(at)
        self._starts = array("i", [0])
        self._starts.extend(m.end() for m in _STARTS.finditer(text) if m.end() < len(text))

    @property
    def size(self) -> int:
        """Roughly what the map holds (for caches bounded by size): the text's length."""
        return self.length

    def coverage(self, terms: Sequence[str]) -> float:
        """The share of ``terms`` found in the text (see ``coverage``)."""
        if not terms:
            return 0.0
        return sum(1 for t in terms if _found(t, self.vocabulary)) / len(terms)

    def _matches(self, terms: Sequence[str]) -> list[tuple[int, int, int]]:
        """``(start, end, term index)`` of every word matching a term, in text order."""
        out: list[tuple[int, int, int]] = []
        for n, term in enumerate(terms):
            stem = _stem(term)
            i = bisect_left(self.vocabulary, stem)
            while i < len(self.vocabulary):
                word = self.vocabulary[i]
                if not (word == term if stem == term else word.startswith(stem)):
                    break
                out.extend((p, p + len(word), n) for p in self._at[word])
                i += 1
        out.sort()
        return out

    def best_window(self, terms: Sequence[str], limit: int) -> int:
        """The start of the ``limit``-character window holding the most distinct terms.

        Windows start at line or sentence starts; ties go to the earliest; without any match
        the window is the text's start. Only starts within ``limit`` before a match are
        tried, so the cost follows the matches, not the text's length.
        """
        matches = self._matches(terms)
        if not matches:
            return 0
        starts = self._starts
        candidates: set[int] = set()
        for pos, end, _ in matches:
            lo = bisect_left(starts, end - limit)
            hi = bisect_left(starts, pos + 1)
            candidates.update(range(lo, hi))
        counts = [0] * len(terms)
        distinct = 0
        left = right = 0  # matches[left:right] are inside the current window
        best, best_hits = 0, 0
        for k in sorted(candidates):
            s = starts[k]
            while right < len(matches) and matches[right][1] <= s + limit:
                n = matches[right][2]
                counts[n] += 1
                distinct += counts[n] == 1
                right += 1
            while left < right and matches[left][0] < s:
                n = matches[left][2]
                counts[n] -= 1
                distinct -= counts[n] == 0
                left += 1
            while left < len(matches) and left >= right and matches[left][0] < s:
                left += 1
                right = max(right, left)
            if distinct > best_hits:
                best, best_hits = s, distinct
        return best


def coverage(text: str, terms: Sequence[str], tmap: TextMap | None = None, *,
             substring: bool = False) -> float:
    """The share of ``terms`` (lower-case query words) found in ``text``, in [0, 1]; with
    ``substring`` a term of 3+ characters also counts inside a word ("gres" in "Postgres":
    the keyword search fell back to substrings).

    ``tmap``, the text's ``TextMap`` when the caller keeps one, saves scanning the text.
    """
    if not terms:
        return 0.0
    if substring:  # rare (no word of the query matched anything): scan the text
        lowered = text.lower()
        words = sorted(set(_WORD.findall(lowered)))
        return sum(1 for t in terms
                   if (len(t) >= 3 and t in lowered) or _found(t, words)) / len(terms)
    if tmap is not None:
        return tmap.coverage(terms)
    vocabulary = sorted({w.lower() for w in _WORD.findall(text)})
    return sum(1 for t in terms if _found(t, vocabulary)) / len(terms)


def relevance(text: str, terms: Sequence[str], cosine: float | None,
              tmap: TextMap | None = None, *, substring: bool = False,
              dated: Sequence[str] = ()) -> float:
    """A drawer's 0-1 relevance: ``max(clip(cosine), coverage)``; coverage alone without one
    (``substring``: see ``coverage``). ``dated``: the terms the drawer's date matches
    ("yesterday" for a drawer of yesterday, ``palaced.text.periods``), found whatever its text."""
    rest = [t for t in terms if t not in dated]
    cov = coverage(text, rest, tmap, substring=substring)
    if terms and len(rest) < len(terms):
        cov = (cov * len(rest) + len(terms) - len(rest)) / len(terms)
    if cosine is None:
        return cov
    return max(min(max(cosine, 0.0), 1.0), cov)


def floor_for(hybrid: bool) -> float:
    """The relevance under which a recall drops a drawer (0: no floor)."""
    return FLOOR_HYBRID if hybrid else FLOOR_KEYWORD


def excerpt(text: str, terms: Sequence[str], limit: int = EXCERPT_CHARS,
            tmap: TextMap | None = None) -> str | None:
    """The ``limit``-character passage of ``text`` holding the most query terms, or None
    when ``text`` is short enough to show whole.

    Windows start at line or sentence starts; ties go to the earliest; a word counts when
    it lies whole inside the window. Without terms it is the text's start (nothing scanned).
    The passage is marked "…" where it cuts the text.
    """
    if len(text) <= limit:
        return None
    best = 0
    if terms:
        best = (tmap if tmap is not None else TextMap(text)).best_window(terms, limit)
    end = min(len(text), best + limit)
    passage = text[best:end].strip()
    return ("…" if best > 0 else "") + passage + ("…" if end < len(text) else "")


def shorten(d: dict[str, Any], terms: Sequence[str], tmap: TextMap | None = None
            ) -> dict[str, Any]:
    """``d`` (a drawer dict) with a long ``text`` replaced by its passage around the query
    terms (its start without terms), marked ``excerpt: true`` with ``chars``, the full length.
    """
    if d.get("excerpt"):
        return d
    text = str(d.get("text", ""))
    passage = excerpt(text, terms, tmap=tmap)
    if passage is None:
        return d
    return {**d, "text": passage, "excerpt": True, "chars": len(text)}
