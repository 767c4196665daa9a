"""Relative times resolved against when a memory was said (palaced.text.reldates), and their use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from palaced.text.reldates import MAX_RESOLVED, resolved_date_words
from tests.conftest import DaemonProc


def _ms(y: int, m: int, d: int) -> int:
    return int(datetime(y, m, d, 12, tzinfo=UTC).timestamp() * 1000)


MONDAY_10_JULY = _ms(2023, 7, 10)


@pytest.mark.parametrize(("text", "words"), [
    ("We went camping last month.", "June 2023"),
    ("Yesterday was fun", "July 2023"),
    ("LAST FRIDAY I painted", "July 2023"),
    ("two weeks ago we met", "June 2023"),
    ("a couple of days ago", "July 2023"),
    ("3 months ago", "April 2023"),
    ("I moved here 4 years ago", "2019"),
    ("maybe next year", "2024"),
    ("next month, then", "August 2023"),
    ("it rained last week and last month", "July 2023 June 2023"),
    ("nothing relative here, not even lastmonth", ""),
])
def test_relative_times_resolve_to_month_words(text: str, words: str) -> None:
    assert resolved_date_words(text, MONDAY_10_JULY) == words


def test_boundaries_cross_months_and_years() -> None:
    assert resolved_date_words("yesterday", _ms(2023, 3, 1)) == "February 2023"
    assert resolved_date_words("last month", _ms(2023, 1, 15)) == "December 2022"
    assert resolved_date_words("last Sunday", _ms(2023, 5, 1)) == "April 2023"
    assert resolved_date_words("next Monday", _ms(2023, 7, 31)) == "August 2023"


def test_repeats_are_rendered_once_and_capped() -> None:
    assert resolved_date_words("last month. Yes, last month.", MONDAY_10_JULY) == "June 2023"
    many = " ".join(f"{n} months ago" for n in range(1, 20))
    assert len(resolved_date_words(many, MONDAY_10_JULY).split()) == 2 * MAX_RESOLVED


def test_a_month_named_only_relatively_is_found_by_keyword(keyword_daemon: DaemonProc) -> None:
    said_in_july = "2023-07-10T12:00:00Z"
    with keyword_daemon.client() as c:
        c.create_palace("when")
        ids = c.remember_many("when", [
            {"text": "We went camping last month, by the lake.", "occurred_at": said_in_july,
             "room": "a"},
            {"text": "Camping again! We love camping, camping every summer.",
             "occurred_at": said_in_july, "room": "b"},
        ])
        first = c.recall_ex("when", "camping in June", top_k=2)["results"][0]
        plain = c.recall_ex("when", "camping", top_k=2)["results"][0]
    assert first["id"] == ids[0]
    assert plain["id"] == ids[1]  # without the month the other drawer wins on its words
