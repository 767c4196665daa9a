"""Questions that ask "when", and memories that say when.

"When did Caroline go to the support group?" is answered by the memory that states a time
("I went to a support group yesterday", "...last Friday", "...in May 2023"), not by the
others that mention the group. ``asks_when`` recognises such a question; ``states_time``
recognises a text that names a time: a year, a month with a day or a year, a weekday, or a
relative expression (yesterday, last week, three days ago, since, next month...).
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


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("When did...", "what date", "which year"...)."""
    return _ASKS.search(query) is not None


def states_time(text: str) -> bool:
    """Whether ``text`` (its first ``HEAD_CHARS`` characters) names a time."""
    return _STATES.search(text[:HEAD_CHARS]) is not None
