"""Hybrid ranking of one palace: BM25 + vectors + dates + importance/recency, rooms ranked.

Synchronous: runs in one worker-thread hop on a reader connection. ``rank`` is the only part
that reads: the keyword and vector hits, then the candidate pool in a few batched statements
(``pool.read_pool``), once per hop. Each hop's scoring (``_hop``) is a pure function of what
was read: the fusion maths (``fusion``) and the heuristics about single candidates
(``candidates``), applied in a fixed, measured order with the knobs of ``params.RankParams``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import apsw
import numpy as np

from palaced.index.keyword_engine import KeywordEngine
from palaced.index.vectors import PgVectors, VectorIndex, brute_force
from palaced.retrieval.candidates import (
    Seen,
    find_times,
    lift_replies,
    month_of,
    pass_to_replies,
    with_neighbours,
)
from palaced.retrieval.fusion import (
    DrawerMeta,
    apply_boosts,
    fuse,
    rank_rooms,
    ranking,
    room_scores,
    standardized_fusion,
)
from palaced.retrieval.multihop import HOP_CHARS, HOP_FROM, hop_names, hop_terms
from palaced.retrieval.params import DEFAULTS, RankParams
from palaced.retrieval.pool import Pool, read_pool
from palaced.retrieval.when import date_matches, query_dates
from palaced.store.lookup import pg_search
from palaced.store.lookup import search as sql
from palaced.store.lookup.vectors import owners_of
from palaced.store.rows import dated
from palaced.store.rows.drawers import Filters
from palaced.text.periods import Period, query_period

BRUTE_FORCE_MAX = 20_000  # a filtered vector search scans at most this many vectors exactly
# A keyword search narrowed by wing, room or tags asks the keyword engine for this many times
# its limit and keeps the drawers that match; when fewer than the limit do, a wing or room of
# at most NARROW_SET_MAX drawers has each of them scored, and FTS5 runs the others
# (``engine_search``; docs/benchmarks.md, "Keyword search at scale").
NARROW_OVERFETCH = 8
NARROW_SET_MAX = 20_000


@dataclass(frozen=True, slots=True)
class Ranking:
    """The scored candidate pool of one query, best first."""

    order: list[int]
    scores: dict[int, float]
    lexical: dict[int, float]
    vector: dict[int, float]
    room_of: dict[int, tuple[str, str]]
    rooms: list[tuple[str, str, float]]
    closet_hits: set[int] = field(default_factory=set)
    mentioned_rooms: set[tuple[str, str]] = field(default_factory=set)
    substring: bool = False  # the keyword hits are substring matches (the fallback)
    period: Period | None = None  # the span of time the query names
    in_period: set[int] = field(default_factory=set)  # candidates dated in that span


def vector_search(c: apsw.Connection, index: VectorIndex, qvec: np.ndarray,
                  filters: Filters, k: int, now_ms: int) -> list[tuple[int, float]]:
    """Best ``(drawer_id, cosine)`` among drawers matching ``filters``.

    Unfiltered: the HNSW index, then drop inactive drawers. Filtered: exact search over the
    matching drawers' vectors (small sets) so a narrow filter never loses its best hits to
    the global top-k; very large filtered sets fall back to an over-fetching index search.
    """
    if isinstance(index, PgVectors):  # a team palace: pgvector in the same snapshot
        return pg_search.vector_search(c, pg_search.vector_literal(qvec), index.dims,
                                       filters if filters.narrows else None, k, now_ms)

    def owners(keys: Sequence[int]) -> dict[int, int]:
        return owners_of(c, keys)

    if not filters.narrows:
        # Inactive drawers among these are dropped by rank()'s metadata query.
        return index.search(qvec, k, owners)
    if sql.matching_vector_count(c, filters, now_ms) <= BRUTE_FORCE_MAX:
        return brute_force(qvec, sql.matching_vectors(c, filters, now_ms), index.dims, k)
    hits = index.search(qvec, k * 20, owners)
    ok = sql.matching_ids(c, [i for i, _ in hits], filters, now_ms)
    return [(i, s) for i, s in hits if i in ok][:k]


_WORD = re.compile(r"[\w-]+", re.UNICODE)


def rooms_mentioned(query: str, rooms: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Rooms whose room or wing name appears as a word of the query."""
    words = {w.lower() for w in _WORD.findall(query)}
    if not words:
        return set()
    return {(w, r) for w, r in rooms if r.lower() in words or w.lower() in words}


@dataclass(frozen=True)
class KeywordHits:
    """The keyword half of ``rank``: ``(drawer_id, score)`` best first, and whether they are
    substring matches (BM25 found nothing and ``substring_fallback`` is on)."""

    hits: list[tuple[int, float]]
    substring: bool = False
    engine: KeywordEngine | None = None  # the keyword engine that found them, if one did


def lexical_search(c: apsw.Connection, query: str, filters: Filters, now_ms: int,
                   params: RankParams = DEFAULTS, stats: sql.TermStats | None = None,
                   n_docs: int = 0, engine: KeywordEngine | None = None) -> KeywordHits:
    """BM25 over words, else substrings of 3+ characters when that finds nothing.

    With ``engine`` (a large palace's keyword engine) the search is the engine's top-k of
    the drawers that match ``filters`` (``engine_search``); a narrowing too few of its best
    match, or a query the engine leaves to FTS5 (a damaged engine too), runs in FTS5.
    """
    hits = engine_search(c, engine, query, filters, params.pool, now_ms)
    if hits is None:
        engine = None
        hits = sql.fts_search(c, query, filters, params.pool, now_ms, stats, n_docs)
    if hits or not params.substring_fallback:
        return KeywordHits(hits, engine=engine)
    found = sql.substring_search(c, query, filters, params.pool, now_ms)
    # Substring matches only when there are some: a recall that finds none (or whose
    # drawers come from elsewhere, a span the query names) must not say it shows them.
    return KeywordHits(found, bool(found))


def engine_search(c: apsw.Connection, engine: KeywordEngine | None, query: str,
                  filters: Filters, limit: int, now_ms: int) -> list[tuple[int, float]] | None:
    """``fts_search`` by the keyword engine: its top ``2 * limit`` in this snapshot
    (``NARROW_OVERFETCH * limit`` for a search narrowed by wing, room or tags), then, as
    FTS5's over-fetch does, the drawers that do not match ``filters`` (superseded, expired,
    outside the narrowing) dropped through ``drawers``. Exact when ``limit`` of them are
    left or the engine found fewer than it was asked for: every drawer it did not return
    scores below those it did. Else a wing or room of at most ``NARROW_SET_MAX`` drawers
    has each of them scored (``KeywordEngine.search_in``); None otherwise (FTS5 runs the
    query and joins the filter), and when there is no engine or it leaves the query to FTS5
    (a phrase, a damaged base)."""
    if engine is None:
        return None
    asked, words = (NARROW_OVERFETCH if filters.narrows else 2) * limit, sql.fts_terms(query)
    found = engine.search(c, words, asked)
    if found is None:
        return None
    keep = sql.matching_ids(c, [i for i, _ in found], filters, now_ms)
    hits = [(i, s) for i, s in found if i in keep]
    if len(hits) >= limit or len(found) < asked:
        return hits[:limit]
    # A wing or room is an index seek; tags are not indexed, so a tag alone is left to FTS5.
    if (filters.wing is not None or filters.room is not None) and not filters.tags and (
            ids := sql.narrowed_ids(c, filters, now_ms, NARROW_SET_MAX)):
        return engine.search_in(c, words, ids, limit)  # a room, say
    return None  # too few of the engine's best match: only FTS5's join is exact


def rank(c: apsw.Connection, *, query: str, qvec: np.ndarray | None,
         index: VectorIndex | None, filters: Filters, now_ms: int,
         params: RankParams = DEFAULTS,
         rooms: Sequence[tuple[str, str]] | None = None,
         lexical_hits: KeywordHits | None = None,
         n_docs: int | None = None,
         vector_hits: Sequence[tuple[int, float]] | None = None,
         known: Pool | None = None) -> Ranking:
    """Rank the palace's drawers for ``query`` under ``filters``, in two hops.

    The first hop ranks by the query; the second (``multihop``) searches the names its best
    drawers mention and the query does not, folds those keyword hits into the first hop's
    and ranks again. In both, a query that asks when or how long lifts the candidates that
    state a time, and one that names a month or year those about it (``palaced.retrieval.when``;
    ``RankParams.when_boost``, ``date_boost``). ``rooms`` is the palace's (wing, room) list
    if the caller has it cached; ``lexical_hits`` the result of ``lexical_search(...)`` if
    the caller ran it already (the palace runs it while the query is being embedded);
    ``n_docs`` the palace's drawer count if the caller has it; ``vector_hits`` the result of
    ``vector_search(...)`` for ``qvec`` if the caller ran it already (a team palace runs it
    beside the keyword half); ``known`` the pool already read of some candidates in this
    snapshot's data (``pool.read_pool``: a team palace reads its keyword hits' beside the
    query's embedding). Substring hits
    (``KeywordHits.substring``) take no second hop: they matched no word.

    The store is read here alone, a few batched statements per hop (``pool.read_pool``);
    each hop's scoring is a pure function of what was read (``_hop``). Raises only the
    store's errors.
    """
    if lexical_hits is None:
        lexical_hits = lexical_search(c, query, filters, now_ms, params)
    lexical = dict(lexical_hits.hits)
    vector: dict[int, float] = {}
    if qvec is not None and index is not None:
        vector = dict(vector_search(c, index, qvec, filters, params.pool, now_ms)
                      if vector_hits is None else vector_hits)
    period = query_period(query, now_ms) if params.date_boost else None
    in_period: list[int] = []
    if period is not None:
        # "What did we decide yesterday?": yesterday's drawers are candidates whatever words
        # they hold (the newest ``pool`` of them), and gain the date boost in each hop.
        in_period = dated.drawers_in_period(c, period.start, period.end, filters, now_ms,
                                            params.pool)
    mentioned = rooms_mentioned(query, sql.all_rooms(c) if rooms is None else rooms)
    pool = read_pool(c, [*in_period, *lexical, *vector], query=query, filters=filters,
                     now_ms=now_ms, qvec=qvec if params.neighbour_vector else None,
                     vector_ids=list(vector), known=known)
    hop = Hop(query, now_ms, params, period, tuple(in_period), frozenset(mentioned))
    first, seen = _hop(hop, pool, lexical, vector, Seen(), lexical_hits.substring)
    if not first.order or first.substring or not params.hop_weight:  # 0: no second hop
        return first
    n = sql.drawer_count(c) if n_docs is None else n_docs
    texts = [pool.head(i, HOP_CHARS) for i in first.order[:HOP_FROM]]
    df = sql.text_doc_freqs(c, list(hop_names(query, texts))) if n > 0 else {}
    words = hop_terms(query, texts, df.__getitem__, n)
    found: dict[int, float] = {}
    if words:
        # On the engine the first hop used, else (or when it leaves the query) in FTS5.
        hits = engine_search(c, lexical_hits.engine, " ".join(words), filters, params.pool,
                             now_ms)
        found = dict(hits if hits is not None else
                     sql.fts_search(c, " ".join(words), filters, params.pool, now_ms))
    if not found:
        return first
    joined = standardized_fusion([lexical, found], weights=[1.0, params.hop_weight])
    pool = read_pool(c, list(found), query=query, filters=filters, now_ms=now_ms, known=pool)
    second, _ = _hop(hop, pool, joined, vector, seen, False)
    # A drawer's keyword score stays its match with the query, and rooms rank by the query
    # alone (LoCoMo dev session R@1: .734 so, .727 by the second hop).
    return replace(second, lexical=lexical, rooms=first.rooms)


@dataclass(frozen=True, slots=True)
class Hop:
    """What both hops of one ranking share besides the pool: the query and its parameters."""

    query: str
    now_ms: int
    params: RankParams
    period: Period | None  # the span of time the query names
    in_period: tuple[int, ...]  # the newest drawers dated in it
    mentioned: frozenset[tuple[str, str]]  # rooms the query names


def _hop(h: Hop, pool: Pool, lexical: dict[int, float], vector: dict[int, float], seen: Seen,
         substring: bool) -> tuple[Ranking, Seen]:
    """One hop of ``rank``: fuse the two lists, boost, rank the rooms, order. Pure: a
    function of the pool read and what earlier hops ``seen``. Never raises."""
    query, params = h.query, h.params
    own = vector  # the candidates' own cosines: what relevance reads (recall._present)
    if params.neighbour_vector and vector:
        vector = with_neighbours(vector, pool.context, params.neighbour_vector)
    keyword = lexical  # what the query's words matched: what the Ranking reports
    if h.in_period:  # the span's drawers join the keyword list at its lowest score
        low = min(lexical.values(), default=0.0)
        lexical = {**dict.fromkeys(h.in_period, low), **lexical}
    empty = Ranking([], {}, keyword, own, {}, [], substring=substring)
    ids = list(dict.fromkeys([*lexical, *vector]))
    if not ids:
        return empty, seen
    meta = {i: pool.rows[i] for i in ids if i in pool.rows}
    fused = fuse(lexical, vector, lexical_weight=params.lexical_weight,
                 vector_weight=params.vector_weight)
    fused = {i: v for i, v in fused.items() if i in meta}
    if not fused:
        return empty, seen
    seen = find_times(query, pool, fused, params.when_boost, params.date_boost, seen)
    on_date = set(seen.dated)
    if params.date_boost and (asked := query_dates(query)):
        on_date.update(i for i in fused if date_matches(asked, {month_of(meta[i].occurred_ms)}))
    in_period: set[int] = set()
    if h.period is not None:  # "yesterday", "last week": the user's calendar
        in_period = {i for i in fused if h.period.start <= meta[i].occurred_ms < h.period.end}
        on_date |= in_period
    closet_hits = {i for i in fused if meta[i].closet}  # recall's L2, not a boost
    spread = max(fused.values()) - min(fused.values()) or 1.0
    scores = {i: s + (params.date_boost * spread if i in on_date else 0.0)
              for i, s in fused.items()}
    scores = apply_boosts(
        scores,
        {i: DrawerMeta(importance=v.importance, ts_ms=v.occurred_ms, accesses=v.accesses)
         for i, v in meta.items()},
        now_ms=h.now_ms, importance_weight=params.importance_weight,
        recency_weight=params.recency_weight, half_life_days=params.half_life_days,
        access_weight=params.access_weight,
    )
    room_of = {i: (v.wing, v.room) for i, v in meta.items()}
    room_key = {i: f"{w}\x1f{r}" for i, (w, r) in room_of.items()}
    room_score = room_scores(scores, room_key, top_n=params.room_top_n,
                             support_share=params.room_support)
    if params.question_drop:
        # After the rooms are scored, like the time boost: rooms rank by the query.
        scores, seen = pass_to_replies(query, pool, scores, spread, params.question_drop,
                                       params.when_boost, seen)
    if params.reply_lift:
        scores, seen = lift_replies(query, pool, scores, spread, params.reply_lift, seen)
    if seen.timed:
        # After the rooms are scored: a time stated picks among a room's drawers, while the
        # rooms rank by the query (LoCoMo dev session R@5 .904 with the boost in the rooms).
        scores = {i: s + (params.when_boost * spread if i in seen.timed else 0.0)
                  for i, s in scores.items()}
    room_list = []
    for key in rank_rooms(room_score):
        wing, room = key.split("\x1f", 1)
        room_list.append((wing, room, room_score[key]))
    return Ranking(ranking(scores), scores, keyword, own, room_of, room_list, closet_hits,
                   set(h.mentioned), substring, h.period, in_period), seen
