"""Pure, synchronous score fusion and ranking maths over plain data.

Everything here is a function of its arguments (no I/O, no clock, no anyio), so the daemon can
run it in a worker thread and the tests can drive it with hand-made numbers. Ranking a recall
(``search.rank`` applies these in a fixed, measured order) is:

1. :func:`fuse` the lexical and vector hit lists into one score per drawer;
2. :func:`apply_boosts` for importance and recency;
3. :func:`room_scores` to rank the rooms (the drawers' order is their own: lifting the
   drawers of strong rooms was measured and removed, docs/benchmarks.md "Model choice and
   fewer rules");
4. :func:`ranking` to order them (``packing.pack`` then fits the results into a budget).

Score conventions: every score map is ``{drawer_id: score}`` with **higher is better**
(``store.search`` negates FTS5's ``bm25()``). Vector scores are cosine similarities. Fused
scores are on an arbitrary scale (sums of weighted z-scores), so the boosts below are
expressed as fractions of the current score range rather than absolute amounts, which keeps
them small whatever the fusion. The weights' defaults are ``RankParams``'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from palaced.retrieval.params import DEFAULTS

# Accesses at which the access boost is full: it grows with log(1 + count) up to here.
ACCESS_SATURATION = 20

_DAY_MS = 86_400_000.0
_EPS = 1e-12


# -- fusion ---------------------------------------------------------------------------------
def ranking(scores: Mapping[int, float]) -> list[int]:
    """Return the ids of ``scores`` best first; ties go to the smaller id (deterministic)."""
    return sorted(scores, key=lambda drawer_id: (-scores[drawer_id], drawer_id))


def normalize(scores: Mapping[int, float]) -> tuple[dict[int, float], float]:
    """Standardise one hit list; return ``(z-scores, floor for missing ids)``.

    ``(s - mean) / population stdev``. The floor is the list's lowest z-score: a drawer the
    list did not return is treated as no better than its worst hit. A list with fewer than
    two distinct values only says "present": its hits get 1 and the floor is -1. Never
    raises.
    """
    if not scores:
        return {}, 0.0
    values = [float(v) for v in scores.values()]
    low, high = min(values), max(values)
    if high - low <= _EPS * max(1.0, abs(high), abs(low)):
        # A list that cannot rank its hits still says "these match and nothing else does":
        # give that the spread of a typical list's top vs floor (+1 / -1), so a lone exact
        # keyword hit is not drowned by the other list's z-spread.
        return dict.fromkeys(scores, 1.0), -1.0
    # Plain float math: statistics.pstdev's exact fractions cost ~0.3 ms per list.
    mean = math.fsum(values) / len(values)
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    normed = {k: (float(v) - mean) / stdev for k, v in scores.items()}
    return normed, (low - mean) / stdev


def standardized_fusion(score_lists: Sequence[Mapping[int, float]], *,
                        weights: Sequence[float] | None = None) -> dict[int, float]:
    """Fuse hit lists by a weighted sum of per-list z-scores.

    Each list is standardised with :func:`normalize`; a drawer missing from a non-empty list
    gets that list's floor. Empty lists are ignored (they say nothing about anyone).

    Raises:
        ValueError: ``weights`` has a different length than ``score_lists`` or a negative
            weight.
    """
    weights = _check_weights(score_lists, weights)
    prepared = [(normalize(scores), w)
                for scores, w in zip(score_lists, weights, strict=True) if scores]
    ids = _union(scores for scores in score_lists)
    return {
        drawer_id: sum(w * normed.get(drawer_id, floor) for (normed, floor), w in prepared)
        for drawer_id in ids
    }


def fuse(lexical: Mapping[int, float], vector: Mapping[int, float], *,
         lexical_weight: float, vector_weight: float) -> dict[int, float]:
    """Fuse lexical and vector hits into one higher-is-better score per drawer: the weighted
    sum of their z-scores (:func:`standardized_fusion`). The weights are the ranking's
    (``RankParams``), the one place they are set.

    Args:
        lexical: ``{drawer_id: score}``, higher is better. Empty in vector-only mode.
        vector: ``{drawer_id: cosine similarity}``. Empty in keyword-only mode.
        lexical_weight, vector_weight: the weight of each list.

    Raises:
        ValueError: a negative weight.
    """
    return standardized_fusion((lexical, vector), weights=(lexical_weight, vector_weight))


def _check_weights(score_lists: Sequence[Mapping[int, float]],
                   weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * len(score_lists)
    if len(weights) != len(score_lists):
        raise ValueError(f"{len(weights)} weights for {len(score_lists)} score lists")
    if any(w < 0 or math.isnan(w) for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    return [float(w) for w in weights]


def _union(maps: Iterable[Mapping[int, float]]) -> list[int]:
    seen: dict[int, None] = {}
    for scores in maps:
        seen.update(dict.fromkeys(scores))
    return list(seen)


def _spread(scores: Mapping[int, float]) -> float:
    """Score range used to scale boosts; 1.0 when the scores are all equal or absent."""
    if not scores:
        return 1.0
    spread = max(scores.values()) - min(scores.values())
    return spread if spread > _EPS else 1.0


# -- boosts ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DrawerMeta:
    """What the boosts need to know about one drawer.

    importance: 0..1, 0.5 is neutral (values outside are clamped).
    ts_ms: when the memory happened (``occurred_at``, else creation), epoch milliseconds.
    accesses: how many recalls returned it (``access_count``).
    """

    importance: float = 0.5
    ts_ms: int | None = None
    accesses: int = 0


def access_share(accesses: int) -> float:
    """0..1: ``log(1 + accesses) / log(1 + ACCESS_SATURATION)``, capped at 1."""
    if accesses <= 0:
        return 0.0
    return min(1.0, math.log1p(accesses) / math.log1p(ACCESS_SATURATION))


def apply_boosts(scores: Mapping[int, float], meta: Mapping[int, DrawerMeta], *, now_ms: int,
                 importance_weight: float = DEFAULTS.importance_weight,
                 recency_weight: float = DEFAULTS.recency_weight,
                 half_life_days: float = DEFAULTS.half_life_days,
                 access_weight: float = DEFAULTS.access_weight) -> dict[int, float]:
    """Return ``scores`` nudged by importance, recency and use, in units of the score range R.

    ``boost = R * (importance_weight * 2 * (importance - 0.5) + recency_weight * recency
    + access_weight * access_share(accesses))`` where ``recency = 0.5 ** (age_days /
    half_life_days)`` (1 for now or the future, 0 without a timestamp). With the defaults,
    importance moves a drawer by at most ±10 % of R and a brand-new one gains 5 % of R, so
    boosts reorder near-ties but never overturn a clear win. Drawers absent from ``meta`` are
    unchanged.

    Raises:
        ValueError: a weight is negative or ``half_life_days <= 0``.
    """
    if importance_weight < 0 or recency_weight < 0 or access_weight < 0:
        raise ValueError("boost weights must be >= 0")
    if not half_life_days > 0:
        raise ValueError(f"half_life_days must be > 0, got {half_life_days}")
    spread = _spread(scores)
    boosted: dict[int, float] = {}
    for drawer_id, score in scores.items():
        info = meta.get(drawer_id)
        if info is None:
            boosted[drawer_id] = score
            continue
        importance = min(1.0, max(0.0, float(info.importance)))
        recency = 0.0
        if info.ts_ms is not None:
            age_days = max(0.0, (now_ms - info.ts_ms) / _DAY_MS)
            recency = 0.5 ** (age_days / half_life_days)
        bonus = (importance_weight * 2.0 * (importance - 0.5) + recency_weight * recency
                 + access_weight * access_share(info.accesses))
        boosted[drawer_id] = score + spread * bonus
    return boosted


# -- rooms ----------------------------------------------------------------------------------
def room_scores(drawer_scores: Mapping[int, float], drawer_room: Mapping[int, str | None], *,
                top_n: int = DEFAULTS.room_top_n,
                support_share: float = DEFAULTS.room_support) -> dict[str, float]:
    """Score each room from its best drawers: ``best + support_share * (next top_n-1 summed)``.

    Drawer scores are first shifted so the weakest drawer scores 0 (scores may be negative
    z-scores, and a weak extra drawer must never lower its room). Drawers without a room are
    ignored. A room with one excellent drawer beats a room of many mediocre ones, but among
    rooms with similar best drawers, corroborating hits break the tie.

    Raises:
        ValueError: ``top_n < 1`` or ``support_share < 0``.
    """
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    if support_share < 0:
        raise ValueError(f"support_share must be >= 0, got {support_share}")
    if not drawer_scores:
        return {}
    floor = min(drawer_scores.values())
    per_room: dict[str, list[float]] = {}
    for drawer_id, score in drawer_scores.items():
        room = drawer_room.get(drawer_id)
        if room is not None:
            per_room.setdefault(room, []).append(score - floor)
    result: dict[str, float] = {}
    for room, values in per_room.items():
        values.sort(reverse=True)
        result[room] = values[0] + support_share * sum(values[1:top_n])
    return result


def rank_rooms(scores: Mapping[str, float]) -> list[str]:
    """Return room names best first; ties by name."""
    return sorted(scores, key=lambda room: (-scores[room], room))
