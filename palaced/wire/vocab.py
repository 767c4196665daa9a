"""Shared vocabulary: names and limits that the daemon, the CLI, the client and the MCP bridge
all speak.

Leaf module (stdlib only), importable by thin clients: the relation names, importance presets,
recall levels and the size limits of graph values are defined here once, and every side reads
them from here instead of keeping its own copy.
"""

from __future__ import annotations

import re

# -- embedding model -------------------------------------------------------------------------
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # fastembed's name; 384 dimensions

# -- importance -------------------------------------------------------------------------------
IMPORTANCE_PRESETS: dict[str, float] = {"critical": 1.0, "high": 0.8, "medium": 0.5, "low": 0.2}
DEFAULT_IMPORTANCE = 0.5

# -- upkeep defaults --------------------------------------------------------------------------
DEFAULT_PRUNE_THRESHOLD = 0.05  # prune drawers whose decayed weight fell below this
STALE_DAYS = 30.0  # health: a drawer unused this long is stale
HEALTH_LIST_LIMIT = 50  # health: at most this many drawers listed per report

# -- backups --------------------------------------------------------------------------------
MAX_BACKUP_KEEP = 1_000  # backups kept per palace, at most
MAX_PATH_CHARS = 4_096  # a backup directory's path (PATH_MAX on Linux)

# -- knowledge graph --------------------------------------------------------------------------
# The typed relations between entities/concepts. All but superseded_by are multi-valued (a
# subject may depend_on several things); any other predicate holds one value at a time.
TYPED_RELATIONS: tuple[str, ...] = (
    "part_of", "depends_on", "related_to", "contradicts", "refines", "alternative_to",
    "caused_by", "instance_of", "superseded_by",
)
MULTI_VALUED: frozenset[str] = frozenset(TYPED_RELATIONS) - {"superseded_by"}

MAX_NAME_CHARS = 200  # an entity name
MAX_PREDICATE_CHARS = 64
MAX_VALUE_CHARS = 2_000  # a fact's object or a source url
MAX_DEPTH = 6  # graph.neighbors depth
MAX_PATH_DEPTH = 12  # graph.path max_depth
MAX_LIMIT = 1_000  # rows a graph listing returns
MAX_OVERVIEW_FACTS = 5_000  # facts graph.overview returns (a drawing of the graph)
MAX_QUERY_CHARS = 10_000  # a search query (recall, entity and concept search)
MAX_ENTITY_DEFINITION_CHARS = 4_000  # an entity's definition
MAX_ENTITY_LABELS = 32  # labels of one entity
MAX_ENTITY_LABEL_CHARS = 64  # one entity label, and an entity type

# -- memoirs (curated concept graphs) ----------------------------------------------------------
# A new concept's confidence, and how much each refinement that changes it adds (capped at 1):
# ICM's rule, so that a concept refined 5 times from the default is fully trusted.
DEFAULT_CONCEPT_CONFIDENCE = 0.5
REFINE_CONFIDENCE_STEP = 0.1
# A concept citing at least this many source drawers is flagged ``consolidate`` (its sources
# are worth folding into one summary drawer); each memoir sets its own.
DEFAULT_CONSOLIDATION_THRESHOLD = 50
MAX_CONSOLIDATION_THRESHOLD = 1_000_000
MAX_DEFINITION_CHARS = 10_000  # a concept's definition
MAX_DESCRIPTION_CHARS = 4_000  # a memoir's description
MAX_CONCEPT_LABELS = 32  # labels of one concept
MAX_LABEL_CHARS = 128  # one ``namespace:value`` label
MAX_SOURCES = 1_000  # source drawers one request may cite
LABEL_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")  # the part before the colon
DEFAULT_LABEL_NAMESPACE = "tag"  # a label given without a namespace (``urgent`` -> ``tag:urgent``)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s\-]+")


def snake_case(text: str) -> str:
    """``text`` in snake_case: ``dependsOn``, ``depends-on``, ``Depends On`` -> ``depends_on``.

    Never raises; the result may be empty or hold other characters than word characters.
    """
    out = _SEPARATORS.sub("_", _CAMEL.sub("_", text.strip())).lower()
    return re.sub(r"_+", "_", out).strip("_")


_RELATIONS_SQUASHED = {r.replace("_", ""): r for r in TYPED_RELATIONS}


def typed_relation(text: str) -> str | None:
    """The typed relation ``text`` names (snake_case, camelCase, hyphens, spaces, or the words
    run together as ``dependson``), or None when it names none of TYPED_RELATIONS."""
    name = snake_case(text)
    if name in TYPED_RELATIONS:
        return name
    return _RELATIONS_SQUASHED.get(name.replace("_", ""))


# -- labels -----------------------------------------------------------------------------------
MAX_FIELD_CHARS = 200  # wing, room, tag and source labels

# -- transcripts ------------------------------------------------------------------------------
# The session transcript formats ``capture.transcript`` reads (its ``format``), one per coding
# agent: Claude Code's JSONL, Codex CLI's rollout JSONL, Gemini CLI's chat JSONL, GitHub
# Copilot CLI's events.jsonl (docs/capture.md). The CLI, the MCP bridge and the hooks name
# them from here.
TRANSCRIPT_FORMATS: tuple[str, ...] = ("claude", "codex", "gemini", "copilot")
DEFAULT_TRANSCRIPT_FORMAT = "claude"

# -- policy -----------------------------------------------------------------------------------
# What a palace's policy grants, each to a list of agent globs (default: every agent):
# write (store and change memories and facts), delete (forget, purge, prune, delete the
# palace), admin (change the policy).
PERMISSIONS: tuple[str, ...] = ("write", "delete", "admin")
MAX_POLICY_GLOBS = 64  # agent globs per permission

# -- hooks ------------------------------------------------------------------------------------
# ``[hooks]`` of the config file, read by ``palace hook prompt`` (palace_client.hooks.prompt)
# and checked by the daemon (palaced.config.settings.SCHEMA): key -> (default, low, high),
# ``low < value <= high`` (a budget of 0 would inject nothing: turn the hook off instead).
HOOK_SETTINGS: dict[str, tuple[float, float, float]] = {
    "prompt_budget": (300, 0, 4_000),  # tokens a prompt's injected memories may take
    "prompt_timeout_s": (1.0, 0, 10.0),  # the prompt hook's whole wall time
}
# Drawer ids a recall may be asked to leave out (``memory.recall`` ``exclude``): what a
# session was already shown. The prompt hook keeps at most this many per session.
MAX_EXCLUDE = 1_000


# -- agents' hooks ----------------------------------------------------------------------------
# Gemini CLI 0.61 puts the SessionStart hooks' context in front of a session's first prompt,
# in one text part of its chat file and in its BeforeAgent hook's ``prompt`` (seen through the
# real binary, tests/e2e/agents): capture and the prompt hook take the words typed.
_HOOK_CONTEXT = re.compile(r"^\s*<hook_context>.*?</hook_context>\s*", re.S)


def typed_prompt(prompt: str) -> str:
    """``prompt`` without the ``<hook_context>`` block an agent put in front of it."""
    return _HOOK_CONTEXT.sub("", prompt, count=1)
