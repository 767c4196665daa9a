"""Questions that ask "when", and memories that say when.

"When did Caroline go to the support group?" is answered by the memory that states a time
("I went to a support group yesterday", "...last Friday", "...in May 2023"), not by the
others that mention the group. ``asks_when`` recognises such a question; ``states_time``
recognises a text that names a time: a year, a month (with a day or a year when its name is
also a word), a weekday, or a relative expression (yesterday, last week, three days ago, next
month...); for a question that asks how long, a duration too ("for three years", "since").
``search.rank`` lifts the candidates that state a time by ``RankParams.when_boost`` of the
score range when the query asks when.

LoCoMo dev: 78 % of the gold turns of "when" questions state a time against 11 % of all
turns (docs/benchmarks.md, "Connecting the dots"). Pure and fast: one regular expression per
query and per candidate's first ``HEAD_CHARS`` characters.
"""

from __future__ import annotations

import re

# How many characters of a drawer are read for a time: a long drawer is a document whose
# head is where an event is dated, and reading 200k characters per candidate would cost
# milliseconds.
HEAD_CHARS = 2_000

_ASKS = re.compile(
    r"^\W*when\b"  # "When did...", not "what did she say when..."
    r"|\b(?:what|which) (?:date|day|year|month|week|weekend|time of year)\b"
    r"|\bhow long ago\b|\bsince when\b|\bon what day\b",
    re.IGNORECASE,
)
_MONTH = (r"(?:january|february|march|april|june|july|august|september|october|november"
          r"|december)")
_SHORT_MONTH = r"(?:jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_COUNT = (r"(?:\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight"
          r"|nine|ten|few)")
_STATES = re.compile(
    r"\b(?:(?:19|20)\d\d"  # a year
    + r"|" + _MONTH  # a month; "may" and "jan" alone are a verb and a name
    + r"|(?:may|" + _SHORT_MONTH + r")\.? (?:\d{1,2}|(?:19|20)\d\d)"
    r"|\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:may|" + _SHORT_MONTH + r")"
    r"|" + _WEEKDAY + r"s?"
    r"|yesterday|tomorrow|tonight|last night|the other day"
    r"|(?:last|next|this|past|coming) (?:week|weekend|month|year|summer|winter|spring|fall"
    r"|autumn|" + _WEEKDAY + r")"
    r"|" + _COUNT + r" (?:days?|weeks?|months?|years?) ago"
    r"|\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4})\b",
    re.IGNORECASE,
)


_ASKS_LONG = re.compile(r"^\W*how long\b(?! ago)", re.IGNORECASE)
_DURATION = re.compile(
    r"\b(?:" + _COUNT + r" (?:days?|weeks?|months?|years?)|since"
    r"|for (?:a while|ages|years|months|weeks|so long|a long time))\b", re.IGNORECASE)


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("When did...", "what date", "which year", "how
    long has...")."""
    return _ASKS.search(query) is not None or _ASKS_LONG.search(query) is not None


def states_time(text: str, query: str = "") -> bool:
    """Whether ``text`` (its first ``HEAD_CHARS`` characters) names a time; for a ``query``
    that asks how long, a duration ("for three years", "since") counts too."""
    head = text[:HEAD_CHARS]
    if _STATES.search(head) is not None:
        return True
    return bool(query) and _ASKS_LONG.search(query) is not None and (
        _DURATION.search(head) is not None)


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_ANY = "(" + "|".join(_MONTHS) + ")"
_YEAR = r"((?:19|20)\d\d)"
# "in June", "on 3 June, 2023", "May 23, 2023", "in 2022", "during August 2023": a month
# after a preposition or a day (so "may" the verb is not one), with or without its year;
# a year alone.
_QUERY_DATE = re.compile(
    r"\b(?:(?:in|during|of|on|around|by|since|until|before|after|early|late|mid)"
    r"(?:[- ](?:early|late|mid))?|\d{1,2}(?:st|nd|rd|th)?)[- ]" + _MONTH_ANY
    + r"(?:,? \d{1,2}(?:st|nd|rd|th)?)?(?:,? " + _YEAR + r")?\b"
    r"|\b" + _MONTH_ANY + r" \d{1,2}(?:st|nd|rd|th)?,? " + _YEAR + r"\b"
    r"|\b" + _MONTH_ANY + r",? " + _YEAR + r"\b"
    r"|\b" + _YEAR + r"\b",
    re.IGNORECASE,
)
_WORDS_DATE = re.compile(r"\b" + _MONTH_ANY + " " + _YEAR + r"\b|\b" + _YEAR + r"\b",
                         re.IGNORECASE)
MAX_QUERY_DATES = 4  # a query naming more dates than this asks about none in particular

Span = tuple[int | None, int | None]  # (month 1-12 or None, year or None)


def query_dates(query: str) -> list[Span]:
    """The months and years ``query`` names, as ``(month, year)`` with None for "any"."""
    out: list[Span] = []
    taken: set[int] = set()
    for m in _QUERY_DATE.finditer(query):
        month_text = m.group(1) or m.group(3) or m.group(5)
        year_text = m.group(2) or m.group(4) or m.group(6) or m.group(7)
        month = _MONTHS.index(month_text.lower()) + 1 if month_text else None
        year = int(year_text) if year_text else None
        if month is None and year is not None and year in taken:
            continue  # the year of a month already taken
        if year is not None:
            taken.add(year)
        span = (month, year)
        if span not in out:
            out.append(span)
    return out if len(out) <= MAX_QUERY_DATES else []


def drawer_spans(occurred: tuple[int, int], resolved_words: str) -> set[Span]:
    """The months a drawer is about: its own ``(month, year)`` and those its resolved
    relative times name (``reldates.resolved_date_words``: "June 2023", "2022")."""
    spans: set[Span] = {occurred}
    for m in _WORDS_DATE.finditer(resolved_words):
        if m.group(1):
            spans.add((_MONTHS.index(m.group(1).lower()) + 1, int(m.group(2))))
        else:
            spans.add((None, int(m.group(3))))
    return spans


def date_matches(asked: list[Span], spans: set[Span]) -> bool:
    """Whether a drawer about ``spans`` is about one of the ``asked`` months or years."""
    for month, year in asked:
        for d_month, d_year in spans:
            if (month is None or month == d_month) and (year is None or year == d_year):
                return True
    return False
