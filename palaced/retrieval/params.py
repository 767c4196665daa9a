"""The ranking's parameters: every knob of ``search.rank`` and its heuristics, one place.

Each default was chosen by measurement on the LoCoMo dev split (``bench/rank_cv.py``,
``bench/locomo.py``, ``bench/access.py``); what was measured for each is in
docs/benchmarks.md, "Tuning constants" and "Connecting the dots". The functions that apply
a knob take it as an argument (their keyword defaults, where they have one, are read from
here), so no second set of defaults exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankParams:
    """Ranking knobs. Shares "of the score range" are of the fused scores' max - min."""

    pool: int = 100  # candidates taken from each list (room scores need a deep pool)
    lexical_weight: float = 0.75  # the keyword list's weight in the fusion
    vector_weight: float = 0.25  # the vector list's; a query no word finds ranks by vectors
    closet_boost: float = 0.05  # share gained when filed under a topic the query names
    importance_weight: float = 0.1  # share gained per unit of importance above 0.5 (x2)
    recency_weight: float = 0.05  # share a brand-new drawer gains, halving per half-life
    half_life_days: float = 30.0  # the recency boost's half-life
    access_weight: float = 0.025  # share gained from use: full at ACCESS_SATURATION recalls
    room_weight: float = 0.4  # share a drawer of the best room gains over the weakest's
    room_top_n: int = 3  # a room scores by its best drawer and the next top_n - 1 ...
    room_support: float = 0.2  # ... at this share
    substring_fallback: bool = True  # a keyword search finding nothing tries substrings
    when_boost: float = 0.3  # states a time, for a query that asks when (when.py)
    date_boost: float = 0.3  # about a month, year or span the query names (when.py)
    neighbour_vector: float = 0.5  # context vector's cosine added to a vector hit's own
    question_drop: float = 0.3  # a question hands its place to its reply (replies.py)
    reply_lift: float = 0.1  # share a reply to a question gains (not for "when")
    set_spread: float = 0.1  # set questions: share lost per better drawer of its room
    set_keep: int = 5  # ... below the best set_keep, which stay (sets.py)
    hop_weight: float = 0.3  # the second hop's keyword list against the query's (0: none)


DEFAULTS = RankParams()
