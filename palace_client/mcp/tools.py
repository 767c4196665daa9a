"""The MCP tools' declarations: names, descriptions, JSON Schemas, hints and argument checks.

Tool names, descriptions and JSON Schemas live only here; ``tools.Toolbox`` runs them. Real
validation is the daemon's (``INVALID_ARGS``), so ``check_arguments`` only checks JSON types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from palaced.vocab import TYPED_RELATIONS


# -- specs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its name, agent-facing description, input schema and behaviour hints."""

    name: str
    title: str
    description: str
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    argument_hint: str = ""  # appended to the tool's INVALID_ARGS results

    @property
    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: dict(v) for k, v in self.properties.items()},
            "additionalProperties": False,
        }
        if self.required:
            schema["required"] = list(self.required)
        return schema

    def to_mcp(self) -> dict[str, Any]:
        """The tool as a ``tools/list`` entry."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }


_WING = {"type": "string", "description": "Broad area the drawer belongs to, e.g. 'backend', "
         "'people', 'ops'."}
_ROOM = {"type": "string", "description": "Topic inside the wing, e.g. 'auth', 'deploy', "
         "'release-process'."}
_TAGS = {"type": "array", "items": {"type": "string"},
         "description": "Free-form labels; a drawer matches when it has all the given tags."}
_TOP_K = {"type": "integer", "minimum": 1, "maximum": 100,
          "description": "Maximum number of drawers to return (default 10)."}
_BUDGET = {"type": "integer", "minimum": 1,
           "description": "Token budget for the returned context (the daemon's default, about "
           "1500 tokens, when omitted)."}

_ENTITY = {"type": "string", "minLength": 1, "maxLength": 200,
           "description": "An entity name: a person, project, service, library, concept... "
           "Case and spacing do not matter ('Acme Corp' = 'acme  corp')."}
_WHEN = "ISO 8601 date or time, e.g. '2024-03-01' or '2024-03-01T09:30:00Z'"

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="remember",
        title="Remember",
        description=(
            "Store one durable memory (a 'drawer') in this project's palace so that future "
            "sessions and other agents can recall it. Use it for decisions and their reasons, "
            "facts about the codebase or people, user preferences, conventions, and outcomes of "
            "work. Write one self-contained statement per call (include names and dates; no "
            "'it'/'this' without context) and file it under a room (and optionally a wing). "
            "Storing the exact same text twice is harmless: the existing drawer id is returned, "
            "and a near-duplicate of a drawer in the same wing/room refreshes that drawer "
            "instead of adding another. To correct or update a memory, pass the old drawer's "
            "id as `supersedes`: the old drawer is kept as history but no longer recalled. For "
            "facts that change over time (who owns what, versions, where things run) prefer "
            "kg_assert."
        ),
        properties={
            "text": {"type": "string", "minLength": 1,
                     "description": "The memory itself, self-contained and specific."},
            "room": _ROOM,
            "wing": _WING,
            "tags": _TAGS,
            "importance": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "0 = trivia, 0.5 = normal (default), 1 = critical; "
                           "important drawers surface first in wake_up and recall."},
            "occurred_at": {"type": "string",
                            "description": "When it happened, ISO 8601 (e.g. '2025-03-14' or "
                            "'2025-03-14T09:30:00Z'); defaults to now."},
            "supersedes": {"type": "integer", "minimum": 1,
                           "description": "Id of the drawer this memory replaces (e.g. 42 for "
                           "'#42'): the old drawer is kept as history but hidden from recall. "
                           "Use it instead of forget when a memory became wrong or outdated."},
            "ttl": {"type": "string",
                    "description": "Time to live for short-lived memories, e.g. '90s', '15m', "
                    "'12h', '7d', '2w' or a number of seconds; the drawer stops being recalled "
                    "after that. Omit for permanent memories."},
            "dedup": {"type": "boolean",
                      "description": "Merge a near-duplicate of an existing drawer in the same "
                      "wing/room into that drawer instead of storing another (default true, "
                      "false when `supersedes` is given). Set false to store it anyway."},
        },
        required=("text",),
        idempotent=True,
    ),
    ToolSpec(
        name="recall",
        title="Recall",
        description=(
            "Search this project's palace for memories relevant to a query (hybrid keyword + "
            "semantic search) and return them as context sections with drawer ids, rooms and "
            "scores. Call it before answering questions about past work, decisions or "
            "preferences, and before redoing something that may have been done already. "
            "Narrow with wing/room/tags; use `levels` and `budget` to control how much context "
            "comes back."
        ),
        properties={
            "query": {"type": "string", "minLength": 1,
                      "description": "What you want to know, in natural language or keywords."},
            "budget": _BUDGET,
            "levels": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3},
                       "description": "Context levels to include: 0 identity, 1 essential "
                       "story (most important/recent), 2 recent drawers of the given room/tags, "
                       "3 search results for the query. Default: all."},
            "deep": {"type": "boolean",
                     "description": "Search more thoroughly (slower); use when a normal recall "
                     "missed something you expect to exist."},
            "top_k": _TOP_K,
            "wing": _WING,
            "room": _ROOM,
            "tags": _TAGS,
            "include_superseded": {"type": "boolean",
                                   "description": "Also return drawers that were replaced via "
                                   "remember's `supersedes` (the history of a memory); default "
                                   "false."},
        },
        required=("query",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="recall_all",
        title="Recall across all palaces",
        description=(
            "Search every palace on this machine (all projects), not just this project's, and "
            "return the best matches merged by score, each labelled with its palace. Use it "
            "for knowledge that may have been stored while working on another project."
        ),
        properties={
            "query": {"type": "string", "minLength": 1,
                      "description": "What you want to know, in natural language or keywords."},
            "top_k": _TOP_K,
        },
        required=("query",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="wake_up",
        title="Wake up",
        description=(
            "Load the essential context of this project's palace: its identity and the most "
            "important and recent memories, packed into a token budget. Call it once at the "
            "start of a session or task, before doing anything else."
        ),
        properties={"budget": _BUDGET},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="forget",
        title="Forget",
        description=(
            "Permanently delete one drawer from this project's palace by its id (as shown by "
            "recall or list_drawers). Use it for memories that are wrong and worth no history "
            "(mistakes, secrets stored by accident); to correct or update a memory while "
            "keeping its history, remember the new text with `supersedes` instead."
        ),
        properties={"id": {"type": "integer", "minimum": 1,
                           "description": "The drawer id, e.g. 42 for '#42'."}},
        required=("id",),
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_drawers",
        title="List drawers",
        description=(
            "List the drawers of this project's palace, newest first, optionally only one wing "
            "or room. Pages with limit/offset; the result says which offset comes next."
        ),
        properties={
            "wing": _WING,
            "room": _ROOM,
            "limit": {"type": "integer", "minimum": 1, "maximum": 500,
                      "description": "Page size (default 50)."},
            "offset": {"type": "integer", "minimum": 0,
                       "description": "Number of drawers to skip (default 0)."},
        },
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_palaces",
        title="List palaces",
        description="List every palace (one per project) stored on this machine.",
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="palace_info",
        title="Palace info",
        description=(
            "Show this project's palace: its name, drawer counts, embedding model and index "
            "state."
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="status",
        title="Daemon status",
        description=(
            "Show the palace daemon's status: version, uptime, whether the embedding model is "
            "loaded, and per-palace counts. Useful when other tools report errors."
        ),
        read_only=True,
        idempotent=True,
    ),
    # -- knowledge graph (issue 5): temporal facts about entities ---------------------------
    ToolSpec(
        name="kg_assert",
        title="Assert a fact",
        description=(
            "Record a fact that can change over time in this project's knowledge graph, as "
            "subject-predicate-object: 'Alice works_at Acme', 'payments-api runs_on Postgres "
            "16', 'release version \"2.4\"' (literal). Most predicates hold one value at a time: "
            "asserting a new object closes the old fact's interval at valid_from, so "
            "kg_query shows the current value and kg_timeline the history. The typed "
            "relations (part_of, depends_on, related_to, ...) accumulate values instead. "
            "Re-asserting an active fact changes nothing. Use remember for free-form notes "
            "and kg_assert for facts you will want to look up by entity or as of a date."
        ),
        properties={
            "subject": {**_ENTITY, "description": "The entity the fact is about, e.g. 'Alice'."},
            "predicate": {"type": "string", "minLength": 1, "maxLength": 64,
                          "description": "The property or relation in snake_case, e.g. "
                          "'works_at', 'owner', 'version', 'deployed_on' ('worksAt' and "
                          "'works at' are normalised to 'works_at')."},
            "object": {"type": "string", "minLength": 1, "maxLength": 2000,
                       "description": "The value: another entity's name, or with literal=true "
                       "a plain value such as a version, number or URL."},
            "valid_from": {"type": "string",
                           "description": f"When the fact became true, {_WHEN}; default now. "
                           "Use the real date when you learn a fact late."},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "How sure you are, 0-1 (default 1)."},
            "literal": {"type": "boolean",
                        "description": "Store object as a plain value, not an entity (default "
                        "false); use it for versions, numbers, URLs and free text."},
            "source_url": {"type": "string", "maxLength": 2000,
                           "description": "Where the fact comes from (issue, doc, commit URL)."},
        },
        required=("subject", "predicate", "object"),
        idempotent=True,
    ),
    ToolSpec(
        name="kg_query",
        title="Query facts",
        description=(
            "List the facts about an entity (as subject) that are true now, or that were true "
            "at `as_of`. Call it before answering who/what/where questions about a person, "
            "project or system, e.g. 'where does Alice work?' or 'which database did "
            "payments use in March?'. Each line shows the fact id (for kg_invalidate) and its "
            "validity interval."
        ),
        properties={
            "subject": {**_ENTITY, "description": "The entity to look up, e.g. 'Alice'."},
            "as_of": {"type": "string",
                      "description": f"Show the facts valid at this time instead of now, {_WHEN}."},
        },
        required=("subject",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kg_timeline",
        title="Fact timeline",
        description=(
            "Show the full history of an entity, oldest first: every fact where it is subject "
            "or object, closed ones included, with validity intervals. Use it to see how "
            "something changed over time or why a fact is no longer current."
        ),
        properties={"subject": {**_ENTITY, "description": "The entity, e.g. 'Alice'."}},
        required=("subject",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kg_invalidate",
        title="Invalidate a fact",
        description=(
            "End an active fact that stopped being true without a replacement (Alice left "
            "Acme and has no new employer yet; a dependency was removed). Not destructive: "
            "the fact is kept as history with its interval closed at `at`, so kg_timeline "
            "and kg_query with an earlier as_of still show it. To replace a value, just "
            "kg_assert the new one. Invalidating a fact that is already closed changes nothing."
        ),
        properties={
            "id": {"type": "integer", "minimum": 1,
                   "description": "The fact id, e.g. 12 for '#12' as shown by kg_query."},
            "at": {"type": "string",
                   "description": f"When the fact stopped being true, {_WHEN}; default now."},
        },
        required=("id",),
        idempotent=True,
    ),
    ToolSpec(
        name="kg_link",
        title="Link concepts",
        description=(
            "Relate two concepts with a typed relation: 'checkout depends_on payments-api', "
            "'auth-service part_of platform', 'GraphQL alternative_to REST', 'RFC-12 "
            "superseded_by RFC-31'. An entity can have many links of the same relation at "
            "once (superseded_by excepted: one successor at a time). Explore links with "
            "kg_neighbors. For any other predicate, or for a literal value, use kg_assert."
        ),
        properties={
            "a": {**_ENTITY, "description": "The concept the relation starts from."},
            "relation": {"type": "string", "enum": list(TYPED_RELATIONS),
                         "description": "How a relates to b (a depends_on b, a part_of b...)."},
            "b": {**_ENTITY, "description": "The concept the relation points to; not a itself."},
        },
        required=("a", "relation", "b"),
        idempotent=True,
        argument_hint="For a predicate that is not a typed relation, use kg_assert.",
    ),
    ToolSpec(
        name="kg_neighbors",
        title="Explore neighbours",
        description=(
            "Walk the knowledge graph around an entity: the entities reachable within "
            "`depth` hops over current entity-to-entity facts (both directions), and the "
            "facts between them. Use it for impact and context questions, e.g. 'what depends "
            "on payments-api?' or 'what is this service part of?'."
        ),
        properties={
            "entity": {**_ENTITY, "description": "Where to start, e.g. 'payments-api'."},
            "depth": {"type": "integer", "minimum": 1, "maximum": 6,
                      "description": "How many hops to follow (default 1)."},
            "relation": {"type": "string", "maxLength": 64,
                         "description": "Follow only this relation or predicate, e.g. "
                         "'depends_on'."},
        },
        required=("entity",),
        read_only=True,
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}


# -- argument sanity ----------------------------------------------------------------------------
class ToolArgumentError(ValueError):
    """Tool arguments are not the JSON types the tool's schema declares."""


_JSON_TYPES: dict[str, str] = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "array": "an array", "object": "an object",
}


def _coerce(value: Any, schema: Mapping[str, Any], where: str) -> Any:
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
            f"argument '{where}' must be {_JSON_TYPES.get(str(kind), kind)}, "
            f"got {json.dumps(value)[:80]}"
        )
    if "enum" in schema and value not in schema["enum"]:
        raise ToolArgumentError(
            f"argument '{where}' must be one of {', '.join(map(str, schema['enum']))}; "
            f"got {json.dumps(value)[:80]}"
        )
    return value


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, Any]:
    """Return ``arguments`` checked against the JSON types of ``spec``'s schema.

    ``null`` optional values are dropped (agents often send them for "not given").

    Raises:
        ToolArgumentError: not an object, an unknown or missing key, or a wrong JSON type.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    unknown = sorted(k for k in arguments if k not in spec.properties)
    if unknown:
        allowed = ", ".join(spec.properties) or "none"
        raise ToolArgumentError(
            f"unknown argument(s) {', '.join(map(repr, unknown))}; allowed: {allowed}"
        )
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None and key not in spec.required:
            continue
        out[key] = _coerce(value, spec.properties[key], key)
    missing = [k for k in spec.required if k not in out]
    if missing:
        raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
    return out

