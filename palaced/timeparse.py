"""Parsing the times users give: ISO 8601 dates/datetimes or epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, date, datetime

from palaced.errors import InvalidContent


def parse_when(value: str | int | None, *, now_ms: int) -> int:
    """Return epoch milliseconds for an ISO 8601 date/datetime (naive = UTC) or epoch ms.

    ``None`` means now.

    Raises:
        InvalidContent: the value is not a date palace understands.
    """
    if value is None:
        return now_ms
    if isinstance(value, bool):
        raise InvalidContent(f"not a date: {value!r}")
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        if len(text) == 10:
            d = date.fromisoformat(text)
            dt = datetime(d.year, d.month, d.day, tzinfo=UTC)
        else:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
    except ValueError:
        raise InvalidContent(
            f"not an ISO 8601 date or datetime: {text[:60]!r} "
            "(examples: 2024-05-08, 2024-05-08T13:56:00Z)",
            details={"value": text[:60]},
        ) from None
    return int(dt.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    """Epoch ms as an ISO 8601 UTC string."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
