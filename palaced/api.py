"""The op table: each op's spec (``palaced.specs``) bound to its async handler.

The specs say what every op accepts and are validated by ``specs.decode_args`` before any
handler runs; this module binds them to handlers and holds the field checks handlers share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from palaced.errors import InvalidArgs, InvalidContent, TextTooLarge, UnknownOp, quote
from palaced.registry import validate_name
from palaced.specs import SPECS, OpSpec
from palaced.store import drawers as m
from palaced.vocab import MAX_FIELD_CHARS

if TYPE_CHECKING:
    from palaced.daemon import Daemon

Handler = Callable[["Daemon", "str | None", dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Op:
    """An op the daemon serves: its spec (``palaced.specs``) bound to its handler."""

    spec: OpSpec
    handler: Handler

    @property
    def name(self) -> str:
        return self.spec.name


# -- field checks shared by ops ---------------------------------------------------------------
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


class OpTable:
    """The ops the daemon serves, one per spec in ``palaced.specs.SPECS``."""

    def __init__(self, handlers: Iterable[tuple[str, Handler]]) -> None:
        """Bind each ``(op name, handler)``.

        Raises:
            ValueError: a name has no spec, or a spec has no handler (a programming error).
        """
        self.ops: dict[str, Op] = {}
        for name, handler in handlers:
            if name not in SPECS or name in self.ops:
                raise ValueError(f"handler for unknown or repeated op {name!r}")
            self.ops[name] = Op(SPECS[name], handler)
        missing = sorted(set(SPECS) - set(self.ops))
        if missing:
            raise ValueError(f"ops without a handler: {', '.join(missing)}")

    def get(self, name: Any) -> Op:
        """Raises UnknownOp for names the daemon does not serve."""
        if not isinstance(name, str) or name not in self.ops:
            raise UnknownOp(f"unknown op {quote(name, 80)}",
                            details={"op": quote(name, 80), "known": sorted(self.ops)})
        return self.ops[name]

    def names(self) -> list[str]:
        return sorted(self.ops)
