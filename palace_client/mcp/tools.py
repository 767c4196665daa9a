"""The MCP tools: names, agent-facing descriptions and behaviour hints.

``tools/list`` is answered from ``TOOLS``; ``toolbox.Toolbox`` runs them. Each tool names the
daemon op it runs, and its properties are that op's arguments (``param``): their JSON Schemas
(types, bounds, defaults) are generated from ``palaced.specs`` by ``schema.op_property``, so
only the wording lives here.
"""

from __future__ import annotations

from palaced.vocab import TYPED_RELATIONS

from .schema import Param, ToolSpec, param

_WING = param("Broad area the drawer belongs to, e.g. 'backend', 'people', 'ops'.")
_ROOM = param("Topic inside the wing, e.g. 'auth', 'deploy', 'release-process'.")
_TAGS = param("Free-form labels; a drawer matches when it has all the given tags.")
_TOP_K = param("Maximum number of drawers to return.")
_BUDGET = param("Token budget for the returned context.")
_QUERY = param("What you want to know, in natural language or keywords.", minLength=1)

_ENTITY = ("An entity name: a person, project, service, library, concept... Case and spacing "
           "do not matter ('Acme Corp' = 'acme  corp').")
_WHEN = "ISO 8601 date or time, e.g. '2024-03-01' or '2024-03-01T09:30:00Z'"


def _entity(description: str = _ENTITY) -> Param:
    """An entity name argument (never empty)."""
    return param(description, minLength=1)


def _when(description: str) -> Param:
    """A time argument, offered to agents as an ISO 8601 string (the daemon also takes ms)."""
    return param(description, kind="str")


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="remember",
        title="Remember",
        op="memory.remember",
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
        params={
            "text": param("The memory itself, self-contained and specific.", minLength=1),
            "room": _ROOM,
            "wing": _WING,
            "tags": _TAGS,
            # Agents get the numeric scale; the daemon also takes the names of the presets
            # (palaced.vocab.IMPORTANCE_PRESETS), which are points on it.
            "importance": param("0 = trivia, 0.5 = normal, 1 = critical; important drawers "
                                "surface first in wake_up and recall.",
                                kind="float", minimum=0.0, maximum=1.0),
            "occurred_at": _when("When it happened, ISO 8601 (e.g. '2025-03-14' or "
                                 "'2025-03-14T09:30:00Z'); defaults to now."),
            "supersedes": param("Id of the drawer this memory replaces (e.g. 42 for '#42'): the "
                                "old drawer is kept as history but hidden from recall. Use it "
                                "instead of forget when a memory became wrong or outdated."),
            "ttl": param("Time to live for short-lived memories, e.g. '90s', '15m', '12h', "
                         "'7d', '2w' or a number of seconds; the drawer stops being recalled "
                         "after that. Omit for permanent memories.", kind="str"),
            "dedup": param("Merge a near-duplicate of an existing drawer in the same wing/room "
                           "into that drawer instead of storing another (default true, false "
                           "when `supersedes` is given). Set false to store it anyway."),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="recall",
        title="Recall",
        op="memory.recall",
        description=(
            "Search this project's palace for memories relevant to a query (hybrid keyword + "
            "semantic search) and return them as context sections with drawer ids, rooms and "
            "scores. Call it before answering questions about past work, decisions or "
            "preferences, and before redoing something that may have been done already. "
            "Narrow with wing/room/tags; use `levels` and `budget` to control how much context "
            "comes back."
        ),
        params={
            "query": _QUERY,
            "budget": _BUDGET,
            "levels": param("Context levels to include: 0 identity, 1 essential story (most "
                            "important/recent), 2 recent drawers of the given room/tags, 3 "
                            "search results for the query. Default: all."),
            "deep": param("Search more thoroughly (slower); use when a normal recall missed "
                          "something you expect to exist."),
            "top_k": _TOP_K,
            "wing": _WING,
            "room": _ROOM,
            "tags": _TAGS,
            "include_superseded": param("Also return drawers that were replaced via remember's "
                                        "`supersedes` (the history of a memory)."),
        },
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="recall_all",
        title="Recall across all palaces",
        op="memory.recall",
        description=(
            "Search every palace on this machine (all projects), not just this project's, and "
            "return the best matches merged by score, each labelled with its palace. Use it "
            "for knowledge that may have been stored while working on another project."
        ),
        params={"query": _QUERY, "top_k": _TOP_K},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="wake_up",
        title="Wake up",
        op="memory.wake_up",
        description=(
            "Load the essential context of this project's palace: its identity and the most "
            "important and recent memories, packed into a token budget. Call it once at the "
            "start of a session or task, before doing anything else."
        ),
        params={"budget": _BUDGET},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="forget",
        title="Forget",
        op="memory.forget",
        description=(
            "Permanently delete one drawer from this project's palace by its id (as shown by "
            "recall or list_drawers). Use it for memories that are wrong and worth no history "
            "(mistakes, secrets stored by accident); to correct or update a memory while "
            "keeping its history, remember the new text with `supersedes` instead."
        ),
        params={"id": param("The drawer id, e.g. 42 for '#42'.")},
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_drawers",
        title="List drawers",
        op="memory.list",
        description=(
            "List the drawers of this project's palace, newest first, optionally only one wing "
            "or room. Pages with limit/offset; the result says which offset comes next."
        ),
        params={
            "wing": _WING,
            "room": _ROOM,
            "limit": param("Page size."),
            "offset": param("Number of drawers to skip."),
        },
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_palaces",
        title="List palaces",
        op="palace.list",
        description="List every palace (one per project) stored on this machine.",
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="palace_info",
        title="Palace info",
        op="palace.info",
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
        op="daemon.status",
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
        op="graph.assert",
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
        params={
            "subject": _entity("The entity the fact is about, e.g. 'Alice'."),
            "predicate": param("The property or relation in snake_case, e.g. 'works_at', "
                               "'owner', 'version', 'deployed_on' ('worksAt' and 'works at' "
                               "are normalised to 'works_at').", minLength=1),
            "object": param("The value: another entity's name, or with literal=true a plain "
                            "value such as a version, number or URL.", minLength=1),
            "valid_from": _when(f"When the fact became true, {_WHEN}; default now. Use the "
                                "real date when you learn a fact late."),
            "confidence": param("How sure you are, 0-1."),
            "literal": param("Store object as a plain value, not an entity; use it for "
                             "versions, numbers, URLs and free text."),
            "source_url": param("Where the fact comes from (issue, doc, commit URL)."),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="kg_query",
        title="Query facts",
        op="graph.query",
        description=(
            "List the facts about an entity (as subject) that are true now, or that were true "
            "at `as_of`. Call it before answering who/what/where questions about a person, "
            "project or system, e.g. 'where does Alice work?' or 'which database did "
            "payments use in March?'. Each line shows the fact id (for kg_invalidate) and its "
            "validity interval."
        ),
        params={
            "subject": _entity("The entity to look up, e.g. 'Alice'."),
            "as_of": _when(f"Show the facts valid at this time instead of now, {_WHEN}."),
        },
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kg_timeline",
        title="Fact timeline",
        op="graph.timeline",
        description=(
            "Show the full history of an entity, oldest first: every fact where it is subject "
            "or object, closed ones included, with validity intervals. Use it to see how "
            "something changed over time or why a fact is no longer current."
        ),
        params={"subject": _entity("The entity, e.g. 'Alice'.")},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kg_invalidate",
        title="Invalidate a fact",
        op="graph.invalidate",
        description=(
            "End an active fact that stopped being true without a replacement (Alice left "
            "Acme and has no new employer yet; a dependency was removed). Not destructive: "
            "the fact is kept as history with its interval closed at `at`, so kg_timeline "
            "and kg_query with an earlier as_of still show it. To replace a value, just "
            "kg_assert the new one. Invalidating a fact that is already closed changes nothing."
        ),
        params={
            "id": param("The fact id, e.g. 12 for '#12' as shown by kg_query."),
            "at": _when(f"When the fact stopped being true, {_WHEN}; default now."),
        },
        idempotent=True,
    ),
    ToolSpec(
        name="kg_link",
        title="Link concepts",
        op="graph.link",
        description=(
            "Relate two concepts with a typed relation: 'checkout depends_on payments-api', "
            "'auth-service part_of platform', 'GraphQL alternative_to REST', 'RFC-12 "
            "superseded_by RFC-31'. An entity can have many links of the same relation at "
            "once (superseded_by excepted: one successor at a time). Explore links with "
            "kg_neighbors. For any other predicate, or for a literal value, use kg_assert."
        ),
        params={
            "a": _entity("The concept the relation starts from."),
            # The daemon relates with any predicate; this tool offers the typed relations
            # (kg_assert takes the others).
            "relation": param("How a relates to b (a depends_on b, a part_of b...).",
                              enum=TYPED_RELATIONS),
            "b": _entity("The concept the relation points to; not a itself."),
        },
        idempotent=True,
        argument_hint="For a predicate that is not a typed relation, use kg_assert.",
    ),
    ToolSpec(
        name="kg_neighbors",
        title="Explore neighbours",
        op="graph.neighbors",
        description=(
            "Walk the knowledge graph around an entity: the entities reachable within "
            "`depth` hops over current entity-to-entity facts (both directions), and the "
            "facts between them. Use it for impact and context questions, e.g. 'what depends "
            "on payments-api?' or 'what is this service part of?'."
        ),
        params={
            "entity": _entity("Where to start, e.g. 'payments-api'."),
            "depth": param("How many hops to follow."),
            "relation": param("Follow only this relation or predicate, e.g. 'depends_on'."),
        },
        read_only=True,
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}
