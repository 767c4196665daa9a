"""Periods a query names relative to now (palaced.text.periods), and how recall ranks by them."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palaced.text.periods import query_period
from tests.conftest import DaemonProc


@pytest.fixture
def keyword_daemon(shared_keyword_daemon: DaemonProc) -> DaemonProc:
    """The module's keyword-only daemon (``shared_keyword_daemon``), not one per test: each
    test here works in palaces of its own names and never stops, kills or damages it."""
    return shared_keyword_daemon


# Tuesday 1 December 2026, 15:00 UTC.
NOW = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def _span(query: str, now_ms: int = NOW_MS, tz: ZoneInfo | None = None) -> tuple[str, str] | None:
    got = query_period(query, now_ms, tz or ZoneInfo("UTC"))
    if got is None:
        return None
    zone = tz or UTC
    return tuple(datetime.fromtimestamp(ms / 1000, zone).strftime("%Y-%m-%d %H:%M")
                 for ms in (got.start, got.end))  # type: ignore[return-value]


@pytest.mark.parametrize(("query", "span"), [
    ("What did we decide yesterday?", ("2026-11-30 00:00", "2026-12-01 00:00")),
    ("what happened last night", ("2026-11-30 00:00", "2026-12-01 00:00")),
    ("the day before yesterday", ("2026-11-29 00:00", "2026-11-30 00:00")),
    ("what did I fix today?", ("2026-12-01 00:00", "2026-12-02 00:00")),
    ("notes from this morning", ("2026-12-01 00:00", "2026-12-02 00:00")),
    ("last week's outage", ("2026-11-23 00:00", "2026-11-30 00:00")),  # Monday to Monday
    ("this week", ("2026-11-30 00:00", "2026-12-07 00:00")),
    ("what changed last month", ("2026-11-01 00:00", "2026-12-01 00:00")),
    ("this month", ("2026-12-01 00:00", "2027-01-01 00:00")),
    ("last year", ("2025-01-01 00:00", "2026-01-01 00:00")),
    ("3 days ago", ("2026-11-28 00:00", "2026-11-29 00:00")),
    ("two weeks ago", ("2026-11-16 00:00", "2026-11-23 00:00")),
    ("a month ago", ("2026-11-01 00:00", "2026-12-01 00:00")),
    ("in the last 3 days", ("2026-11-29 00:00", "2026-12-02 00:00")),
    ("over the past week", ("2026-11-25 00:00", "2026-12-02 00:00")),
    ("the last few days", ("2026-11-29 00:00", "2026-12-02 00:00")),
    ("on Monday", ("2026-11-30 00:00", "2026-12-01 00:00")),
    ("last Tuesday", ("2026-11-24 00:00", "2026-11-25 00:00")),  # today is a Tuesday
    # Several expressions: the span that covers them all.
    ("yesterday or the day before yesterday", ("2026-11-29 00:00", "2026-12-01 00:00")),
])
def test_query_period(query: str, span: tuple[str, str]) -> None:
    assert _span(query) == span


@pytest.mark.parametrize("query", [
    "What did we decide recently?", "a while ago", "When did Caroline go to the group?",
    "Where did Melanie go camping in June?",  # a month named: palaced.retrieval.when's
    "the last commit", "todays", "weekday", "",
])
def test_no_period(query: str) -> None:
    assert query_period(query, NOW_MS, UTC) is None


def test_days_are_the_users_calendar_days() -> None:
    """At 23:30 UTC it is already tomorrow in Berlin: "yesterday" is the UTC day then."""
    late = int(datetime(2026, 12, 1, 23, 30, tzinfo=UTC).timestamp() * 1000)
    assert _span("yesterday", late) == ("2026-11-30 00:00", "2026-12-01 00:00")
    berlin = ZoneInfo("Europe/Berlin")
    assert _span("yesterday", late, berlin) == ("2026-12-01 00:00", "2026-12-02 00:00")
    # Across a daylight-saving change the day is still midnight to midnight (25 hours).
    autumn = int(datetime(2026, 10, 26, 12, 0, tzinfo=berlin).timestamp() * 1000)
    got = query_period("yesterday", autumn, berlin)
    assert got is not None and got.end - got.start == 25 * 3600 * 1000


def test_the_words_that_named_the_period() -> None:
    got = query_period("What did we ship last week, and yesterday?", NOW_MS, UTC)
    assert got is not None and got.phrases == ("last week", "yesterday")


@given(st.text(max_size=200), st.integers(min_value=-(2**62), max_value=2**62))
def test_never_raises_and_spans_are_ordered(query: str, now_ms: int) -> None:
    got = query_period(query, now_ms, UTC)
    assert got is None or (got.start < got.end and all(p in query for p in got.phrases))


def test_at_the_ends_of_the_calendar_there_is_no_span() -> None:
    first = int(datetime(1, 1, 1, 5, 0, tzinfo=UTC).timestamp() * 1000)
    assert query_period("yesterday", first, UTC) is None
    assert query_period("last year", first, UTC) is None


def _local_noon(days_ago: int, hour: int = 12) -> str:
    """Noon (or ``hour``) local time ``days_ago`` days before today, as the daemon (same
    TZ) reads it."""
    day = date.today() - timedelta(days=days_ago)
    return datetime.combine(day, time(hour)).astimezone().isoformat()


def test_recall_prefers_the_drawers_of_the_period_the_query_names(
        keyword_daemon: DaemonProc) -> None:
    """Through a real daemon: the older drawer matches the words better, the query asks
    about yesterday; the same words without "yesterday" keep the keyword order."""
    older = "We decided the cache should use Redis, the Redis cluster in staging."
    recent = "We decided the cache uses Redis."
    filler = [{"text": f"The cache of service {i} was decided in review {i}.",
               "room": f"r{i % 4}", "occurred_at": _local_noon(30 + i)} for i in range(20)]
    items = [*filler, {"text": older, "room": "a", "occurred_at": _local_noon(9)},
             {"text": recent, "room": "b", "occurred_at": _local_noon(1)}]
    with keyword_daemon.client() as c:
        c.create_palace("period")
        c.remember_many("period", items)
        plain = c.recall_ex("period", "What did we decide about the Redis cache?",
                            top_k=5)["results"]
        asked = c.recall_ex("period", "What did we decide about the Redis cache yesterday?",
                            top_k=5)["results"]
    lexical = {r["text"]: float(r["lexical"]) for r in asked}
    assert lexical[older] > lexical[recent]  # the words alone prefer the older drawer
    assert plain[0]["text"] == older
    assert asked[0]["text"] == recent


def test_a_period_query_finds_the_drawers_of_that_span_whatever_their_words(
        keyword_daemon: DaemonProc) -> None:
    """Keyword-only, through a real daemon: "what did we do yesterday?" shares no word with
    yesterday's drawers, yet they are the answer, first, and count as relevant (their
    date matches "yesterday"), the drawers of other days after them; and the recall does not
    call them substring matches (the fallback found none)."""
    yesterday = ["We moved CI to GitHub Actions.", "Alice reviewed the payment retries."]
    items = [{"text": f"Standup note {i}: the build was green.", "room": "notes",
              "occurred_at": _local_noon(3 + i)} for i in range(30)]
    items += [{"text": t, "room": "notes", "occurred_at": _local_noon(1, 10 + k)}
              for k, t in enumerate(yesterday)]
    with keyword_daemon.client() as c:
        c.create_palace("days")
        c.remember_many("days", items)
        got = c.recall_ex("days", "What did we do yesterday?", top_k=5)
    texts = [r["text"] for r in got["results"]]
    assert set(texts[:2]) == set(yesterday)
    assert not got["nothing_relevant"] and "substring" not in got
    assert all(r["score"] == 1.0 for r in got["results"][:2])
    assert all("Standup" not in t for t in texts[:2])


def test_with_the_model_a_period_drawer_is_over_the_relevance_floor(daemon: DaemonProc) -> None:
    """Hybrid: a drawer of yesterday whose words barely resemble the question is still
    shown as relevant (its date answers "yesterday"), the day before's are ranked below."""
    with daemon.client() as c:
        c.create_palace("hdays")
        c.remember_many("hdays", [
            {"text": "Moved CI to GitHub Actions.", "occurred_at": _local_noon(1)},
            {"text": "Ordered new chairs for the office.", "occurred_at": _local_noon(2)},
            {"text": "Renamed the billing service.", "occurred_at": _local_noon(4)}])
        got = c.recall_ex("hdays", "what did we do yesterday?", top_k=3)
    first = got["results"][0]
    assert first["text"] == "Moved CI to GitHub Actions."
    assert not first["below_floor"] and not got["nothing_relevant"]
