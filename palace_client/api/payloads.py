"""Request arguments built from the Python client's keyword arguments."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def drawer_args(*, text: str, wing: str | None = None, room: str | None = None,
                 tags: Iterable[str] = (), importance: float = 0.5, source: str | None = None,
                 occurred_at: str | None = None, **extra: Any) -> dict[str, Any]:
    """The arguments of one ``memory.remember`` (or ``remember_many`` item): the given ones,
    tags as a list."""
    args: dict[str, Any] = {"text": text, "importance": importance}
    if wing is not None:
        args["wing"] = wing
    if room is not None:
        args["room"] = room
    if isinstance(tags, str):
        args["tags"] = [tags]
    else:
        tag_list = list(tags)
        if tag_list:
            args["tags"] = tag_list
    if source is not None:
        args["source"] = source
    if occurred_at is not None:
        args["occurred_at"] = occurred_at
    args.update(extra)
    return args
