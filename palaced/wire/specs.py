"""Op specs: every op's name, arguments (types, bounds, defaults), palace need and retry class.

Leaf module (stdlib + the wire leaves ``args``, ``errors``, ``vocab``, ``protocol`` and
``export_format``), importable by thin clients: this is the one definition of what each op
accepts: what a spec is (``OpSpec``, ``RetryRule``), then every op's, the memoir ops' last. The
daemon validates requests with ``args.decode_args`` against :data:`SPECS` before any handler runs
(bad input is refused with INVALID_ARGS and changes nothing); the CLI, the Python client and the MCP
bridge derive their options, keywords and JSON Schemas from the same specs, so they cannot drift
from the daemon.

Retrying after a broken connection (``OpSpec.retry``, read by the client)
--------------------------------------------------------------------------
A client whose connection breaks cannot tell whether the daemon applied the request. If the
request was never written whole (connect or send failed), the daemon cannot have applied it
and any op may be sent again. If it was written and the reply was lost (e.g. the daemon was
killed right after committing), the retry lands on a *new* daemon process, so no request-id
memory in the daemon could recognise it. Correctness must come from the op itself, so every
op declares its retry class in its spec (``retry`` has no default, so none can be missing):

* ``SAFE``: reads, and writes idempotent by nature (``memory.remember`` dedups by content
  hash and returns the same id; ``memory.update`` finds its values in place and changes
  nothing; ``graph.assert`` returns an already active fact unchanged;
  ``graph.invalidate`` returns a closed fact unchanged; ``palace.reembed`` recomputes the
  same state). Sent again as is.
* ``CONVERGE``: writes whose retry would fail only *because* the lost attempt succeeded.
  The retry is sent with ``retry_args`` merged in (``palace.create`` with ``exist_ok``) and
  the error ``done_code`` on a retry means "already done": the client reports success
  (``memory.forget`` → MEMORY_NOT_FOUND, ``palace.delete`` → PALACE_NOT_FOUND). The price:
  if the lost request in fact never ran and the drawer/palace was already absent (or another
  client created the palace meanwhile), the retry still reports success; the state the
  caller asked for holds either way.
* ``NEVER``: writes whose second run would report something else than the first did
  (``memory.prune`` would prune nothing, ``memory.consolidate`` would find nothing left) or
  that must not reach a successor daemon (``daemon.stop``). After a lost reply the client
  raises ``OutcomeUnknown`` instead of guessing. Ops missing from the table count as NEVER.

A reply that does not arrive within the client's deadline is a lost reply the client does not
resend (a stalled daemon would make the caller wait twice): ``SAFE`` ops raise ``Timeout``
(retryable: sending again is correct), ``CONVERGE`` and ``NEVER`` ops ``OutcomeUnknown``.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from palaced.wire.args import MAX_ID, MAX_OFFSET, MAX_TIME_CHARS, NO_LIMIT, Arg
from palaced.wire.errors import (
    ConceptNotFound,
    InvalidArgs,
    MemoirNotFound,
    MemoryNotFound,
    PalaceNotFound,
)
from palaced.wire.export_format import MAX_KEY_CHARS
from palaced.wire.protocol import HELLO_OP
from palaced.wire.vocab import (
    DEFAULT_CONCEPT_CONFIDENCE,
    DEFAULT_CONSOLIDATION_THRESHOLD,
    DEFAULT_IMPORTANCE,
    DEFAULT_PRUNE_THRESHOLD,
    DEFAULT_TRANSCRIPT_FORMAT,
    HEALTH_LIST_LIMIT,
    MAX_BACKUP_KEEP,
    MAX_CONCEPT_LABELS,
    MAX_CONSOLIDATION_THRESHOLD,
    MAX_DEFINITION_CHARS,
    MAX_DEPTH,
    MAX_DESCRIPTION_CHARS,
    MAX_ENTITY_DEFINITION_CHARS,
    MAX_ENTITY_LABEL_CHARS,
    MAX_ENTITY_LABELS,
    MAX_EXCLUDE,
    MAX_FIELD_CHARS,
    MAX_LABEL_CHARS,
    MAX_LIMIT,
    MAX_NAME_CHARS,
    MAX_OVERVIEW_FACTS,
    MAX_PATH_CHARS,
    MAX_PATH_DEPTH,
    MAX_POLICY_GLOBS,
    MAX_PREDICATE_CHARS,
    MAX_QUERY_CHARS,
    MAX_SOURCES,
    MAX_VALUE_CHARS,
    PERMISSIONS,
    STALE_DAYS,
    TRANSCRIPT_FORMATS,
)


class Retry(enum.Enum):
    """How a client may resend an op whose reply was lost."""

    SAFE = "safe"
    CONVERGE = "converge"
    NEVER = "never"


DoneResult = Callable[["str | None", Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class RetryRule:
    """The retry class of one op and, for CONVERGE, how to resend and read the answer."""

    kind: Retry
    # CONVERGE: the error code that, on a retry, means the lost attempt already did it ...
    done_code: int | None = None
    # ... and the result reported then, from the request's palace and args.
    done_result: DoneResult | None = None
    # CONVERGE: args merged into the resent request.
    retry_args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


SAFE = RetryRule(Retry.SAFE)
NEVER = RetryRule(Retry.NEVER)


@dataclass(frozen=True)
class OpSpec:
    """What one op accepts: its arguments, whether it needs a palace, and how it behaves.

    ``read_only`` ops change nothing; ``retry`` says whether and how a client may resend the
    op after a lost reply (no default: every op must decide). ``permission`` is what the
    palace's policy must grant the caller (``vocab.PERMISSIONS``; "" for none).
    """

    name: str
    args: Mapping[str, Arg] = field(default_factory=dict)
    palace: str = "none"  # "none" | "required" | "optional" (none: every palace)
    doc: str = ""
    read_only: bool = False
    retry: RetryRule = field(kw_only=True)
    permission: str = field(default="", kw_only=True)


# -- the ops ---------------------------------------------------------------------------------
MAX_TTL_S = 3_155_760_000  # 100 years of 365.25 days: "forever" is no ttl, not a huge one
MAX_CONSOLIDATE_IDS = 10_000
MAX_BUDGET = 200_000
MAX_TOP_K = 1_000

_LABEL = Arg("str", max_len=MAX_FIELD_CHARS)
_TAGS = Arg("strlist", default=[], max_len=64)
# Retired drawers stay out of recall unless asked for: superseded by a correction, or
# consolidated into a summary that takes their place.
_RETIRED = Arg("bool", default=False,
               help="also retired drawers: superseded, or consolidated into a summary")
_FOR_AGENT = Arg("bool", default=False,
                 help="the reader is an agent with the MCP get tool: excerpts name it")
_WHEN = Arg("str|int", max_len=MAX_TIME_CHARS)
# A drawer's date (occurred_at) within [since, until): recall's and list's time filter.
_DATED: dict[str, Arg] = {
    "since": Arg("str|int", max_len=MAX_TIME_CHARS, help="only drawers dated at or after "
                 "this time (ISO 8601, epoch ms, or a duration back from now: 7d)"),
    "until": Arg("str|int", max_len=MAX_TIME_CHARS, help="only drawers dated before this time"),
}
_ID = Arg("int", required=True, min=1, max=MAX_ID)
_NAME = Arg("str", required=True, max_len=MAX_NAME_CHARS)
_PREDICATE = Arg("str", required=True, max_len=MAX_PREDICATE_CHARS)
_THRESHOLD = Arg("float", default=DEFAULT_PRUNE_THRESHOLD, min=0.0, max=1.0)
_IMPORTER = Arg("str", required=True, max_len=64)
_KEY = Arg("str", required=True, max_len=MAX_KEY_CHARS)
MAX_EXPORT_PAGE = 10_000
MAX_BULK = 100_000  # drawers one bulk forget may trash
BULK_MAX_DEFAULT = 1_000  # past this a bulk forget must be confirmed by a larger max_drawers
MAX_MERGE = 100  # drawers one merge joins

DRAWER_ARGS: dict[str, Arg] = {
    "text": Arg("str", required=True, max_len=NO_LIMIT, content=True),
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

# Each item of memory.remember_many is decoded like memory.remember's arguments.
REMEMBER_MANY_ITEM = OpSpec("memory.remember_many item", DRAWER_ARGS, retry=SAFE)

_R = "required"
_MODEL = Arg("str", required=True, max_len=200,
             help="a model of the catalog by short or fastembed name (`palace model list`), "
                  "or another fastembed model name")
_O = "optional"
_ALL: tuple[OpSpec, ...] = (
    # daemon
    OpSpec("daemon.status", read_only=True, retry=SAFE,
           doc="Version, pid, uptime, socket, model and tokenizer state, SQLite's memory "
               "(sqlite_mb), per-palace counts."),
    # A resend would stop (or first auto-start) the successor daemon.
    OpSpec("daemon.stop", retry=NEVER,
           doc="Stop gracefully: finish requests, save indexes, close databases."),
    # palaces
    OpSpec("palace.list", read_only=True, retry=SAFE,
           doc="Every palace: name, path, whether it is open."),
    OpSpec("palace.create", {
        "exist_ok": Arg("bool", default=False),
        "store": Arg("str", max_len=2000,
                     help="a team palace in PostgreSQL: a libpq URL (no password) or the name "
                          "of a [stores.NAME] connection of config.toml"),
    }, palace=_R,
           retry=RetryRule(Retry.CONVERGE, retry_args=MappingProxyType({"exist_ok": True})),
           doc="Create a palace (its directory, database and identity file); with `store`, a "
               "team palace in PostgreSQL, or attach to it when another daemon created it "
               "(`created` false; docs/teams.md)."),
    OpSpec("palace.delete", {
        "purge": Arg("bool", default=False,
                     help="a team palace: also drop its schema, every daemon's data of it"),
    }, palace=_R, doc="Delete a palace and every drawer in it; a team palace is detached "
                      "from this daemon (its data stays in PostgreSQL) unless `purge`.",
           permission="delete",
           retry=RetryRule(Retry.CONVERGE, done_code=PalaceNotFound.code,
                           done_result=lambda palace, args: {"deleted": palace})),
    OpSpec("palace.info", palace=_R, read_only=True, retry=SAFE,
           doc="Counts (drawers, vectors, `pending_embeddings` and `pending_chunks` awaiting "
               "vectors), embedder identity, index agreement and how it was loaded "
               "(`index_load`, `index_unsaved`), the keyword engine's state (`keywords`), "
               "rooms, identity text, and what a recall runs now: `recall_mode` hybrid or "
               "keyword (`keyword_reason` says why)."),
    OpSpec("palace.reembed", palace=_R, retry=SAFE, permission="write",
           doc="Re-embed every drawer with the daemon's current model now and switch the "
               "palace to it (a background re-embedding does it anyway after a model change)."),
    # export and import (docs/export-format.md); an import skips records already imported.
    OpSpec("palace.export", {
        "cursor": Arg("str", max_len=64, help="where the previous page ended (its `next`)"),
        "limit": Arg("int", default=1000, min=1, max=MAX_EXPORT_PAGE),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="One page of the palace's export records (header, identity, drawers, entities, "
            "facts, sources, memoirs, concepts, concept links, end) from `cursor`; `next` is "
            "the cursor of the next page, null after the end record."),
    OpSpec("palace.import_records", {"records": Arg("list", required=True, max_len=NO_LIMIT)},
           palace=_R, retry=SAFE, permission="write",
           doc="Restore a batch of export records into an empty palace (or one this export "
               "was restored into); ids are kept, vectors re-derived in the background."),
    # the import ledger: what each imported file or conversation filed
    OpSpec("source.list", {
        "importer": _IMPORTER,
        "prefix": Arg("str", default="", max_len=MAX_KEY_CHARS),
        "after": Arg("str", max_len=MAX_KEY_CHARS),
        "limit": Arg("int", default=1000, min=1, max=MAX_EXPORT_PAGE),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="The imported sources of an importer whose key starts with `prefix`, by key, "
            "paginated: key, content hash, drawer count."),
    OpSpec("source.sync", {
        "importer": _IMPORTER, "key": _KEY,
        "hash": Arg("str", required=True, max_len=128),
        "items": Arg("list", required=True, max_len=NO_LIMIT),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Make a source's drawers `items` (maps with the `remember` arguments) unless its "
            "recorded `hash` is this one: new ones stored, vanished ones deleted."),
    OpSpec("source.drop", {"importer": _IMPORTER, "key": _KEY}, palace=_R, retry=SAFE,
           permission="delete",
           doc="Forget an imported source: delete the drawers no other source claims."),
    # the model
    OpSpec("model.load", retry=SAFE,
           doc="(Re)load the embedding model from the configured or installed copy, without "
               "a restart; palaces of another model switch to it in the background."),
    OpSpec("model.use", {"model": _MODEL}, retry=SAFE,
           doc="Choose the embedding model: write `[embedder] model` into the config file "
               "(commenting out `model_path`), load it (the old one serves meanwhile), "
               "re-embed every local palace in the background (`reembedding`). Nothing "
               "changes when it does not load, the environment overrides the model, or a "
               "team palace holds the old model's vectors."),
    OpSpec("model.check", {"model": _MODEL}, read_only=True, retry=SAFE,
           doc="Load the installed copy of `model` on the side, embed a probe, drop it: its "
               "identity, dims, source (`palace model import --name`)."),
    # maintenance: repairs converge, a resent backup makes one more snapshot, and a resent
    # restore finds the palace exactly as old as the backup, so it may replace it again.
    OpSpec("palace.doctor", {
        "repair": Arg("bool", default=False, help="fix what can be derived again, then check "
                      "again"),
        "full": Arg("bool", default=False, help="integrity_check instead of quick_check, and "
                    "compare every vector index key and every drawer's topics (slower)"),
    }, palace=_O, retry=SAFE,
        doc="Check the daemon and each palace (or the one given): permissions, SQLite "
            "integrity, full-text and vector indexes, embeddings, schema, disk; `repair` "
            "mends what is derivable."),
    OpSpec("palace.backup", {
        "to": Arg("str", max_len=MAX_PATH_CHARS, help="absolute directory to write backups "
                  "under (default: [backup] dir)"),
        "keep": Arg("int", min=1, max=MAX_BACKUP_KEEP, help="backups of each palace to keep "
                    "(default: [backup] keep)"),
    }, palace=_O, retry=SAFE,
        doc="Snapshot each palace (or the one given) online into `<to>/<palace>/<time>/` "
            "with a manifest; keep the newest `keep`."),
    OpSpec("palace.restore", {
        "path": Arg("str", required=True, max_len=MAX_PATH_CHARS,
                    help="absolute path of the backup directory"),
        "force": Arg("bool", default=False, help="replace the palace even if it was written "
                     "after the backup"),
    }, palace=_O, retry=SAFE, permission="admin",
        doc="Verify a backup and restore it as the palace given (default: the backed-up "
            "one); refuses to replace a palace written after the backup unless `force`."),
    # drawers
    OpSpec("memory.remember", {**DRAWER_ARGS, "dedup": Arg("bool", default=None)}, palace=_R,
           retry=SAFE, permission="write",
           doc="Store one drawer (idempotent by content; near-duplicates refresh, one that "
               "adds detail is stored: `extends`; `conflicts`: older drawers it contradicts). "
               "A long text answers once committed, with the `pending_chunks` left to embed "
               "in the background."),
    OpSpec("memory.remember_many", {"items": Arg("list", required=True, max_len=NO_LIMIT),
                                    "dedup": Arg("bool", default=False)}, palace=_R,
           retry=SAFE, permission="write",
           doc="Store a batch of drawers (`items`: maps with the `remember` arguments)."),
    OpSpec("memory.recall", {
        "query": Arg("str", required=True, max_len=MAX_QUERY_CHARS),
        "top_k": Arg("int", default=10, min=1, max=MAX_TOP_K),
        "wing": _LABEL,
        "room": _LABEL,
        "tags": _TAGS,
        "levels": Arg("intlist", default=[0, 2, 3], max_len=4, min=0, max=3),
        "budget": Arg("int", default=1500, min=0, max=MAX_BUDGET),
        "deep": Arg("bool", default=False),
        "include_superseded": _RETIRED,
        "compact": Arg("bool", default=False),
        "for_agent": _FOR_AGENT,
        "exclude": Arg("intlist", default=[], max_len=MAX_EXCLUDE, min=1, max=MAX_ID,
                       help="drawer ids to leave out (already shown): the ranking's next "
                            "drawers take their places"),
        **_DATED,
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Ranked drawers with 0-1 relevance (`below_floor` flags, `nothing_relevant`, "
            "`unknown_names` the query names but no drawer mentions, `substring` when no word "
            "matched and substrings did), rooms, mode, and the hits then L0/L2/L3 sections "
            "(L1 only when in `levels`) with `text`, what an agent is shown, which fits "
            "`budget` whole (`tokens_used`; `compact`: one line per drawer) and shows only "
            "drawers that reach the floor; a miss is one line and the nearest three drawers, "
            "marked weak. `exclude`d drawers are left out of the results and every section "
            "before packing: the next take their places."),
    OpSpec("memory.recall_all", {
        "query": Arg("str", required=True, max_len=MAX_QUERY_CHARS),
        "top_k": Arg("int", default=10, min=1, max=MAX_TOP_K),
        "wing": _LABEL,
        "room": _LABEL,
        "tags": _TAGS,
        "include_superseded": _RETIRED,
    }, read_only=True, retry=SAFE,
        doc="Recall across every palace: the best `top_k` drawers of all of them by 0-1 "
            "relevance, each with its `palace`; `skipped` palaces that failed."),
    OpSpec("memory.wake_up", {"budget": Arg("int", default=800, min=0, max=MAX_BUDGET),
                              "compact": Arg("bool", default=False),
                              "for_agent": _FOR_AGENT},
           palace=_R, read_only=True, retry=SAFE,
           doc="L0 identity and L1 essential drawers, with their `text` fitting `budget` "
               "whole."),
    OpSpec("memory.get", {"id": _ID, "history": Arg("bool", default=False),
                          "max_tokens": Arg("int", min=1, max=MAX_BUDGET,
                                            help="cut the text to this many tokens")},
           palace=_R, read_only=True, retry=SAFE,
           doc="One drawer (`versions`: 1 + its edits; with `history`, the earlier versions). "
               "With `max_tokens`, a longer text is cut to that many tokens (the daemon's "
               "tokenizer): `tokens` is the whole text's count, `truncated` says it was cut."),
    # A resend finds the values already there and changes nothing.
    OpSpec("memory.update", {
        "id": _ID,
        "text": Arg("str", max_len=NO_LIMIT, content=True),
        "wing": _LABEL,
        "room": _LABEL,
        "tags": Arg("strlist", max_len=64),
        "importance": Arg("str|float", max_len=64),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Edit a drawer in place (same id): the given fields change, a new text is "
            "re-embedded, the replaced version is kept as history."),
    OpSpec("memory.forget", {"id": _ID, "purge": Arg("bool", default=False)}, palace=_R,
           doc="Move one drawer to the trash (restorable for `[trash] keep_days`); with "
               "`purge`, delete it (or its trash entry) for good.",
           permission="delete",
           retry=RetryRule(Retry.CONVERGE, done_code=MemoryNotFound.code,
                           done_result=lambda palace, args: {"id": args.get("id"),
                                                             "forgotten": True})),
    # A resent restore finds the drawer active and says restored: false.
    OpSpec("memory.restore", {"id": _ID}, palace=_R, retry=SAFE, permission="write",
           doc="Bring a drawer back from the trash: text, keyword index, vectors."),
    OpSpec("memory.trash", {"limit": Arg("int", default=50, min=1, max=1000),
                            "offset": Arg("int", default=0, min=0, max=MAX_OFFSET)},
           palace=_R, read_only=True, retry=SAFE,
           doc="Forgotten drawers still restorable, most recently forgotten first."),
    # Emptying an empty trash changes nothing: a resend converges.
    OpSpec("memory.empty_trash", palace=_R, retry=SAFE, permission="delete",
           doc="Delete every drawer in the trash for good."),
    # -- bulk upkeep (issue 31): every drawer a selection names, or a set of duplicates, into
    # the trash as one batch that memory.restore_batch brings back. A resent bulk forget
    # finds nothing left and would report something else: NEVER.
    OpSpec("memory.forget_many", {
        "wing": _LABEL,
        "room": _LABEL,
        "tags": Arg("strlist", default=[], max_len=64, help="drawers with any of these tags"),
        "source": Arg("str", max_len=MAX_FIELD_CHARS, help="source glob, e.g. 'chatgpt:*'"),
        "older_than": Arg("str|int", max_len=MAX_TIME_CHARS,
                          help="stored before: a duration back from now (90d) or a time"),
        "query": Arg("str", max_len=MAX_QUERY_CHARS,
                     help="drawers holding every word of it (keywords, not meaning)"),
        "dry_run": Arg("bool", default=False, help="only list what would be forgotten"),
        "max_drawers": Arg("int", default=BULK_MAX_DEFAULT, min=1, max=MAX_BULK,
                           help="refuse when more drawers match"),
        "show": Arg("int", default=20, min=0, max=MAX_LIMIT,
                    help="how many of the selected drawers the answer lists"),
        "expect": Arg("str", max_len=64,
                      help="the `selection` a dry run answered: refused when the drawers "
                           "selected now are another set"),
    }, palace=_R, retry=NEVER, permission="delete",
        doc="Move every drawer matching all the selectors given (at least one) to the trash "
            "as one batch (`batch`, restorable with memory.restore_batch); `dry_run` lists "
            "them and changes nothing (`selection` names the set: pass it back as `expect` "
            "to forget exactly that set); more than `max_drawers` is refused."),
    # A resent restore finds nothing left: MEMORY_NOT_FOUND means the first one did it.
    OpSpec("memory.restore_batch", {"batch": Arg("str", required=True, max_len=64)},
           palace=_R, permission="write",
           retry=RetryRule(Retry.CONVERGE, done_code=MemoryNotFound.code,
                           done_result=lambda palace, args: {"batch": args.get("batch"),
                                                             "restored": [],
                                                             "conflicts": []}),
           doc="Bring back every drawer a bulk forget or a merge put in the trash."),
    OpSpec("memory.merge", {
        "ids": Arg("intlist", required=True, min=1, max=MAX_ID, max_len=MAX_MERGE,
                   help="the duplicate drawers (at least two)"),
        "dry_run": Arg("bool", default=False, help="only say what the merge would do"),
    }, palace=_R, retry=NEVER, permission="delete",
        doc="Merge duplicate drawers into one: the longest (then newest) text is kept with "
            "the union of their tags and the highest importance (its old version kept as "
            "history); the others go to the trash as one batch."),
    OpSpec("memory.list", {
        "wing": _LABEL,
        "room": _LABEL,
        "tags": _TAGS,
        **_DATED,
        "created_by": Arg("str", max_len=MAX_NAME_CHARS, help="only drawers this agent "
                          "remembered"),
        "limit": Arg("int", default=50, min=1, max=1000),
        "offset": Arg("int", default=0, min=0, max=MAX_OFFSET),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Drawers newest first (by when they were stored), paginated."),
    # knowledge graph
    OpSpec("graph.assert", {
        "subject": _NAME,
        "predicate": _PREDICATE,
        "object": Arg("str", required=True, max_len=MAX_VALUE_CHARS),
        "literal": Arg("bool", default=False),
        # None: the predicate's default (typed relations but superseded_by keep several
        # objects at once; any other predicate holds one value, so a new one closes the old).
        "multi": Arg("bool", help="keep several objects at once (default: typed relations "
                     "yes, other predicates no)"),
        **SOURCE_ARGS,
    }, palace=_R, retry=SAFE, permission="write",
        doc="Record a fact subject-predicate-object valid from a time."),
    OpSpec("graph.link", {"a": _NAME, "relation": _PREDICATE, "b": _NAME, **SOURCE_ARGS},
           palace=_R, retry=SAFE, permission="write",
           doc="Relate two concepts (part_of, depends_on, related_to, ...)."),
    OpSpec("graph.invalidate", {"id": _ID, "at": _WHEN}, palace=_R, retry=SAFE,
           permission="write",
           doc="End an active fact at a time (default now)."),
    OpSpec("graph.query", {"subject": _NAME, "as_of": _WHEN}, palace=_R, read_only=True,
           retry=SAFE, doc="Active facts about an entity, or those valid at as_of."),
    OpSpec("graph.timeline", {"subject": _NAME}, palace=_R, read_only=True, retry=SAFE,
           doc="Every fact about an entity, closed ones included, oldest first."),
    OpSpec("graph.neighbors", {
        "entity": _NAME,
        "depth": Arg("int", default=1, min=0, max=MAX_DEPTH),
        "relation": Arg("str", max_len=MAX_PREDICATE_CHARS),
        "as_of": _WHEN,
        "max_nodes": Arg("int", default=200, min=1, max=MAX_LIMIT),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Entities within depth hops, with the facts between them."),
    OpSpec("graph.path", {
        "a": _NAME,
        "b": _NAME,
        "max_depth": Arg("int", default=6, min=1, max=MAX_PATH_DEPTH),
        "as_of": _WHEN,
    }, palace=_R, read_only=True, retry=SAFE,
        doc="A shortest chain of facts linking two entities."),
    OpSpec("graph.overview", {
        "as_of": _WHEN,
        "max_nodes": Arg("int", default=500, min=1, max=MAX_LIMIT),
        "max_facts": Arg("int", default=2_000, min=1, max=MAX_OVERVIEW_FACTS),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="The whole graph to draw: the active facts (or those valid at as_of), oldest "
            "first, their entities, up to max_nodes/max_facts (`truncated`), `changes`."),
    OpSpec("graph.search", {
        "query": Arg("str", required=True, max_len=MAX_QUERY_CHARS),
        "limit": Arg("int", default=20, min=1, max=MAX_LIMIT),
        "type": Arg("str", max_len=MAX_ENTITY_LABEL_CHARS, help="only entities of this type"),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Full-text search over entity names, definitions and labels (of one type)."),
    # Sets values: a resend finds them in place and changes nothing.
    OpSpec("graph.describe", {
        "entity": _NAME,
        "type": Arg("str", max_len=MAX_ENTITY_LABEL_CHARS, help="e.g. person, service"),
        "definition": Arg("str", max_len=MAX_ENTITY_DEFINITION_CHARS,
                          help="what it is, in a sentence"),
        "labels": Arg("strlist", max_len=MAX_ENTITY_LABELS, help="replace its labels"),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Set an entity's type, definition and/or labels (created when new); they are "
            "searched by graph.search."),
    # lifecycle
    # Recomputes weights from the clock; a rerun's count is its own.
    OpSpec("memory.decay", palace=_R, retry=SAFE, permission="write",
           doc="Recompute the decayed weight of every drawer."),
    OpSpec("memory.prune", {"threshold": _THRESHOLD, "dry_run": Arg("bool", default=False)},
           palace=_R, retry=NEVER, permission="delete",
           doc="Move low/medium drawers whose weight fell below threshold to the trash."),
    OpSpec("memory.consolidate", {
        "room": Arg("str", required=True, max_len=MAX_FIELD_CHARS),
        "summary": Arg("str", required=True, max_len=NO_LIMIT, content=True),
        "wing": _LABEL,
        "ids": Arg("intlist", max_len=MAX_CONSOLIDATE_IDS, min=1, max=MAX_ID),
    }, palace=_R, retry=NEVER, permission="write",
        doc="Write a summary drawer and mark its sources consolidated into it: retired from "
            "recall and L1 (kept; `get` and `include_superseded` reach them)."),
    # conflicting drawers (memory.truth): list and resolve
    OpSpec("memory.conflicts", {
        "include_resolved": Arg("bool", default=False, help="also the resolved ones"),
        "limit": Arg("int", default=50, min=1, max=1000),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Conflicts newest first: a newer drawer that restates an older one of its wing "
            "with another name, number, date or polarity (found at remember time), with "
            "both texts; open ones unless `include_resolved`."),
    # A second run of a resolved conflict answers `already` and changes nothing.
    OpSpec("memory.resolve_conflict", {
        "id": Arg("int", required=True, min=1, max=MAX_ID, help="the conflict's id"),
        "resolution": Arg("str", required=True, max_len=16,
                          help="supersede (retire the older), keep_both, or merge"),
        "text": Arg("str", max_len=NO_LIMIT, content=True,
                    help="merge: the merged drawer's text (it retires both)"),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Resolve a conflict: `supersede` retires the older drawer behind the newer, "
            "`keep_both` keeps both current, `merge` stores `text` and retires both."),
    # capture
    OpSpec("capture.transcript", {
        "path": Arg("str", required=True, max_len=MAX_PATH_CHARS,
                    help="absolute path of the session transcript (JSONL) to read"),
        "format": Arg("str", default=DEFAULT_TRANSCRIPT_FORMAT, max_len=MAX_NAME_CHARS,
                      help="whose transcript: " + "/".join(TRANSCRIPT_FORMATS)),
        "session_id": Arg("str", max_len=MAX_FIELD_CHARS,
                          help="the session's id: keys its capture state (default: the path)"),
        "wing": Arg("str", default="sessions", max_len=MAX_FIELD_CHARS,
                    help="wing of the captured exchanges"),
        "project_wing": Arg("bool", default=False,
                            help="file under a wing named after the session's project instead"),
        "create": Arg("bool", default=False, help="create the palace when it does not exist"),
        "wait": Arg("bool", default=False,
                    help="capture now and return the counts (default: queue and return)"),
        "dry_run": Arg("bool", default=False,
                       help="count what would be captured, store nothing (implies wait)"),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Capture what is new in a session transcript (Claude Code, Codex CLI, Gemini CLI, "
            "Copilot CLI): one drawer per exchange, secrets redacted, tool output left out; "
            "queued unless `wait` (then the counts)."),
    OpSpec("memory.health", {
        "threshold": _THRESHOLD,
        "stale_days": Arg("float", default=STALE_DAYS, min=0.0, max=36_500.0),
        "limit": Arg("int", default=HEALTH_LIST_LIMIT, min=1, max=1000),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Per-room stale drawers, duplicate candidates and consolidation hints."),
    # who did what, and who may
    OpSpec("palace.audit", {
        "since": Arg("str|int", max_len=MAX_TIME_CHARS,
                     help="a time, or a duration back from now (90m, 7d)"),
        "agent": Arg("str", max_len=MAX_NAME_CHARS, help="agent glob, e.g. 'mcp:*'"),
        "op": Arg("str", max_len=MAX_PREDICATE_CHARS, help="op glob, e.g. 'memory.*'"),
        "limit": Arg("int", default=50, min=1, max=1000),
        "offset": Arg("int", default=0, min=0, max=MAX_OFFSET),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Audit log newest first: who changed what when (ids and outcomes, never texts)."),
    OpSpec("palace.policy", palace=_R, read_only=True, retry=SAFE,
           doc="The palace's policy (agent globs per permission) and what the caller may do."),
    OpSpec("palace.policy_set", {
        "permission": Arg("str", required=True, max_len=MAX_PREDICATE_CHARS,
                          help="/".join(PERMISSIONS)),
        "agents": Arg("strlist", required=True, max_len=MAX_POLICY_GLOBS,
                      help="agent globs granted it (empty: nobody)"),
    }, palace=_R, retry=SAFE, permission="admin",
        doc="Set which agents (globs) hold a permission of the palace's policy."),
)
# -- the memoir ops (memoir.*): curated concept graphs (docs/concepts.md); every op names its
# memoir ``memoir`` and the concept it acts on ``name``.
_MEMOIR = Arg("str", required=True, max_len=MAX_NAME_CHARS)
_CONCEPT = Arg("str", required=True, max_len=MAX_NAME_CHARS)
_RELATION = Arg("str", required=True, max_len=MAX_PREDICATE_CHARS)
_DEFINITION = Arg("str", required=True, max_len=MAX_DEFINITION_CHARS)
_LABELS = Arg("strlist", default=[], max_len=MAX_CONCEPT_LABELS,
              help="namespace:value labels, e.g. domain:auth")
_SOURCES = Arg("intlist", default=[], max_len=MAX_SOURCES, min=1, max=MAX_ID,
               help="ids of the drawers it was learnt from")
_LINK_ARGS: dict[str, Arg] = {"memoir": _MEMOIR, "name": _CONCEPT, "relation": _RELATION,
                              "to": _CONCEPT}

MEMOIR_SPECS: tuple[OpSpec, ...] = (
    OpSpec("memoir.create", {
        "memoir": _MEMOIR,
        "description": Arg("str", default="", max_len=MAX_DESCRIPTION_CHARS),
        "consolidation_threshold": Arg("int", default=DEFAULT_CONSOLIDATION_THRESHOLD, min=1,
                                       max=MAX_CONSOLIDATION_THRESHOLD),
        "exist_ok": Arg("bool", default=False),
    }, palace=_R, retry=RetryRule(Retry.CONVERGE, retry_args=MappingProxyType({"exist_ok": True})),
        permission="write",
        doc="Create a memoir: a named container of concepts with a description."),
    OpSpec("memoir.list", palace=_R, read_only=True, retry=SAFE,
           doc="Every memoir of the palace with its concept and link counts."),
    OpSpec("memoir.show", {
        "memoir": _MEMOIR,
        "limit": Arg("int", default=100, min=1, max=MAX_LIMIT),
        "offset": Arg("int", default=0, min=0, max=MAX_OFFSET),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="A memoir, its stats (average confidence, top labels) and its concepts by name."),
    OpSpec("memoir.delete", {"memoir": _MEMOIR}, palace=_R, permission="delete",
           doc="Delete a memoir with its concepts and links, in one transaction.",
           retry=RetryRule(Retry.CONVERGE, done_code=MemoirNotFound.code,
                           done_result=lambda palace, args: {"memoir": args.get("memoir"),
                                                             "deleted": True})),
    # An identical re-add returns the concept unchanged, so a resend is safe.
    OpSpec("memoir.add_concept", {
        "memoir": _MEMOIR, "name": _CONCEPT, "definition": _DEFINITION, "labels": _LABELS,
        "confidence": Arg("float", default=DEFAULT_CONCEPT_CONFIDENCE, min=0.0, max=1.0),
        "sources": _SOURCES,
    }, palace=_R, retry=SAFE, permission="write",
        doc="Add a concept (unique name per memoir) with a definition, labels and sources."),
    # A refine that changes nothing is a no-op: the resend of an applied one changes nothing.
    OpSpec("memoir.refine", {
        "memoir": _MEMOIR, "name": _CONCEPT, "definition": _DEFINITION, "labels": _LABELS,
        "sources": _SOURCES,
    }, palace=_R, retry=SAFE, permission="write",
        doc="Give a concept a new definition and more labels and sources: revision + 1, "
            "confidence + 0.1 (max 1)."),
    OpSpec("memoir.search", {
        "query": Arg("str", max_len=MAX_QUERY_CHARS),
        "label": Arg("str", max_len=MAX_LABEL_CHARS, help="only concepts with this label"),
        "memoir": Arg("str", max_len=MAX_NAME_CHARS),
        "limit": Arg("int", default=20, min=1, max=MAX_LIMIT),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="Concepts by words (names, definitions, labels) and/or a label, in one memoir or "
            "all."),
    OpSpec("memoir.inspect", {
        "memoir": _MEMOIR, "name": _CONCEPT,
        "depth": Arg("int", default=1, min=0, max=MAX_DEPTH),
        "max_nodes": Arg("int", default=100, min=1, max=MAX_LIMIT),
    }, palace=_R, read_only=True, retry=SAFE,
        doc="A concept and the concepts within depth links of it, with the links between."),
    OpSpec("memoir.link", {**_LINK_ARGS, "weight": Arg("float", default=1.0, min=0.0, max=1.0)},
           palace=_R, retry=SAFE, permission="write",
           doc="Link two concepts of a memoir by a typed relation (a duplicate is stored once)."),
    OpSpec("memoir.unlink", _LINK_ARGS, palace=_R, retry=SAFE, permission="write",
           doc="Remove a link between two concepts (none there: nothing to do)."),
    # -- curating memoirs (issue 31); each finds its values in place on a resend.
    OpSpec("memoir.update", {
        "memoir": _MEMOIR,
        "description": Arg("str", max_len=MAX_DESCRIPTION_CHARS),
        "consolidation_threshold": Arg("int", min=1, max=MAX_CONSOLIDATION_THRESHOLD),
    }, palace=_R, retry=SAFE, permission="write",
        doc="Change a memoir's description and/or consolidation threshold."),
    # A resent rename finds the concept under its new name, the old one gone.
    OpSpec("memoir.rename_concept", {"memoir": _MEMOIR, "name": _CONCEPT, "new_name": _CONCEPT},
           palace=_R, permission="write",
           retry=RetryRule(Retry.CONVERGE, done_code=ConceptNotFound.code,
                           done_result=lambda palace, args: {
                               "concept": {"name": args.get("new_name")}, "changed": True}),
           doc="Rename a concept; its definition, labels, sources and links stay."),
    OpSpec("memoir.delete_concept", {"memoir": _MEMOIR, "name": _CONCEPT}, palace=_R,
           permission="delete",
           retry=RetryRule(Retry.CONVERGE, done_code=ConceptNotFound.code,
                           done_result=lambda palace, args: {
                               "concept": {"name": args.get("name")}, "deleted": True}),
           doc="Delete a concept with its labels, sources and links."),
)


SPECS: dict[str, OpSpec] = {spec.name: spec for spec in (*_ALL, *MEMOIR_SPECS)}


def _spec_digest() -> str:
    """A digest of every op's name, palace rule and argument names and kinds: what a daemon
    accepts. The hello carries it, so a client can tell a daemon started from older code (a
    running palaced outlives a ``pip install -U``) from a refusal of its own arguments."""
    shape = sorted((name, spec.palace, sorted((a, arg.kind) for a, arg in spec.args.items()))
                   for name, spec in SPECS.items())
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


SPEC_DIGEST = _spec_digest()


def retry_rule(op: str) -> RetryRule:
    """The retry rule of ``op``: the handshake is SAFE; ops this side does not know are NEVER."""
    if op == HELLO_OP:
        return SAFE
    spec = SPECS.get(op)
    return NEVER if spec is None else spec.retry


# -- MCP toolsets ------------------------------------------------------------------------------
# The tools of the MCP bridge by toolset: ``core`` is always served; the others are opt-in
# (``palace mcp --tools kg,memoir``, ``palace init --tools ...``, ``[mcp] tools`` in
# config.toml), since every tool listed costs tokens in every agent session. Defined here,
# beside the ops the tools run, so that the daemon's config check knows the names too.
MCP_TOOLSETS: dict[str, tuple[str, ...]] = {
    "core": ("remember", "recall", "wake_up", "get", "list_drawers", "rooms", "forget"),
    "kg": ("kg_assert", "kg_query", "kg_invalidate"),
    "memoir": ("memoir",),
    "upkeep": ("upkeep",),
}
ALL_TOOLSETS = "all"  # every toolset
TOOLSETS_HELP = (f"Opt-in MCP toolsets besides core, comma-separated: "
                 f"{', '.join(n for n in MCP_TOOLSETS if n != 'core')}, or {ALL_TOOLSETS}")


def parse_toolsets(value: str | None) -> tuple[str, ...]:
    """The toolsets a ``--tools`` value or ``[mcp] tools`` names, ``core`` first and always.

    ``value`` is comma-separated toolset names (spaces allowed), ``all`` for every one;
    None or "" is ``core`` alone.

    Raises:
        InvalidArgs: a name that is no toolset (the message lists them).
    """
    names = [n.strip().lower() for n in (value or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in MCP_TOOLSETS and n != ALL_TOOLSETS]
    if unknown:
        raise InvalidArgs(
            f"unknown toolset {', '.join(map(repr, unknown))}; the toolsets are "
            f"{', '.join(MCP_TOOLSETS)} and {ALL_TOOLSETS}",
            details={"toolsets": unknown, "known": [*MCP_TOOLSETS, ALL_TOOLSETS]})
    if ALL_TOOLSETS in names:
        return tuple(MCP_TOOLSETS)
    return tuple(n for n in MCP_TOOLSETS if n == "core" or n in names)
