"""The MCP tools: names, agent-facing descriptions and behaviour hints.

``tools/list`` is answered from ``TOOLS``; ``toolbox.Toolbox`` runs them. Each tool names the
daemon op it runs, and its properties are that op's arguments (``param``): their JSON Schemas
(types, bounds, defaults) are generated from ``palaced.wire.specs`` by ``schema.op_property``, so
only the wording lives here. The tool-only properties (``recall``'s ``scope``,
``kg_query``'s ``history`` and ``depth``, ``memoir``'s and ``upkeep``'s ``action``) choose
which op the tool runs and are written out in ``extra``.

Every ``tools/list`` costs tokens in every agent session, so the surface is kept lean: the
``core`` toolset by default, the knowledge graph, memoir and upkeep tools opt-in
(``palaced.wire.specs.MCP_TOOLSETS``, ``tools_of``); one-line descriptions that say when to
call each, short property texts, no length limits or empty defaults in the published schemas
(``schema.published``) and no ``openWorldHint``
(``tests/palace_client/mcp/test_mcp_toolsets.py`` counts the cl100k tokens and bounds them).
Tools that were folded into others are listed in ``RETIRED`` with what to call instead.
"""

from __future__ import annotations

from typing import Any

from palace_client.mcp.schema import Param, ToolSpec, op_property, param
from palaced.wire.specs import MCP_TOOLSETS
from palaced.wire.vocab import IMPORTANCE_PRESETS, TYPED_RELATIONS

_WING = param("Area, e.g. 'backend'.")
_ROOM = param("Topic, e.g. 'auth'.")


def _name(description: str = "") -> Param:
    """An entity name argument (never empty)."""
    return param(description, minLength=1)


def _when(description: str) -> Param:
    """A time argument, offered to agents as an ISO 8601 string (the daemon also takes ms)."""
    return param(description, kind="str")


# An importance is a preset name (as `palace remember --importance high`) or a number.
_IMPORTANCE: dict[str, Any] = {"kind": "str|float", "enum": list(IMPORTANCE_PRESETS),
                               "minimum": 0.0, "maximum": 1.0}

# get: the drawers of one call, and the tokens of their texts together by default and at most
# (Claude Code refuses a tool result over 25,000 tokens).
GET_MAX_IDS = 5
GET_MIN_TOKENS = 200  # the lines around the texts are charged their bytes (mcp.reading)
GET_TOKENS = 2000
GET_MAX_TOKENS = 20_000
IDS: dict[str, Any] = {
    "type": "array",
    "items": {k: v for k, v in op_property("memory.get", "id").items() if k != "description"},
    "minItems": 1, "maxItems": GET_MAX_IDS,
    "description": f"1-{GET_MAX_IDS} drawer ids, e.g. [42] for '#42'."}
# list_drawers' default page: under 1,000 tokens (tests/palace_client/mcp/test_mcp_toolsets.py)
LIST_PAGE = 10

SCOPES = ("palace", "all")
SCOPE: dict[str, Any] = {"type": "string", "enum": list(SCOPES), "default": "palace",
                         "description": "'all': every project's palace."}
HISTORY: dict[str, Any] = {"type": "boolean", "default": False,
                           "description": "All facts ever, closed ones too, oldest first."}
# kg_query with depth runs graph.neighbors: its bounds, from 1 (0 would be the entity alone),
# and no default (without depth kg_query looks up facts).
DEPTH: dict[str, Any] = {
    k: v for k, v in op_property("graph.neighbors", "depth", "Linked entities within n hops.",
                                 minimum=1).items() if k != "default"}

# The memoir tool's actions and the ops they run (no memoir delete or unlink: an agent
# curates concepts, a person prunes whole memoirs with `palace memoir delete`).
MEMOIR_ACTIONS: dict[str, str] = {
    "create": "memoir.create", "list": "memoir.list", "show": "memoir.show",
    "add_concept": "memoir.add_concept", "refine": "memoir.refine", "link": "memoir.link",
    "search": "memoir.search", "inspect": "memoir.inspect", "update": "memoir.update",
    "rename_concept": "memoir.rename_concept", "delete_concept": "memoir.delete_concept",
}
ACTION: dict[str, Any] = {"type": "string", "enum": list(MEMOIR_ACTIONS)}
_ADD, _LINK = "memoir.add_concept", "memoir.link"

# The upkeep tool's actions and the ops they run (prune and decay stay with the CLI and the
# daemon's schedule: deleting by weight is a person's call).
# (forget has no max_drawers here: an agent forgets at most the op's default, 1,000, at once;
# a person confirms a larger forget with `palace forget --max N`.)
UPKEEP_ACTIONS: dict[str, str] = {
    "update": "memory.update", "consolidate": "memory.consolidate", "health": "memory.health",
    "conflicts": "memory.conflicts", "resolve": "memory.resolve_conflict",
    "forget": "memory.forget_many", "merge": "memory.merge", "restore": "memory.restore_batch"}
UPKEEP_ACTION: dict[str, Any] = {"type": "string", "enum": list(UPKEEP_ACTIONS)}
_EDIT = "memory.update"
_BULK = "memory.forget_many"

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="remember",
        op="memory.remember",
        description=(
            "Store a durable fact, decision, preference or outcome as one self-contained "
            "statement; to correct a memory, pass its id as supersedes."
        ),
        params={
            "text": param(minLength=1),
            "room": _ROOM,
            "wing": _WING,
            "tags": param(),
            "importance": param(**_IMPORTANCE),
            "occurred_at": _when("ISO 8601; default now."),
            "supersedes": param("Id of the drawer it corrects."),
            "ttl": param("Lifetime if short-lived, e.g. '12h', '7d'.", kind="str"),
            "dedup": param("false: keep even a near-duplicate."),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="recall",
        op="memory.recall",
        description=(
            "Search memories before answering about past work, decisions or preferences, "
            "or before redoing something."
        ),
        params={
            "query": param(minLength=1),
            "top_k": param(),
            "wing": param(),
            "room": param(),
            "tags": param(),
            "budget": param(),
            "levels": param("0 identity, 1 key, 2 recent, 3 search."),
            "deep": param("Slower, more thorough search."),
            "include_superseded": param("Also replaced drawers."),
        },
        extra={"scope": SCOPE},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="wake_up",
        op="memory.wake_up",
        description=(
            "Call once at the start of a task: the palace's identity and key memories."
        ),
        params={"budget": param()},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="forget",
        op="memory.forget",
        description=(
            "Move a wrong or accidental drawer to the trash (a human can restore it); to "
            "correct one, remember the right text with supersedes."
        ),
        params={"id": param("Drawer id, e.g. 42 for '#42'.")},
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="get",
        op="memory.get",
        description="Read drawers whole: recall and list_drawers show long ones cut short.",
        params={"max_tokens": param("Of the whole answer; longer texts are cut.",
                                    default=GET_TOKENS, minimum=GET_MIN_TOKENS,
                                    maximum=GET_MAX_TOKENS)},
        extra={"ids": IDS},
        extra_required=("ids",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_drawers",
        op="memory.list",
        description="Browse this palace's drawers newest first, e.g. to review or tidy them.",
        params={"wing": param(), "room": param(), "limit": param(default=LIST_PAGE),
                "offset": param()},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="rooms",
        op="palace.info",
        description=(
            "This palace's wings and rooms with drawer counts (file memories under these "
            "names), and whether recall is semantic or keyword-only."
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="upkeep",
        description=(
            "update: edit a drawer; consolidate: sum up a room; health: stale/duplicates; "
            "conflicts, resolve: contradictions; forget: trash by selectors; merge: join ids; "
            "restore: undo a batch. forget/merge list unless dry_run=false."
        ),
        params={
            "id": param(op=_EDIT),
            "text": param("update: the new text.", op=_EDIT),
            "importance": param(op=_EDIT, **_IMPORTANCE),
            "tags": param(op=_EDIT),
            "room": param("To consolidate, forget, or move to.", op=_EDIT),
            "wing": param(op=_EDIT),
            "summary": param(op="memory.consolidate"),
            "resolution": param("supersede (the older), keep_both, or merge (with text).",
                                op="memory.resolve_conflict"),
            "source": param(op=_BULK),
            "older_than": param(op=_BULK, kind="str"),
            "query": param(op=_BULK),
            "dry_run": param("false: do it.", op=_BULK),
            "expect": param("forget: a dry run's selection; else refused.", op=_BULK),
            "ids": param(op="memory.merge"),
            "batch": param("restore: what forget/merge said.", op="memory.restore_batch"),
        },
        actions=UPKEEP_ACTIONS,
        extra={"action": UPKEEP_ACTION},
        extra_required=("action",),
        destructive=True,  # forget and merge move drawers to the trash
    ),
    # -- knowledge graph: temporal facts about entities -------------------------------------
    ToolSpec(
        name="kg_assert",
        op="graph.assert",
        description=(
            "Record a fact ('Alice works_at Acme') or a relation ('web depends_on api'); a "
            "new value replaces the old one, except for relations."
        ),
        params={
            "subject": _name(),
            "predicate": param("snake_case, e.g. works_at, version, depends_on.",
                               minLength=1),
            "object": param("An entity, or a value with literal=true.", minLength=1),
            "literal": param("object is a value, not an entity."),
            "multi": param("true: keep the old values too (e.g. uses)."),
            "valid_from": _when("ISO 8601; default now."),
            "source_url": param(),
            "type": param("Subject's type, e.g. person.", op="graph.describe"),
            "definition": param("What the subject is.", op="graph.describe"),
            "labels": param("Subject's labels.", op="graph.describe"),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="kg_query",
        op="graph.query",
        description=(
            "Look up an entity before answering who/what/where questions: its facts now, at "
            "as_of, its history, or (depth) what is linked to it."
        ),
        params={
            "subject": _name(),
            "as_of": _when("Facts valid at this time (ISO 8601)."),
            "relation": param("With depth: only this predicate.", op="graph.neighbors"),
        },
        extra={"history": HISTORY, "depth": DEPTH},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kg_invalidate",
        op="graph.invalidate",
        description=(
            "End a fact that stopped being true with no replacement (kept as history); to "
            "change a value, kg_assert the new one."
        ),
        params={
            "id": param("Fact id, e.g. 12 for '#12'."),
            "at": _when("ISO 8601; default now."),
        },
        idempotent=True,
    ),
    # -- memoirs: curated concepts ----------------------------------------------------------
    ToolSpec(
        name="memoir",
        description=(
            "Curated knowledge: concepts (definition, labels) in named memoirs, linked by "
            "typed relations; refine, rename or delete them as you learn. search spans all "
            "memoirs unless given one."
        ),
        params={
            "memoir": param(op=_ADD),
            "name": param("Concept name.", op=_ADD, minLength=1),
            "definition": param(op=_ADD, minLength=1),
            "labels": param("e.g. domain:auth", op=_ADD),
            "sources": param("Drawer ids it is from.", op=_ADD),
            "relation": param(op=_LINK, enum=TYPED_RELATIONS),
            "to": param("Linked concept.", op=_LINK),
            "query": param(op="memoir.search"),
            "label": param(op="memoir.search"),
            "depth": param(op="memoir.inspect"),
            "description": param(op="memoir.create"),
            "consolidation_threshold": param("update: sources to flag.", op="memoir.update"),
            "new_name": param("rename_concept: to this.", op="memoir.rename_concept",
                              minLength=1),
        },
        actions=MEMOIR_ACTIONS,
        extra={"action": ACTION},
        extra_required=("action",),
        destructive=True,  # delete_concept
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}
TOOLSET_OF: dict[str, str] = {tool: name for name, tools in MCP_TOOLSETS.items()
                              for tool in tools}


def tools_of(toolsets: tuple[str, ...]) -> tuple[ToolSpec, ...]:
    """The tools of ``toolsets`` (``palaced.wire.specs.parse_toolsets``), in ``TOOLS`` order."""
    return tuple(spec for spec in TOOLS if TOOLSET_OF[spec.name] in toolsets)

# Tools of earlier versions: a call names what to use instead (an agent's stale plan or a
# prompt written for the old surface then corrects itself).
RETIRED: dict[str, str] = {
    "recall_all": "call recall with scope='all'",
    "kg_timeline": "call kg_query with history=true",
    "kg_neighbors": "call kg_query with subject=entity and depth (and relation to follow one "
                    "predicate)",
    "kg_link": "call kg_assert with subject=a, predicate=relation, object=b",
    "status": "the daemon's status is `palace status` in a shell; tool errors say what to do",
    "palace_info": "call rooms for the wings, rooms and recall mode; `palace info` in a "
                   "shell shows the rest",
    "list_palaces": "recall with scope='all' searches every palace; `palace list` in a shell "
                    "lists them",
}
