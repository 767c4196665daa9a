"""The candidate pool of one recall, read once into immutable records.

``read_pool`` reads everything the ranking's heuristics need about a set of candidates in a
few batched statements: their rows (metadata, the ends of their texts, closet hits:
``store.search.pool_rows``), their neighbours in their rooms (``store.context``), the ends
of the texts of the drawers before them, and the query's cosines with their context vectors
(``store.context_vectors``). The heuristics (``palaced.retrieval.candidates``) are pure
functions over the ``Pool`` it returns. The second hop of a ranking adds its new keyword hits
with ``Pool.extended``: a candidate is read once per recall. Synchronous, on the ranking's
reader connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import TypeVar

import apsw
import numpy as np

from palaced.retrieval.multihop import HOP_CHARS
from palaced.retrieval.replies import TAIL_CHARS, question_share
from palaced.retrieval.when import HEAD_CHARS
from palaced.store.lookup import context as ctx
from palaced.store.lookup import context_vectors
from palaced.store.lookup import search as sql
from palaced.store.lookup.search import PoolRow
from palaced.store.rows.drawers import Filters
from palaced.text.topics import query_topics

# The characters of a candidate's start that are read: what the time and date heuristics
# (when.HEAD_CHARS) and the second hop's names (multihop.HOP_CHARS) look at.
READ_HEAD = max(HEAD_CHARS, HOP_CHARS)

# Memoised: the heuristics ask about the same candidates in both hops and across recalls
# (uncached, ~50 calls per ranking were ~1 ms of its CPU time).
_question_share = lru_cache(maxsize=8192)(question_share)

K = TypeVar("K")
V = TypeVar("V")


def _frozen(d: dict[K, V]) -> Mapping[K, V]:
    """A read-only view of ``d`` (the pool's records are never changed once read)."""
    return MappingProxyType(d)


@dataclass(frozen=True, slots=True)
class Pool:
    """What one recall read about its candidates; ``rows`` holds those that match its
    filters in the ranking's snapshot (a candidate missing there is not ranked)."""

    rows: Mapping[int, PoolRow] = field(default_factory=lambda: _frozen({}))
    looked_up: frozenset[int] = frozenset()  # every id read, found or not
    before: Mapping[int, int] = field(default_factory=lambda: _frozen({}))  # previous in room
    # next in room; without superseded candidates (``Filters.include_superseded``), known
    # only where the next is a candidate (the drawer read as that one's previous)
    after: Mapping[int, int] = field(default_factory=lambda: _frozen({}))
    # (tail, length) of the drawers before candidates that are not candidates themselves
    tails: Mapping[int, tuple[str, int]] = field(default_factory=lambda: _frozen({}))
    # the query's cosine with the context vector of each vector hit that has one
    context: Mapping[int, float] = field(default_factory=lambda: _frozen({}))

    def head(self, i: int, chars: int = HEAD_CHARS) -> str:
        """The first ``chars`` characters of candidate ``i``'s text."""
        return self.rows[i].head[:chars]

    def question_share(self, i: int) -> float:
        """``replies.question_share`` of drawer ``i``'s end (a candidate or the drawer
        before one); 0 for a drawer not read."""
        row = self.rows.get(i)
        if row is not None:
            return _question_share(row.tail, row.length)
        tail = self.tails.get(i)
        return 0.0 if tail is None else _question_share(*tail)

    def extended(self, more: Pool) -> Pool:
        """This pool with ``more`` (read for other candidates) added."""
        return Pool(_frozen({**self.rows, **more.rows}), self.looked_up | more.looked_up,
                    _frozen({**self.before, **more.before}),
                    _frozen({**self.after, **more.after}),
                    _frozen({**self.tails, **more.tails}),
                    _frozen({**self.context, **more.context}))


def read_pool(c: apsw.Connection, ids: Sequence[int], *, query: str, filters: Filters,
              now_ms: int, qvec: np.ndarray | None = None, vector_ids: Sequence[int] = (),
              known: Pool | None = None) -> Pool:
    """The pool of candidates ``ids`` (those ``known`` looked up already left out, and
    added to it): their rows under ``filters``, their room neighbours, the tails of the
    drawers before them and, with ``qvec``, the context cosines of ``vector_ids``. Two
    statements (three with superseded candidates). Raises only the store's errors."""
    known = known or Pool()
    new = [i for i in dict.fromkeys(ids) if i not in known.looked_up]
    # Without superseded candidates, each candidate's "after" is the drawer whose "before"
    # it is, and is only asked about when that drawer is a candidate too, so the "before"
    # side alone is read, in the rows' own statement with its text end (on a team palace
    # each statement is a round trip; the neighbours statement was most of the pool's CPU).
    one_sided = not filters.include_superseded
    read = sql.pool_rows(c, new, filters, now_ms, head_chars=READ_HEAD,
                         tail_chars=TAIL_CHARS, topics=query_topics(query) if new else (),
                         before=one_sided)
    rows, before, after = read.rows, read.before, {}
    if one_sided:
        after = {j: i for i, j in before.items()}
    else:
        for i, near in ctx.neighbours_of(c, list(rows), 1).items():
            for j, off in near:
                (before if off == -1 else after)[i] = j
    all_rows = {**known.rows, **rows}
    unread = [j for j in before.values() if j not in all_rows and j not in known.tails]
    tails = ({j: read.before_tails[j] for j in unread} if one_sided
             else sql.drawer_tails(c, unread, TAIL_CHARS))
    context: dict[int, float] = {}
    fresh = [i for i in dict.fromkeys(vector_ids) if i not in known.context]
    if qvec is not None and fresh:
        context = context_vectors.cosines(c, fresh, qvec)
    return known.extended(Pool(_frozen(rows), frozenset(new), _frozen(before), _frozen(after),
                               _frozen(tails), _frozen(context)))
