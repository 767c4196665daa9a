"""Shared vocabulary: names and limits that the daemon, the CLI, the client and the MCP bridge
all speak.

Leaf module (stdlib only), importable by thin clients: the relation names, importance presets,
recall levels and the size limits of graph values are defined here once, and every side reads
them from here instead of keeping its own copy.
"""

from __future__ import annotations

# -- importance -------------------------------------------------------------------------------
IMPORTANCE_PRESETS: dict[str, float] = {"critical": 1.0, "high": 0.8, "medium": 0.5, "low": 0.2}
DEFAULT_IMPORTANCE = 0.5

# -- upkeep defaults --------------------------------------------------------------------------
DEFAULT_PRUNE_THRESHOLD = 0.05  # prune drawers whose decayed weight fell below this
STALE_DAYS = 30.0  # health: a drawer unused this long is stale
HEALTH_LIST_LIMIT = 50  # health: at most this many drawers listed per report

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

# -- labels -----------------------------------------------------------------------------------
MAX_FIELD_CHARS = 200  # wing, room, tag and source labels

# -- policy -----------------------------------------------------------------------------------
# What a palace's policy grants, each to a list of agent globs (default: every agent):
# write (store and change memories and facts), delete (forget, purge, prune, delete the
# palace), admin (change the policy).
PERMISSIONS: tuple[str, ...] = ("write", "delete", "admin")
MAX_POLICY_GLOBS = 64  # agent globs per permission
