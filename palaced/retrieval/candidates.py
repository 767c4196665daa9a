"""The ranking's heuristics about single candidates: pure functions over the read pool.

``search.rank`` fuses the keyword and vector lists; these steps adjust the fused scores from
what ``pool.read_pool`` read about the candidates: which state a time or are about a date the
query names (``palaced.retrieval.when``), their context vectors' cosines
(``RankParams.neighbour_vector``), which close with a question and what replied to it, and
which reply to a question (``palaced.retrieval.replies``). No I/O: each takes the pool and
its parameter and returns new scores. What one hop of the ranking looked at, and so boosts
in the next hop too, travels in an immutable ``Seen``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from palaced.retrieval.fusion import ranking
from palaced.retrieval.pool import Pool
from palaced.retrieval.when import (
    asks_when,
    date_matches,
    drawer_spans,
    query_dates,
    states_time,
)
from palaced.text.reldates import resolved_date_words

REPLY_CHECKED = 30  # best candidates whose text ends are read for questions
TIME_CHECKED = 50  # best fused candidates whose texts are read for times and dates


@dataclass(frozen=True, slots=True)
class Seen:
    """What the hops of a ranking so far looked at, carried into the next hop: a candidate
    found to state a time in the first hop is lifted in the second too."""

    checked: frozenset[int] = frozenset()  # candidates whose heads were read for times
    timed: frozenset[int] = frozenset()  # ... and state one (a query that asks when)
    dated: frozenset[int] = frozenset()  # ... about a date the query names, by their text
    prev_checked: frozenset[int] = frozenset()  # candidates checked for a question before


def month_of(ms: int) -> tuple[int, int]:
    """The (month, year) of a timestamp in milliseconds, UTC."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.month, at.year


def find_times(query: str, pool: Pool, fused: Mapping[int, float], when_boost: float,
               date_boost: float, seen: Seen) -> Seen:
    """``seen`` with the best ``TIME_CHECKED`` of ``fused`` not looked at before checked:
    for a query that asks when or how long, which state a time; for one that names a month
    or year, which are about it by a relative time in their text (``palaced.retrieval.when``).
    A boost is a fifth to a third of the score range, so the best candidates alone are read
    (reading every candidate's text cost p95 +4 ms at 11k drawers). Never raises."""
    when = bool(when_boost) and asks_when(query)
    asked = query_dates(query) if date_boost else []
    ids = [i for i in ranking(fused)[:TIME_CHECKED] if i not in seen.checked]
    if not ids or not (when or asked):
        return seen
    timed = {i for i in ids if states_time(pool.head(i), query)} if when else set()
    dated = set()
    for i in ids if asked else ():
        occurred = pool.rows[i].occurred_ms
        if date_matches(asked, drawer_spans(
                month_of(occurred), resolved_date_words(pool.head(i), occurred))):
            dated.add(i)
    return replace(seen, checked=seen.checked.union(ids), timed=seen.timed | timed,
                   dated=seen.dated | dated)


def pass_to_replies(query: str, pool: Pool, scores: Mapping[int, float], spread: float,
                    question_drop: float, when_boost: float, seen: Seen
                    ) -> tuple[dict[int, float], Seen]:
    """``scores`` with each of the best ``REPLY_CHECKED`` that closes with a question
    (``replies.question_share``) lowered by ``question_drop`` times that share of
    ``spread``, and the drawer after it in its room, when that is a candidate, raised to
    its score before the drop (for a query that asks when, only a reply that states a
    time: the answer to "when" does); and ``seen`` with the replies read for times. Never
    raises."""
    top = ranking(scores)[:REPLY_CHECKED]
    asks = {i: share for i in top if (share := pool.question_share(i)) > 0}
    out = dict(scores)
    if not asks:
        return out, seen
    replies = {i: j for i in asks if (j := pool.after.get(i)) is not None and j in out}
    if when_boost and replies and asks_when(query):
        unchecked = [j for j in replies.values() if j not in seen.checked]
        seen = replace(seen, checked=seen.checked.union(unchecked), timed=seen.timed | {
            j for j in unchecked if states_time(pool.head(j), query)})
        replies = {i: j for i, j in replies.items() if j in seen.timed}
    for i, share in asks.items():
        if (j := replies.get(i)) is not None:
            out[j] = max(out[j], scores[i])
        out[i] -= share * question_drop * spread
    return out, seen


def lift_replies(query: str, pool: Pool, scores: Mapping[int, float], spread: float,
                 lift: float, seen: Seen) -> tuple[dict[int, float], Seen]:
    """``scores`` with each candidate among the best ``REPLY_CHECKED`` (of this hop or an
    earlier one) whose previous drawer in its room closes with a question
    (``replies.question_share``) raised by ``lift`` times ``spread``
    (``RankParams.reply_lift``). Not for a query that asks when: ``pass_to_replies`` raises
    only a reply that states a time for those. Never raises."""
    if not lift or asks_when(query):
        return dict(scores), seen
    seen = replace(seen, prev_checked=seen.prev_checked.union(
        ranking(scores)[:REPLY_CHECKED]))
    return {i: s + lift * spread if i in seen.prev_checked
            and (j := pool.before.get(i)) is not None and pool.question_share(j) > 0 else s
            for i, s in scores.items()}, seen


def with_neighbours(vector: Mapping[int, float], context: Mapping[int, float],
                    weight: float) -> dict[int, float]:
    """``vector`` (the vector hits' cosines) with each hit's ``weight`` times the query's
    cosine with its context vector (``context``: the mean of its room neighbours' vectors,
    ``store.context_vectors``) added (``RankParams.neighbour_vector``); a hit without one
    keeps its cosine. Never raises."""
    return {i: own if (near := context.get(i)) is None else own + weight * near
            for i, own in vector.items()}
