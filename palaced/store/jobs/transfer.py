"""Synchronous queries of export and restore: records in id order, and rows with their ids.

An export lists each kind of row after a given id (keyset pages: a page costs the same at the
start and at the end of a million drawers). A restore inserts rows with the ids, times and
counters the export gave, so that links between them (``superseded_by``,
``consolidated_into``, a fact's ``source_drawer``) need no remapping. The record shapes are
``palaced.wire.export_format``'s; the field checks that need no database run before these.

Every function takes an open ``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apsw

from palaced.store.conn.dialect import is_pg, raise_sequence, sequence_value
from palaced.store.knowledge import concept_links, concepts, memoirs
from palaced.store.knowledge.entities import (
    MAX_DEFINITION_CHARS,
    MAX_LABEL_CHARS,
    _clean_labels,
    _clean_name,
    _clean_text,
    entity_key,
)
from palaced.store.knowledge.facts import normalize_predicate
from palaced.store.rows.drawers import index_drawer
from palaced.wire.errors import InvalidContent, quote
from palaced.wire.vocab import (
    MAX_DEFINITION_CHARS as MAX_CONCEPT_DEFINITION_CHARS,
)
from palaced.wire.vocab import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_VALUE_CHARS,
)

_DRAWER_SELECT = (
    "SELECT id, text, wing, room, tags, importance, source, kind, created_ms, updated_ms, "
    "occurred_ms, accessed_ms, access_count, weight, expires_ms, superseded_by, "
    "consolidated_into FROM drawers WHERE id > ? ORDER BY id"
)
_ENTITY_SELECT = ("SELECT id, name, type, definition, labels, created_ms, updated_ms "
                  "FROM entities WHERE id > ? ORDER BY id")
_FACT_SELECT = (
    "SELECT f.id, s.name, f.predicate, coalesce(o.name, f.object_value), "
    "f.object_id IS NOT NULL, f.valid_from_ms, f.valid_to_ms, f.confidence, f.source_drawer, "
    "f.source_url, f.source_agent, f.created_ms, f.invalidated_ms FROM facts f "
    "JOIN entities s ON s.id = f.subject_id LEFT JOIN entities o ON o.id = f.object_id "
    "WHERE f.id > ? ORDER BY f.id"
)
_SOURCE_SELECT = ("SELECT id, importer, key, hash, imported_ms FROM sources WHERE id > ? "
                  "ORDER BY id")
_MEMOIR_SELECT = ("SELECT id, name, description, consolidation_threshold, created_ms, "
                  "updated_ms FROM memoirs WHERE id > ? ORDER BY id")
_CONCEPT_SELECT = ("SELECT id, memoir_id, name, definition, labels, confidence, revision, "
                   "created_ms, updated_ms FROM concepts WHERE id > ? ORDER BY id")
_LINK_SELECT = ("SELECT id, source_id, target_id, relation, weight, created_ms FROM "
                "concept_links WHERE id > ? ORDER BY id")
_FIELDS = {
    "drawer": ("id", "text", "wing", "room", "tags", "importance", "source", "kind",
               "created_ms", "updated_ms", "occurred_ms", "accessed_ms", "access_count",
               "weight", "expires_ms", "superseded_by", "consolidated_into"),
    "entity": ("id", "name", "type", "definition", "labels", "created_ms", "updated_ms"),
    "fact": ("id", "subject", "predicate", "object", "object_is_entity", "valid_from_ms",
             "valid_to_ms", "confidence", "source_drawer", "source_url", "source_agent",
             "created_ms", "invalidated_ms"),
    "source": ("id", "importer", "key", "hash", "imported_ms"),
    "memoir": ("id", "name", "description", "consolidation_threshold", "created_ms",
               "updated_ms"),
    "concept": ("id", "memoir", "name", "definition", "labels", "confidence", "revision",
                "created_ms", "updated_ms"),
    "concept_link": ("id", "source", "target", "relation", "weight", "created_ms"),
}
_SELECTS = {"drawer": _DRAWER_SELECT, "entity": _ENTITY_SELECT, "fact": _FACT_SELECT,
            "source": _SOURCE_SELECT, "memoir": _MEMOIR_SELECT, "concept": _CONCEPT_SELECT,
            "concept_link": _LINK_SELECT}
# Memoirs are a local palace's own (a team palace has none of their tables).
MEMOIR_KINDS = ("memoir", "concept", "concept_link")
EXPORTED_KINDS = tuple(_SELECTS)  # the kinds listed row by row, in export order
# superseded_by steps doctor follows from each drawer looking for a cycle (real chains: a few)
_MAX_CHAIN = 1_000


# -- export -----------------------------------------------------------------------------------
def rows_after(conn: apsw.Connection, kind: str, after: int
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row id, record)`` of every ``kind`` row after id ``after``, in id order.

    Lazy: the caller stops when its page is full. Consume it inside the read that opened
    ``conn``.
    """
    if kind in MEMOIR_KINDS and is_pg(conn):
        return
    for row in conn.execute(_SELECTS[kind], (after,)):
        values = dict(zip(_FIELDS[kind], row, strict=True))
        row_id = int(values["id"])
        record: dict[str, Any] = {"record": kind, **values}
        if kind in ("drawer", "entity", "concept"):
            key = "tags" if kind == "drawer" else "labels"
            record[key] = json.loads(record[key]) if record[key] else []
            if kind == "concept":
                record["sources"] = [int(r[0]) for r in conn.execute(
                    "SELECT drawer_id FROM concept_sources WHERE concept_id = ? "
                    "ORDER BY drawer_id", (row_id,))]
        elif kind == "fact":
            record["object_is_entity"] = bool(record["object_is_entity"])
        elif kind in MEMOIR_KINDS:
            pass
        else:
            del record["id"]  # a source's id is internal: its key names it
            record["drawers"] = [int(r[0]) for r in conn.execute(
                "SELECT drawer_id FROM source_drawers WHERE source_id = ? ORDER BY drawer_id",
                (row_id,))]
        yield row_id, record


def drawer_seq(conn: apsw.Connection) -> int:
    """The highest drawer id ever handed out (forgotten ones included)."""
    return sequence_value(conn, "drawers")


def counts(conn: apsw.Connection) -> dict[str, int]:
    """Rows of every exported kind: ``{"drawers", "entities", "facts", "sources", "memoirs",
    "concepts", "concept_links"}`` (a team palace has no memoirs: 0)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM drawers), (SELECT count(*) FROM entities), "
        "(SELECT count(*) FROM facts), (SELECT count(*) FROM sources)").fetchall()[0]
    out = dict(zip(("drawers", "entities", "facts", "sources"), map(int, row), strict=True))
    row = (0, 0, 0) if is_pg(conn) else conn.execute(
        "SELECT (SELECT count(*) FROM memoirs), (SELECT count(*) FROM concepts), "
        "(SELECT count(*) FROM concept_links)").fetchall()[0]
    out.update(zip(("memoirs", "concepts", "concept_links"), map(int, row), strict=True))
    return out


# -- restore ----------------------------------------------------------------------------------
def raise_drawer_seq(conn: apsw.Connection, seq: int) -> None:
    """Make sure no drawer id up to ``seq`` is handed out again (the exported palace's own
    forgotten ids included)."""
    raise_sequence(conn, "drawers", seq)


def _conflict(message: str, **details: Any) -> InvalidContent:
    return InvalidContent(message, details={"condition": "conflict", **details})


def restore_drawer(conn: apsw.Connection, rec: Mapping[str, Any], digest: str,
                   topics: Sequence[str]) -> bool:
    """Insert drawer ``rec`` with its own id; False when it is already there (a re-run).

    The caller refreshes the full-text context around the new drawers (``refresh_around``).

    Raises:
        InvalidContent: its id holds another text, or its text is another drawer's.
    """
    did = int(rec["id"])
    same_id = conn.execute("SELECT content_hash FROM drawers WHERE id = ?", (did,)).fetchall()
    if same_id:
        if same_id[0][0] == digest:
            return False
        raise _conflict(f"drawer {did} already exists with another text", id=did)
    twin = conn.execute("SELECT id FROM drawers WHERE content_hash = ?", (digest,)).fetchall()
    if twin:
        raise _conflict(f"drawer {did} has the same wing, room and text as drawer "
                        f"{twin[0][0]}", id=did, twin=int(twin[0][0]))
    if rec["superseded_by"] is not None and supersedes_back(conn, int(rec["superseded_by"]),
                                                            did):
        raise InvalidContent(
            f"drawer {did} is superseded by drawer {rec['superseded_by']}, whose "
            f"superseded_by chain leads back to drawer {did}: a cycle would hide every drawer "
            "in it", details={"condition": "cycle", "id": did, "field": "superseded_by"})
    conn.execute(
        "INSERT INTO drawers(id, text, wing, room, tags, importance, source, kind, created_ms, "
        "updated_ms, occurred_ms, accessed_ms, access_count, weight, expires_ms, superseded_by, "
        "consolidated_into, content_hash, embedded) "
        "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
        (did, rec["text"], rec["wing"], rec["room"], json.dumps(list(rec["tags"])),
         rec["importance"], rec["source"], rec["kind"], rec["created_ms"], rec["updated_ms"],
         rec["occurred_ms"], rec["accessed_ms"], rec["access_count"], rec["weight"],
         rec["expires_ms"], rec["superseded_by"], rec["consolidated_into"], digest))
    index_drawer(conn, did, rec["text"], int(rec["occurred_ms"]), topics)
    return True


def supersedes_back(conn: apsw.Connection, start: int, target: int) -> bool:
    """Whether the ``superseded_by`` chain from drawer ``start`` (itself included) reaches
    drawer ``target``. Ends on a cycle already stored (UNION keeps each id once)."""
    return bool(conn.execute(
        "WITH RECURSIVE chain(id) AS (SELECT CAST(? AS BIGINT) UNION SELECT d.superseded_by "
        "FROM drawers d JOIN chain c ON d.id = c.id WHERE d.superseded_by IS NOT NULL) "
        "SELECT 1 FROM chain WHERE id = ? LIMIT 1", (start, target)).fetchall())


def edge_numbers(conn: apsw.Connection) -> dict[str, int]:
    """The numbers that must stay clear of SQLite's int64 limit, for ``palace doctor``:
    ``drawer_seq`` and the highest drawer, entity and fact ids, the highest
    ``access_count``, and ``cycles``: drawers on a ``superseded_by`` cycle (hidden forever)."""
    row = conn.execute(
        "SELECT (SELECT max(id) FROM drawers), (SELECT max(id) FROM entities), "
        "(SELECT max(id) FROM facts), (SELECT max(access_count) FROM drawers)").fetchall()[0]
    out = dict(zip(("drawer_id", "entity_id", "fact_id", "access_count"),
                   (int(v or 0) for v in row), strict=True))
    out["drawer_seq"] = drawer_seq(conn)
    out["cycles"] = int(conn.execute(
        "WITH RECURSIVE walk(start, id, steps) AS (SELECT id, superseded_by, 1 FROM drawers "
        "WHERE superseded_by IS NOT NULL UNION ALL SELECT w.start, d.superseded_by, w.steps + 1 "
        "FROM walk w JOIN drawers d ON d.id = w.id WHERE d.superseded_by IS NOT NULL "
        "AND w.id != w.start AND w.steps < ?) "
        "SELECT count(DISTINCT start) FROM walk WHERE id = start", (_MAX_CHAIN,)
    ).fetchall()[0][0])
    return out


def restore_entity(conn: apsw.Connection, rec: Mapping[str, Any]) -> bool:
    """Insert entity ``rec`` with its own id; False when it is already there.

    Raises:
        InvalidContent: its id or its name belongs to another entity, or its name, type,
            definition or labels are invalid.
    """
    eid, name = int(rec["id"]), _clean_name(rec["name"])
    key = name.casefold()
    type_ = None if rec["type"] is None else _clean_text(rec["type"], "an entity type",
                                                         MAX_LABEL_CHARS)
    definition = None if rec["definition"] is None else _clean_text(
        rec["definition"], "a definition", MAX_DEFINITION_CHARS)
    labels = _clean_labels(rec["labels"])
    same = conn.execute("SELECT name_key FROM entities WHERE id = ?", (eid,)).fetchall()
    if same:
        if same[0][0] == key:
            return False
        raise _conflict(f"entity {eid} already exists with another name", id=eid)
    if conn.execute("SELECT 1 FROM entities WHERE name_key = ?", (key,)).fetchall():
        raise _conflict(f"entity {rec['name']!r} already exists under another id", id=eid)
    conn.execute(
        "INSERT INTO entities(id, name, name_key, type, definition, labels, created_ms, "
        "updated_ms) VALUES(?,?,?,?,?,?,?,?)",
        (eid, name, key, type_, definition, json.dumps(labels, ensure_ascii=False),
         rec["created_ms"], rec["updated_ms"]))
    return True


def _entity_id(conn: apsw.Connection, name: str) -> int:
    rows = conn.execute("SELECT id FROM entities WHERE name_key = ?",
                        (entity_key(name),)).fetchall()
    if not rows:
        raise InvalidContent(f"the fact names the entity {name!r}, which no entity record "
                             "restored", details={"condition": "missing", "entity": name})
    return int(rows[0][0])


def restore_fact(conn: apsw.Connection, rec: Mapping[str, Any]) -> tuple[bool, bool]:
    """Insert fact ``rec`` with its own id: ``(stored, source dropped)``.

    ``stored`` is False when it is already there. A ``source_drawer`` that does not exist is
    stored as none (as when a cited drawer is forgotten) and reported by ``source dropped``.

    Raises:
        InvalidContent: its id holds another fact, it names an entity not restored, links an
            entity to itself, ends before it starts, or a name, predicate or value is invalid.
    """
    fid = int(rec["id"])
    predicate = normalize_predicate(rec["predicate"])
    subject = _entity_id(conn, rec["subject"])
    same = conn.execute("SELECT subject_id, predicate, valid_from_ms FROM facts WHERE id = ?",
                        (fid,)).fetchall()
    if same:
        if tuple(same[0]) == (subject, predicate, rec["valid_from_ms"]):
            return False, False
        raise _conflict(f"fact {fid} already exists with other contents", id=fid)
    obj = _entity_id(conn, rec["object"]) if rec["object_is_entity"] else None
    value = None if obj is not None else _clean_text(rec["object"], "a fact value",
                                                     MAX_VALUE_CHARS)
    if obj == subject:
        raise InvalidContent(f"fact {fid} links {rec['subject']!r} to itself", details={"id": fid})
    if rec["valid_to_ms"] is not None and rec["valid_to_ms"] < rec["valid_from_ms"]:
        raise InvalidContent(f"fact {fid} ends before it starts", details={"id": fid})
    url = rec["source_url"] and _clean_text(rec["source_url"], "source_url", MAX_VALUE_CHARS)
    agent = rec["source_agent"] and _clean_text(rec["source_agent"], "source_agent",
                                                MAX_NAME_CHARS)
    source = rec["source_drawer"]
    dropped = source is not None and not conn.execute(
        "SELECT 1 FROM drawers WHERE id = ?", (source,)).fetchall()
    conn.execute(
        "INSERT INTO facts(id, subject_id, predicate, object_id, object_value, valid_from_ms, "
        "valid_to_ms, confidence, source_drawer, source_url, source_agent, created_ms, "
        "invalidated_ms) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (fid, subject, predicate, obj, value, rec["valid_from_ms"], rec["valid_to_ms"],
         rec["confidence"], None if dropped else source, url or None, agent or None,
         rec["created_ms"], rec["invalidated_ms"]))
    return True, dropped


def restore_source(conn: apsw.Connection, rec: Mapping[str, Any]) -> tuple[bool, int]:
    """Record an imported source and the drawers it filed: ``(stored, drawers dropped)``.

    Drawers that do not exist are left out (and counted). False when it is already there.

    Raises:
        InvalidContent: the source is recorded with another content hash.
    """
    known = conn.execute("SELECT hash FROM sources WHERE importer = ? AND key = ?",
                         (rec["importer"], rec["key"])).fetchall()
    if known:
        if known[0][0] == rec["hash"]:
            return False, 0
        raise _conflict(f"source {rec['key']!r} of {rec['importer']} is already recorded "
                        "with another content", key=rec["key"][:200])
    sid = int(conn.execute(
        "INSERT INTO sources(importer, key, hash, imported_ms) VALUES(?,?,?,?) RETURNING id",
        (rec["importer"], rec["key"], rec["hash"], rec["imported_ms"])).fetchall()[0][0])
    wanted = sorted(set(rec["drawers"]))
    present = [int(r[0]) for r in conn.execute(
        "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(wanted),))]
    conn.executemany("INSERT INTO source_drawers(source_id, drawer_id) VALUES(?, ?)",
                     [(sid, d) for d in present])
    return True, len(wanted) - len(present)


def clear_dangling(conn: apsw.Connection) -> int:
    """Unlink drawers from drawers that were never restored; returns how many links went.

    A ``superseded_by`` or ``consolidated_into`` naming a missing drawer would hide a drawer
    behind nothing: it is cleared, as forgetting the summary of a consolidation does.
    """
    total = 0
    for column in ("superseded_by", "consolidated_into"):
        total += len(conn.execute(
            f"UPDATE drawers SET {column} = NULL WHERE {column} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM drawers t WHERE t.id = drawers.{column}) RETURNING id").fetchall())
    return total


# -- memoirs ----------------------------------------------------------------------------------
def _local_only(conn: apsw.Connection, kind: str) -> None:
    """Raises InvalidContent for a memoir record into a team palace (it has no memoirs)."""
    if is_pg(conn):
        raise InvalidContent(f"a {kind} record cannot go into a team palace: memoirs are a "
                             "local palace's", details={"condition": "unsupported"})


def restore_memoir(conn: apsw.Connection, rec: Mapping[str, Any]) -> bool:
    """Insert memoir ``rec`` with its own id; False when it is already there.

    Raises:
        InvalidContent: its id or its name belongs to another memoir, or its name or
            description is invalid.
    """
    _local_only(conn, "memoir")
    mid = int(rec["id"])
    name = memoirs.clean_name(rec["name"], "a memoir name")
    key = memoirs.name_key(name)
    text = memoirs.clean_text(rec["description"], "a memoir description",
                              MAX_DESCRIPTION_CHARS, empty=True)
    same = conn.execute("SELECT name_key FROM memoirs WHERE id = ?", (mid,)).fetchall()
    if same:
        if same[0][0] == key:
            return False
        raise _conflict(f"memoir {mid} already exists with another name", id=mid)
    if conn.execute("SELECT 1 FROM memoirs WHERE name_key = ?", (key,)).fetchall():
        raise _conflict(f"memoir {quote(name, 80)} already exists under another id", id=mid)
    conn.execute(
        "INSERT INTO memoirs(id, name, name_key, description, consolidation_threshold, "
        "created_ms, updated_ms) VALUES(?,?,?,?,?,?,?)",
        (mid, name, key, text, rec["consolidation_threshold"], rec["created_ms"],
         rec["updated_ms"]))
    return True


def restore_concept(conn: apsw.Connection, rec: Mapping[str, Any]) -> tuple[bool, int]:
    """Insert concept ``rec`` with its own id and its sources: ``(stored, sources
    dropped)``; source drawers that do not exist are left out (and counted).

    Raises:
        InvalidContent: its memoir was not restored, its id or its name (in its memoir)
            belongs to another concept, or its name, definition or labels are invalid.
    """
    _local_only(conn, "concept")
    cid, mid = int(rec["id"]), int(rec["memoir"])
    if not conn.execute("SELECT 1 FROM memoirs WHERE id = ?", (mid,)).fetchall():
        raise InvalidContent(f"concept {cid} names memoir {mid}, which no memoir record "
                             "restored", details={"condition": "missing", "memoir": mid})
    name = memoirs.clean_name(rec["name"], "a concept name")
    key = memoirs.name_key(name)
    definition = memoirs.clean_text(rec["definition"], "a definition",
                                    MAX_CONCEPT_DEFINITION_CHARS)
    labels = concepts.clean_labels(rec["labels"])
    same = conn.execute("SELECT memoir_id, name_key FROM concepts WHERE id = ?",
                        (cid,)).fetchall()
    if same:
        if tuple(same[0]) == (mid, key):
            return False, 0
        raise _conflict(f"concept {cid} already exists with another name", id=cid)
    if conn.execute("SELECT 1 FROM concepts WHERE memoir_id = ? AND name_key = ?",
                    (mid, key)).fetchall():
        raise _conflict(f"concept {quote(name, 80)} already exists under another id", id=cid)
    conn.execute(
        "INSERT INTO concepts(id, memoir_id, name, name_key, definition, labels, confidence, "
        "revision, created_ms, updated_ms) VALUES(?,?,?,?,?,?,?,?,?,?)",
        (cid, mid, name, key, definition, json.dumps(labels, ensure_ascii=False),
         rec["confidence"], rec["revision"], rec["created_ms"], rec["updated_ms"]))
    wanted = sorted(set(rec["sources"]))
    present = [int(r[0]) for r in conn.execute(
        "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(wanted),))]
    conn.executemany("INSERT INTO concept_sources(concept_id, drawer_id) VALUES(?, ?)",
                     [(cid, d) for d in present])
    return True, len(wanted) - len(present)


def restore_concept_link(conn: apsw.Connection, rec: Mapping[str, Any]) -> bool:
    """Insert concept link ``rec`` with its own id; False when it is already there.

    Raises:
        InvalidContent: a concept it names was not restored, it links a concept to itself or
            two memoirs, its relation is not a typed one, or its id holds another link.
    """
    _local_only(conn, "concept_link")
    lid, src, dst = int(rec["id"]), int(rec["source"]), int(rec["target"])
    relation = concept_links.relation_of(rec["relation"])
    found = {int(r[0]): int(r[1]) for r in conn.execute(
        "SELECT id, memoir_id FROM concepts WHERE id IN (?, ?)", (src, dst))}
    missing = [c for c in (src, dst) if c not in found]
    if missing:
        raise InvalidContent(f"concept link {lid} names concept {missing[0]}, which no concept "
                             "record restored", details={"condition": "missing",
                                                         "concept": missing[0]})
    if src == dst or found[src] != found[dst]:
        raise InvalidContent(f"concept link {lid} links a concept to itself or across "
                             "memoirs", details={"id": lid})
    same = conn.execute("SELECT source_id, target_id, relation FROM concept_links "
                        "WHERE id = ?", (lid,)).fetchall()
    if same:
        if tuple(same[0]) == (src, dst, relation):
            return False
        raise _conflict(f"concept link {lid} already exists with other contents", id=lid)
    if conn.execute("SELECT 1 FROM concept_links WHERE source_id = ? AND target_id = ? AND "
                    "relation = ?", (src, dst, relation)).fetchall():
        raise _conflict(f"concept link {lid} is already stored under another id", id=lid)
    conn.execute("INSERT INTO concept_links(id, source_id, target_id, relation, weight, "
                 "created_ms) VALUES(?,?,?,?,?,?)",
                 (lid, src, dst, relation, rec["weight"], rec["created_ms"]))
    return True
