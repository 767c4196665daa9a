"""The op table: op name -> argument spec + async handler.

The only module that knows both wire shapes and domain calls. Arguments are validated by one
small generic decoder (required keys, unknown keys, types, bounds) before any handler runs, so
bad input is refused with INVALID_ARGS and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from palaced.errors import InvalidArgs, InvalidContent, TextTooLarge, UnknownOp
from palaced.registry import validate_name
from palaced.store import memories as m

if TYPE_CHECKING:
    from palaced.daemon import Daemon

Handler = Callable[["Daemon", "str | None", dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Arg:
    """One accepted argument: its type(s), whether required, default and bounds."""

    kind: str  # "str" | "int" | "float" | "bool" | "strlist" | "intlist" | "any" | "list"
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    max_len: int | None = None


@dataclass(frozen=True)
class Op:
    name: str
    handler: Handler
    args: dict[str, Arg] = field(default_factory=dict)
    palace: str = "none"  # "none" | "required"
    doc: str = ""


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value))
    if kind == "strlist":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "intlist":
        return isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
    if kind == "list":
        return isinstance(value, list)
    if kind == "str|float":
        return isinstance(value, str) or _type_ok("float", value)
    if kind == "str|int":
        return isinstance(value, str) or _type_ok("int", value)
    return False


def decode_args(op: Op, raw: Any) -> dict[str, Any]:
    """Validate ``raw`` against the op's spec; returns the args with defaults filled in.

    Raises:
        InvalidArgs: not a map, unknown keys, missing keys, wrong types or out of bounds.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidArgs("args must be a map", details={"op": op.name})
    unknown = sorted(str(k) for k in raw if k not in op.args)
    if unknown:
        raise InvalidArgs(
            f"unknown argument(s) for {op.name}: {', '.join(unknown)}; "
            f"accepted: {', '.join(sorted(op.args)) or 'none'}",
            details={"op": op.name, "unknown": unknown, "accepted": sorted(op.args)},
        )
    out: dict[str, Any] = {}
    for name, spec in op.args.items():
        if name not in raw or raw[name] is None:
            if spec.required:
                raise InvalidArgs(f"{op.name}: missing required argument {name!r}",
                                  details={"op": op.name, "missing": [name]})
            out[name] = spec.default
            continue
        value = raw[name]
        if not _type_ok(spec.kind, value):
            raise InvalidArgs(
                f"{op.name}: argument {name!r} must be {spec.kind}, got {type(value).__name__}",
                details={"op": op.name, "arg": name, "expected": spec.kind,
                         "got": type(value).__name__},
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            if (spec.min is not None and value < spec.min) or (
                spec.max is not None and value > spec.max
            ):
                raise InvalidArgs(
                    f"{op.name}: argument {name!r} must be between {spec.min} and {spec.max}",
                    details={"op": op.name, "arg": name, "min": spec.min, "max": spec.max},
                )
        if isinstance(value, str | list) and spec.max_len is not None and (
            len(value) > spec.max_len
        ):
            raise InvalidArgs(
                f"{op.name}: argument {name!r} is longer than {spec.max_len}",
                details={"op": op.name, "arg": name, "max_len": spec.max_len},
            )
        out[name] = value
    return out


# -- field checks shared by ops ---------------------------------------------------------------
def check_label(value: str | None, what: str) -> str | None:
    """Wing/room/tag/source labels: non-empty, no control characters, at most 200 chars.

    Raises:
        InvalidArgs: the label is empty or contains control characters.
    """
    if value is None:
        return None
    stripped = value.strip()
    if not stripped or len(stripped) > 200 or any(ord(ch) < 32 for ch in stripped):
        raise InvalidArgs(f"{what} must be 1-200 printable characters",
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
    """Registry of ops; ``api_ops()`` builds the daemon's table."""

    def __init__(self) -> None:
        self.ops: dict[str, Op] = {}

    def add(self, op: Op) -> None:
        self.ops[op.name] = op

    def get(self, name: Any) -> Op:
        """Raises UnknownOp for names the daemon does not serve."""
        if not isinstance(name, str) or name not in self.ops:
            raise UnknownOp(f"unknown op {str(name)[:80]!r}",
                            details={"op": str(name)[:80], "known": sorted(self.ops)})
        return self.ops[name]

    def names(self) -> list[str]:
        return sorted(self.ops)
