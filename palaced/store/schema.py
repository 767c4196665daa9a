"""The whole schema of a palace database, as ordered migrations keyed by ``PRAGMA user_version``.

v1: ``meta``, ``drawers`` with their full-text index ``drawers_fts``, ``vectors`` and
``closets`` (topics). v2: the knowledge graph: ``entities`` with their full-text index
``entities_fts`` (kept by triggers) and temporal ``facts``. v3: the import ledger: ``sources``
(one row per imported file or conversation: its importer, key and content hash) and
``source_drawers`` (which drawers each source filed), so re-running an import replaces what
changed and nothing else. v4: ``vectors_next``, the vectors of the model a palace is being
re-embedded for (``store/reembed.py``). v5: ``drawers.chunks``, how many pieces (vectors) a
drawer's text is embedded as (NULL for drawers stored before: estimated from their length
where needed).

Each step runs inside one transaction together with the bump of ``user_version``, so a crash
mid-migration leaves the previous version intact. Newer schemas are refused, never guessed at.
A step, once released, never changes: a new schema is a new step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import apsw

from palaced.errors import SchemaTooNew, StorageError

from .db import APPLICATION_ID, storage_errors

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
# old model's; one transaction then replaces them (``store/reembed.py``).
REEMBED_DDL: list[str] = [
    """CREATE TABLE vectors_next(
        id INTEGER PRIMARY KEY,
        drawer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        chunk INTEGER NOT NULL,
        vec BLOB NOT NULL
    )""",
    "CREATE INDEX vectors_next_drawer ON vectors_next(drawer_id)",
]


def _sql_step(statements: Sequence[str]) -> Callable[[apsw.Connection], None]:
    def step(conn: apsw.Connection) -> None:
        for stmt in statements:
            conn.execute(stmt)

    return step


# v5: a drawer's chunk count, known at write time, so the pending work (chunks awaiting
# vectors) is counted without chunking texts again.
CHUNKS_DDL: Sequence[str] = ("ALTER TABLE drawers ADD COLUMN chunks INTEGER",)

MIGRATIONS: list[Callable[[apsw.Connection], None]] = [
    _sql_step(V1), _sql_step(GRAPH_DDL), _sql_step(SOURCES_DDL), _sql_step(REEMBED_DDL),
    _sql_step(CHUNKS_DDL)]
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
            with conn:
                MIGRATIONS[target - 1](conn)
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={target}")
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES('schema', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (str(target),),
                )
        return int(version)
