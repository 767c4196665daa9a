"""The steps of a ranking that read the store about single candidates.

``search.rank`` fuses the keyword and vector lists; these steps look up what that needs
about the candidates: which state a time or are about a date the query names
(``palaced.retrieval.when``), their context vectors' cosines (``RankParams.neighbour_vector``),
which close with a question and what replied to it, and which reply to a question
(``palaced.retrieval.replies``). What one hop of the ranking looked up is kept in a ``Known`` and
reused by the next hop. Synchronous, on the ranking's reader connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import apsw
import numpy as np

from palaced.retrieval.fusion import ranking
from palaced.retrieval.replies import TAIL_CHARS, question_share
from palaced.retrieval.when import (
    HEAD_CHARS,
    asks_when,
    date_matches,
    drawer_spans,
    query_dates,
    states_time,
)
from palaced.store.lookup import context as ctx
from palaced.store.lookup import context_vectors
from palaced.store.lookup import search as sql
from palaced.text.periods import Period
from palaced.text.reldates import resolved_date_words

REPLY_CHECKED = 30  # best candidates whose text ends are read for questions
TIME_CHECKED = 50  # best fused candidates whose texts are read for times and dates


@dataclass
class Known:
    """What one hop of ``rank`` looked up about its candidates, reused by the next hop."""

    looked_up: set[int] = field(default_factory=set)
    period: Period | None = None  # the span of time the query names (``palaced.text.periods``)
    in_period: list[int] = field(default_factory=list)  # the newest drawers dated in it
    meta: dict[int, tuple[str, str, float, int, int, int]] = field(default_factory=dict)
    closet_hits: set[int] = field(default_factory=set)
    checked: set[int] = field(default_factory=set)  # candidates looked at for times
    timed: set[int] = field(default_factory=set)  # candidates whose text states a time
    dated: set[int] = field(default_factory=set)  # candidates about a date the query names
    qvec: np.ndarray | None = None  # the query's vector (None: keyword-only)
    context: dict[int, float | None] = field(default_factory=dict)  # context cosines
    tails: set[int] = field(default_factory=set)  # candidates whose ends were read
    reply_of: dict[int, int | None] = field(default_factory=dict)  # question -> next drawer
    asks: dict[int, float] = field(default_factory=dict)  # question -> its question share
    prev_of: dict[int, int | None] = field(default_factory=dict)  # drawer -> the one before


def find_times(c: apsw.Connection, query: str, ids: list[int], when_boost: float,
               date_boost: float, known: Known) -> None:
    """Which of the candidates ``ids`` (not looked at before) state a time, for a query that
    asks when or how long, and which are about a month or year the query names by a relative
    time in their text; recorded in ``known``. Reads the first ``HEAD_CHARS`` characters of
    their texts; never raises but for the store's errors."""
    when = bool(when_boost) and asks_when(query)
    asked = query_dates(query) if date_boost else []
    if not ids or not (when or asked):
        return
    known.checked.update(ids)
    heads = sql.drawer_heads(c, ids, HEAD_CHARS)
    if when:
        known.timed.update(i for i, text in heads.items() if states_time(text, query))
    for i, text in heads.items():
        occurred = known.meta[i][3]
        if asked and date_matches(asked, drawer_spans(
                month_of(occurred), resolved_date_words(text, occurred))):
            known.dated.add(i)


def pass_to_replies(c: apsw.Connection, query: str, scores: dict[int, float],
                    spread: float, question_drop: float, when_boost: float, known: Known
                    ) -> dict[int, float]:
    """``scores`` with each of the best ``REPLY_CHECKED`` that closes with a question
    (``replies.question_share``) lowered by ``question_drop`` times that share of
    ``spread``, and the drawer after it in its room, when that is a candidate, raised to
    its score before the drop (for a query that asks when, only a reply that states a
    time: the answer to "when" does). Never raises but for the store's errors."""
    top = ranking(scores)[:REPLY_CHECKED]
    new = [i for i in top if i not in known.tails]
    if new:
        known.tails.update(new)
        shares = {i: share for i, (t, n) in sql.drawer_tails(c, new, TAIL_CHARS).items()
                  if (share := question_share(t, n)) > 0}
        known.asks.update(shares)
        known.reply_of.update(dict.fromkeys(shares))
        for i, near in ctx.neighbours_of(c, list(shares), 1).items():
            known.reply_of[i] = next((j for j, off in near if off == 1), None)
    asking = [i for i in top if i in known.asks]
    if not asking:
        return scores
    out = dict(scores)
    replies = {i: j for i in asking if (j := known.reply_of[i]) is not None and j in out}
    if when_boost and replies and asks_when(query):
        unchecked = [j for j in replies.values() if j not in known.checked]
        known.checked.update(unchecked)
        known.timed.update(j for j, text in sql.drawer_heads(c, unchecked, HEAD_CHARS).items()
                           if states_time(text, query))
        replies = {i: j for i, j in replies.items() if j in known.timed}
    for i in asking:
        if (j := replies.get(i)) is not None:
            out[j] = max(out[j], scores[i])
        out[i] -= known.asks[i] * question_drop * spread
    return out


def lift_replies(c: apsw.Connection, query: str, scores: dict[int, float], spread: float,
                 lift: float, known: Known) -> dict[int, float]:
    """``scores`` with each of the best ``REPLY_CHECKED`` whose previous drawer in its room
    closes with a question (``replies.question_share``) raised by ``lift`` times ``spread``
    (``RankParams.reply_lift``). Not for a query that asks when: ``pass_to_replies`` raises
    only a reply that states a time for those. Never raises but for the store's errors."""
    if not lift or asks_when(query):
        return scores
    top = ranking(scores)[:REPLY_CHECKED]
    new = [i for i in top if i not in known.prev_of]
    if new:
        known.prev_of.update(dict.fromkeys(new))
        for i, near in ctx.neighbours_of(c, new, 1).items():
            known.prev_of[i] = next((j for j, off in near if off == -1), None)
        before = {j: i for i in new if (j := known.prev_of[i]) is not None}
        unread = [j for j in before if j not in known.tails]
        known.tails.update(unread)
        for j, (tail, length) in sql.drawer_tails(c, unread, TAIL_CHARS).items():
            if (share := question_share(tail, length)) > 0:
                # Read as ``pass_to_replies`` reads a candidate: the drawer after a
                # question is the one it precedes.
                known.asks[j], known.reply_of[j] = share, before[j]
    return {i: s + lift * spread if (j := known.prev_of.get(i)) is not None
            and j in known.asks else s for i, s in scores.items()}


def month_of(ms: int) -> tuple[int, int]:
    """The (month, year) of a timestamp in milliseconds, UTC."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.month, at.year


def with_neighbours(c: apsw.Connection, vector: dict[int, float], weight: float,
                    known: Known) -> dict[int, float]:
    """``vector`` (the vector hits' cosines) with each hit's ``weight`` times the query's
    cosine with its context vector (the mean of its room neighbours' vectors,
    ``store.lookup.context_vectors``) added (``RankParams.neighbour_vector``); a hit without one
    keeps its cosine. Never raises but for the store's errors."""
    assert known.qvec is not None
    new = [i for i in vector if i not in known.context]
    if new:
        known.context.update(dict.fromkeys(new))
        known.context.update(context_vectors.cosines(c, new, known.qvec))
    return {i: own if (near := known.context[i]) is None else own + weight * near
            for i, own in vector.items()}
