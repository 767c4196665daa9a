"""The pure parts of bulk upkeep (palaced.memory.bulk): batch ids, the merge's keeper, the
query selector's every-word rule, and what counts as no selector."""

from __future__ import annotations

import pytest

from palaced.memory import bulk
from palaced.wire.errors import InvalidArgs


def test_batch_ids_are_fresh_and_checked() -> None:
    a, b = bulk.new_batch("forget", 1_796_449_476_864), bulk.new_batch("forget", 1)
    assert a.startswith("forget-") and b.startswith("forget-1-") and a != b
    assert bulk.check_batch(a) == a and bulk.check_batch(bulk.new_batch("merge", 5))
    for bad in ("forget", "forget-x", "purge-abc-123456", "forget-abc-12345g", "forget 1-1",
                "forget-abc-123456; DROP"):
        with pytest.raises(InvalidArgs):
            bulk.check_batch(bad)


def test_the_merge_keeps_the_longest_then_newest_text() -> None:
    rows = [{"id": 1, "text": "short", "created_ms": 9},
            {"id": 2, "text": "longer", "created_ms": 1},
            {"id": 3, "text": "longer", "created_ms": 2}]
    assert bulk.pick_keeper(rows)["id"] == 3
    assert bulk.pick_keeper(rows[:2])["id"] == 2


def test_a_query_selects_drawers_holding_every_word() -> None:
    assert bulk._holds_all("Restart the payment worker 7", ["payment", "worker", "7"])
    assert not bulk._holds_all("Restart the payment worker 17", ["payment", "worker", "7"])
    assert bulk._holds_all("PAYMENT-worker", ["payment", "worker"])


def test_no_selector_is_empty() -> None:
    assert bulk.Selection().empty and bulk.Selection(query="").empty
    assert not bulk.Selection(tags=("x",)).empty and not bulk.Selection(before_ms=0).empty
