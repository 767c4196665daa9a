"""The ranking reads its candidate pool once (``palaced.retrieval.pool``) and ranks by pure
functions over it (``palaced.retrieval.candidates``): the heuristics on hand-made pools, no
store; and the statements one recall runs, counted on a real palace in-process."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from types import MappingProxyType
from typing import Any

import apsw
import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import recall
from palaced.retrieval.candidates import (
    Seen,
    find_times,
    lift_replies,
    pass_to_replies,
    with_neighbours,
)
from palaced.retrieval.pool import Pool, read_pool
from palaced.retrieval.replies import TAIL_CHARS
from palaced.store.lookup import context as ctx
from palaced.store.lookup import search as sql
from palaced.store.lookup.search import PoolRow
from palaced.store.rows import drawers as m
from tests.palaced.palace.test_palace_unit import services

MAY_2023 = 1_683_000_000_000  # 2 May 2023


def _row(text: str, room: str = "chat", occurred: int = MAY_2023) -> PoolRow:
    return PoolRow("w", room, 0.5, occurred, 0, len(text), text, text, False)


def _pool(texts: dict[int, str], chain: list[int], tails: dict[int, str] | None = None
          ) -> Pool:
    """A pool of ``texts``, one room whose time order is ``chain``."""
    after = dict(pairwise(chain))
    before = {b: a for a, b in after.items()}
    return Pool(MappingProxyType({i: _row(t) for i, t in texts.items()}),
                frozenset(texts), MappingProxyType(before), MappingProxyType(after),
                MappingProxyType({i: (t, len(t)) for i, t in (tails or {}).items()}))


def test_pass_to_replies_is_a_function_of_the_pool() -> None:
    pool = _pool({1: "Where did you go?", 2: "To Lisbon.", 3: "Nice weather."}, [1, 2, 3])
    scores = {1: 3.0, 2: 1.0, 3: 2.0}
    out, seen = pass_to_replies("trip", pool, scores, 2.0, 0.5, 0.3, Seen())
    # The question hands its score to its reply and loses 0.5 x its share (1) x the spread.
    assert out == {1: 3.0 - 1.0, 2: 3.0, 3: 2.0}
    assert scores == {1: 3.0, 2: 1.0, 3: 2.0} and seen == Seen()  # nothing changed in place
    # Asked "when", only a reply that states a time takes the place; it is checked once.
    out, seen = pass_to_replies("when did you go", pool, scores, 2.0, 0.5, 0.3, Seen())
    assert out[2] == 1.0 and seen.checked == {2} and seen.timed == frozenset()


def test_lift_replies_reads_the_drawer_before_even_when_it_is_no_candidate() -> None:
    pool = _pool({2: "To Lisbon.", 3: "Nice weather."}, [1, 2, 3],
                 tails={1: "Where did you go?"})
    out, seen = lift_replies("trip", pool, {2: 1.0, 3: 2.0}, 1.0, 0.1, Seen())
    assert out == {2: 1.1, 3: 2.0} and seen.prev_checked == {2, 3}
    # Not for a query that asks when.
    assert lift_replies("when was the trip", pool, {2: 1.0}, 1.0, 0.1, Seen())[0] == {2: 1.0}


def test_find_times_checks_the_best_once_and_carries_them_to_the_next_hop() -> None:
    pool = _pool({1: "We met at 5 pm yesterday.", 2: "We met at the cafe."}, [1, 2])
    seen = find_times("when did we meet", pool, {1: 1.0, 2: 2.0}, 0.3, 0.0, Seen())
    assert seen.checked == {1, 2} and seen.timed == {1}
    again = find_times("when did we meet", pool, {1: 1.0, 2: 2.0}, 0.3, 0.0, seen)
    assert again is seen  # nothing new to look at
    assert find_times("where did we meet", pool, {1: 1.0}, 0.3, 0.0, Seen()) == Seen()


def test_with_neighbours_adds_the_context_cosine() -> None:
    assert with_neighbours({1: 0.5, 2: 0.4}, {1: 0.2}, 0.5) == {1: 0.6, 2: 0.4}


class Tracer:
    """The SQL statements run on every connection opened while installed, when ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.sql: list[str] = []

    def trace(self, _cursor: Any, sql: str, _bindings: Any) -> bool:
        if self.on:
            self.sql.append(sql)
        return True

    def hook(self, conn: apsw.Connection) -> None:
        conn.exec_trace = self.trace


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    t = Tracer()
    apsw.connection_hooks.append(t.hook)
    try:
        yield t
    finally:
        apsw.connection_hooks.remove(t.hook)


@pytest.mark.anyio
async def test_a_recall_reads_each_kind_of_fact_once_per_hop(tmp_path: Path,
                                                            tracer: Tracer) -> None:
    """A recall whose ranking takes both hops, the reply steps and the time boost: each kind
    of fact the heuristics use (rows, heads, tails, neighbours, closets, document
    frequencies) is read in one statement per hop, not by each step that needs it."""
    p = await Palace.open("rq", tmp_path / "rq", services(tmp_path, HashEmbedder()))
    try:
        turns = ["Caroline went hiking with Melanie near the lake last week?",
                 "Yes, Melanie took her to Lakeview Ridge at 6 am.",
                 "Lakeview Ridge is where Zephyr Outfitters opened a shop.",
                 "Zephyr Outfitters sells boots. Do you like them?",
                 "I bought trail boots there in May 2023."]
        # Names in few drawers, so the second hop follows them.
        notes = [f"Note {k}: the weather was mild and the meeting ran long." for k in range(25)]
        for k, text in enumerate(turns + notes):
            await writes.remember(p, m.NewDrawer(text=text, room=f"session_{k // 5}",
                                                 occurred_ms=MAY_2023 + k * 60_000))
        req = recall.RecallRequest(query="When did Caroline go hiking with Melanie?",
                                   top_k=10, levels=(0,), budget=0)
        await recall.recall(p, req)  # the caches (rooms, counts) are warm from here on
        tracer.on = True
        got = await recall.recall(p, req)
        tracer.on = False
    finally:
        await p.aclose()
    assert got.results
    reads = [s for s in tracer.sql if not s.startswith(("BEGIN", "COMMIT", "SELECT seq"))]
    # Before: 17 (rows, closets, heads, tails, neighbours and the hop's texts each on
    # their own, a document frequency per name); now 10, 5 of them the ranking's.
    assert len(reads) <= 10, "\n".join(reads)
    assert sum("count(*) FROM drawers_fts" in s for s in reads) == 1  # every name at once


@pytest.mark.anyio
async def test_the_pool_reads_the_drawers_before_and_knows_the_next_among_candidates(
        tmp_path: Path, tracer: Tracer) -> None:
    """The neighbours statement reads one side (the drawers before): a candidate's next
    drawer, which the reply step asks about only when it is a candidate, is the candidate
    whose previous it is. The same as reading both sides, in half the subqueries; with
    superseded drawers among the candidates, both sides are read."""
    p = await Palace.open("nb", tmp_path / "nb", services(tmp_path, HashEmbedder()))
    try:
        ids = [int((await writes.remember(p, m.NewDrawer(
            text=f"Turn {k} of the talk about the lake?", room=f"s{k % 2}",
            occurred_ms=MAY_2023 + k * 60_000)))["id"]) for k in range(12)]
        newer = await writes.remember(p, m.NewDrawer(
            text="Turn 4 of the talk, corrected.", room="s0",
            occurred_ms=MAY_2023 + 4 * 60_000 + 1, supersedes=ids[4]))
        picked = ids[:3] + ids[5:9]  # some candidates' next drawers are no candidates

        def both(c: apsw.Connection) -> dict[int, list[tuple[int, int]]]:
            return ctx.neighbours_of(c, picked, 1)

        near = await p.read(both)
        tracer.on = True
        pool = await p.read(lambda c: read_pool(c, picked, query="lake", filters=m.Filters(),
                                                now_ms=MAY_2023 + 10 ** 9))
        tracer.on = False
        unread = [j for j in pool.before.values() if j not in pool.rows]
        tails = await p.read(lambda c: sql.drawer_tails(c, unread, TAIL_CHARS))
        wide = await p.read(lambda c: read_pool(
            c, [*picked, ids[4]], query="lake", now_ms=MAY_2023 + 10 ** 9,
            filters=m.Filters(include_superseded=True)))
    finally:
        await p.aclose()
    sides = {i: {off: j for j, off in got} for i, got in near.items()}
    assert dict(pool.before) == {i: s[-1] for i, s in sides.items() if -1 in s}
    assert {i: j for i, j in pool.after.items() if i in pool.rows and j in pool.rows} == {
        i: s[1] for i, s in sides.items() if 1 in s and s[1] in picked}
    # One statement: the rows, the drawer before each and that drawer's text end.
    [statement] = [s for s in tracer.sql if "FROM drawers" in s]
    assert "(x.occurred_ms, x.id) <" in statement and "(x.occurred_ms, x.id) >" not in statement
    assert dict(pool.tails) == tails and tails  # the same ends drawer_tails reads
    # The superseded candidate (4) has a next drawer (its correction); nothing has it as
    # its previous.
    assert wide.after[ids[4]] == newer["id"] and ids[4] not in wide.before.values()
