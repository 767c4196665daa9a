"""Op arguments: what one argument accepts (``Arg``), the structural bounds every argument
obeys, and the decoder that validates a request's arguments against an op's signature.

Leaf module (stdlib + the wire leaf ``errors``), importable by thin clients. The op specs that
use it are in ``palaced.wire.specs``; the daemon runs :func:`decode_args` on every request before
any handler does, so bad input is refused with INVALID_ARGS and changes nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from palaced.wire.errors import InvalidArgs, quote

# Structural bounds, applied by ``decode_args`` even where a spec names none: every integer
# must fit SQLite's signed 64-bit INTEGER (apsw raises OverflowError beyond it), no string
# or list may be unbounded, and no string holds a NUL (PostgreSQL text cannot: a team palace
# failed a filter with STORAGE_ERROR where SQLite matched nothing).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_ID = INT64_MAX  # drawer, fact and vector ids are positive SQLite rowids
MAX_OFFSET = 1_000_000_000  # paging offsets: far beyond any palace, far below overflow
DEFAULT_MAX_STR = 1_000  # characters of a string (or of each strlist item) without max_len
DEFAULT_MAX_ITEMS = 1_000  # items of a list without max_len
# For arguments a handler bounds with a configured limit and its own typed error (texts:
# max_text_chars and TEXT_TOO_LARGE; batches: max_batch); the frame limit bounds them first.
NO_LIMIT = 1 << 30
MAX_TIME_CHARS = 64  # ISO 8601 times, epoch ms as digits and durations fit easily
_FLOAT_MAX = sys.float_info.max
_INT_KINDS = frozenset({"int", "str|int", "intlist", "any"})


@dataclass(frozen=True)
class Arg:
    """One accepted argument: its type(s), whether required, default and bounds.

    ``min``/``max`` bound numbers (and each item of an intlist); ``max_len`` bounds the
    characters of a string or the items of a list. The decoder narrows, never widens, its
    structural bounds with them: integers always fit in INT64_MIN..INT64_MAX, floats are
    always finite, strings default to DEFAULT_MAX_STR characters (strlist items too) and lists
    to DEFAULT_MAX_ITEMS items, and strings never hold a NUL (INVALID_ARGS) unless ``content``:
    a text whose handler refuses NUL itself, as INVALID_CONTENT (``ops.fields.check_text``).
    """

    kind: str  # "str" | "int" | "float" | "bool" | "strlist" | "intlist" | "any" | "list"
    #            | "str|int" | "str|float"
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    max_len: int | None = None
    help: str = ""  # one line for CLI --help and MCP schemas
    content: bool = False



class Signature(Protocol):
    """What the decoder needs of an op: its name (for messages) and its arguments."""

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Arg]: ...


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    if _is_int(value):
        return bool(-_FLOAT_MAX <= value <= _FLOAT_MAX)  # math.isfinite(10**400) overflows
    return isinstance(value, float) and math.isfinite(value)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return _is_int(value)
    if kind == "float":
        return _is_finite(value)
    if kind == "strlist":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "intlist":
        return isinstance(value, list) and all(_is_int(v) for v in value)
    if kind == "list":
        return isinstance(value, list)
    if kind == "str|float":
        return isinstance(value, str) or _is_finite(value)
    if kind == "str|int":
        return isinstance(value, str) or _is_int(value)
    return False


def _bounds(spec: Arg, value: int | float) -> tuple[float | None, float | None]:
    """The effective (low, high) bounds of a number: the spec's, within the structural ones."""
    lo, hi = spec.min, spec.max
    if _is_int(value) and spec.kind in _INT_KINDS:
        lo = INT64_MIN if lo is None else max(lo, INT64_MIN)
        hi = INT64_MAX if hi is None else min(hi, INT64_MAX)
    return lo, hi


def _in_range(value: int | float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def range_text(lo: float | None, hi: float | None) -> str:
    """``between 1 and 9``, ``at least 1``, ``at most 9`` (or ``any number``)."""
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    if lo is not None:
        return f"at least {lo}"
    if hi is not None:
        return f"at most {hi}"
    return "any number"


def _arg_name(key: Any) -> str:
    return key if isinstance(key, str) and len(key) <= 80 else quote(key, 80)


def decode_args(op: Signature, raw: Any) -> dict[str, Any]:
    """Validate ``raw`` against the op's spec; returns the args with defaults filled in.

    Every number, string and list is bounded (see ``Arg``), so no argument that passes can
    overflow SQLite's integers or grow without limit.

    Raises:
        InvalidArgs: not a map, unknown keys, missing keys, wrong types or out of bounds.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidArgs("args must be a map", details={"op": op.name})
    unknown = sorted(_arg_name(k) for k in raw if k not in op.args)
    if unknown:
        shown = unknown[:20] + ([f"… ({len(unknown)} in all)"] if len(unknown) > 20 else [])
        raise InvalidArgs(
            f"unknown argument(s) for {op.name}: {', '.join(shown)}; "
            f"accepted: {', '.join(sorted(op.args)) or 'none'}",
            details={"op": op.name, "unknown": shown, "accepted": sorted(op.args)},
        )
    out: dict[str, Any] = {}
    for name, spec in op.args.items():
        if name not in raw or raw[name] is None:
            if spec.required:
                raise InvalidArgs(f"{op.name}: missing required argument {name!r}",
                                  details={"op": op.name, "missing": [name]})
            out[name] = spec.default
            continue
        out[name] = _check_value(op, name, spec, raw[name])
    return out


def _check_value(op: Signature, name: str, spec: Arg, value: Any) -> Any:
    """``value`` if it has the spec's type and lies within its bounds; else InvalidArgs."""
    where = f"{op.name}: argument {name!r}"
    if not _type_ok(spec.kind, value):
        if isinstance(value, float) and not math.isfinite(value) and "float" in spec.kind:
            raise InvalidArgs(f"{where} must be a finite number, got {value}",
                              details={"op": op.name, "arg": name, "expected": spec.kind,
                                       "got": repr(value)})
        raise InvalidArgs(
            f"{where} must be {spec.kind}, got {type(value).__name__}",
            details={"op": op.name, "arg": name, "expected": spec.kind,
                     "got": type(value).__name__},
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi = _bounds(spec, value)
        if not _in_range(value, lo, hi):
            raise InvalidArgs(f"{where} must be {range_text(lo, hi)}, got {quote(value, 40)}",
                              details={"op": op.name, "arg": name, "min": lo, "max": hi})
    elif isinstance(value, str):
        limit = DEFAULT_MAX_STR if spec.max_len is None else spec.max_len
        if len(value) > limit:
            raise InvalidArgs(f"{where} is longer than {limit} characters ({len(value)})",
                              details={"op": op.name, "arg": name, "max_len": limit,
                                       "len": len(value)})
        if not spec.content:
            _refuse_nul(op, name, value, where)
    elif isinstance(value, list):
        limit = DEFAULT_MAX_ITEMS if spec.max_len is None else spec.max_len
        if len(value) > limit:
            raise InvalidArgs(f"{where} has more than {limit} items ({len(value)})",
                              details={"op": op.name, "arg": name, "max_len": limit,
                                       "len": len(value)})
        for i, item in enumerate(value):
            _check_item(op, name, spec, i, item)
    return value


def _check_item(op: Signature, name: str, spec: Arg, i: int, item: Any) -> None:
    where = f"{op.name}: item {i} of argument {name!r}"
    if spec.kind == "intlist":
        lo, hi = _bounds(spec, item)
        if not _in_range(item, lo, hi):
            raise InvalidArgs(f"{where} must be {range_text(lo, hi)}, got {quote(item, 40)}",
                              details={"op": op.name, "arg": name, "index": i,
                                       "min": lo, "max": hi})
    elif spec.kind == "strlist":
        if len(item) > DEFAULT_MAX_STR:
            raise InvalidArgs(f"{where} is longer than {DEFAULT_MAX_STR} characters "
                              f"({len(item)})", details={"op": op.name, "arg": name, "index": i,
                                                         "max_len": DEFAULT_MAX_STR,
                                                         "len": len(item)})
        _refuse_nul(op, name, item, where)


def _refuse_nul(op: Signature, name: str, value: str, where: str) -> None:
    """Raises InvalidArgs when string ``value`` (argument ``name``) holds a NUL character."""
    if "\x00" in value:
        raise InvalidArgs(f"{where} contains a NUL character",
                          details={"op": op.name, "arg": name, "at": value.index("\x00")})


def client_bounds(arg: Arg) -> tuple[float | None, float | None]:
    """The ``(min, max)`` of ``arg`` as a client states it (CLI ranges, JSON Schemas).

    A maximum at or beyond 2**53 is left out: it is a structural limit (``MAX_ID``, the int64
    range that every integer has anyway) rather than a real one, and JSON clients cannot even
    represent it exactly as a number. The daemon still enforces it.
    """
    hi = arg.max if arg.max is not None and arg.max < 2**53 else None
    return arg.min, hi
