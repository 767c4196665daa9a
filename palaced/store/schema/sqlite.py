"""The whole schema of a palace database, as ordered migrations keyed by ``PRAGMA user_version``.

v1: ``meta``, ``drawers`` with their full-text index ``drawers_fts``, ``vectors`` and ``closets``
(topics). v2: the knowledge graph: ``entities`` with their full-text index ``entities_fts`` (kept
by triggers) and temporal ``facts``. v3: the import ledger: ``sources`` (one row per imported file
or conversation: its importer, key and content hash) and ``source_drawers`` (which drawers each
source filed), so re-running an import replaces what changed and nothing else. v4:
``vectors_next``, the vectors of the model a palace is being re-embedded for
(``store/lookup/reembed.py``). v5: memoirs, curated concept graphs: ``memoirs``, their ``concepts``
with the full-text index ``concepts_fts`` and the label index ``concept_labels`` (both kept by
triggers), ``concept_sources`` (the drawers a concept cites) and typed ``concept_links``. v6:
``captures``, how far each captured transcript was stored (``store/rows/captures.py``). v7:
``drawers.chunks``, how many pieces (vectors) a drawer's text is embedded as (NULL for drawers
stored before: estimated from their length where needed). v8: editing and upkeep:
``drawer_history`` (the earlier versions of a drawer edited in place by ``memory.update``),
``drawers_trigram`` (a trigram full-text index over the drawers' text, kept by triggers, for
substring search when the word search finds nothing) and ``drawers.ttl_ms`` (the lifetime a drawer
was given, so that a recall can restart it). v9: who did what: the agents that wrote drawers and
facts, the ``trash`` of forgotten drawers, the append-only ``audit`` log and the palace's
``policy``. v10: ``vectors_owner``, a vector's drawer without reading the vector. v11:
``fts_changes``, the log the keyword engine follows. v12: ``context_vectors``, each drawer's room
neighbours' mean vector. v13: ``drawers_occurred``, drawers by their own date (``store/dated``).
v14: ``conflicts``, drawers that contradict older ones (``store/knowledge/conflicts``).

Each step runs inside one transaction together with the bump of ``user_version``, so a crash
mid-migration leaves the previous version intact. Newer schemas are refused, never guessed at.
A step, once released, never changes: a new schema is a new step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import apsw

from palaced.store.conn.db import APPLICATION_ID, storage_errors
from palaced.store.lookup.context import fill_context_vectors
from palaced.store.schema.tables import (
    AUDIT_DDL,
    CAPTURES_DDL,
    CHUNKS_DDL,
    CONFLICTS_DDL,
    CONTEXT_VECTORS_DDL,
    DATED_DDL,
    FTS_LOG_DDL,
    OWNER_DDL,
    POLICY_DDL,
    TRASH_DDL,
)
from palaced.wire.errors import SchemaTooNew, StorageError

log = logging.getLogger(__name__)

V1: Sequence[str] = (
    """CREATE TABLE meta(
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    # AUTOINCREMENT: a forgotten drawer's id is never handed to a new drawer, so an agent
    # holding an old id can never read or forget the wrong memory (found by bench/soak.py).
    """CREATE TABLE drawers(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        text TEXT NOT NULL,
        wing TEXT NOT NULL,
        room TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        importance REAL NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
        source TEXT,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        accessed_ms INTEGER,
        access_count INTEGER NOT NULL DEFAULT 0,
        occurred_ms INTEGER NOT NULL,
        content_hash TEXT NOT NULL UNIQUE,
        embedded INTEGER NOT NULL DEFAULT 0,
        weight REAL NOT NULL DEFAULT 1.0,
        expires_ms INTEGER,
        superseded_by INTEGER,
        consolidated_into INTEGER,
        kind TEXT NOT NULL DEFAULT 'drawer'
    )""",
    "CREATE INDEX drawers_room_time ON drawers(wing, room, occurred_ms, id)",
    "CREATE INDEX drawers_room_only ON drawers(room)",
    "CREATE INDEX drawers_essential ON drawers(importance DESC, updated_ms DESC)",
    "CREATE INDEX drawers_created ON drawers(created_ms DESC, id DESC)",
    "CREATE INDEX drawers_pending ON drawers(embedded) WHERE embedded = 0",
    "CREATE INDEX drawers_expires ON drawers(expires_ms) WHERE expires_ms IS NOT NULL",
    # Full-text index over the drawer (weight 1), its room neighbours as down-weighted
    # context, and the date it happened in words; maintained in code in the same transaction.
    """CREATE VIRTUAL TABLE drawers_fts USING fts5(
        text, context, dates, tokenize = 'porter unicode61 remove_diacritics 2'
    )""",
    # Vector ids are the HNSW keys; never reusing them keeps a removed key from coming back.
    """CREATE TABLE vectors(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        chunk INTEGER NOT NULL,
        vec BLOB NOT NULL
    )""",
    "CREATE INDEX vectors_drawer ON vectors(drawer_id)",
    """CREATE TABLE closets(
        topic TEXT NOT NULL,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        PRIMARY KEY (topic, drawer_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX closets_drawer ON closets(drawer_id)",
)


# v2, the knowledge graph: runs after the drawers table exists (facts cite drawers as sources).
# Self-links are refused by a CHECK as well as in code, so raw SQL cannot create one either.
GRAPH_DDL: list[str] = [
    """CREATE TABLE entities(
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        name_key TEXT NOT NULL UNIQUE,
        type TEXT,
        definition TEXT,
        labels TEXT NOT NULL DEFAULT '[]',
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    ) STRICT""",
    """CREATE TABLE facts(
        id INTEGER PRIMARY KEY,
        subject_id INTEGER NOT NULL REFERENCES entities(id),
        predicate TEXT NOT NULL,
        object_id INTEGER REFERENCES entities(id),
        object_value TEXT,
        valid_from_ms INTEGER NOT NULL,
        valid_to_ms INTEGER,
        confidence REAL NOT NULL DEFAULT 1.0 CHECK (confidence >= 0 AND confidence <= 1),
        source_drawer INTEGER REFERENCES drawers(id) ON DELETE SET NULL,
        source_url TEXT,
        source_agent TEXT,
        created_ms INTEGER NOT NULL,
        invalidated_ms INTEGER,
        CHECK (object_id IS NULL OR object_id != subject_id),
        CHECK ((object_id IS NULL) != (object_value IS NULL)),
        CHECK (valid_to_ms IS NULL OR valid_to_ms >= valid_from_ms)
    ) STRICT""",
    "CREATE INDEX facts_subject ON facts(subject_id, predicate, valid_from_ms)",
    "CREATE INDEX facts_object ON facts(object_id, valid_from_ms) WHERE object_id IS NOT NULL",
    "CREATE INDEX facts_active ON facts(subject_id, predicate) WHERE valid_to_ms IS NULL",
    "CREATE INDEX facts_predicate ON facts(predicate, valid_to_ms)",
    # Lets ON DELETE SET NULL find a deleted drawer's facts without scanning every fact.
    "CREATE INDEX facts_source ON facts(source_drawer) WHERE source_drawer IS NOT NULL",
    """CREATE VIRTUAL TABLE entities_fts USING fts5(
        name, definition, labels,
        content = 'entities', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER entities_fts_insert AFTER INSERT ON entities BEGIN
        INSERT INTO entities_fts(rowid, name, definition, labels)
        VALUES (new.id, new.name, new.definition, new.labels);
    END""",
    """CREATE TRIGGER entities_fts_delete AFTER DELETE ON entities BEGIN
        INSERT INTO entities_fts(entities_fts, rowid, name, definition, labels)
        VALUES ('delete', old.id, old.name, old.definition, old.labels);
    END""",
    """CREATE TRIGGER entities_fts_update AFTER UPDATE OF name, definition, labels ON entities
    BEGIN
        INSERT INTO entities_fts(entities_fts, rowid, name, definition, labels)
        VALUES ('delete', old.id, old.name, old.definition, old.labels);
        INSERT INTO entities_fts(rowid, name, definition, labels)
        VALUES (new.id, new.name, new.definition, new.labels);
    END""",
]


# v3, the import ledger (palace import markdown/chatgpt/...): a drawer may be claimed by several
# sources (the same section in two files); it is deleted only when no source claims it.
SOURCES_DDL: list[str] = [
    """CREATE TABLE sources(
        id INTEGER PRIMARY KEY,
        importer TEXT NOT NULL,
        key TEXT NOT NULL,
        hash TEXT NOT NULL,
        imported_ms INTEGER NOT NULL,
        UNIQUE (importer, key)
    ) STRICT""",
    """CREATE TABLE source_drawers(
        source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        PRIMARY KEY (source_id, drawer_id)
    ) STRICT, WITHOUT ROWID""",
    "CREATE INDEX source_drawers_drawer ON source_drawers(drawer_id)",
]


# v4: a model switch builds the new model's vectors here while ``vectors`` keeps serving the
# old model's; one transaction then replaces them (``store/lookup/reembed.py``).
REEMBED_DDL: list[str] = [
    """CREATE TABLE vectors_next(
        id INTEGER PRIMARY KEY,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        chunk INTEGER NOT NULL,
        vec BLOB NOT NULL
    )""",
    "CREATE INDEX vectors_next_drawer ON vectors_next(drawer_id)",
]


# v5, memoirs. Deleting a memoir cascades to its concepts, and from them to their labels,
# sources and links, inside the one DELETE statement's transaction. The database itself refuses
# a self-link (CHECK), a relation outside the nine typed ones (CHECK; the list is this step's
# own copy of vocab.TYPED_RELATIONS, since a released step never changes) and a link between
# two memoirs (trigger); duplicate links are impossible (UNIQUE).
MEMOIR_DDL: Sequence[str] = (
    """CREATE TABLE memoirs(
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        name_key TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        consolidation_threshold INTEGER NOT NULL DEFAULT 50 CHECK (consolidation_threshold >= 1),
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    ) STRICT""",
    """CREATE TABLE concepts(
        id INTEGER PRIMARY KEY,
        memoir_id INTEGER NOT NULL REFERENCES memoirs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        name_key TEXT NOT NULL,
        definition TEXT NOT NULL,
        labels TEXT NOT NULL DEFAULT '[]',
        confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
        revision INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1),
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        UNIQUE (memoir_id, name_key)
    ) STRICT""",
    # Labels are ``namespace:value`` strings; this index of ``concepts.labels`` (a JSON list)
    # serves exact label search in one memoir or across all of them.
    """CREATE TABLE concept_labels(
        label TEXT NOT NULL COLLATE NOCASE,
        concept_id INTEGER NOT NULL REFERENCES concepts(id) ON DELETE CASCADE,
        PRIMARY KEY (label, concept_id)
    ) WITHOUT ROWID, STRICT""",
    "CREATE INDEX concept_labels_concept ON concept_labels(concept_id)",
    """CREATE TRIGGER concept_labels_insert AFTER INSERT ON concepts BEGIN
        INSERT OR IGNORE INTO concept_labels(label, concept_id)
        SELECT value, new.id FROM json_each(new.labels);
    END""",
    """CREATE TRIGGER concept_labels_update AFTER UPDATE OF labels ON concepts BEGIN
        DELETE FROM concept_labels WHERE concept_id = new.id;
        INSERT OR IGNORE INTO concept_labels(label, concept_id)
        SELECT value, new.id FROM json_each(new.labels);
    END""",
    # A forgotten drawer leaves the concepts that cited it (ON DELETE CASCADE).
    """CREATE TABLE concept_sources(
        concept_id INTEGER NOT NULL REFERENCES concepts(id) ON DELETE CASCADE,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        PRIMARY KEY (concept_id, drawer_id)
    ) WITHOUT ROWID, STRICT""",
    "CREATE INDEX concept_sources_drawer ON concept_sources(drawer_id)",
    """CREATE TABLE concept_links(
        id INTEGER PRIMARY KEY,
        source_id INTEGER NOT NULL REFERENCES concepts(id) ON DELETE CASCADE,
        target_id INTEGER NOT NULL REFERENCES concepts(id) ON DELETE CASCADE,
        relation TEXT NOT NULL CHECK (relation IN ('part_of', 'depends_on', 'related_to',
            'contradicts', 'refines', 'alternative_to', 'caused_by', 'instance_of',
            'superseded_by')),
        weight REAL NOT NULL DEFAULT 1.0 CHECK (weight >= 0 AND weight <= 1),
        created_ms INTEGER NOT NULL,
        UNIQUE (source_id, target_id, relation),
        CHECK (source_id != target_id)
    ) STRICT""",
    "CREATE INDEX concept_links_target ON concept_links(target_id)",
    """CREATE TRIGGER concept_links_one_memoir BEFORE INSERT ON concept_links
    WHEN (SELECT memoir_id FROM concepts WHERE id = new.source_id)
         IS NOT (SELECT memoir_id FROM concepts WHERE id = new.target_id)
    BEGIN
        SELECT RAISE(ABORT, 'concept links stay inside one memoir');
    END""",
    """CREATE VIRTUAL TABLE concepts_fts USING fts5(
        name, definition, labels,
        content = 'concepts', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER concepts_fts_insert AFTER INSERT ON concepts BEGIN
        INSERT INTO concepts_fts(rowid, name, definition, labels)
        VALUES (new.id, new.name, new.definition, new.labels);
    END""",
    """CREATE TRIGGER concepts_fts_delete AFTER DELETE ON concepts BEGIN
        INSERT INTO concepts_fts(concepts_fts, rowid, name, definition, labels)
        VALUES ('delete', old.id, old.name, old.definition, old.labels);
    END""",
    """CREATE TRIGGER concepts_fts_update AFTER UPDATE OF name, definition, labels ON concepts
    BEGIN
        INSERT INTO concepts_fts(concepts_fts, rowid, name, definition, labels)
        VALUES ('delete', old.id, old.name, old.definition, old.labels);
        INSERT INTO concepts_fts(rowid, name, definition, labels)
        VALUES (new.id, new.name, new.definition, new.labels);
    END""",
)


# v8, editing and upkeep. The trigram index reads its text from ``drawers`` (external
# content: the text is not stored twice) and triggers keep it current on every path that
# inserts, edits or deletes a drawer (remember, update, restore, forget, prune, sweep).
UPKEEP_DDL: list[str] = [
    """CREATE TABLE drawer_history(
        id INTEGER PRIMARY KEY,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        wing TEXT NOT NULL,
        room TEXT NOT NULL,
        tags TEXT NOT NULL,
        importance REAL NOT NULL,
        replaced_ms INTEGER NOT NULL
    ) STRICT""",
    "CREATE INDEX drawer_history_drawer ON drawer_history(drawer_id, id)",
    """CREATE VIRTUAL TABLE drawers_trigram USING fts5(
        text, content = 'drawers', content_rowid = 'id', tokenize = 'trigram'
    )""",
    "INSERT INTO drawers_trigram(drawers_trigram) VALUES ('rebuild')",
    """CREATE TRIGGER drawers_trigram_insert AFTER INSERT ON drawers BEGIN
        INSERT INTO drawers_trigram(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER drawers_trigram_delete AFTER DELETE ON drawers BEGIN
        INSERT INTO drawers_trigram(drawers_trigram, rowid, text)
        VALUES ('delete', old.id, old.text);
    END""",
    """CREATE TRIGGER drawers_trigram_update AFTER UPDATE OF text ON drawers BEGIN
        INSERT INTO drawers_trigram(drawers_trigram, rowid, text)
        VALUES ('delete', old.id, old.text);
        INSERT INTO drawers_trigram(rowid, text) VALUES (new.id, new.text);
    END""",
    # The lifetime a drawer was given (ttl, or expires_at less the time it was stored): a
    # recall that returns it may push its expiry to recall time + ttl_ms.
    "ALTER TABLE drawers ADD COLUMN ttl_ms INTEGER",
    """UPDATE drawers SET ttl_ms = max(expires_ms - created_ms, 0)
        WHERE expires_ms IS NOT NULL""",
    """CREATE TRIGGER drawers_ttl AFTER INSERT ON drawers
        WHEN new.expires_ms IS NOT NULL AND new.ttl_ms IS NULL BEGIN
        UPDATE drawers SET ttl_ms = max(new.expires_ms - new.created_ms, 0) WHERE id = new.id;
    END""",
]


# v9, agents, trash, audit and policy (each table defined beside its queries).
GOVERNANCE_DDL: list[str] = [
    # The agent (protocol envelope) that stored the drawer, and the last one that changed it.
    "ALTER TABLE drawers ADD COLUMN created_by TEXT",
    "ALTER TABLE drawers ADD COLUMN updated_by TEXT",
    "ALTER TABLE facts ADD COLUMN created_by TEXT",
    "ALTER TABLE facts ADD COLUMN invalidated_by TEXT",
    *TRASH_DDL, *AUDIT_DDL, *POLICY_DDL,
]


def _sql_step(statements: Sequence[str]) -> Callable[[apsw.Connection], None]:
    def step(conn: apsw.Connection) -> None:
        for stmt in statements:
            conn.execute(stmt)

    return step


def _context_vectors(conn: apsw.Connection) -> None:
    """v12: the table of each drawer's room neighbours' mean vector, filled at once."""
    _sql_step(CONTEXT_VECTORS_DDL)(conn)
    fill_context_vectors(conn)


MIGRATIONS: list[Callable[[apsw.Connection], None]] = [
    _sql_step(V1), _sql_step(GRAPH_DDL), _sql_step(SOURCES_DDL), _sql_step(REEMBED_DDL),
    _sql_step(MEMOIR_DDL), _sql_step(CAPTURES_DDL), _sql_step(CHUNKS_DDL), _sql_step(UPKEEP_DDL),
    _sql_step(GOVERNANCE_DDL), _sql_step(OWNER_DDL), _sql_step(FTS_LOG_DDL),
    _context_vectors, _sql_step(DATED_DDL), _sql_step(CONFLICTS_DDL)]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: apsw.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version found before.

    Raises:
        SchemaTooNew: written by a newer palace.
        StorageError: not a palace database (foreign application_id) or SQLite failed.
    """
    with storage_errors(Path(conn.filename) if conn.filename else None):
        app_id = conn.execute("PRAGMA application_id").fetchall()[0][0]
        version = conn.execute("PRAGMA user_version").fetchall()[0][0]
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and version != 0):
            raise StorageError(
                f"not a palace database ({conn.filename}: application_id {app_id:#x}, "
                f"user_version {version})", details={"condition": "foreign",
                                                     "path": conn.filename})
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"palace schema v{version} is newer than this palaced (v{SCHEMA_VERSION}); "
                "upgrade palace",
                details={"found": version, "supported": SCHEMA_VERSION},
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            # Logged: v8's trigram index takes ~30 s at 1M drawers, a slow open to explain.
            started = time.monotonic()
            with conn:
                MIGRATIONS[target - 1](conn)
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={target}")
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES('schema', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (str(target),),
                )
            if version:
                log.info("%s: schema migrated to v%d in %.1f s", conn.filename, target,
                         time.monotonic() - started)
        return int(version)
