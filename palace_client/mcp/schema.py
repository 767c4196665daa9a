"""MCP tool declarations: ``ToolSpec``, input schemas derived from the op specs, argument checks.

A tool property that is an argument of the tool's op is declared with ``param`` (its
agent-facing description and, optionally, narrowing) and its JSON Schema is generated from the
op's ``palaced.wire.specs.Arg``: type, bounds, lengths and default come from the one definition the
daemon validates against, so the schemas cannot drift from the daemon. Narrowing may only make
a schema stricter (a union kind reduced to one member, an enum, a minimum length, tighter
bounds); ``op_property`` refuses anything else.

The daemon validates every request (``INVALID_ARGS``); ``check_arguments`` checks the same
schema first (JSON types, enums, bounds, lengths) so that an agent's mistake is worded after
the tool's arguments and costs no round trip.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from palaced.wire.args import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_STR,
    NO_LIMIT,
    Arg,
    client_bounds,
    range_text,
)
from palaced.wire.specs import SPECS

# Op argument kinds as JSON Schema types (union kinds must be narrowed to one member first).
JSON_TYPES: dict[str, str] = {"str": "string", "int": "integer", "float": "number",
                              "bool": "boolean", "strlist": "array", "intlist": "array",
                              "list": "array"}
# Keywords a tool may add to a derived schema: each only narrows what the op accepts.
NARROWING = frozenset({"minLength", "enum", "minimum", "maximum"})


def op_property(op: str, arg: str, description: str = "", *, kind: str | None = None,
                **narrow: Any) -> dict[str, Any]:
    """The JSON Schema of argument ``arg`` of op ``op``, generated from its spec.

    A union kind (``"str|float"``) is an ``anyOf`` of its members, each narrowed by the
    keywords that apply to its type (``enum`` and ``minLength`` to strings, ``minimum`` and
    ``maximum`` to numbers): importance is a preset name or a number.

    Args:
        description: the agent-facing text (default: the argument's ``help``).
        kind: the argument's kind or some of its members (``"str"`` of ``"str|int"``);
            JSON clients and models handle a single type best.
        narrow: ``minLength``, ``enum``, ``minimum``, ``maximum``, each at least as strict
            as the spec.

    Raises:
        KeyError: no such op or argument (a renamed argument fails when the tools load).
        ValueError: ``kind`` is not made of members of the argument's kind, or ``narrow``
            widens the spec, names another keyword or applies to no member.
    """
    spec = SPECS[op].args[arg]
    kind = kind or spec.kind
    members = kind.split("|")
    if any(m not in spec.kind.split("|") or m not in JSON_TYPES for m in members):
        raise ValueError(f"{op} {arg}: cannot state kind {kind!r} of {spec.kind!r} in JSON")
    where = f"{op} {arg}"
    schema: dict[str, Any]
    if len(members) == 1:
        schema = _typed_schema(spec, members[0])
        _narrow(schema, narrow, where)
    else:
        alternatives = [_typed_schema(spec, m) for m in members]
        for key in narrow:
            if not any(key in _APPLIES.get(a["type"], ()) for a in alternatives):
                raise ValueError(f"{where}: {key!r} applies to no member of {kind!r}")
        for alt in alternatives:
            _narrow(alt, {k: v for k, v in narrow.items()
                          if k in _APPLIES.get(alt["type"], ())}, where)
        schema = {"anyOf": alternatives}
    if spec.default is not None:
        schema["default"] = json.loads(json.dumps(spec.default))  # a copy, JSON-clean
    text = description or spec.help
    if text:
        schema["description"] = text
    return schema


# Which narrowing keywords apply to which JSON type (for the members of a union).
_APPLIES: dict[str, frozenset[str]] = {
    "string": frozenset({"minLength", "enum"}),
    "integer": frozenset({"minimum", "maximum"}),
    "number": frozenset({"minimum", "maximum"}),
}


def _typed_schema(spec: Arg, kind: str) -> dict[str, Any]:
    """The type, bounds and lengths of ``spec`` stated as the JSON type of ``kind``."""
    schema: dict[str, Any] = {"type": JSON_TYPES[kind]}
    lo, hi = client_bounds(spec)
    if kind in ("int", "float"):
        schema.update(_range(lo, hi))
    elif kind == "str" and spec.max_len != NO_LIMIT:
        schema["maxLength"] = DEFAULT_MAX_STR if spec.max_len is None else spec.max_len
    elif kind in ("strlist", "intlist", "list"):
        if kind == "strlist":
            schema["items"] = {"type": "string", "maxLength": DEFAULT_MAX_STR}
        elif kind == "intlist":
            schema["items"] = {"type": "integer", **_range(lo, hi)}
        if spec.max_len != NO_LIMIT:
            schema["maxItems"] = DEFAULT_MAX_ITEMS if spec.max_len is None else spec.max_len
    return schema


def _range(lo: float | None, hi: float | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def _narrow(schema: dict[str, Any], narrow: Mapping[str, Any], where: str) -> None:
    """Add the ``narrow`` keywords to ``schema``; refuse any that would widen it."""
    for key, value in narrow.items():
        if key not in NARROWING:
            raise ValueError(f"{where}: {key!r} is not a narrowing keyword")
        if key == "minimum" and schema.get("minimum", value) > value:
            raise ValueError(f"{where}: minimum {value} is below the op's")
        if key == "maximum" and schema.get("maximum", value) < value:
            raise ValueError(f"{where}: maximum {value} is above the op's")
        if key == "enum" and schema["type"] == "string" and any(
                not isinstance(v, str) or len(v) > schema.get("maxLength", len(v)) for v in value):
            raise ValueError(f"{where}: an enum value does not fit the op's argument")
        schema[key] = list(value) if key == "enum" else value


# Checked by ``check_arguments`` (and the daemon) but left out of ``tools/list``: every token
# of it is paid in every agent session, and these limits (200-character labels, 10,000-
# character queries, 64 tags...) are far beyond what a call needs, so they only cost tokens
# (151 of them over the nine tools, measured with cl100k). So are defaults that say "nothing":
# false, "" and [] (an absent flag is off, an absent list empty).
UNPUBLISHED = frozenset({"maxLength", "maxItems"})
_EMPTY_DEFAULTS: tuple[Any, ...] = (False, "", [])


def published(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (a property's) as ``tools/list`` shows it (see ``UNPUBLISHED``), a copy."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in UNPUBLISHED or (key == "default" and any(
                value == e and type(value) is type(e) for e in _EMPTY_DEFAULTS)):
            continue
        if isinstance(value, Mapping):
            out[key] = published(value)
        elif key == "anyOf":
            out[key] = [published(v) for v in value]
        else:
            out[key] = json.loads(json.dumps(value))
    return out


@dataclass(frozen=True)
class Param:
    """A tool property that is an argument of an op: description, narrowing, and the op
    (None: the tool's own ``op``)."""

    description: str = ""
    kind: str | None = None
    narrow: Mapping[str, Any] = field(default_factory=dict)
    op: str | None = None
    default: Any = None


def param(description: str = "", *, kind: str | None = None, op: str | None = None,
          default: Any = None, **narrow: Any) -> Param:
    """Declare a tool property as the argument of the same name of ``op`` (default: the
    tool's op; see ``op_property``). ``default`` replaces the op's default for this tool:
    the tool sends it when the agent gives none (``check_arguments``)."""
    return Param(description, kind, narrow, op, default)


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its name, agent-facing description, input schema and behaviour hints.

    No ``title``: clients show the name, and the model never sees a title.

    ``params`` are arguments of ``op`` (the daemon op the tool runs), their schemas derived
    from its spec; ``extra`` are hand-written properties only the tool knows (how it runs
    its op: ``recall``'s ``scope``, ``kg_query``'s ``history``).
    Required are the op's required arguments among ``params``, then ``extra_required``.

    A tool with ``actions`` runs one of several ops, chosen by its ``action`` property
    (``memoir``): it has no ``op``, each param names the op it comes from, and only
    ``extra_required`` is required by the schema (``action_args`` checks each action's own).
    """

    name: str
    description: str
    op: str | None = None
    params: Mapping[str, Param] = field(default_factory=dict)
    actions: Mapping[str, str] = field(default_factory=dict)  # action -> op
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    extra_required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @cached_property
    def properties(self) -> dict[str, dict[str, Any]]:
        """Every property's JSON Schema: required tool-only ones (``action``) first, then the
        derived ones, then the other tool-only ones.

        Raises:
            KeyError, ValueError: a param that its op does not accept (see ``op_property``).
        """
        props: dict[str, dict[str, Any]] = {
            key: dict(self.extra[key]) for key in self.extra_required if key in self.extra}
        for key, p in self.params.items():
            op = p.op or self.op
            if op is None:
                raise KeyError(f"tool {self.name}: param {key!r} needs an op")
            props[key] = op_property(op, key, p.description, kind=p.kind, **p.narrow)
            if p.default is not None:
                # Within what the op accepts, or the tools fail to load.
                props[key]["default"] = _coerce(p.default, props[key], f"{self.name} {key}")
        props.update((key, dict(schema)) for key, schema in self.extra.items() if key not in props)
        return props

    @cached_property
    def defaults(self) -> dict[str, Any]:
        """The tool's own defaults (``param(default=...)``), sent when a call omits them."""
        return {k: self.properties[k]["default"] for k, p in self.params.items()
                if p.default is not None}

    @cached_property
    def required(self) -> tuple[str, ...]:
        """The properties a call must give."""
        args = SPECS[self.op].args if self.op is not None else {}
        return (*(k for k in self.params if k in args and args[k].required),
                *self.extra_required)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The tool's JSON Schema as ``tools/list`` publishes it: an object of
        ``properties``, nothing else allowed, each without its ``UNPUBLISHED`` keywords."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: published(v) for k, v in self.properties.items()},
            "additionalProperties": False,
        }
        if self.required:
            schema["required"] = list(self.required)
        return schema

    def to_mcp(self) -> dict[str, Any]:
        """The tool as a ``tools/list`` entry.

        Only the hints that differ from MCP's defaults are sent (readOnlyHint false,
        destructiveHint true, idempotentHint false; the last two mean something only for a
        tool that writes): every token of ``tools/list`` is paid in every session. For the
        same reason ``openWorldHint: false`` (true of every palace tool: nothing leaves the
        machine) is left out: it cost 54 tokens over the nine tools and no client acts on it.
        """
        hints: dict[str, bool] = {}
        if self.read_only:
            hints["readOnlyHint"] = True
        else:
            if not self.destructive:
                hints["destructiveHint"] = False
            if self.idempotent:
                hints["idempotentHint"] = True
        return {"name": self.name, "description": self.description,
                "inputSchema": self.input_schema, "annotations": hints}


# -- argument sanity ----------------------------------------------------------------------------
class ToolArgumentError(ValueError):
    """Tool arguments are not the JSON types the tool's schema declares."""


_JSON_TYPE_NAMES: dict[str, str] = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "array": "an array", "object": "an object",
}


def _coerce(value: Any, schema: Mapping[str, Any], where: str) -> Any:
    if "anyOf" in schema:
        for alternative in schema["anyOf"]:
            try:
                return _coerce(value, alternative, where)
            except ToolArgumentError:
                continue
        raise ToolArgumentError(
            f"argument '{where}' must be "
            f"{' or '.join(_what(a) for a in schema['anyOf'])}, got {_shown(value)}")
    kind = schema.get("type")
    ok: bool
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "integer":
        # Some clients serialise every number as a float; 5.0 is still the integer 5.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "array":
        ok = isinstance(value, list)
        if ok and "items" in schema:
            value = [_coerce(v, schema["items"], f"{where}[{i}]") for i, v in enumerate(value)]
    else:
        ok = True
    if not ok:
        raise ToolArgumentError(
            f"argument '{where}' must be {_JSON_TYPE_NAMES.get(str(kind), kind)}, "
            f"got {_shown(value)}"
        )
    if "enum" in schema and value not in schema["enum"]:
        raise ToolArgumentError(
            f"argument '{where}' must be one of {', '.join(map(str, schema['enum']))}; "
            f"got {_shown(value)}"
        )
    _check_bounds(value, schema, where)
    return value


def _what(schema: Mapping[str, Any]) -> str:
    """What one member of an ``anyOf`` accepts: ``one of a, b`` or ``a number between...``."""
    if "enum" in schema:
        return f"one of {', '.join(map(str, schema['enum']))}"
    what = _JSON_TYPE_NAMES.get(str(schema.get("type")), str(schema.get("type")))
    if "minimum" in schema or "maximum" in schema:
        what += " " + range_text(schema.get("minimum"), schema.get("maximum"))
    return what


def _shown(value: Any) -> str:
    """``value`` as JSON, cut to 80 characters (it may be the agent's whole text)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:79] + "…"


def _check_bounds(value: Any, schema: Mapping[str, Any], where: str) -> None:
    """Refuse ``value`` outside the schema's minimum/maximum, minLength/maxLength or
    minItems/maxItems."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ToolArgumentError(
                f"argument '{where}' must be {range_text(lo, hi)}, got {_shown(value)}")
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise ToolArgumentError(f"argument '{where}' must not be empty")
        if len(value) > schema.get("maxLength", len(value)):
            raise ToolArgumentError(f"argument '{where}' is longer than {schema['maxLength']} "
                                    f"characters ({len(value)})")
    elif isinstance(value, list) and len(value) > schema.get("maxItems", len(value)):
        raise ToolArgumentError(
            f"argument '{where}' has more than {schema['maxItems']} items ({len(value)})")
    elif isinstance(value, list) and len(value) < schema.get("minItems", 0):
        raise ToolArgumentError(f"argument '{where}' needs at least {schema['minItems']} "
                                f"item(s), got {len(value)}")


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, Any]:
    """Return ``arguments`` checked against the JSON types of ``spec``'s schema.

    ``null`` optional values are dropped (agents often send them for "not given").

    Raises:
        ToolArgumentError: not an object, an unknown or missing key, a wrong JSON type, a
            value outside the enum, or outside the schema's bounds or lengths.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    properties = spec.properties
    unknown = sorted(k for k in arguments if k not in properties)
    if unknown:
        allowed = ", ".join(properties) or "none"
        raise ToolArgumentError(
            f"unknown argument(s) {', '.join(map(repr, unknown))}; allowed: {allowed}"
        )
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None and key not in spec.required:
            continue
        out[key] = _coerce(value, properties[key], key)
    for key, value in spec.defaults.items():
        out.setdefault(key, value)
    missing = [k for k in spec.required if k not in out]
    if missing:
        raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
    return out


def action_args(spec: ToolSpec, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The op that ``arguments["action"]`` picks in ``spec.actions``, and the arguments it
    takes (``action`` removed), checked against that op's spec.

    Raises:
        ToolArgumentError: an argument the action does not take, or one it needs is missing.
    """
    args = dict(arguments)
    action = str(args.pop("action"))
    op = spec.actions[action]
    accepted = SPECS[op].args
    foreign = [k for k in args if k not in accepted]
    if foreign:
        takes = ", ".join(k for k in spec.params if k in accepted) or "nothing else"
        raise ToolArgumentError(f"action '{action}' does not take {', '.join(foreign)}; "
                                f"it takes {takes}")
    missing = [k for k, a in accepted.items() if a.required and k not in args]
    if missing:
        raise ToolArgumentError(f"action '{action}' needs {', '.join(missing)}")
    return op, args
