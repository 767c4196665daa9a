"""Relative time in a memory's text, resolved against the day it happened.

"We went camping last month", said on 10 July 2023, happened in June 2023: a question "when
did they go camping in June?" should find it by keyword. ``resolved_date_words`` finds the
relative expressions of a text (yesterday, last night, tomorrow, last/next week, weekend,
month or year, last/next Friday, "three weeks ago") and renders the times they point at as
words for its full-text row, next to the drawer's own date (``store.lookup.context.date_words``):
the month and year ("June 2023"), or the year alone for "last year" and "N years ago". Days
are not rendered: the drawer's own date already names its day, and the month is what
questions ask by (LoCoMo dev turn R@1/5/10 with the second hop: days rendered too
.414/.728/.825, months only .415/.728/.826, none .409/.727/.824). Pure and fast (one
regular-expression scan).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

# Count words of relative times, here and in the queries ``periods`` reads ("a few" only
# there: this module's pattern does not take it).
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "couple of": 2,
           "a few": 3, "few": 3}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNT = r"(\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_PATTERN = re.compile(
    r"\b(?:(?P<single>yesterday|last night|tomorrow)"
    r"|(?P<dir>last|next|past) (?P<unit>week|weekend|month|year|" + "|".join(WEEKDAYS) + r")"
    r"|" + _COUNT + r" (?P<many>days?|weeks?|months?|years?) ago)\b",
    re.IGNORECASE,
)
MAX_RESOLVED = 8  # expressions resolved per text at most (a long text repeats itself)


def _month_words(dt: datetime) -> str:
    return f"{dt:%B} {dt.year}"


def month_start(day: date, months: int) -> date:
    """The first day of the month ``months`` after (before, if negative) ``day``'s.

    Raises:
        ValueError: outside the years 1-9999.
    """
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _month_shift(dt: datetime, months: int) -> str:
    return _month_words(datetime.combine(month_start(dt.date(), months), time()))


def _resolve(m: re.Match[str], at: datetime) -> str | None:
    single = (m.group("single") or "").lower()
    if single:
        return _month_words(at + timedelta(days=1 if single == "tomorrow" else -1))
    unit = (m.group("unit") or "").lower()
    if unit:
        step = 1 if m.group("dir").lower() == "next" else -1
        if unit == "month":
            return _month_shift(at, step)
        if unit == "year":
            return str(at.year + step)
        if unit in ("week", "weekend"):
            return _month_words(at + timedelta(days=7 * step))
        # "last Friday": the latest Friday before the day it was said; "next": the first after.
        delta = (WEEKDAYS.index(unit) - at.weekday()) % 7 or 7
        return _month_words(at + timedelta(days=delta if step > 0 else delta - 7))
    count_text = m.group(4).lower()
    count = int(count_text) if count_text.isdigit() else NUMBERS[count_text]
    many = m.group("many").lower().rstrip("s")
    if many == "day":
        return _month_words(at - timedelta(days=count))
    if many == "week":
        return _month_words(at - timedelta(days=7 * count))
    if many == "month":
        return _month_shift(at, -count)
    return str(at.year - count)


def resolved_date_words(text: str, occurred_ms: int) -> str:
    """The times ``text``'s relative expressions point at, as date words ("" if none).

    ``occurred_ms`` (Unix ms, UTC) is when the text was said. Never raises: a time that
    would fall outside years 1-9999 is left out.
    """
    at = datetime.fromtimestamp(occurred_ms / 1000, tz=UTC)
    out: list[str] = []
    for m in _PATTERN.finditer(text):
        try:
            words = _resolve(m, at)
        except (OverflowError, ValueError):
            continue
        if words and words not in out:
            out.append(words)
        if len(out) >= MAX_RESOLVED:
            break
    return " ".join(out)
