"""The MCP tools: names, agent-facing descriptions and behaviour hints.

``tools/list`` is answered from ``TOOLS``; ``toolbox.Toolbox`` runs them. Each tool names the
daemon op it runs, and its properties are that op's arguments (``param``): their JSON Schemas
(types, bounds, defaults) are generated from ``palaced.specs`` by ``schema.op_property``, so
only the wording lives here. The two tool-only properties (``recall``'s ``scope`` and
``kg_query``'s ``history``) choose how the tool runs its op and are written out in ``extra``.

Every ``tools/list`` costs tokens in every agent session, so the surface is kept lean: nine
tools, one-line descriptions that say when to call each, short property texts
(``tests/test_mcp_bridge.py`` prints the cl100k count and holds it to 1,500 tokens).
Tools that were folded into others are listed in ``RETIRED`` with what to call instead.
"""

from __future__ import annotations

from typing import Any

from .schema import Param, ToolSpec, param

_WING = param("Area, e.g. 'backend'.")
_ROOM = param("Topic, e.g. 'auth'.")


def _name(description: str = "") -> Param:
    """An entity name argument (never empty)."""
    return param(description, minLength=1)


def _when(description: str) -> Param:
    """A time argument, offered to agents as an ISO 8601 string (the daemon also takes ms)."""
    return param(description, kind="str")


SCOPES = ("palace", "all")
SCOPE: dict[str, Any] = {"type": "string", "enum": list(SCOPES), "default": "palace",
                         "description": "'all': every project's palace."}
HISTORY: dict[str, Any] = {"type": "boolean", "default": False,
                           "description": "All facts ever, closed ones too, oldest first."}

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
            # Agents get the numeric scale; the daemon also takes the names of the presets
            # (palaced.vocab.IMPORTANCE_PRESETS), which are points on it.
            "importance": param("1 = critical.",
                                kind="float", minimum=0.0, maximum=1.0),
            "occurred_at": _when("When it happened (ISO 8601); default now."),
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
            "update a memory, remember it with supersedes instead."
        ),
        params={"id": param("Drawer id, e.g. 42 for '#42'.")},
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_drawers",
        op="memory.list",
        description="Browse this palace's drawers newest first, e.g. to review or tidy them.",
        params={"wing": param(), "room": param(), "limit": param(), "offset": param()},
        read_only=True,
        idempotent=True,
    ),
    # -- knowledge graph: temporal facts about entities -------------------------------------
    ToolSpec(
        name="kg_assert",
        op="graph.assert",
        description=(
            "Record a changing fact or a relation ('Alice works_at Acme', 'web depends_on "
            "api'); a new value replaces the old one, except for relations (depends_on, "
            "part_of, related_to...)."
        ),
        params={
            "subject": _name(),
            "predicate": param("snake_case, e.g. works_at, version, depends_on.",
                               minLength=1),
            "object": param("An entity, or a value with literal=true.", minLength=1),
            "literal": param("object is a value (version, URL...), not an entity."),
            "multi": param("true: keep the old values too (e.g. uses)."),
            "valid_from": _when("When it became true (ISO 8601); default now."),
                        "source_url": param(),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="kg_query",
        op="graph.query",
        description=(
            "Look up an entity's facts before answering who/what/where questions: true now, "
            "at as_of, or its whole history."
        ),
        params={
            "subject": _name(),
            "as_of": _when("Facts valid at this time (ISO 8601)."),
        },
        extra={"history": HISTORY},
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
            "at": _when("When it ended (ISO 8601); default now."),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="kg_neighbors",
        op="graph.neighbors",
        description=(
            "Explore what is linked to an entity within depth hops, e.g. what depends on a "
            "service."
        ),
        params={
            "entity": _name(),
            "depth": param(),
            "relation": param("Follow only this predicate, e.g. depends_on."),
        },
        read_only=True,
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}

# Tools of earlier versions: a call names what to use instead (an agent's stale plan or a
# prompt written for the old surface then corrects itself).
RETIRED: dict[str, str] = {
    "recall_all": "call recall with scope='all'",
    "kg_timeline": "call kg_query with history=true",
    "kg_link": "call kg_assert with subject=a, predicate=relation, object=b",
    "status": "the daemon's status is `palace status` in a shell; tool errors say what to do",
    "palace_info": "every result names its palace; `palace info` in a shell shows the counts",
    "list_palaces": "recall with scope='all' searches every palace; `palace list` in a shell "
                    "lists them",
}
