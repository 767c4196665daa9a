"""The ranking's parameters: every knob of ``search.rank`` and its heuristics, one place.

Each default was chosen by measurement on the LoCoMo dev split (``bench/rank_cv.py``,
``bench/locomo.py``, ``bench/access.py``); what was measured for each is in
docs/benchmarks.md, "Tuning constants" and "Connecting the dots". The functions that apply
a knob take it as an argument (their keyword defaults, where they have one, are read from
here), so no second set of defaults exists. The fusion weights are the model's:
``params_for`` reads them from the palace's embedder's catalog entry (``palaced.wire.models``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from palaced.wire.models import entry


@dataclass(frozen=True, slots=True)
class RankParams:
    """Ranking knobs. Shares "of the score range" are of the fused scores' max - min."""

    pool: int = 100  # candidates taken from each list
    lexical_weight: float = 0.75  # the keyword list's weight (a model's own: params_for)
    vector_weight: float = 0.25  # the vector list's; a query no word finds ranks by vectors
    importance_weight: float = 0.1  # share gained per unit of importance above 0.5 (x2)
    recency_weight: float = 0.05  # share a brand-new drawer gains, halving per half-life
    half_life_days: float = 30.0  # the recency boost's half-life
    access_weight: float = 0.025  # share gained from use: full at ACCESS_SATURATION recalls
    room_top_n: int = 3  # a room scores by its best drawer and the next top_n - 1 ...
    room_support: float = 0.2  # ... at this share
    substring_fallback: bool = True  # a keyword search finding nothing tries substrings
    when_boost: float = 0.3  # states a time, for a query that asks when (when.py)
    date_boost: float = 0.3  # about a month, year or span the query names (when.py)
    neighbour_vector: float = 0.5  # context vector's cosine added to a vector hit's own
    question_drop: float = 0.3  # a question hands its place to its reply (replies.py)
    reply_lift: float = 0.1  # share a reply to a question gains (not for "when")
    hop_weight: float = 0.3  # the second hop's keyword list against the query's (0: none)


DEFAULTS = RankParams()


@functools.lru_cache(maxsize=64)  # per recall; a daemon knows a handful of identities
def params_for(identity: str | None) -> RankParams:
    """The ranking's knobs for a palace whose vectors are ``identity``'s
    (``fastembed:<model name>:<dims>``, ``Embedder.identity``): the (keyword, vector) fusion
    weights of the model's catalog entry, the defaults for an unknown model, a model without
    fitted weights, or None (keyword-only). Never raises."""
    if identity is None:
        return DEFAULTS
    name = identity.removeprefix("fastembed:").rpartition(":")[0] or identity
    model = entry(name)
    if model is None or model.fusion is None:
        return DEFAULTS
    lexical, vector = model.fusion
    return replace(DEFAULTS, lexical_weight=lexical, vector_weight=vector)
