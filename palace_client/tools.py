"""The MCP tools of the palace bridge: declarative specs, argument sanity checks, rendering.

Tool names, descriptions and JSON Schemas live only here. Each tool maps its arguments onto one
daemon op (``recall_all`` fans out over every palace); real validation is the daemon's
(``INVALID_ARGS``), so the bridge only checks JSON types. Results are rendered as plain text
for an agent; failures become ``isError`` results the agent can act on, never protocol errors.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from palaced.errors import DaemonUnreachable, InternalError, PalaceError, ShuttingDown

DEFAULT_PALACE = "default"
NUDGE_AFTER = 10
NUDGE_TEXT = (
    "(palace hint: nothing was stored for a while. If you learned a durable fact, decision, "
    "preference or outcome, save it now with the `remember` tool.)"
)
_SLUG_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_SLUG = 64


class DaemonClient(Protocol):
    """What the tools need from ``palace_client.Client`` (tests inject a fake)."""

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]: ...

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]: ...

    def list_palaces(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


# -- palace naming ------------------------------------------------------------------------------
def slugify(text: str) -> str:
    """Return ``text`` as a palace name: lowercase kebab-case, 1-64 chars, or "" if nothing is left.

    Accents are folded to ASCII, camelCase boundaries become hyphens, and every run of other
    characters becomes one hyphen.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", ascii_text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", spaced)
    slug = re.sub(r"[^a-z0-9]+", "-", spaced.lower()).strip("-")
    return slug[:_MAX_SLUG].rstrip("-")


def is_palace_name(name: str) -> bool:
    """True if ``name`` is a valid palace name (lowercase kebab-case, 1-64 chars)."""
    return len(name) <= _MAX_SLUG and _SLUG_RE.fullmatch(name) is not None


def find_project_root(start: Path) -> Path | None:
    """Return the nearest directory at or above ``start`` holding ``.git`` (dir or file)."""
    current = start
    for candidate in (current, *current.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def palace_name_for(start: Path, home: Path | None = None) -> str:
    """Derive the palace name of the project containing ``start``.

    The git root's directory name, slugified; outside a git repository the directory itself,
    except the home directory and the filesystem root, which map to ``"default"``.
    """
    start = start.expanduser().absolute()
    root = find_project_root(start)
    if root is None:
        home = (home or Path.home()).absolute()
        if start == home or start == Path(start.anchor):
            return DEFAULT_PALACE
        root = start
    return slugify(root.name) or DEFAULT_PALACE


def default_palace(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """The palace of the current project: from ``CLAUDE_PROJECT_DIR`` if set, else the cwd."""
    env = os.environ if environ is None else environ
    project_dir = env.get("CLAUDE_PROJECT_DIR")
    try:
        start = Path(project_dir) if project_dir else (cwd or Path.cwd())
        return palace_name_for(start)
    except OSError:  # the cwd was deleted, or the home directory is unknown
        return DEFAULT_PALACE


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

# The typed relations of palaced.store.graph (not imported: it pulls in apsw). All but
# superseded_by are multi-valued; every other predicate holds one value at a time.
TYPED_RELATIONS: tuple[str, ...] = (
    "part_of", "depends_on", "related_to", "contradicts", "refines", "alternative_to",
    "caused_by", "instance_of", "superseded_by",
)
MULTI_VALUED: frozenset[str] = frozenset(TYPED_RELATIONS) - {"superseded_by"}
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


# -- rendering ----------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _format_score(score: Any) -> str:
    return f"{score:.3f}" if isinstance(score, int | float) else str(score)


def _format_when(item: Mapping[str, Any]) -> str | None:
    value = item.get("occurred_ms") or item.get("occurred_at") or item.get("created_ms")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d")
    return str(value) if value else None


def render_drawer(item: Mapping[str, Any], *, compact: bool = False,
                  show_palace: bool = False) -> str:
    """Render one drawer (recall item, list entry) as text: id, place, score, date, text."""
    place = "/".join(str(item[k]) for k in ("wing", "room") if item.get(k))
    if show_palace and item.get("palace"):
        place = f"{item['palace']}:{place}" if place else str(item["palace"])
    head: list[str] = []
    # Only real drawers (integer ids) can be passed to forget; synthetic items have no "#".
    if isinstance(item.get("id"), int):
        head.append(f"#{item['id']}")
    elif item.get("kind") == "fact" and isinstance(item.get("fact_id"), int):
        head.append(f"fact #{item['fact_id']}")
    if place:
        head.append(f"[{place}]")
    if item.get("score") is not None:
        head.append(f"score {_format_score(item['score'])}")
    when = _format_when(item)
    if when:
        head.append(when)
    if item.get("tags"):
        head.append("tags " + ",".join(map(str, item["tags"])))
    if isinstance(item.get("superseded_by"), int):
        head.append(f"(superseded by #{item['superseded_by']})")
    text = str(item.get("text", ""))
    if compact:
        return " ".join([*head, _one_line(text)]).strip()
    body = "\n".join("  " + line for line in text.splitlines()) or "  (empty)"
    return ("- " + " ".join(head) + "\n" + body) if head else body


def _render_items(items: Iterable[Mapping[str, Any]], compact: bool,
                  show_palace: bool = False) -> list[str]:
    return [render_drawer(item, compact=compact, show_palace=show_palace) for item in items]


def render_sections(sections: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    """Render recall/wake-up sections: one heading per level, then its drawers."""
    lines: list[str] = []
    for section in sections:
        items = list(section.get("items") or [])
        title = section.get("title") or "Memories"
        level = section.get("level")
        heading = f"L{level} · {title}" if level is not None else str(title)
        lines.append(heading if compact else f"## {heading}")
        lines.extend(_render_items(items, compact) if items else ["(nothing)"])
        if not compact:
            lines.append("")
    return lines


def _render_tree(value: Any, indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                lines.append(f"{pad}{key}:")
                lines.extend(_render_tree(item, indent + 1))
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item:
                sub = _render_tree(item, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(f"{pad}{_scalar(value)}")
    return lines


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, bool | Mapping | list):
        return json.dumps(value, default=str)
    return str(value)


def format_time(ms: Any) -> str:
    """An epoch-ms instant as a date, or a UTC time when it is not midnight."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "?" if ms is None else str(ms)
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    if (when.hour, when.minute, when.second, when.microsecond) == (0, 0, 0, 0):
        return when.strftime("%Y-%m-%d")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def render_fact(fact: Mapping[str, Any], *, compact: bool = False) -> str:
    """One fact on one line: ``#id subject predicate object [valid_from → valid_to|now]``.

    A literal object is quoted; confidence below 1 and a retraction are noted. Outside compact
    mode the line is a list item and ends with the cited source (URL, drawer), if any.
    """
    obj = fact.get("object")
    shown = (str(obj) if fact.get("object_is_entity", True)
             else json.dumps(str(obj), ensure_ascii=False))
    start, end = fact.get("valid_from_ms"), fact.get("valid_to_ms")
    interval = f"[{format_time(start)} → {'now' if end is None else format_time(end)}]"
    parts = [f"#{fact.get('id')}", _one_line(str(fact.get("subject"))),
             str(fact.get("predicate")), _one_line(shown), interval]
    confidence = fact.get("confidence")
    if isinstance(confidence, int | float) and confidence < 1:
        parts.append(f"confidence {confidence:.2f}")
    if end is not None and end == start:
        parts.append("(retracted)")
    line = " ".join(parts)
    if compact:
        return line
    source = fact.get("source")
    cited: list[str] = []
    if isinstance(source, Mapping):
        if source.get("url"):
            cited.append(str(source["url"]))
        if source.get("drawer") is not None:
            cited.append(f"drawer #{source['drawer']}")
        if cited and source.get("agent"):  # alone, the agent is noise on every line
            cited.append(f"by {source['agent']}")
    return "- " + line + (f" (source: {', '.join(cited)})" if cited else "")


def render_facts(facts: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    return [render_fact(f, compact=compact) for f in facts]


def render_error(exc: BaseException) -> str:
    """Text of an ``isError`` tool result: error name, message, details and what to do."""
    if isinstance(exc, ToolArgumentError):
        return f"Error INVALID_ARGS: {exc}. Fix the arguments (see the tool's input schema)."
    if isinstance(exc, OSError):
        exc = DaemonUnreachable(f"lost the connection to palaced: {exc}")
    elif not isinstance(exc, PalaceError):
        exc = InternalError(f"{type(exc).__name__}: {exc}")
    lines = [f"Error {exc.name} ({exc.code}): {exc.message}"]
    if exc.details:
        lines.append("details: " + json.dumps(exc.details, sort_keys=True, default=str))
    hint = _ERROR_HINTS.get(exc.name)
    if hint is None and exc.retryable:
        hint = "This is temporary; retry in a moment."
    if hint:
        lines.append(hint)
    return "\n".join(lines)


_ERROR_HINTS = {
    "INVALID_ARGS": "Fix the arguments named above and call the tool again.",
    "MEMORY_NOT_FOUND": "No drawer has that id here; find ids with recall or list_drawers.",
    "PALACE_NOT_FOUND": "See the existing palaces with list_palaces.",
    "TEXT_TOO_LARGE": "Split the text into several smaller, self-contained drawers.",
    "INVALID_CONTENT": "Fix the text, name or date and call the tool again.",
    "FACT_NOT_FOUND": "No fact has that id here; find fact ids with kg_query or kg_timeline.",
}
# Tools that store something: calling one resets the remember nudge.
_STORING_TOOLS = frozenset({"remember", "kg_assert", "kg_link"})


# -- running tools ------------------------------------------------------------------------------
def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` with one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


class Toolbox:
    """Runs the palace tools for one bridge process against a lazily created client.

    Args:
        client_factory: returns the daemon client; called on the first tool call only.
        palace: the palace the palace-scoped tools act on; created on first use.
        compact: render one line per drawer.
        nudge_after: tool calls without a ``remember`` before the store hint is appended.
    """

    def __init__(self, client_factory: Callable[[], DaemonClient], palace: str, *,
                 compact: bool = False, nudge_after: int = NUDGE_AFTER) -> None:
        self.palace = palace
        self.compact = compact
        self.source = "mcp"
        self._factory = client_factory
        self._client: DaemonClient | None = None
        self._palace_ready = False
        self._nudge_after = nudge_after
        self._calls_since_remember = 0
        self._runners: dict[str, Callable[[dict[str, Any]], str]] = {
            "remember": self._remember, "recall": self._recall, "recall_all": self._recall_all,
            "wake_up": self._wake_up, "forget": self._forget, "list_drawers": self._list_drawers,
            "list_palaces": self._list_palaces, "palace_info": self._palace_info,
            "status": self._status, "kg_assert": self._kg_assert, "kg_query": self._kg_query,
            "kg_timeline": self._kg_timeline, "kg_invalidate": self._kg_invalidate,
            "kg_link": self._kg_link, "kg_neighbors": self._kg_neighbors,
        }

    @staticmethod
    def list_tools() -> list[dict[str, Any]]:
        """Every tool as ``tools/list`` entries, in their stable order."""
        return [spec.to_mcp() for spec in TOOLS]

    @staticmethod
    def has_tool(name: str) -> bool:
        return name in TOOLS_BY_NAME

    def call(self, name: str, arguments: object) -> dict[str, Any]:
        """Run tool ``name`` and return its ``CallToolResult``; failures become ``isError``.

        Raises:
            KeyError: there is no tool of that name (a protocol error, not a tool error).
        """
        spec = TOOLS_BY_NAME[name]
        try:
            args = check_arguments(spec, arguments)
            text = self._runners[name](args)
        except (PalaceError, ToolArgumentError, OSError) as exc:
            error = render_error(exc)
            bad_args = isinstance(exc, ToolArgumentError) or (
                isinstance(exc, PalaceError) and exc.name == "INVALID_ARGS")
            if spec.argument_hint and bad_args:
                error = f"{error}\n{spec.argument_hint}"
            return text_result(error, is_error=True)
        if name in _STORING_TOOLS:
            self._calls_since_remember = 0
        else:
            self._calls_since_remember += 1
            if self._calls_since_remember >= self._nudge_after:
                self._calls_since_remember = 0
                text = f"{text}\n\n{NUDGE_TEXT}"
        return text_result(text)

    def close(self) -> None:
        """Close the daemon connection, if one was opened."""
        if self._client is not None:
            self._client.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _daemon(self) -> DaemonClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def _op(self, op: str, palace: str | None, args: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
        client = self._daemon()
        if palace == self.palace and not self._palace_ready:
            client.create_palace(palace, exist_ok=True)
            self._palace_ready = True
        try:
            return client.call(op, palace, args or {})
        except ShuttingDown:
            # The daemon is restarting: a fresh connection reaches (or starts) its successor.
            client.close()
            return client.call(op, palace, args or {})

    # -- tools ------------------------------------------------------------------------------
    def _remember(self, args: dict[str, Any]) -> str:
        payload = {**args, "source": self.source}
        old = args.get("supersedes")
        if old is not None:
            # A correction is by nature close to the drawer it replaces: merging it into that
            # drawer would silently drop the correction.
            payload.setdefault("dedup", False)
        result = self._op("memory.remember", self.palace, payload)
        where = "/".join(str(args[k]) for k in ("wing", "room") if args.get(k))
        place = f" [{where}]" if where else ""
        did = result["id"]
        if result.get("deduplicated"):
            sim = result.get("similarity")
            how = f" (similarity {sim:.2f})" if isinstance(sim, int | float) else ""
            text = (f"Refreshed existing drawer #{did}{place} instead of storing a "
                    f"near-duplicate{how} in palace '{self.palace}'. If this really is a "
                    "different memory, call remember again with dedup=false; if it updates "
                    f"#{did}, call it with supersedes={did}.")
        elif result.get("created", True):
            text = f"Stored drawer #{did}{place} in palace '{self.palace}'."
            if old is not None:
                return (f"{text} It supersedes drawer #{old}, which is kept as history and no "
                        "longer recalled.")
            return text
        else:
            text = (f"Already stored as drawer #{did} in palace '{self.palace}' "
                    "(identical text); nothing changed.")
        if old is not None:
            text += f" Drawer #{old} was not superseded."
        return text

    def _recall(self, args: dict[str, Any]) -> str:
        result = self._op("memory.recall", self.palace, args)
        return self._render_recall(args["query"], result)

    def _render_recall(self, query: str, result: Mapping[str, Any]) -> str:
        meta = [f"mode {result['mode']}"] if result.get("mode") else []
        if result.get("tokens_used") is not None:
            meta.append(f"{result['tokens_used']} tokens")
        if result.get("truncated"):
            meta.append("truncated to budget")
        head = f"Recall {json.dumps(query, ensure_ascii=False)} in palace '{self.palace}'"
        head += f" ({', '.join(meta)})" if meta else ""
        sections = result.get("sections")
        results = list(result.get("results") or [])
        # Section items do not say whether a drawer was superseded; the results do.
        successor = {r["id"]: r["superseded_by"] for r in results
                     if isinstance(r.get("superseded_by"), int)}
        if sections and successor:
            sections = [{**s, "items": [{"superseded_by": successor.get(i.get("id")), **i}
                                        for i in s.get("items") or []]} for s in sections]
        if sections and any(s.get("items") for s in sections):
            body = render_sections(sections, self.compact)
        elif results:
            body = _render_items(results, self.compact)
        else:
            return (f"{head}\nNo drawers matched. Try other words, drop filters, or search every "
                    "palace with recall_all.")
        if result.get("notice"):
            body.append(f"({result['notice']})")
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(body).rstrip()

    def _recall_all(self, args: dict[str, Any]) -> str:
        client = self._daemon()
        top_k = int(args.get("top_k", 10))
        merged: list[dict[str, Any]] = []
        skipped: list[str] = []
        palaces = [str(p["name"]) for p in client.list_palaces()]
        for name in palaces:
            try:
                result = client.call("memory.recall", name, args)
            except PalaceError as exc:
                skipped.append(f"{name} ({exc.name}: {exc.message})")
                continue
            merged.extend({**item, "palace": name} for item in result.get("results") or [])
        merged.sort(key=lambda item: float(item.get("score") or 0.0), reverse=True)
        merged = merged[:top_k]
        head = (f"Recall {json.dumps(args['query'], ensure_ascii=False)} across "
                f"{len(palaces)} palace(s)")
        lines = [head]
        if merged:
            if not self.compact:
                lines.append("")
            lines.extend(_render_items(merged, self.compact, show_palace=True))
        else:
            lines.append("No drawers matched in any palace.")
        if skipped:
            lines.append("Skipped: " + "; ".join(skipped))
        return "\n".join(lines)

    def _wake_up(self, args: dict[str, Any]) -> str:
        result = self._op("memory.wake_up", self.palace, args)
        head = f"Wake-up context of palace '{self.palace}'"
        if result.get("tokens_used") is not None:
            head += f" ({result['tokens_used']} tokens)"
        sections = list(result.get("sections") or [])
        if not any(s.get("items") for s in sections):
            return (f"{head}\nThe palace is empty so far. Store durable facts and decisions with "
                    "remember as you learn them.")
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(render_sections(sections, self.compact)).rstrip()

    def _forget(self, args: dict[str, Any]) -> str:
        self._op("memory.forget", self.palace, args)
        return f"Forgot drawer #{args['id']} in palace '{self.palace}'."

    def _list_drawers(self, args: dict[str, Any]) -> str:
        result = self._op("memory.list", self.palace, args)
        drawers = list(result.get("drawers") or [])
        total = result.get("total", len(drawers))
        offset = int(args.get("offset", 0))
        if not drawers:
            return f"No drawers in palace '{self.palace}' at offset {offset} (total {total})."
        lines = [f"Drawers {offset + 1}-{offset + len(drawers)} of {total} in palace "
                 f"'{self.palace}', newest first"]
        if not self.compact:
            lines.append("")
        lines.extend(_render_items(drawers, self.compact))
        if result.get("next_offset") is not None:
            lines.append(f"More: call list_drawers with offset={result['next_offset']}.")
        return "\n".join(lines)

    def _list_palaces(self, args: dict[str, Any]) -> str:
        palaces = self._daemon().list_palaces()
        if not palaces:
            return f"No palaces yet; '{self.palace}' is created on the first remember."
        lines = [f"{len(palaces)} palace(s); this project's is '{self.palace}':"]
        for entry in palaces:
            extra = ", ".join(f"{k} {_scalar(v)}" for k, v in entry.items()
                              if k not in ("name", "path") and not isinstance(v, Mapping | list))
            mark = " (this project)" if entry.get("name") == self.palace else ""
            lines.append(f"- {entry.get('name')}{mark}" + (f": {extra}" if extra else ""))
        return "\n".join(lines)

    def _palace_info(self, args: dict[str, Any]) -> str:
        info = self._op("palace.info", self.palace)
        return "\n".join([f"Palace '{self.palace}':", *_render_tree(info, 1)])

    def _status(self, args: dict[str, Any]) -> str:
        status = self._daemon().call("daemon.status")
        return "\n".join(["Palace daemon status:", *_render_tree(status, 1)])

    # -- knowledge graph --------------------------------------------------------------------
    def _kg_assert(self, args: dict[str, Any]) -> str:
        result = self._op("graph.assert", self.palace, {**args, "source_agent": self.source})
        fact = result["fact"]
        lines = [f"Recorded fact in palace '{self.palace}':",
                 render_fact(fact, compact=self.compact)]
        predicate = str(fact.get("predicate"))
        if predicate not in MULTI_VALUED:
            lines.append(f"('{predicate}' holds one value at a time: asserting it closes "
                         "the previous value's interval; kg_timeline shows the history.)")
        return "\n".join(lines)

    def _kg_link(self, args: dict[str, Any]) -> str:
        result = self._op("graph.link", self.palace, {**args, "source_agent": self.source})
        return "\n".join([f"Linked in palace '{self.palace}':",
                          render_fact(result["fact"], compact=self.compact)])

    def _kg_invalidate(self, args: dict[str, Any]) -> str:
        result = self._op("graph.invalidate", self.palace, args)
        fact = result["fact"]
        return "\n".join([
            f"Fact #{fact.get('id')} is closed in palace '{self.palace}' (kept as history):",
            render_fact(fact, compact=self.compact)])

    def _facts_block(self, head: str, facts: list[Mapping[str, Any]]) -> str:
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(render_facts(facts, self.compact))

    def _kg_query(self, args: dict[str, Any]) -> str:
        result = self._op("graph.query", self.palace, args)
        subject = str(args["subject"])
        if result.get("entity") is None:
            return self._unknown_entity(subject)
        name = str(result["entity"].get("name") or subject)
        when = (f"valid at {format_time(result['as_of_ms'])}"
                if result.get("as_of_ms") is not None else "true now")
        facts = list(result.get("facts") or [])
        if not facts:
            return (f"No facts about '{name}' {when} in palace '{self.palace}'. kg_timeline "
                    "shows its full history.")
        return self._facts_block(f"Facts about '{name}' {when} in palace '{self.palace}' "
                                 f"({len(facts)}):", facts)

    def _kg_timeline(self, args: dict[str, Any]) -> str:
        result = self._op("graph.timeline", self.palace, args)
        subject = str(args["subject"])
        if result.get("entity") is None:
            return self._unknown_entity(subject)
        name = str(result["entity"].get("name") or subject)
        facts = list(result.get("facts") or [])
        if not facts:
            return f"No facts mention '{name}' in palace '{self.palace}'."
        return self._facts_block(f"Timeline of '{name}' in palace '{self.palace}' "
                                 f"({len(facts)} facts, oldest first):", facts)

    def _kg_neighbors(self, args: dict[str, Any]) -> str:
        result = self._op("graph.neighbors", self.palace, args)
        entity = str(args["entity"])
        if result.get("entity") is None:
            return self._unknown_entity(entity)
        name = str(result["entity"].get("name") or entity)
        depth = int(args.get("depth", 1))
        via = f" via {args['relation']}" if args.get("relation") else ""
        by_distance: dict[int, list[str]] = {}
        for node in result.get("nodes") or []:
            if node.get("distance"):
                by_distance.setdefault(int(node["distance"]), []).append(str(node.get("name")))
        edges = list(result.get("edges") or [])
        head = (f"Neighbours of '{name}' within {depth} hop(s){via} in palace "
                f"'{self.palace}': {sum(map(len, by_distance.values()))} entities, "
                f"{len(edges)} facts")
        if not by_distance:
            return f"{head}. Nothing is linked to it yet; relate it with kg_link or kg_assert."
        lines = [head]
        if not self.compact:
            lines.append("")
        for dist in sorted(by_distance):
            label = f"{dist} hop{'s' if dist > 1 else ''}"
            names = ", ".join(by_distance[dist])
            lines.append(f"{label}: {names}" if self.compact else f"- {label}: {names}")
        lines.append("Facts:" if self.compact else "\nFacts:")
        lines.extend(render_facts(edges, self.compact))
        if result.get("truncated"):
            lines.append("(cut short at the node limit; narrow with relation or a smaller "
                         "depth)")
        return "\n".join(lines)

    def _unknown_entity(self, name: str) -> str:
        return (f"'{name}' is not in the knowledge graph of palace '{self.palace}' yet "
                "(record facts about it with kg_assert or kg_link).")
