"""The export format of a palace: its name, version, and the fields of every record kind.

Leaf module (stdlib + the wire leaf ``args``), importable by thin clients: the one definition
of what an export line holds. ``palace.export`` writes these records, ``palace.import_records``
decodes each record it receives against :data:`RECORDS` with ``args.decode_args`` (so a
malformed record is refused with INVALID_ARGS naming the field), and ``palace import jsonl``
checks every line against the same specs before sending it, so a dry run catches what the
daemon would refuse. The format is documented in ``docs/export-format.md``.

An export is JSON Lines: one ``header`` record, one ``identity`` record, then every
``drawer``, ``entity``, ``fact`` and ``source`` record, then (version 2) every ``memoir``,
``concept`` (with its labels and source drawers) and ``concept_link`` record (each kind in
id order), and one ``end`` record. Vectors, the full-text index and closets are not
exported: they are derived from the texts again on import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from palaced.wire.args import NO_LIMIT, Arg
from palaced.wire.vocab import (
    MAX_CONCEPT_LABELS,
    MAX_CONSOLIDATION_THRESHOLD,
    MAX_DEFINITION_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_ENTITY_DEFINITION_CHARS,
    MAX_ENTITY_LABEL_CHARS,
    MAX_ENTITY_LABELS,
    MAX_NAME_CHARS,
    MAX_PREDICATE_CHARS,
)

FORMAT = "palace-export"
VERSION = 2  # 2: memoirs, concepts and their links (a version 1 export has none)
KIND_KEY = "record"  # the key naming a record's kind ("type" is an entity field)
MAX_KEY_CHARS = 4_096  # an import ledger key (a file path, a conversation id)
MAX_IDENTITY_CHARS = 65_536  # identity.txt is read up to 64 KiB
MAX_SOURCE_DRAWERS = 100_000
# The bounds of the numbers an export brings, in this one place (the client's dry run and the
# daemon refuse the same records, naming the field and the bound). Ids (and ``drawer_seq``)
# stay 2**63 - 2**53 below SQLite's int64 limit: at that limit every later insert fails with
# SQLITE_FULL, a palace that can never be written again. 2**53 - 1 is also the largest integer
# every JSON reader holds exactly. Counters stay as far from it, and the daemon saturates
# them there (``access.apply_touches``) instead of overflowing.
MAX_RESTORED_ID = 2**53 - 1
MAX_COUNT = 2**53 - 1


@dataclass(frozen=True)
class RecordSpec:
    """The fields of one record kind (a ``Signature`` for ``args.decode_args``)."""

    name: str
    args: Mapping[str, Arg] = field(default_factory=dict)


_KIND = Arg("str", required=True, max_len=16)
_MS = Arg("int", required=True)  # epoch milliseconds; the daemon checks years 1-9999
_MS_OR_NONE = Arg("int")
_ID = Arg("int", required=True, min=1, max=MAX_RESTORED_ID)
_LINK = Arg("int", min=1, max=MAX_RESTORED_ID)
_LABEL = Arg("str", max_len=200)

RECORDS: dict[str, RecordSpec] = {spec.name: spec for spec in (
    RecordSpec("header", {
        KIND_KEY: _KIND,
        "format": Arg("str", required=True, max_len=64),
        "version": Arg("int", required=True, min=1, max=1_000),
        "palace": Arg("str", max_len=64),
        "exported_at": Arg("str", max_len=64),
        "exported_ms": _MS_OR_NONE,
        "schema": Arg("int", min=0, max=1_000),
        "embedder": Arg("str", max_len=200),
        "drawer_seq": Arg("int", min=0, max=MAX_RESTORED_ID),
        "decayed_ms": _MS_OR_NONE,
        "palace_version": Arg("str", max_len=64),
        "counts": Arg("any"),
    }),
    RecordSpec("identity", {KIND_KEY: _KIND,
                            "text": Arg("str", required=True, max_len=MAX_IDENTITY_CHARS,
                                        content=True)}),
    RecordSpec("drawer", {
        KIND_KEY: _KIND,
        "id": _ID,
        "text": Arg("str", required=True, max_len=NO_LIMIT, content=True),
        "wing": Arg("str", required=True, max_len=200),
        "room": Arg("str", required=True, max_len=200),
        "tags": Arg("strlist", default=[], max_len=64),
        "importance": Arg("float", required=True, min=0.0, max=1.0),
        "source": _LABEL,
        "kind": Arg("str", default="drawer", max_len=32),
        "created_ms": _MS,
        "updated_ms": _MS,
        "occurred_ms": _MS,
        "accessed_ms": _MS_OR_NONE,
        "access_count": Arg("int", default=0, min=0, max=MAX_COUNT),
        "weight": Arg("float", default=1.0, min=0.0, max=1.0),
        "expires_ms": _MS_OR_NONE,
        "superseded_by": _LINK,
        "consolidated_into": _LINK,
    }),
    RecordSpec("entity", {
        KIND_KEY: _KIND,
        "id": _ID,
        "name": Arg("str", required=True, max_len=200),
        "type": Arg("str", max_len=MAX_ENTITY_LABEL_CHARS),
        "definition": Arg("str", max_len=MAX_ENTITY_DEFINITION_CHARS),
        "labels": Arg("strlist", default=[], max_len=MAX_ENTITY_LABELS),
        "created_ms": _MS,
        "updated_ms": _MS,
    }),
    RecordSpec("fact", {
        KIND_KEY: _KIND,
        "id": _ID,
        "subject": Arg("str", required=True, max_len=200),
        "predicate": Arg("str", required=True, max_len=64),
        "object": Arg("str", required=True, max_len=2_000),
        "object_is_entity": Arg("bool", required=True),
        "valid_from_ms": _MS,
        "valid_to_ms": _MS_OR_NONE,
        "confidence": Arg("float", default=1.0, min=0.0, max=1.0),
        "source_drawer": _LINK,
        "source_url": Arg("str", max_len=2_000),
        "source_agent": Arg("str", max_len=200),
        "created_ms": _MS,
        "invalidated_ms": _MS_OR_NONE,
    }),
    RecordSpec("source", {
        KIND_KEY: _KIND,
        "importer": Arg("str", required=True, max_len=64),
        "key": Arg("str", required=True, max_len=MAX_KEY_CHARS),
        "hash": Arg("str", required=True, max_len=128),
        "imported_ms": _MS,
        "drawers": Arg("intlist", default=[], min=1, max=MAX_RESTORED_ID,
                       max_len=MAX_SOURCE_DRAWERS),
    }),
    RecordSpec("memoir", {
        KIND_KEY: _KIND,
        "id": _ID,
        "name": Arg("str", required=True, max_len=MAX_NAME_CHARS),
        "description": Arg("str", default="", max_len=MAX_DESCRIPTION_CHARS),
        "consolidation_threshold": Arg("int", required=True, min=1,
                                       max=MAX_CONSOLIDATION_THRESHOLD),
        "created_ms": _MS,
        "updated_ms": _MS,
    }),
    RecordSpec("concept", {
        KIND_KEY: _KIND,
        "id": _ID,
        "memoir": _ID,  # the memoir record's id
        "name": Arg("str", required=True, max_len=MAX_NAME_CHARS),
        "definition": Arg("str", required=True, max_len=MAX_DEFINITION_CHARS),
        "labels": Arg("strlist", default=[], max_len=MAX_CONCEPT_LABELS),
        "confidence": Arg("float", required=True, min=0.0, max=1.0),
        "revision": Arg("int", default=1, min=1, max=MAX_COUNT),
        "sources": Arg("intlist", default=[], min=1, max=MAX_RESTORED_ID,
                       max_len=MAX_SOURCE_DRAWERS),
        "created_ms": _MS,
        "updated_ms": _MS,
    }),
    RecordSpec("concept_link", {
        KIND_KEY: _KIND,
        "id": _ID,
        "source": _ID,  # concept record ids, of one memoir
        "target": _ID,
        "relation": Arg("str", required=True, max_len=MAX_PREDICATE_CHARS),
        "weight": Arg("float", default=1.0, min=0.0, max=1.0),
        "created_ms": _MS,
    }),
    RecordSpec("end", {KIND_KEY: _KIND}),
)}
# The order in which an export lists its records (each kind in id order, key order for
# sources); a restore needs drawers before the facts and sources that cite them.
ORDER: tuple[str, ...] = tuple(RECORDS)


def record_kind(record: object) -> str | None:
    """The kind of ``record`` when it is a map naming a known kind, else None."""
    if not isinstance(record, dict):
        return None
    kind = record.get(KIND_KEY)
    return kind if isinstance(kind, str) and kind in RECORDS else None
