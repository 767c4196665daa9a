"""Questions and their replies (``palaced.retrieval.replies``, ``RankParams.question_drop``): a drawer
that closes with a question gives its place in the ranking to the drawer after it in its
room. A real palace (SQLite, vector index) in-process, with hand-made vectors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import search
from palaced.retrieval.replies import TAIL_CHARS, question_share
from palaced.store.lookup import search as sql
from palaced.store.rows import drawers as m
from palaced.store.rows.drawers import Filters
from tests.palaced.palace.test_palace_unit import services
from tests.palaced.retrieval.test_neighbour_vector import (
    ANSWER,
    FAR,
    NOW_MS,
    PROMPT,
    TABLE,
    TableEmbedder,
    _palace,
    _unit,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("text", "share"), [
    ("What are their names?", 1.0),
    ('Melanie said, "What are their names?"', 1.0),  # closing quotes and brackets aside
    ("Really?! (so soon?)", 1.0),
    ("We went camping last week. Have you been?", len("Have you been?") / 41),
    ("I went. It was great! Did you? Will you?", len("Did you? Will you?") / 40),
    ("We went camping last week.", 0.0),
    ("What? No. It is done.", 0.0),  # asks, then answers: not closing with a question
    ("", 0.0),
])
def test_question_share(text: str, share: float) -> None:
    assert question_share(text, len(text)) == pytest.approx(share)


def test_question_share_of_a_long_drawer_counts_what_was_not_read() -> None:
    head = "A statement. " * 100
    ask = "And what then?"
    tail = (head + ask)[-TAIL_CHARS:]
    assert question_share(tail, len(head) + len(ask)) == pytest.approx(
        len(ask) / (len(head) + len(ask)))
    # A tail that is all question, of a longer drawer: what precedes it is counted too.
    assert question_share("why?", 8) == pytest.approx(0.5)


def _rank(p: Palace, params: search.RankParams, query: str = "qqzx vvwk") -> Any:
    def rank(c: Any) -> search.Ranking:
        return search.rank(c, query=query, qvec=_unit({0: 1.0}), index=p.index,
                           filters=Filters(), now_ms=NOW_MS, params=params)
    return p.read(rank)


async def test_the_reply_takes_the_place_of_the_question_it_answers(tmp_path: Path) -> None:
    p, ids = await _palace(tmp_path)
    try:
        # The lift of a reply (below) off: this is the question's step alone.
        params = replace(search.RankParams(), reply_lift=0.0)
        assert params.question_drop > 0
        on = await _rank(p, params)
        off = await _rank(p, replace(params, question_drop=0.0))
        prompt, answer = ids[PROMPT], ids[ANSWER]
        # The question matches the query best; its reply ranks after it without the step
        # and before it with it, scored as the question was; the question follows.
        assert off.order[0] == prompt and off.order.index(answer) > 0
        assert on.order[:2] == [answer, prompt]
        assert on.scores[answer] == pytest.approx(off.scores[prompt])
        assert on.scores[prompt] < off.scores[prompt]
        # Nothing else moves: the other candidates keep their scores.
        for i, s in off.scores.items():
            if i not in (prompt, answer):
                assert on.scores[i] == pytest.approx(s)
        # Rooms rank by the query alone, before the step.
        assert on.rooms == off.rooms
    finally:
        await p.aclose()


ASKED = "And where were you then, do you remember?"
TIMED = "In Lisbon, last summer, for three weeks."


async def test_a_when_question_passes_only_to_a_reply_that_states_a_time(tmp_path: Path
                                                                         ) -> None:
    table = {**TABLE, ASKED: _unit({0: 0.8, 4: 0.6}), TIMED: _unit({0: 0.05, 5: 1.0})}
    p = await Palace.open("n", tmp_path / "n", services(tmp_path, TableEmbedder(table)))
    try:
        ids = {}
        for room, texts in (("chat", [PROMPT, ANSWER, FAR]), ("talk", [ASKED, TIMED])):
            for k, text in enumerate(texts):
                got = await writes.remember(p, m.NewDrawer(
                    text=text, room=room, occurred_ms=1_700_000_000_000 + k * 60_000))
                ids[text] = int(got["id"])
        query = "when qqzx vvwk"
        on = await _rank(p, search.RankParams(), query)
        off = await _rank(p, replace(search.RankParams(), question_drop=0.0), query)
        # "When ..." is answered by a time. ANSWER names none: it keeps its score, below
        # the question it replies to. TIMED states one: it takes its question's place.
        assert on.order.index(ids[PROMPT]) < on.order.index(ids[ANSWER])
        assert on.scores[ids[ANSWER]] < on.scores[ids[PROMPT]] - 0.1
        assert off.order.index(ids[ASKED]) < off.order.index(ids[TIMED])
        assert on.order.index(ids[TIMED]) < on.order.index(ids[ASKED])
        tails = await p.read(lambda c: sql.drawer_tails(c, [ids[ASKED]], 10))
        assert tails == {ids[ASKED]: (" remember?", len(ASKED))}
    finally:
        await p.aclose()


async def test_a_question_that_closes_its_room_only_drops(
        tmp_path: Path) -> None:
    table = dict(TABLE)
    last = "So, did you ever go back there in the end?"
    table[last] = _unit({0: 0.95, 1: (1 - 0.95 ** 2) ** 0.5})
    p = await Palace.open("n", tmp_path / "n", services(tmp_path, TableEmbedder(table)))
    try:
        for k, text in enumerate([FAR, last]):
            await writes.remember(p, m.NewDrawer(text=text, room="solo",
                                                 occurred_ms=1_700_000_000_000 + k * 60_000))
        on = await _rank(p, search.RankParams())
        off = await _rank(p, replace(search.RankParams(), question_drop=0.0))
        # The question closes its room: there is no reply to raise; it only drops, by its
        # share of the score range, and no candidate joins or leaves.
        assert set(on.order) == set(off.order) and len(on.order) == 2
        ask = off.order[0]
        assert on.scores[ask] < off.scores[ask]
        assert on.scores[on.order[1]] <= off.scores[off.order[1]] + 1e-9
    finally:
        await p.aclose()


async def test_a_reply_gains_the_lift_and_nothing_else_moves(tmp_path: Path) -> None:
    p, ids = await _palace(tmp_path)
    try:
        params = search.RankParams()
        assert params.reply_lift > 0
        on = await _rank(p, params)
        off = await _rank(p, replace(params, reply_lift=0.0))
        answer = ids[ANSWER]  # the drawer after PROMPT, which closes with a question
        assert on.scores[answer] > off.scores[answer]
        for i, s in off.scores.items():
            if i != answer:
                assert on.scores[i] == pytest.approx(s)
        # Both steps off: the reply alone ranks below its question.
        bare = await _rank(p, replace(params, reply_lift=0.0, question_drop=0.0))
        assert bare.order.index(answer) > bare.order.index(ids[PROMPT])
        # A query that asks when lifts no reply that states no time.
        when_on = await _rank(p, params, "when qqzx vvwk")
        when_off = await _rank(p, replace(params, reply_lift=0.0), "when qqzx vvwk")
        assert when_on.scores == pytest.approx(when_off.scores)
    finally:
        await p.aclose()
