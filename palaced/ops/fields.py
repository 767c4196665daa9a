"""Field checks shared by op handlers: what the generic decoder (``palaced.wire.args``) cannot
check (labels, texts, durations, times), and the drawer and filter values built from them.

Every failure is a typed PalaceError (INVALID_ARGS, INVALID_CONTENT or TEXT_TOO_LARGE).
"""

from __future__ import annotations

import math
import time
from typing import Any

from palaced.palace.layout import validate_name
from palaced.store.rows import drawers as m
from palaced.store.rows.edits import Edit
from palaced.text.rules import parse_importance
from palaced.text.timeparse import parse_when
from palaced.text.topics import extract_topics
from palaced.wire.args import MAX_TIME_CHARS, decode_args
from palaced.wire.errors import InvalidArgs, InvalidContent, PalaceError, TextTooLarge, quote
from palaced.wire.specs import MAX_TTL_S, REMEMBER_MANY_ITEM
from palaced.wire.vocab import MAX_FIELD_CHARS


def check_label(value: str | None, what: str) -> str | None:
    """Wing/room/tag/source labels: non-empty, no control characters, at most MAX_FIELD_CHARS.

    Raises:
        InvalidArgs: the label is empty or contains control characters.
    """
    if value is None:
        return None
    stripped = value.strip()
    if not stripped or len(stripped) > MAX_FIELD_CHARS or any(ord(ch) < 32 for ch in stripped):
        raise InvalidArgs(f"{what} must be 1-{MAX_FIELD_CHARS} printable characters",
                          details={"arg": what, "value": value[:80]})
    return stripped


def check_text(text: str, limit: int) -> str:
    """Normalise a drawer text and enforce the size limit.

    Raises:
        InvalidContent: empty or contains NUL bytes.
        TextTooLarge: longer than ``limit`` characters.
    """
    if "\x00" in text:
        raise InvalidContent("text contains NUL bytes", details={"arg": "text"})
    if len(text) > limit:
        raise TextTooLarge(f"text of {len(text)} characters exceeds the {limit} limit",
                           details={"size": len(text), "limit": limit})
    norm = m.normalise_text(text)
    if not norm:
        raise InvalidContent("text is empty", details={"arg": "text"})
    return norm


def need_palace(name: str | None) -> str:
    """Raises InvalidArgs when an op that needs a palace got none; validates the name."""
    if name is None:
        raise InvalidArgs("this op needs a palace", details={"arg": "palace"})
    return validate_name(name)


def check_query(query: str) -> str:
    """Raises InvalidArgs when a search query contains NUL bytes."""
    if "\x00" in query:
        raise InvalidArgs("query contains NUL bytes", details={"arg": "query"})
    return query


def drawer_from_args(max_text_chars: int, args: dict[str, Any], now: int) -> m.NewDrawer:
    """Validate drawer fields into a NewDrawer (``now``: epoch ms, for ttl and relative times).

    Raises:
        InvalidArgs, InvalidContent, TextTooLarge.
    """
    text = check_text(args["text"], max_text_chars)
    tags = tuple(dict.fromkeys(t for t in (check_label(t, "tag") for t in args.get("tags") or ())
                               if t))
    occurred = when(args, "occurred_at", now) if args.get("occurred_at") else None
    expires = None
    if args.get("ttl") is not None and args.get("expires_at") is not None:
        raise InvalidArgs("give ttl or expires_at, not both", details={"arg": "ttl"})
    if args.get("ttl") is not None:
        expires = now + parse_ttl(args["ttl"]) * 1000
    elif args.get("expires_at") is not None:
        expires = when(args, "expires_at", now)
    return m.NewDrawer(
        text=text,
        wing=check_label(args.get("wing"), "wing") or m.DEFAULT_WING,
        room=check_label(args.get("room"), "room") or m.DEFAULT_ROOM,
        tags=tags,
        importance=parse_importance(args.get("importance", 0.5)),
        source=check_label(args.get("source"), "source"),
        occurred_ms=occurred,
        expires_ms=expires,
        ttl_ms=None if expires is None else max(expires - now, 0),
        topics=tuple(extract_topics(text)),
        supersedes=args.get("supersedes"),
    )


def edit_from_args(max_text_chars: int, args: dict[str, Any]) -> Edit:
    """Validate the fields of a ``memory.update`` into an Edit (None: keep the field).

    Raises:
        InvalidArgs: no field to change, a bad label or importance; InvalidContent,
            TextTooLarge: a bad text.
    """
    fields = [k for k in ("text", "wing", "room", "tags", "importance") if args.get(k) is not None]
    if not fields:
        # ``args`` lists every argument the message names, so that a client names its own
        # flags for them (the CLI's ``--tag``), not only the first.
        raise InvalidArgs("nothing to update: give text, wing, room, tags or importance",
                          details={"arg": "text",
                                   "args": ["text", "wing", "room", "tags", "importance"]})
    tags = args.get("tags")
    return Edit(
        text=None if args.get("text") is None else check_text(args["text"], max_text_chars),
        wing=check_label(args.get("wing"), "wing"),
        room=check_label(args.get("room"), "room"),
        tags=None if tags is None else tuple(dict.fromkeys(
            t for t in (check_label(t, "tag") for t in tags) if t)),
        importance=None if args.get("importance") is None
        else parse_importance(args["importance"]),
    )


def drawers_from_items(max_text_chars: int, max_batch: int, items: list[Any], now: int
                       ) -> list[m.NewDrawer]:
    """Validate a batch of drawers (maps with the ``remember`` arguments); slow for big
    batches (topic extraction): call it in a worker thread.

    Raises:
        InvalidArgs: more than ``max_batch`` items; or, like InvalidContent and TextTooLarge,
            an item is invalid (``details["index"]`` and the message name it).
    """
    if len(items) > max_batch:
        raise InvalidArgs(f"at most {max_batch} items per batch", details={"items": len(items)})
    out = []
    for i, raw in enumerate(items):
        try:
            out.append(drawer_from_args(max_text_chars, decode_args(REMEMBER_MANY_ITEM, raw),
                                        now))
        except PalaceError as exc:
            exc.details["index"] = i
            exc.message = f"item {i}: {exc.message}"
            exc.args = (exc.message,)
            raise
    return out


def filters_from_args(args: dict[str, Any]) -> m.Filters:
    """The wing/room/tags filters of a recall or list, and the dates (``since``, ``until``:
    the drawer's date, ``until`` excluded) and author (``created_by``) of the ops that take
    them.

    Raises:
        InvalidArgs: a label is empty or contains control characters, or a malformed
            duration. InvalidContent: a date is no ISO 8601 time or epoch milliseconds.
    """
    tags = tuple(t for t in (check_label(t, "tag") for t in args.get("tags") or ()) if t)
    # A time, or a duration back from now as `palace audit --since` takes (7d).
    now = int(time.time() * 1000)
    since, until = (since_ms(args.get(key), now, key) for key in ("since", "until"))
    return m.Filters(
        wing=check_label(args.get("wing"), "wing"),
        room=check_label(args.get("room"), "room"),
        tags=tags,
        since_ms=since,
        until_ms=until,
        created_by=check_label(args.get("created_by"), "created_by"),
    )


def when(args: dict[str, Any], key: str, now: int) -> int | None:
    """The time argument ``key`` as epoch ms, or None when absent.

    Raises:
        InvalidContent: not an ISO 8601 time or epoch milliseconds within years 1-9999; the
            message starts with ``key`` and ``details["arg"]`` is ``key``, so that a client
            can name its own flag for it (the CLI's ``--when`` for ``occurred_at``).
    """
    value = args.get(key)
    if value is None:
        return None
    try:
        return parse_when(value, now_ms=now)
    except InvalidContent as exc:
        raise InvalidContent(f"{key}: {exc.message}", details={**exc.details, "arg": key}
                             ) from None


def since_ms(value: str | int | None, now: int, arg: str = "since") -> int | None:
    """``palace.audit``'s ``since`` (or the argument ``arg``: a bulk forget's ``older_than``,
    a recall's or list's ``since`` and ``until``): a time (ISO 8601, epoch ms) or a duration
    back from ``now`` (``90m``, ``12h``, ``7d``: a number and a unit).

    Raises:
        InvalidArgs: a malformed duration. InvalidContent: a malformed time.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip()[-1:].lower() in ("s", "m", "h", "d", "w"):
        try:
            return now - parse_ttl(value) * 1000
        except InvalidArgs:
            # parse_ttl's own words name ``ttl`` and offer bare seconds, which ``since``
            # reads as epoch milliseconds.
            raise InvalidArgs(
                f"bad {arg} {quote(value, 60)}: use a duration back from now (90m, 12h, 7d) "
                "or a time (ISO 8601 such as 2023-05-08, or epoch milliseconds)",
                details={"arg": arg, "value": quote(value, 60)}) from None
    return when({arg: value}, arg, now)


_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_ttl(value: str | int) -> int:
    """A time-to-live in whole seconds, 1 to MAX_TTL_S (100 years).

    Accepts an integer of seconds, or a string: an integer, or a number with a unit
    (``90s``, ``15m``, ``12h``, ``7d``, ``2w``, ``1.5h``).

    Raises:
        InvalidArgs: anything else: not a number, infinite or NaN, under one second, or
            longer than 100 years.
    """
    seconds: float
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and len(value) <= MAX_TIME_CHARS:
        text = value.strip().lower()
        try:
            if text[-1:] in _TTL_UNITS:
                seconds = float(text[:-1]) * _TTL_UNITS[text[-1]]
            else:
                seconds = int(text)
        except ValueError:
            seconds = math.nan
    else:
        seconds = math.nan
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise InvalidArgs(f"bad ttl {quote(value, 60)}: use seconds or 90s/15m/12h/7d/2w",
                          details={"arg": "ttl", "value": quote(value, 60)})
    if seconds > MAX_TTL_S:
        raise InvalidArgs(f"ttl {quote(value, 60)} is longer than 100 years "
                          f"({MAX_TTL_S} seconds); omit ttl to keep a memory",
                          details={"arg": "ttl", "max_s": MAX_TTL_S})
    if int(seconds) <= 0:
        raise InvalidArgs("ttl must be at least one second", details={"arg": "ttl"})
    return int(seconds)
