"""Recall and wake-up of an open palace: the ranking, the L0-L3 sections and their packing.

``recall`` ranks the palace's drawers for a query (``search.rank``: BM25 and vectors fused
with the weights of the palace's model, boosted by importance, recency and use, rooms
ranked), gives each a 0-1 relevance (``relevance``) and flags those under the relevance
floor, then builds the sections a response carries from the drawers that reach it, packed to
a token budget (``packing.pack``) in this order:

* the hits: the query's best ``top_k`` drawers, with their relevance (always first);
* L0, the palace's identity text (``reads.read_identity``);
* L1, the essential drawers (importance, then recency), cached until the next write; only
  when asked for (``wake_up`` is where they belong);
* L2, where the query points: the memoir concepts it names or matches (with their strongest
  links), the drawers inside the rooms/closets it names, and facts about entities it names;
* L3, deep search: the ranking beyond the hits, always with ``deep``, else when L2 is thin.

``choose_levels`` owns which ranked drawers go to L2 and L3. ``wake_up`` is L0 and L1 alone
(session start). Both return typed results whose ``to_wire()`` is the response dict.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import apsw
import numpy as np

from palaced.engine.embedder import INSTALL_HINT
from palaced.index.vectors import VectorIndex
from palaced.palace.access import read_ids
from palaced.palace.directory import IDENTITY_NAME
from palaced.palace.handle import Palace, now_ms
from palaced.palace.reads import identity_text, read_identity
from palaced.palace.team import identity_in, strip_comments
from palaced.retrieval import search
from palaced.retrieval.packing import Item, Section
from palaced.retrieval.params import params_for
from palaced.retrieval.pool import Pool, read_pool
from palaced.retrieval.recall_caches import RecallCaches, caches_of
from palaced.retrieval.sections import (
    HITS,
    Sections,
    drawer_item,
    essential_section,
    identity_section,
    l2_knowledge,
    pack_sections,
    unexpired,
)
from palaced.store.knowledge import conflicts as conflict_rows
from palaced.store.lookup.fts_log import change_stamp
from palaced.store.lookup.search import all_rooms, fts_terms, matching_ids, mentioned
from palaced.store.rows import drawers
from palaced.text import relevance
from palaced.text.exchanges import is_exchange_source
from palaced.text.topics import query_entities, spelled
from palaced.wire.errors import PalaceError
from palaced.wire.recall_text import Frame, miss_line

L1_SIZE = 15
_ACRONYM = re.compile(r"[A-Z]{2,5}s?")
# A miss (nothing reaches the floor) delivers one line and its nearest drawers, all marked
# weak, within this many tokens: enough for three short lines (measured in bench/relevance.py),
# little enough that a miss costs the agent next to nothing.
MISS_TOKENS = 80
MISS_NEAREST = 3
WEAK_CHARS = 90  # a weak drawer shows at most this much of its text, on one line


@dataclass(frozen=True)
class RecallRequest:
    """A validated recall."""

    query: str
    top_k: int = 10
    filters: drawers.Filters = field(default_factory=drawers.Filters)
    levels: tuple[int, ...] = (0, 2, 3)
    budget: int = 1500
    deep: bool = False
    compact: bool = False  # the delivered text's layout: one line per drawer
    for_agent: bool = False  # the reader has the MCP get tool (excerpt notes name it)
    exclude: frozenset[int] = frozenset()  # drawer ids left out (a session saw them already)


@dataclass(frozen=True)
class RecallResult:
    """What a recall found: the ranked drawers, the rooms and the packed sections.

    ``results`` are drawer dicts with ``score`` (the 0-1 relevance), ``rank_score`` (the fused
    ranking score), ``lexical`` and ``vector``, best first; ``rooms`` are ``(wing, room,
    score)`` best first; ``notice`` says why a recall ran keyword-only; ``floor`` is the
    relevance floor applied (0: none) and ``nothing_relevant`` is true when no drawer reached
    it, or when the query names things no drawer mentions (``unknown_names``, as the query
    spells them; see ``_unknown_names``); ``substring``: no word matched, substrings did.
    """

    results: list[dict[str, Any]]
    rooms: list[tuple[str, str, float]]
    hybrid: bool
    notice: str | None
    sections: Sections
    floor: float = 0.0
    nothing_relevant: bool = False
    unknown_names: tuple[str, ...] = ()
    substring: bool = False  # no word matched: the keyword hits are substring matches

    def to_wire(self) -> dict[str, Any]:
        """The ``memory.recall`` response."""
        out: dict[str, Any] = {
            "results": self.results,
            "rooms": [{"wing": w, "room": r, "score": round(sc, 6)} for w, r, sc in self.rooms],
            "mode": "hybrid" if self.hybrid else "keyword",
            "floor": self.floor,
            "nothing_relevant": self.nothing_relevant,
        }
        out.update({"unknown_names": list(self.unknown_names)} if self.unknown_names else {})
        out.update({"substring": True} if self.substring else {})
        if self.notice is not None:
            out["notice"] = self.notice
        out.update(self.sections.to_wire())
        return out


# -- recall -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _QueryReads:
    """What a recall reads for its query alone, whatever the ranking: L2's knowledge, L0 and
    the query's names some drawer mentions."""

    concepts: list[Item]
    facts: list[Item]
    identity: str | None
    known_names: set[str]


@dataclass(frozen=True)
class _Gathered:
    """What recall's one read hop brings back from the worker thread."""

    ranking: search.Ranking
    shown: dict[int, dict[str, Any]]  # drawers as presented: scored, long texts excerpted
    top: list[int]
    l2: list[int]
    l3: list[int]
    concepts: list[Item]  # L2: memoir concepts (before its drawers) ...
    facts: list[Item]  # ... and knowledge-graph facts (after them)
    l1: list[dict[str, Any]] | None
    identity: str | None
    unknown_names: tuple[str, ...]


def choose_levels(ranking: search.Ranking, req: RecallRequest
                  ) -> tuple[list[int], list[int], list[int]]:
    """The ranked drawer ids of a recall's results, its L2 and its L3, each best first.

    Results are the top ``top_k``. L2 (when asked, and when filters do not already narrow
    the results to where the query points): the best ``top_k`` drawers beyond the results
    among those filed under a topic the query names or inside a room or wing it names. L3
    (when asked): the next ``top_k`` of the ranking after the results, with ``deep`` or when
    L2 holds fewer than ``top_k`` drawers. The drawers of ``req.exclude`` are left out of
    the ranking first, so that the next ones take their places.
    """
    levels = set(req.levels)
    order = ([i for i in ranking.order if i not in req.exclude] if req.exclude
             else ranking.order)
    top = order[: req.top_k]
    shown = set(top)
    l2_ids: list[int] = []
    if 2 in levels and not req.filters.narrows:
        pointed = ranking.closet_hits | {
            i for i, room in ranking.room_of.items() if room in ranking.mentioned_rooms}
        l2_ids = [i for i in order if i in pointed and i not in shown][: req.top_k]
    l3_ids: list[int] = []
    if 3 in levels and (req.deep or len(l2_ids) < req.top_k):
        l3_ids = order[req.top_k: 2 * req.top_k]
    return top, l2_ids, l3_ids


async def recall(palace: Palace, req: RecallRequest) -> RecallResult:
    """Progressive recall: ranked ``results`` plus hits-first ``sections`` packed to a budget.

    ``results`` is the hybrid ranking (BM25 + vectors fused at the score level with the
    weights of the palace's model, boosted by importance, recency and use) under the
    request's filters, each with its 0-1 relevance as ``score``; drawers under the relevance
    floor are kept but flagged ``below_floor`` (a long drawer's chunks can score low on
    meaning yet be the answer), and ``nothing_relevant`` says no drawer reached the floor. The
    sections, which leave the drawers under the floor out (``_over_floor``), fill the token
    budget in order: the hits, L0 identity, L1 essential drawers
    (only when asked), L2 the drawers inside the rooms/closets the query points at (plus
    matching concepts and facts), L3 the ranking beyond the hits (with ``deep``, else when L2
    is thin).
    Every requested section with content appears, cut to fit when the budget is small.

    Keyword-only (with a ``notice`` saying why) while no model is loaded or the palace is
    being re-embedded for the loaded one.

    Raises:
        StorageError: SQLite failed.
    """
    caches = caches_of(palace)
    # Embed the query while BM25 runs: ONNX and SQLite both release the GIL.
    keyword_half = _lexical(palace, caches, req)
    vec_box: list[np.ndarray | None] = [None]
    team = palace.storage.shared
    levels = set(req.levels)
    names = query_entities(req.query)
    identity_path = palace.dir / IDENTITY_NAME

    def query_reads(c: apsw.Connection) -> _QueryReads:
        concepts, facts = l2_knowledge(c, req.query) if 2 in levels else ([], [])
        identity = (None if 0 not in levels else strip_comments(identity_in(c)) if team
                    else read_identity(identity_path))
        return _QueryReads(concepts, facts, identity, mentioned(c, names))

    # A team palace reads them in the keyword half's snapshot, which waits less than the
    # query's embedding and vector search beside it, instead of in the main snapshot, whose
    # every round trip the recall waits for (again there if a write landed in between).
    early_reads: list[_QueryReads | None] = [None]
    # So are the keyword hits' pool rows (what the ranking reads about each candidate), with
    # the snapshot's change stamp: the vector half then reads the rest of its hits' pool.
    early_pool: list[tuple[Pool, int] | None] = [None]
    params = params_for(palace.embedder_identity)  # the fusion weights of its vectors' model

    # The keyword half's hits and change stamp, set in its worker thread when it is done.
    kw_box: list[tuple[search.KeywordHits, int] | None] = [None]

    def keyword_snapshot(c: apsw.Connection) -> None:
        out = keyword_half(c)
        if team:
            early_reads[0] = query_reads(c)
            early_pool[0] = (read_pool(c, [i for i, _ in out[0].hits], query=req.query,
                                       filters=req.filters, now_ms=now_ms()), out[1])
        kw_box[0] = out  # last: the vector half's thread may go on with it from here
    # A team palace's vector search runs on the server as soon as the query is embedded, in
    # a snapshot of its own beside the keyword half's (PostgreSQL's two searches overlap
    # instead of following each other): its hits and the snapshot's change stamp.
    # With them, their pool (``early_pool``'s for the vector hits, with the context cosines).
    early: list[tuple[list[tuple[int, float]], int, Pool] | None] = [None]

    def vector_half(qvec: np.ndarray, index: VectorIndex) -> Callable[
            [apsw.Connection], tuple[list[tuple[int, float]], int, Pool]]:
        def run(c: apsw.Connection) -> tuple[list[tuple[int, float]], int, Pool]:
            ts = now_ms()
            hits = search.vector_search(c, index, qvec, req.filters, params.pool, ts)
            ids, stamp = [i for i, _ in hits], change_stamp(c)
            # The keyword hits' pool when the keyword half read it in this snapshot's data:
            # only the vector hits it lacks are read (and the context cosines).
            kw = early_pool[0]
            pool = read_pool(c, ids, query=req.query, filters=req.filters, now_ms=ts,
                             qvec=qvec if params.neighbour_vector else None, vector_ids=ids,
                             known=kw[0] if kw is not None and kw[1] == stamp else None)
            return hits, stamp, pool
        return run

    def main_read(counter: int) -> Callable[[apsw.Connection], _Gathered]:
        """The main snapshot's read (the ranking, the hits' rows and what goes with them) on
        what both halves found; ``counter``: the write counter read before it, which the
        caches it fills are stamped with (a write that lands meanwhile bumps the counter and
        so invalidates what this read computes)."""
        if kw_box[0] is None:  # never: called once the keyword half is done
            raise RuntimeError("the main snapshot before the keyword half")
        (lexical, stamp), qvec = kw_box[0], vec_box[0]
        index = palace.index if qvec is not None else None
        floor = relevance.floor_for(qvec is not None)
        need_l1 = 1 in levels and caches.l1_valid(counter) is None
        rooms_cache, conflicts_cache = caches.rooms, caches.conflicts
        terms = fts_terms(req.query)
        doc_count = caches.doc_count[1] if caches.doc_count else None
        return lambda c: _main(c, counter, lexical, stamp, qvec, index, need_l1,
                               rooms_cache, conflicts_cache, terms, floor, doc_count)

    def _main(c: apsw.Connection, counter: int, lexical: search.KeywordHits, stamp: int,
              qvec: np.ndarray | None, index: VectorIndex | None, need_l1: bool,
              rooms_cache: tuple[int, list[tuple[str, str]]] | None,
              conflicts_cache: tuple[int, bool] | None, terms: list[str], floor: float,
              doc_count: int | None) -> _Gathered:
        ts = now_ms()
        hits, reads = lexical, early_reads[0]
        known = early_pool[0][0] if early_pool[0] is not None else None
        if change_stamp(c) != stamp:
            # A write landed between the hops (a supersede: the recall could see neither).
            hits, reads, known = keyword_half(c)[0], None, None
        # The early vector hits when no write landed since their snapshot, else searched here;
        # the pools read beside them when their snapshots are this one's data.
        vector_hits = None
        if early[0] and early[0][1] == change_stamp(c):
            vector_hits = early[0][0]
            known = known.extended(early[0][2]) if known is not None else early[0][2]
        rooms = rooms_cache[1] if rooms_cache and rooms_cache[0] == counter else None
        if rooms is None:
            rooms = all_rooms(c)
            caches.rooms = (counter, rooms)
        ranking = search.rank(c, query=req.query, qvec=qvec, index=index,
                              filters=req.filters, now_ms=ts, params=params, rooms=rooms,
                              lexical_hits=hits, n_docs=doc_count,
                              vector_hits=vector_hits, known=known)
        top, l2_ids, l3_ids = choose_levels(ranking, req)
        want = list(dict.fromkeys([*top, *l2_ids, *l3_ids]))
        rows = drawers.get_drawers(c, want)
        conflicts = conflicts_cache[1] if conflicts_cache and conflicts_cache[0] == counter \
            else None
        if conflicts is None:
            conflicts = conflict_rows.any_open(c)
            caches.conflicts = (counter, conflicts)
        newer = conflict_rows.newer_of(c, want) if conflicts else {}
        # The newer side of a hit's open conflict is shown even when it ranked lower: the
        # current fact goes first (``current_first``).
        absent = [n for o, n in newer.items()
                  if o in top and n not in rows and n not in req.exclude]
        if absent:
            live = matching_ids(c, absent, req.filters, ts)
            rows.update(drawers.get_drawers(c, [n for n in absent if n in live]))
        l1 = _essential(c, ts) if need_l1 else None
        # L0, L2's knowledge and the names: in this same worker-thread hop, unless read
        # beside the keyword half.
        reads = reads or query_reads(c)
        unknown = _unknown_names(req.query, names, reads.known_names)
        # Scoring and excerpting read whole texts (a drawer may hold 200k characters): here
        # in the worker thread, so the event loop only ever handles the short excerpts.
        dated = (fts_terms(" ".join(ranking.period.phrases))
                 if ranking.period is not None else [])
        shown = {did: _present(d, ranking, terms, floor, unknown, hybrid=qvec is not None,
                               tmap=caches.text_map(did, str(d["text"])),
                               dated=dated if did in ranking.in_period else ())
                 for did, d in rows.items()}
        for did, n in newer.items():
            if did in shown:
                shown[did]["conflicts_with"] = n
        return _Gathered(ranking, shown, top, l2_ids, l3_ids, reads.concepts, reads.facts, l1,
                         reads.identity, unknown)

    # A team palace's main snapshot runs in the worker thread of whichever half ends last,
    # right after it: not after a hop back to the event loop and another to a worker thread
    # (~1 ms of a 25 ms recall at 10k drawers on a loaded machine). Its read and the write
    # counter it was stamped with; the event loop runs it when no half did (keyword-only).
    gathered: list[tuple[_Gathered, int] | None] = [None]
    halves_done, halves_lock = [0], threading.Lock()

    def then_main() -> None:
        with halves_lock:
            halves_done[0] += 1
            if halves_done[0] < 2:
                return
        counter = palace.write_counter
        # The store straight from this worker thread (a team palace's, PostgreSQL):
        # what ``palace.read`` adds is the SQLite corruption check.
        gathered[0] = (palace.store.read(main_read(counter)), counter)

    def vector_then_main(qvec: np.ndarray, index: VectorIndex) -> None:
        early[0] = palace.store.read(vector_half(qvec, index))
        then_main()

    def keyword_then_main() -> None:
        palace.store.read(keyword_snapshot)
        then_main()

    async def embed() -> None:
        vec_box[0] = qvec = await query_vector(palace, req.query)
        if team and qvec is not None and palace.index is not None:
            await anyio.to_thread.run_sync(vector_then_main, qvec, palace.index)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(embed)
            if team:
                await anyio.to_thread.run_sync(keyword_then_main)
            else:
                await palace.read(keyword_snapshot)
    except BaseExceptionGroup as group:
        # The group wraps even the host's own exception: report the PalaceError inside.
        leaf = first_palace_error(group)
        if leaf is None:
            raise
        raise leaf from leaf.__cause__  # keep its own cause (the apsw error)
    qvec = vec_box[0]
    floor = relevance.floor_for(qvec is not None)

    if gathered[0] is None:
        counter = palace.write_counter
        got = await palace.read(main_read(counter))
    else:
        got, counter = gathered[0]
    ranking = got.ranking
    l1_cached = caches.l1_valid(counter) if 1 in levels else None
    if got.l1 is not None:
        caches.l1 = (counter, got.l1)
        l1_cached = got.l1
    unknown = got.unknown_names

    results = current_first(curated_first(
        [d for d in (got.shown.get(i) for i in got.top) if d is not None]), got.shown,
        req.top_k)
    palace.note_touched(read_ids(results))  # what the agent reads counts as used
    # A memoir concept or a graph fact the query points at is relevant knowledge too, even
    # when no drawer passes the floor: not a miss.
    nothing = bool(unknown) or not (any(not r["below_floor"] for r in results)
                                    or got.concepts or got.facts)
    notice = None if qvec is not None else keyword_reason(palace)
    frame = Frame("recall", palace.name, req.compact, "hybrid" if qvec is not None else
                  "keyword", miss_line(palace.name, unknown) if nothing else None, notice,
                  ranking.substring, req.for_agent)
    if nothing:
        # A miss costs a line: the nearest few, cut short, and no context levels.
        nearest = sorted(results[:MISS_NEAREST], key=lambda d: -float(d["score"]))
        parts = [Section(HITS, "Nearest, all weak", [_weak(d) for d in nearest])]
    else:
        parts = _levels(got, results, req, palace.name, l1_cached)
    return RecallResult(
        results=results,
        rooms=ranking.rooms[: max(req.top_k, 10)],
        hybrid=qvec is not None,
        notice=notice,
        sections=await pack_sections(palace, parts, req.budget, frame,
                                     MISS_TOKENS if nothing else None),
        floor=floor,
        nothing_relevant=nothing,
        unknown_names=unknown,
        substring=ranking.substring,
    )


def _weak(d: dict[str, Any]) -> Item:
    """A drawer shown under a miss: its start, on one line, at most ``WEAK_CHARS``, with its
    0-1 relevance (what makes it weak; the nearest are shown in its order)."""
    item = drawer_item(d, HITS)
    item.score = float(d["score"])
    text = " ".join(item.text.split())
    if len(text) > WEAK_CHARS:
        text = text[: WEAK_CHARS - 1].rstrip() + "…"
    item.text = text
    return item


# -- curated before captured ----------------------------------------------------------------
def captured(d: dict[str, Any]) -> bool:
    """Whether drawer ``d`` is a captured exchange of a session transcript (not curated)."""
    return is_exchange_source(str(d.get("source") or ""))


def curated_first(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hits with no captured exchange above a curated drawer of equal relevance.

    An earlier session asking the same question matches it as well as the answer stored with
    remember, and its words (the question's own) can rank it higher. At an equal shown
    relevance (3 decimals) the captured one's ``rank_score`` is lowered to the curated one's
    and the hits re-sorted (stably): the order still follows the score shown. The one
    tie-break recall applies after the ranking (``search.rank``)."""
    curated = [d for d in results if not captured(d)]
    if len(curated) == len(results) or not curated:
        return results
    for d in results:
        if captured(d):
            rel = round(float(d["score"]), 3)
            under = [float(c["rank_score"]) for c in curated
                     if round(float(c["score"]), 3) == rel
                     and float(c["rank_score"]) <= float(d["rank_score"])]
            if under:
                d["rank_score"] = min(under)
    # Equal rank scores keep the given order, but a captured drawer goes after its curated tie.
    return sorted(results, key=lambda d: (-float(d["rank_score"]), captured(d)))


def current_first(results: list[dict[str, Any]], shown: dict[int, dict[str, Any]],
                  limit: int) -> list[dict[str, Any]]:
    """The hits with the newer drawer of each open conflict (``conflicts_with``, set on the
    older one) just above the older: the current fact first. A newer one that is no hit but
    was read (``shown``: it matches the filters) comes in there, the last hit going when
    there are ``limit`` already. The
    newer one takes the older one's ``rank_score`` when that is higher, so the order shown
    still follows the score shown."""
    order = list(results)
    lifted: set[int] = set()  # each drawer moves up once: no cycle can loop
    i = 0
    while i < len(order):
        newer = order[i].get("conflicts_with")
        j = next((k for k in range(i + 1, len(order)) if order[k]["id"] == newer), None)
        if j is None and isinstance(newer, int) and newer in shown and newer not in lifted \
                and all(d["id"] != newer for d in order[:i]):
            order.append(shown[newer])
            j = len(order) - 1
        if j is None or order[j]["id"] in lifted:
            i += 1
            continue
        lifted.add(int(order[j]["id"]))
        moved = order.pop(j)
        moved["rank_score"] = max(float(moved["rank_score"]), float(order[i]["rank_score"]))
        order.insert(i, moved)  # then looks at the moved one's own conflicts
    return order[:max(limit, len(results))]


def _levels(got: _Gathered, results: list[dict[str, Any]], req: RecallRequest, palace: str,
            l1: list[dict[str, Any]] | None) -> list[Section]:
    """The sections of a recall that found something: the hits, then the levels asked for."""
    levels = set(req.levels)
    relevant = _over_floor(got.shown)
    parts: list[Section] = [Section(HITS, "Best matches", [drawer_item(d, HITS)
                                                           for d in results if relevant(d)])]
    if 0 in levels:
        parts.append(identity_section(palace, got.identity or ""))
    if 1 in levels:
        parts.append(essential_section([d for d in unexpired(l1 or [])
                                        if d["id"] not in req.exclude]))
    if 2 in levels:
        items = [*got.concepts, *(drawer_item(d, 2) for d in (got.shown.get(i) for i in got.l2)
                                  if d and relevant(d)), *got.facts]
        parts.append(Section(2, "Where the query points", items))
    if 3 in levels:
        items = [drawer_item(d, 3) for d in (got.shown.get(i) for i in got.l3)
                 if d and relevant(d)]
        parts.append(Section(3, "Deep search", items))
    return parts


def _over_floor(shown: dict[int, dict[str, Any]]) -> Callable[[dict[str, Any]], bool]:
    """Whether a drawer of ``shown`` (those a recall read) belongs in the text of a recall
    that found something: it reaches the relevance floor, or it is the newer side of an open
    conflict of one that does, or of such a newer one in turn (the current fact, which the
    older one's mark names).

    The drawers under the floor stay in ``results`` (flagged ``below_floor``) but not in the
    text: on LoCoMo dev they held 1-2 of 1,349 gold turns and, for a question whose answer
    is not stored, most of what the text delivered (benchmarks.md, "What the agent receives").
    """
    keep = {did for did, d in shown.items() if not d["below_floor"]}
    todo = list(keep)
    while todo:
        newer = shown[todo.pop()].get("conflicts_with")
        if isinstance(newer, int) and newer in shown and newer not in keep:
            keep.add(newer)
            todo.append(newer)
    return lambda d: int(d["id"]) in keep


def _present(d: dict[str, Any], ranking: search.Ranking, terms: list[str], floor: float,
             unknown: tuple[str, ...], *, hybrid: bool,
             tmap: relevance.TextMap | None = None,
             dated: Sequence[str] = ()) -> dict[str, Any]:
    """Drawer ``d`` as a recall shows it: its 0-1 relevance ``score`` and ``below_floor``,
    its ranking parts, and a long text cut to the passage around the query terms.
    ``dated``: the query's words its date matches (it lies in the span they name)."""
    did = int(d["id"])
    lex, vec = ranking.lexical.get(did), ranking.vector.get(did)
    cos: float | None = None
    # A drawer still waiting for its vectors (stored before the model loaded) has no cosine
    # yet: it is judged by its words alone, against the same floor. One outside the vector
    # pool is no closer than the pool's farthest.
    if hybrid and d.get("embedded", True):
        cos = vec if vec is not None else min(ranking.vector.values(), default=None)
    rel = relevance.relevance(str(d["text"]), terms, cos, tmap, substring=ranking.substring,
                              dated=dated)
    out = relevance.shorten(dict(d), terms, tmap)
    out["score"] = round(rel, 6)
    out["below_floor"] = bool(unknown) or rel < floor
    out["rank_score"] = round(ranking.scores.get(did, 0.0), 6)
    out["lexical"] = None if lex is None else round(lex, 6)
    out["vector"] = None if vec is None else round(vec, 6)
    return out


def _essential(c: apsw.Connection, ts: int) -> list[dict[str, Any]]:
    """The L1 drawers, long texts already cut to their start: cut in the read hop and cached
    that way, so a wake-up never scans a 150k-character drawer on the event loop."""
    return [relevance.shorten(d, ()) for d in drawers.essential(c, L1_SIZE, ts)]


def _unknown_names(query: str, names: list[str], known: set[str]) -> tuple[str, ...]:
    """The query's names, as it spells them, when it names something and no drawer mentions
    any of them (then nothing in the palace is about the query); else ().

    One known name is enough to let the relevance floor decide: "Caroline's trip to Paris"
    is worth answering from a palace that knows Caroline but not Paris.
    """
    if not names or known:
        return ()
    # "Caroline Smith" stands for its words "caroline" and "smith" too.
    inside = {w for n in names if " " in n for w in n.split()}
    # An acronym ("UI", "SQL", "API") names a kind of thing, not one thing: a palace that
    # never spells it may still hold the answer ("the frontend is built with React").
    return tuple(dict.fromkeys(s for s in (spelled(query, n) for n in names if n not in inside)
                               if not _ACRONYM.fullmatch(s)))


def _lexical(palace: Palace, caches: RecallCaches, req: RecallRequest
             ) -> Callable[[apsw.Connection], tuple[search.KeywordHits, int]]:
    """The keyword half of a recall for one read hop: its hits and ``change_stamp``."""
    counter = palace.write_counter
    team = palace.storage.shared

    def run(c: apsw.Connection) -> tuple[search.KeywordHits, int]:
        # A team palace's counter was just read at the start of this snapshot (PgStore.read).
        nonlocal counter
        counter = palace.write_counter if team else counter
        n_docs = caches.drawers(counter, c)
        engine = None if team else palace.keywords.engine_for(n_docs)
        return search.lexical_search(c, req.query, req.filters, now_ms(),
                                     stats=caches.term_stats, n_docs=n_docs,
                                     engine=engine), change_stamp(c)

    return run


async def query_vector(palace: Palace, query: str) -> np.ndarray | None:
    """The query's embedding (cached daemon-wide), or None in keyword-only mode."""
    emb = palace.vector_embedder()
    if emb is None:
        return None
    key = (emb.identity, query)
    cache = palace.services.query_vectors
    vec = cache.get(key)
    if vec is None:
        vec = await palace.services.embeds.query(emb, query)
        cache[key] = vec
    return cast(np.ndarray, vec)


def keyword_reason(palace: Palace) -> str:
    """Why recall runs keyword-only right now (a re-embedding runs, the model loads...)."""
    model = palace.services.model
    if palace.storage.shared and palace.mismatch:  # shared: never re-embedded here
        return f"keyword-only: {palace.mismatch}"
    if palace.mismatch and model.embedder is not None:
        return (f"keyword-only: palace {palace.name} is being re-embedded for the new model "
                f"{model.embedder.identity} (its vectors are {palace.embedder_identity}'s); "
                "`palace status` shows the progress, `palace reembed --palace "
                f"{palace.name}` finishes it now")
    if model.state == "loading":
        return "keyword-only: the embedding model is still loading"
    if model.embedder is None:
        # A reason from a failed load already says how to install the model.
        hint = "" if model.disabled or INSTALL_HINT in (model.reason or "") else (
            f"; {INSTALL_HINT}")
        return f"keyword-only: no embedding model ({model.reason}){hint}"
    return "keyword-only: vector index not ready"


def first_palace_error(group: BaseExceptionGroup[Any]) -> PalaceError | None:
    """The first PalaceError inside a (possibly nested) exception group, if any."""
    for exc in group.exceptions:
        found = first_palace_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(found, PalaceError):
            return found
    return None


# -- wake-up ----------------------------------------------------------------------------------
async def wake_up(palace: Palace, budget: int, *, compact: bool = False,
                  for_agent: bool = False) -> Sections:
    """L0 identity + L1 essential drawers within ``budget`` tokens (session start), the whole
    delivered text counted (``compact``: its layout, one line per drawer; ``for_agent``: its
    excerpts name the MCP get tool).

    Raises:
        StorageError: SQLite failed.
    """
    caches = caches_of(palace)
    await palace.refresh()
    counter = palace.write_counter
    cached = caches.l1_valid(counter)
    if cached is None:
        cached = await palace.read(lambda c: _essential(c, now_ms()))
        caches.l1 = (counter, cached)
    parts = [identity_section(palace.name, await identity_text(palace)),
             essential_section(unexpired(cached))]
    return await pack_sections(palace, parts, budget, Frame("wake_up", palace.name, compact,
                                                               agent=for_agent))
