"""Periods a query names relative to now: "what did we decide yesterday?", "last week".

A memory's own date (``occurred_at``) is what such a question is about: "yesterday" asked on
a Tuesday means Monday's drawers. ``query_period`` finds the relative expressions of a query
and returns the span of time they name, as Unix milliseconds ``[start, end)``, with day,
week (Monday to Sunday), month and year boundaries in the machine's local time zone (the
daemon runs as the user on their machine: their "yesterday"). ``search.rank`` gives the
drawers dated in that span a place among the candidates (``store.rows.dated``: the newest,
however few of the query's words they hold) and ``RankParams.date_boost`` of the score
range, as it does for a month the query names (``palaced.retrieval.when``); recall counts the words
that named the span as matched by a drawer dated in it.

Recognised: today, tonight, this morning/afternoon/evening; yesterday, last night, the day
before yesterday; this/last week, month, year; N days/weeks/months/years ago; the last/past
N days/weeks/months (and "the past week"); on/last <weekday> (the latest such day before
today). Vague words (recently, lately, a while ago) name no period. Pure and fast: one
regular-expression scan of the query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from palaced.text.reldates import NUMBERS, WEEKDAYS, month_start

# Longest first, so "a couple of" is taken whole rather than as "a".
_WORDS = "|".join(sorted(NUMBERS, key=len, reverse=True))
_COUNT = r"(?P<count>\d{1,3}|" + _WORDS + ")"
_PATTERN = re.compile(
    r"\b(?:(?P<today>today|tonight|this (?:morning|afternoon|evening))"
    r"|(?P<before>the day before yesterday)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<which>this|last) (?P<unit>week|month|year)"
    r"|(?:the )?(?:last|past) (?:(?P<rcount>\d{1,3}|" + _WORDS + r") )?"
    r"(?P<runit>days?|weeks?|months?)"
    r"|" + _COUNT + r" (?P<agounit>days?|weeks?|months?|years?) ago"
    r"|(?:on|last) (?P<weekday>" + "|".join(WEEKDAYS) + r"))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Period:
    """A span of time a query names: ``[start, end)`` in Unix milliseconds, and the words
    of the query that named it ("yesterday", "last week"): a drawer dated in the span
    matches those words by its date (``recall``'s relevance)."""

    start: int
    end: int
    phrases: tuple[str, ...]


def _ms(day: date, tz: tzinfo | None) -> int:
    """Midnight at the start of ``day`` in ``tz`` (None: local time), in Unix ms."""
    start = datetime.combine(day, time())
    aware = start.replace(tzinfo=tz) if tz is not None else start.astimezone()
    return int(aware.timestamp() * 1000)


def _count(text: str | None) -> int:
    if not text:
        return 1
    text = text.lower()
    return int(text) if text.isdigit() else NUMBERS[text]


def _days(m: re.Match[str], today: date) -> tuple[date, date] | None:
    """The days ``[first, end)`` one match names, ``today`` being the query's day."""
    if m.group("today"):
        return today, today + timedelta(days=1)
    if m.group("before"):
        return today - timedelta(days=2), today - timedelta(days=1)
    if m.group("yesterday"):
        return today - timedelta(days=1), today
    if unit := (m.group("unit") or "").lower():
        step = 0 if m.group("which").lower() == "this" else -1
        if unit == "week":
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
            return monday, monday + timedelta(weeks=1)
        if unit == "month":
            return month_start(today, step), month_start(today, step + 1)
        return date(today.year + step, 1, 1), date(today.year + step + 1, 1, 1)
    if runit := (m.group("runit") or "").lower().rstrip("s"):
        # A rolling span ending today: "the last 3 days" are today and the two before.
        n = _count(m.group("rcount"))
        if runit == "month":
            return month_start(today, -n) + timedelta(days=today.day - 1), today + timedelta(1)
        return today - timedelta(days=n * (7 if runit == "week" else 1) - 1), today + timedelta(1)
    if agounit := (m.group("agounit") or "").lower().rstrip("s"):
        n = _count(m.group("count"))
        if agounit == "day":
            day = today - timedelta(days=n)
            return day, day + timedelta(days=1)
        if agounit == "week":
            monday = today - timedelta(days=today.weekday()) - timedelta(weeks=n)
            return monday, monday + timedelta(weeks=1)
        if agounit == "month":
            return month_start(today, -n), month_start(today, -n + 1)
        return date(today.year - n, 1, 1), date(today.year - n + 1, 1, 1)
    weekday = WEEKDAYS.index(m.group("weekday").lower())
    day = today - timedelta(days=(today.weekday() - weekday) % 7 or 7)
    return day, day + timedelta(days=1)


def query_period(query: str, now_ms: int, tz: tzinfo | None = None) -> Period | None:
    """The span of time ``query``'s relative expressions name, asked at ``now_ms``; several
    expressions give the span that covers them all; None if it names none. ``tz`` sets the
    day boundaries (None: the machine's local time zone). Never raises: a span outside the
    years 1-9999 is no span."""
    found: list[tuple[date, date]] = []
    phrases: list[str] = []
    try:
        now = datetime.fromtimestamp(now_ms / 1000, tz=tz).astimezone(tz)
        for m in _PATTERN.finditer(query):
            span = _days(m, now.date())
            if span is not None:
                found.append(span)
                phrases.append(m.group(0))
        if not found:
            return None
        return Period(_ms(min(s for s, _ in found), tz), _ms(max(e for _, e in found), tz),
                      tuple(phrases))
    except (OverflowError, ValueError, OSError):
        return None
