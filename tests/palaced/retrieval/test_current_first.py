"""``recall.current_first``: the newer drawer of an open conflict goes just above the older;
``recall._over_floor``: and it stays in the delivered text when the older reaches the floor."""

from __future__ import annotations

from typing import Any

from palaced.retrieval.recall import _over_floor, current_first


def _d(did: int, rank: float, newer: int | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"id": did, "rank_score": rank}
    if newer is not None:
        d["conflicts_with"] = newer
    return d


def test_newer_hit_is_lifted_above_the_older_and_takes_its_score() -> None:
    a, b, c = _d(1, 0.9, newer=3), _d(2, 0.8), _d(3, 0.5)
    out = current_first([a, b, c], {}, 10)
    assert [d["id"] for d in out] == [3, 1, 2]
    assert out[0]["rank_score"] == 0.9


def test_chain_ends_with_the_newest_first() -> None:
    a, b, c = _d(1, 0.9, newer=2), _d(2, 0.8, newer=3), _d(3, 0.7)
    assert [d["id"] for d in current_first([a, b, c], {}, 10)] == [3, 2, 1]


def test_newer_outside_the_hits_comes_in_and_the_last_hit_goes() -> None:
    a, b = _d(1, 0.9, newer=7), _d(2, 0.8)
    newer = _d(7, 0.1)
    assert [d["id"] for d in current_first([a, b], {7: newer}, 2)] == [7, 1]
    assert [d["id"] for d in current_first([a, b], {7: newer}, 3)] == [7, 1, 2]
    # Not read (filtered out, retired): nothing to bring in.
    assert [d["id"] for d in current_first([a, b], {}, 2)] == [1, 2]


def test_a_cycle_cannot_loop() -> None:
    a, b = _d(1, 0.9, newer=2), _d(2, 0.8, newer=1)
    assert sorted(d["id"] for d in current_first([a, b], {}, 10)) == [1, 2]


def test_the_text_keeps_the_current_fact_of_a_drawer_over_the_floor() -> None:
    def drawer(did: int, low: bool, newer: int | None = None) -> dict[str, Any]:
        return {**_d(did, 0.0, newer), "below_floor": low}

    # 1 reaches the floor and conflicts with 2, which 3 replaced in turn; 4 is only weak,
    # 5 reaches the floor, 6 is under it and names a newer drawer that was not read.
    shown = {1: drawer(1, False, newer=2), 2: drawer(2, True, newer=3), 3: drawer(3, True),
             4: drawer(4, True), 5: drawer(5, False), 6: drawer(6, True, newer=9)}
    relevant = _over_floor(shown)
    assert [did for did, d in shown.items() if relevant(d)] == [1, 2, 3, 5]
