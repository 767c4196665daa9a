"""Room neighbours in the vector score (``RankParams.neighbour_vector``, through each
drawer's stored context vector) and the store query that finds a drawer's neighbours
(``store.context.neighbours_of``, which the reply step reads): a real palace (SQLite, vector
index) in-process, with hand-made vectors so the cosines are known."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import search
from palaced.store.lookup import context
from palaced.store.rows import drawers as m
from palaced.store.rows.drawers import Filters
from tests.palaced.palace.test_palace_unit import services

pytestmark = pytest.mark.anyio
DIMS = 16
NOW_MS = 1_800_000_000_000


def _unit(parts: dict[int, float]) -> np.ndarray:
    vec = np.zeros(DIMS, dtype=np.float32)
    for axis, value in parts.items():
        vec[axis] = value
    return vec / np.linalg.norm(vec)


class TableEmbedder(HashEmbedder):
    """Vectors from a table (text -> vector; other texts hashed); every query is axis 0."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(DIMS)
        self.table = table

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMS), dtype=np.float32)
        return np.stack([self.table[t] if t in self.table else super(TableEmbedder, self)
                         .embed_passages([t])[0] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return _unit({0: 1.0})


# One room in time order. The question matches PROMPT (cosine .9); ANSWER, the reply to it,
# barely matches on its own (.1) and less than FAR (.15), whose neighbours match nothing.
PROMPT = "Did you ever go back to that little harbour town?"
ANSWER = "Yes, twice, and the second time I stayed a whole month."
FAR = "The weather had been grey for weeks."
FILLER = [f"Filler remark number {w}." for w in
          ("one", "two", "three", "four", "five", "six")]
ORDER = [FILLER[0], PROMPT, ANSWER, FILLER[1], FILLER[2], FILLER[3], FAR, FILLER[4],
         FILLER[5]]
TABLE = {PROMPT: _unit({0: 0.9, 1: 0.19 ** 0.5}), ANSWER: _unit({0: 0.1, 1: 0.99 ** 0.5}),
         FAR: _unit({0: 0.15, 2: (1 - 0.15 ** 2) ** 0.5}),
         **{t: _unit({3 + k: 1.0}) for k, t in enumerate(FILLER)}}


async def _palace(tmp_path: Path) -> tuple[Palace, dict[str, int]]:
    p = await Palace.open("n", tmp_path / "n", services(tmp_path, TableEmbedder(TABLE)))
    ids = {}
    for k, text in enumerate(ORDER):
        got = await writes.remember(p, m.NewDrawer(text=text, room="chat",
                                                   occurred_ms=1_700_000_000_000 + k * 60_000))
        ids[text] = int(got["id"])
    return p, ids


async def test_the_reply_to_the_matching_turn_rises_by_its_neighbours(tmp_path: Path) -> None:
    p, ids = await _palace(tmp_path)
    try:
        def go(params: search.RankParams) -> Any:
            def rank(c: Any) -> search.Ranking:
                return search.rank(c, query="qqzx vvwk", qvec=_unit({0: 1.0}), index=p.index,
                                   filters=Filters(), now_ms=NOW_MS, params=params)
            return p.read(rank)

        # The reply steps (test_replies.py) would move the prompt, a question, and lift
        # its reply: off here.
        base = replace(search.RankParams(), question_drop=0.0, reply_lift=0.0)
        on = await go(base)
        off = await go(replace(base, neighbour_vector=0.0))
        assert search.RankParams().neighbour_vector > 0
        answer, far = ids[ANSWER], ids[FAR]
        # By its own cosine the answer ranks below FAR; beside the prompt it ranks above.
        assert off.order.index(far) < off.order.index(answer)
        assert on.order.index(answer) < on.order.index(far)
        assert on.order[0] == ids[PROMPT]
        # What relevance reads stays the drawer's own cosine.
        assert on.vector[answer] == pytest.approx(0.1, abs=0.01)
        assert on.vector == off.vector
    finally:
        await p.aclose()


async def test_neighbours_of_follows_the_room_order_and_skips_superseded(tmp_path: Path
                                                                         ) -> None:
    p, ids = await _palace(tmp_path)
    try:
        other = await writes.remember(p, m.NewDrawer(text="Another room entirely.",
                                                     room="elsewhere",
                                                     occurred_ms=1_700_000_000_000 + 60_000))
        newer = await writes.remember(p, m.NewDrawer(
            text="Filler remark number two, corrected.", room="chat",
            occurred_ms=1_700_000_000_000 + 3 * 60_000 + 1, supersedes=ids[FILLER[1]]))

        def go(c: Any) -> dict[int, list[tuple[int, int]]]:
            return context.neighbours_of(c, [ids[ANSWER], ids[FILLER[0]], other["id"],
                                             10 ** 9], 2)
        got = await p.read(go)
        # The superseded filler is skipped; its replacement (later in time) takes its place.
        assert got[ids[ANSWER]] == [(ids[PROMPT], -1), (ids[FILLER[0]], -2),
                                    (newer["id"], 1), (ids[FILLER[2]], 2)]
        assert got[ids[FILLER[0]]] == [(ids[PROMPT], 1), (ids[ANSWER], 2)]
        # Alone in its room, or not a drawer: no entry.
        assert int(other["id"]) not in got and 10 ** 9 not in got
        assert await p.read(lambda c: context.neighbours_of(c, [], 2)) == {}
    finally:
        await p.aclose()
