"""Questions that ask for a set (``palaced.retrieval.sets``, ``RankParams.set_spread``): after the
best few, their answers are spread over rooms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palaced.retrieval.params import DEFAULTS
from palaced.retrieval.sets import asks_for_set, spread_over_rooms
from tests.conftest import DaemonProc

SET_KEEP = DEFAULTS.set_keep


@pytest.mark.parametrize("query", [
    "What books has John read?",
    "Which cities has Jon been to?",
    "which databases have we tried so far",
    "How many times did the deploy fail?",
    "What issues did we fix last week?",
    "What transgender-specific events has Caroline attended?",
    "Which people were at the retro?",
    "Do both of them like hiking?",
])
def test_questions_that_ask_for_a_set(query: str) -> None:
    assert asks_for_set(query)


@pytest.mark.parametrize("query", [
    "What pet does Caroline have?",  # one thing: no plural
    "What does Melanie do to relax?",  # "does" is not a plural
    "What is the port of the staging database?",
    "What was his answer?",
    "When did we switch to Postgres?",
    "Which database did we pick?",
    "",
])
def test_questions_that_do_not(query: str) -> None:
    assert not asks_for_set(query)


def test_a_room_after_the_kept_places_waits_its_turn() -> None:
    # Room a holds the six best drawers; b and c one weaker drawer each.
    scores = {1: 1.0, 2: 0.95, 3: 0.9, 4: 0.85, 5: 0.8, 6: 0.75, 7: 0.7, 8: 0.0}
    room = {1: "a", 2: "a", 3: "a", 4: "a", 5: "a", 6: "a", 7: "b", 8: "c"}
    out = spread_over_rooms(scores, room, 0.1, keep=2)
    order = sorted(out, key=lambda i: -out[i])
    # 1 and 2 keep their places; 3 then loses 0.2 of the range (0.7), so it ties 7 and the
    # smaller id goes first; 4 loses 0.3 (0.55), below 7 (0.7).
    assert order[:2] == [1, 2] and out[1] == 1.0 and out[2] == 0.95
    assert out[3] == pytest.approx(0.7) and out[7] == pytest.approx(0.7)
    assert order.index(7) < order.index(4)
    assert out[8] == 0.0  # alone in its room: no penalty
    assert spread_over_rooms(scores, room, 0.0) == scores
    with pytest.raises(ValueError):
        spread_over_rooms(scores, room, -0.1)


@given(st.dictionaries(st.integers(0, 60), st.floats(-5, 5, allow_nan=False), max_size=40),
       st.integers(0, 4), st.sampled_from([0.05, 0.1, 0.4, 2.0]), st.integers(0, 6))
def test_spread_is_a_ranking_that_only_lowers(scores: dict[int, float], rooms: int,
                                              share: float, keep: int) -> None:
    room_of = {i: i % rooms for i in scores} if rooms else {}
    out = spread_over_rooms(scores, room_of, share, keep)
    assert out.keys() == scores.keys()
    best = sorted(scores, key=lambda i: (-scores[i], i))
    for i in best[:keep]:
        assert out[i] == scores[i]
    if len(scores) < 2:
        return
    span = (max(scores.values()) - min(scores.values())) or 1.0
    order = sorted(out, key=lambda i: (-out[i], i))
    for n, i in enumerate(order):
        # Each drawer lost share x range for each better-placed drawer of its room.
        before = sum(1 for j in order[:n] if (room_of.get(j, ("", j)) == room_of.get(i, ("", i))))
        if i not in best[:keep]:
            assert out[i] == pytest.approx(scores[i] - share * span * before)
        assert out[i] <= scores[i]


def _fill(d: DaemonProc, palace: str) -> None:
    with d.client() as c:
        c.create_palace(palace)
        items = [{"text": f"Ann read books and more books about sailing, volume {i}.",
                  "room": "club"} for i in range(8)]
        # The same words in three other rooms, three drawers each: weaker rooms.
        items += [{"text": f"Ann read books and more books about sailing, volume {i}.",
                   "room": ("trip", "summer", "home")[i % 3]} for i in range(8, 17)]
        items += [{"text": f"The weather was mild on day {i}.", "room": f"days{i % 3}"}
                  for i in range(20)]
        c.remember_many(palace, items)


def test_a_set_question_lists_answers_from_other_rooms(keyword_daemon: DaemonProc) -> None:
    _fill(keyword_daemon, "sets")
    with keyword_daemon.client() as c:
        asked = c.recall_ex("sets", "What books has Ann read?", top_k=8)["results"]
        plain = c.recall_ex("sets", "Did Ann read books?", top_k=8)["results"]
    # The same words: asked as a yes/no question the club's eight drawers fill the eight
    # places (the strongest room lifts them all); asked for the set, the first five stay
    # and the other rooms' drawers take places after them.
    assert [r["room"] for r in plain] == ["club"] * 8
    assert [r["text"] for r in asked[:SET_KEEP]] == [r["text"] for r in plain[:SET_KEEP]]
    others = [r["room"] for r in asked[SET_KEEP:] if r["room"] != "club"]
    assert len(set(others)) >= 2 and len(others) == len(set(others))
