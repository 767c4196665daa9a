"""The specs of the memoir ops (``memoir.*``): curated concept graphs (docs/concepts.md).

Leaf module (stdlib + the wire leaves ``args``, ``errors``, ``opspec`` and ``vocab``): the
specs join ``palaced.specs.SPECS``, whose docstring explains the retry classes. Every op names
its memoir ``memoir`` and the concept it acts on ``name``.
"""

from __future__ import annotations

from types import MappingProxyType

from palaced.args import MAX_ID, MAX_OFFSET, Arg
from palaced.errors import MemoirNotFound
from palaced.opspec import SAFE, OpSpec, Retry, RetryRule
from palaced.vocab import (
    DEFAULT_CONCEPT_CONFIDENCE,
    DEFAULT_CONSOLIDATION_THRESHOLD,
    MAX_CONCEPT_LABELS,
    MAX_CONSOLIDATION_THRESHOLD,
    MAX_DEFINITION_CHARS,
    MAX_DEPTH,
    MAX_DESCRIPTION_CHARS,
    MAX_LABEL_CHARS,
    MAX_LIMIT,
    MAX_NAME_CHARS,
    MAX_PREDICATE_CHARS,
    MAX_QUERY_CHARS,
    MAX_SOURCES,
)

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
_R = "required"

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
)
