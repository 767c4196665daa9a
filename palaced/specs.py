"""Op specs: every op's name and arguments (types, bounds, defaults), and their decoder.

Leaf module (stdlib + the wire leaves ``errors`` and ``vocab``), importable by thin clients:
this is the one definition of what each op accepts. The daemon validates requests with
:func:`decode_args` against :data:`SPECS` before any handler runs (bad input is refused with
INVALID_ARGS and changes nothing); the CLI, the Python client and the MCP bridge derive their
options, keywords and JSON Schemas from the same specs, so they cannot drift from the daemon.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from palaced.errors import InvalidArgs, UnknownOp, quote
from palaced.vocab import (
    DEFAULT_IMPORTANCE,
    DEFAULT_PRUNE_THRESHOLD,
    HEALTH_LIST_LIMIT,
    MAX_DEPTH,
    MAX_FIELD_CHARS,
    MAX_LIMIT,
    MAX_NAME_CHARS,
    MAX_PATH_DEPTH,
    MAX_PREDICATE_CHARS,
    MAX_VALUE_CHARS,
    STALE_DAYS,
)

# Structural bounds, applied by ``decode_args`` even where a spec names none: every integer
# must fit SQLite's signed 64-bit INTEGER (apsw raises OverflowError beyond it), and no string
# or list may be unbounded.
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
    to DEFAULT_MAX_ITEMS items.
    """

    kind: str  # "str" | "int" | "float" | "bool" | "strlist" | "intlist" | "any" | "list"
    #            | "str|int" | "str|float"
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    max_len: int | None = None
    help: str = ""  # one line for CLI --help and MCP schemas


@dataclass(frozen=True)
class OpSpec:
    """What one op accepts: its arguments, whether it needs a palace, and how it behaves.

    ``read_only`` ops change nothing; ``idempotent`` ops give the same outcome when repeated
    (a client may resend them after a lost reply).
    """

    name: str
    args: Mapping[str, Arg] = field(default_factory=dict)
    palace: str = "none"  # "none" | "required"
    doc: str = ""
    read_only: bool = False
    idempotent: bool = False


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


def decode_args(op: OpSpec, raw: Any) -> dict[str, Any]:
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


def _check_value(op: OpSpec, name: str, spec: Arg, value: Any) -> Any:
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
    elif isinstance(value, list):
        limit = DEFAULT_MAX_ITEMS if spec.max_len is None else spec.max_len
        if len(value) > limit:
            raise InvalidArgs(f"{where} has more than {limit} items ({len(value)})",
                              details={"op": op.name, "arg": name, "max_len": limit,
                                       "len": len(value)})
        for i, item in enumerate(value):
            _check_item(op, name, spec, i, item)
    return value


def _check_item(op: OpSpec, name: str, spec: Arg, i: int, item: Any) -> None:
    where = f"{op.name}: item {i} of argument {name!r}"
    if spec.kind == "intlist":
        lo, hi = _bounds(spec, item)
        if not _in_range(item, lo, hi):
            raise InvalidArgs(f"{where} must be {range_text(lo, hi)}, got {quote(item, 40)}",
                              details={"op": op.name, "arg": name, "index": i,
                                       "min": lo, "max": hi})
    elif spec.kind == "strlist" and len(item) > DEFAULT_MAX_STR:
        raise InvalidArgs(f"{where} is longer than {DEFAULT_MAX_STR} characters ({len(item)})",
                          details={"op": op.name, "arg": name, "index": i,
                                   "max_len": DEFAULT_MAX_STR, "len": len(item)})


# -- the specs --------------------------------------------------------------------------------
MAX_TTL_S = 3_155_760_000  # 100 years of 365.25 days: "forever" is no ttl, not a huge one
MAX_CONSOLIDATE_IDS = 10_000
MAX_QUERY_CHARS = 10_000
MAX_BUDGET = 200_000
MAX_TOP_K = 1_000

_LABEL = Arg("str", max_len=MAX_FIELD_CHARS)
_TAGS = Arg("strlist", default=[], max_len=64)
_WHEN = Arg("str|int", max_len=MAX_TIME_CHARS)
_ID = Arg("int", required=True, min=1, max=MAX_ID)
_NAME = Arg("str", required=True, max_len=MAX_NAME_CHARS)
_PREDICATE = Arg("str", required=True, max_len=MAX_PREDICATE_CHARS)
_THRESHOLD = Arg("float", default=DEFAULT_PRUNE_THRESHOLD, min=0.0, max=1.0)

DRAWER_ARGS: dict[str, Arg] = {
    "text": Arg("str", required=True, max_len=NO_LIMIT),
    "wing": _LABEL,
    "room": _LABEL,
    "tags": _TAGS,
    "importance": Arg("str|float", default=DEFAULT_IMPORTANCE, max_len=64),
    "source": _LABEL,
    "occurred_at": _WHEN,
    "ttl": Arg("str|int", min=1, max=MAX_TTL_S, max_len=MAX_TIME_CHARS),
    "expires_at": _WHEN,
    "supersedes": Arg("int", min=1, max=MAX_ID),
}
SOURCE_ARGS: dict[str, Arg] = {
    "valid_from": _WHEN,
    "confidence": Arg("float", default=1.0, min=0.0, max=1.0),
    "source_drawer": Arg("int", min=1, max=MAX_ID),
    "source_url": Arg("str", max_len=MAX_VALUE_CHARS),
    "source_agent": Arg("str", max_len=MAX_NAME_CHARS),
}

_R = "required"
_ALL: tuple[OpSpec, ...] = (
    # daemon
    OpSpec("daemon.status", read_only=True, idempotent=True,
           doc="The daemon's state, model and palaces."),
    OpSpec("daemon.stop", idempotent=True, doc="Stop the daemon after in-flight requests."),
    # palaces
    OpSpec("palace.list", read_only=True, idempotent=True, doc="Every palace of this daemon."),
    OpSpec("palace.create", {"exist_ok": Arg("bool", default=False)}, palace=_R,
           doc="Create a palace."),
    OpSpec("palace.delete", palace=_R, doc="Delete a palace and all its drawers."),
    OpSpec("palace.info", palace=_R, read_only=True, idempotent=True,
           doc="Counts, embedder and index state of a palace."),
    OpSpec("palace.reembed", palace=_R, idempotent=True,
           doc="Re-embed every drawer with the daemon's current model."),
    # drawers
    OpSpec("memory.remember", {**DRAWER_ARGS, "dedup": Arg("bool", default=None)}, palace=_R,
           idempotent=True, doc="Store one drawer (the same text again returns the same id)."),
    OpSpec("memory.remember_many", {"items": Arg("list", required=True, max_len=NO_LIMIT),
                                    "dedup": Arg("bool", default=False)}, palace=_R,
           idempotent=True, doc="Store many drawers in one transaction."),
    OpSpec("memory.recall", {
        "query": Arg("str", required=True, max_len=MAX_QUERY_CHARS),
        "top_k": Arg("int", default=10, min=1, max=MAX_TOP_K),
        "wing": _LABEL,
        "room": _LABEL,
        "tags": _TAGS,
        "levels": Arg("intlist", default=[0, 1, 2, 3], max_len=4, min=0, max=3),
        "budget": Arg("int", default=1500, min=0, max=MAX_BUDGET),
        "deep": Arg("bool", default=False),
        "include_superseded": Arg("bool", default=False),
    }, palace=_R, read_only=True, idempotent=True,
        doc="Ranked drawers and L0-L3 context packed into a token budget."),
    OpSpec("memory.wake_up", {"budget": Arg("int", default=800, min=0, max=MAX_BUDGET)},
           palace=_R, read_only=True, idempotent=True,
           doc="Identity and essential drawers for the start of a session."),
    OpSpec("memory.get", {"id": _ID}, palace=_R, read_only=True, idempotent=True,
           doc="One drawer in full."),
    OpSpec("memory.forget", {"id": _ID}, palace=_R, doc="Delete one drawer."),
    OpSpec("memory.list", {
        "wing": _LABEL,
        "room": _LABEL,
        "tags": _TAGS,
        "limit": Arg("int", default=50, min=1, max=1000),
        "offset": Arg("int", default=0, min=0, max=MAX_OFFSET),
    }, palace=_R, read_only=True, idempotent=True, doc="Drawers, newest first, filtered."),
    # knowledge graph
    OpSpec("graph.assert", {
        "subject": _NAME,
        "predicate": _PREDICATE,
        "object": Arg("str", required=True, max_len=MAX_VALUE_CHARS),
        "literal": Arg("bool", default=False),
        **SOURCE_ARGS,
    }, palace=_R, doc="Record a fact subject-predicate-object valid from a time."),
    OpSpec("graph.link", {"a": _NAME, "relation": _PREDICATE, "b": _NAME, **SOURCE_ARGS},
           palace=_R, doc="Relate two concepts (part_of, depends_on, related_to, ...)."),
    OpSpec("graph.invalidate", {"id": _ID, "at": _WHEN}, palace=_R,
           doc="End an active fact at a time (default now)."),
    OpSpec("graph.query", {"subject": _NAME, "as_of": _WHEN}, palace=_R, read_only=True,
           idempotent=True, doc="Active facts about an entity, or those valid at as_of."),
    OpSpec("graph.timeline", {"subject": _NAME}, palace=_R, read_only=True, idempotent=True,
           doc="Every fact about an entity, closed ones included, oldest first."),
    OpSpec("graph.neighbors", {
        "entity": _NAME,
        "depth": Arg("int", default=1, min=0, max=MAX_DEPTH),
        "relation": Arg("str", max_len=MAX_PREDICATE_CHARS),
        "as_of": _WHEN,
        "max_nodes": Arg("int", default=200, min=1, max=MAX_LIMIT),
    }, palace=_R, read_only=True, idempotent=True,
        doc="Entities within depth hops, with the facts between them."),
    OpSpec("graph.path", {
        "a": _NAME,
        "b": _NAME,
        "max_depth": Arg("int", default=6, min=1, max=MAX_PATH_DEPTH),
        "as_of": _WHEN,
    }, palace=_R, read_only=True, idempotent=True,
        doc="A shortest chain of facts linking two entities."),
    OpSpec("graph.search", {
        "query": Arg("str", required=True, max_len=MAX_QUERY_CHARS),
        "limit": Arg("int", default=20, min=1, max=MAX_LIMIT),
    }, palace=_R, read_only=True, idempotent=True,
        doc="Full-text search over entity names, definitions and labels."),
    # lifecycle
    OpSpec("memory.decay", palace=_R, idempotent=True,
           doc="Recompute the decayed weight of every drawer."),
    OpSpec("memory.prune", {"threshold": _THRESHOLD, "dry_run": Arg("bool", default=False)},
           palace=_R, idempotent=True,
           doc="Delete low/medium drawers whose weight fell below threshold."),
    OpSpec("memory.consolidate", {
        "room": Arg("str", required=True, max_len=MAX_FIELD_CHARS),
        "summary": Arg("str", required=True, max_len=NO_LIMIT),
        "wing": _LABEL,
        "ids": Arg("intlist", max_len=MAX_CONSOLIDATE_IDS, min=1, max=MAX_ID),
    }, palace=_R, doc="Write a summary drawer and mark its sources consolidated into it."),
    OpSpec("memory.health", {
        "threshold": _THRESHOLD,
        "stale_days": Arg("float", default=STALE_DAYS, min=0.0, max=36_500.0),
        "limit": Arg("int", default=HEALTH_LIST_LIMIT, min=1, max=1000),
    }, palace=_R, read_only=True, idempotent=True,
        doc="Per-room stale drawers, duplicate candidates and consolidation hints."),
)
SPECS: dict[str, OpSpec] = {spec.name: spec for spec in _ALL}


def spec_of(name: Any) -> OpSpec:
    """The spec of op ``name``.

    Raises:
        UnknownOp: the daemon serves no op of that name.
    """
    if not isinstance(name, str) or name not in SPECS:
        raise UnknownOp(f"unknown op {quote(name, 80)}",
                        details={"op": quote(name, 80), "known": sorted(SPECS)})
    return SPECS[name]
