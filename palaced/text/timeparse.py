"""Parsing the times users give: ISO 8601 dates/datetimes or epoch milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from palaced.wire.errors import QUOTE_CHARS, InvalidContent, clip, quote

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
# Years 0001..9999, the range ISO 8601 strings can express.
MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _ONE_MS
MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // _ONE_MS
_YEAR_MONTH = re.compile(r"(\d{4})(?:-(\d{2}))?")
# The longest ISO 8601 form (2023-05-08T13:56:00.123456+02:00) has 32 characters: anything
# much longer is refused before parsing, and never echoed whole.
MAX_CHARS = 64


def parse_when(value: str | int | None, *, now_ms: int) -> int:
    """Turn a point in time into Unix milliseconds.

    Accepts None (meaning ``now_ms``), an integer of epoch milliseconds, or a string: ISO 8601
    dates and datetimes (``2023-05-08``, ``20230508``, ``2023-05-08T13:56:00``, ``...Z``,
    ``...+02:00``, fractional seconds, a space instead of ``T``, week dates), a year
    (``2023``) or year-month (``2023-05``) meaning its first instant, and strings of 11 or more
    digits as epoch milliseconds. Naive values are UTC. Strings may have at most MAX_CHARS
    characters.

    Raises:
        InvalidContent: any other value, a string longer than MAX_CHARS, or a time outside
            years 1-9999.
    """
    if value is None:
        return now_ms
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidContent(
            f"a time must be an ISO 8601 string or epoch milliseconds, not {type(value).__name__}"
        )
    if isinstance(value, int):
        return _check_ms(value, value)
    if len(value) > MAX_CHARS:
        raise InvalidContent(
            f"invalid date {quote(value, 80)}: longer than {MAX_CHARS} characters; use ISO 8601 "
            "such as 2023-05-08T13:56:00Z, or epoch milliseconds",
            details={"value": clip(value, 80), "max_len": MAX_CHARS},
        )
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) >= 11:
        return _check_ms(int(text), value)
    if m := _YEAR_MONTH.fullmatch(text):
        year, month = int(m.group(1)), int(m.group(2) or 1)
        if year < 1 or not 1 <= month <= 12:
            raise InvalidContent(
                f"invalid date {quote(value)}: the year must be 0001-9999 and the month 01-12",
                details={"value": clip(value, QUOTE_CHARS)},
            )
        return (datetime(year, month, 1, tzinfo=UTC) - _EPOCH) // _ONE_MS
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        ms = (parsed - _EPOCH) // _ONE_MS
    except (ValueError, OverflowError) as exc:
        # "Invalid isoformat string: '...'" would quote the value a second time: leave it out.
        why = "" if "isoformat" in str(exc) else f" ({exc})"
        raise InvalidContent(
            f"invalid date {quote(value)}{why}; use ISO 8601 such as 2023-05-08, "
            "2023-05-08T13:56:00Z or 2023-05-08T13:56:00+02:00, or epoch milliseconds",
            details={"value": clip(value, QUOTE_CHARS)},
        ) from None
    return _check_ms(ms, value)


def _check_ms(ms: int, original: object) -> int:
    if not MIN_MS <= ms <= MAX_MS:
        raise InvalidContent(
            f"time {quote(original)} is outside years 1-9999",
            details={"value": clip(str(original), QUOTE_CHARS)},
        )
    return ms


def iso(ms: int | None) -> str | None:
    """Epoch ms as an ISO 8601 UTC string."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
