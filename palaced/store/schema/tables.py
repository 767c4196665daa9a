"""The DDL of the tables other rooms' modules own (the audit log, trash, policy, transcript
captures, the full-text change log, vectors' extra column and index, context vectors, the
drawers' date index): with ``sqlite.py`` (the rest of SQLite's schema and every migration
step) and ``pg.py`` (PostgreSQL's), every DDL statement of palace is in ``store/schema/``.
Each constant is one migration step's statements; the comment says which step. Leaf module.
"""

from __future__ import annotations

from collections.abc import Sequence

# Schema v9: the audit log (``rows.audit``).
AUDIT_DDL: tuple[str, ...] = (
    # Who changed what, never the memory text itself; rows are only ever appended, and
    # dropped oldest first by the retention upkeep.
    """CREATE TABLE audit(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        agent TEXT NOT NULL,
        op TEXT NOT NULL,
        drawer_ids TEXT NOT NULL DEFAULT '[]',
        fact_ids TEXT NOT NULL DEFAULT '[]',
        outcome TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    ) STRICT""",
    "CREATE INDEX audit_time ON audit(at_ms)",
    """CREATE TRIGGER audit_append_only BEFORE UPDATE ON audit BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END""",
)

# Schema v9: the trash (``rows.trash``).
TRASH_DDL: tuple[str, ...] = (
    # A forgotten drawer, whole, until restored or purged: its row (JSON of its columns),
    # closets, vectors (chunk vectors end to end, of the embedder named), its edit history
    # (rows of drawer_history), the facts citing it and the drawers consolidated into it
    # (both links SQLite cut when the row went).
    """CREATE TABLE trash(
        id INTEGER PRIMARY KEY,
        drawer TEXT NOT NULL,
        topics TEXT NOT NULL DEFAULT '[]',
        vectors BLOB,
        vector_count INTEGER NOT NULL DEFAULT 0,
        embedder TEXT,
        facts TEXT NOT NULL DEFAULT '[]',
        sources TEXT NOT NULL DEFAULT '[]',
        history TEXT NOT NULL DEFAULT '[]',
        reason TEXT NOT NULL,
        trashed_ms INTEGER NOT NULL,
        trashed_by TEXT
    ) STRICT""",
    "CREATE INDEX trash_time ON trash(trashed_ms)",
)

# Schema v9: the access policy (``rows.policy``).
POLICY_DDL: tuple[str, ...] = (
    # permission (write, delete, admin) -> JSON list of agent globs; no row: everyone.
    """CREATE TABLE policy(
        permission TEXT PRIMARY KEY,
        agents TEXT NOT NULL
    ) STRICT""",
)

# Schema v6: how far each transcript was captured (``rows.captures``).
CAPTURES_DDL: tuple[str, ...] = (
    """CREATE TABLE captures(
        key TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        wing TEXT NOT NULL,
        room TEXT NOT NULL,
        offset INTEGER NOT NULL CHECK (offset >= 0),
        line INTEGER NOT NULL CHECK (line >= 0),
        scanned INTEGER NOT NULL DEFAULT 0,
        open_drawer INTEGER REFERENCES drawers(id) ON DELETE SET NULL,
        open_hash TEXT,
        exchanges INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL
    ) STRICT""",
)

# Schema v7 (``lookup.vectors``): the column, known at write time, so the pending work (chunks
# awaiting vectors) is counted without chunking texts again (beside ``CHUNKS_SQL``, which
# reads it).
CHUNKS_DDL: Sequence[str] = ("ALTER TABLE drawers ADD COLUMN chunks INTEGER",)

# Schema v10 (``lookup.vectors``): a vector search resolves ~200 keys to drawers per recall
# (``owners_of``). Through the table each key reads its own page of vector rows: 13-20 ms per
# recall on a million-drawer palace whose pages are not cached, against 0.3-0.7 ms through
# this index (~20 B a vector).
OWNER_DDL: Sequence[str] = ("CREATE INDEX IF NOT EXISTS vectors_owner ON vectors(id, drawer_id)",)

# Schema v11: the log of full-text row changes (``lookup.fts_log``).
FTS_LOG_DDL: list[str] = [
    """CREATE TABLE fts_changes(
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        drawer_id INTEGER NOT NULL
    )""",
]

# Schema v12 (PostgreSQL v2: ``CONTEXT_VECTORS_PG_DDL``): each drawer's room neighbours' mean
# vector (``lookup.context_vectors``; ``lookup.context.fill_context_vectors`` fills it).
CONTEXT_VECTORS_DDL: Sequence[str] = (
    """CREATE TABLE context_vectors(
        drawer_id INTEGER PRIMARY KEY REFERENCES drawers(id) ON DELETE CASCADE,
        vec BLOB NOT NULL
    )""",
)

CONTEXT_VECTORS_PG_DDL: Sequence[str] = (
    """CREATE TABLE context_vectors(
        drawer_id BIGINT PRIMARY KEY REFERENCES drawers(id) ON DELETE CASCADE,
        vec BYTEA NOT NULL
    )""",
)

# Schema v13 (PostgreSQL v3): drawers by their own date (``rows.dated``).
DATED_DDL: Sequence[str] = ("CREATE INDEX IF NOT EXISTS drawers_occurred ON drawers(occurred_ms)",)

# Schema v14 (PostgreSQL v4): conflicting drawers found at write time (``knowledge.conflicts``):
# a newer drawer that restates an older one with another value (rule: ``text.conflicts``), or
# a single-valued fact that replaced one cited from another drawer. Open until resolved
# (supersede, keep both, merge); a forgotten drawer takes its conflicts with it.
CONFLICTS_DDL: Sequence[str] = (
    """CREATE TABLE conflicts(
        id INTEGER PRIMARY KEY,
        newer_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        older_id INTEGER NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        reason TEXT NOT NULL,
        similarity REAL,
        found_ms INTEGER NOT NULL,
        resolved_ms INTEGER,
        resolution TEXT,
        resolved_by TEXT,
        UNIQUE (newer_id, older_id)
    ) STRICT""",
    "CREATE INDEX conflicts_older ON conflicts(older_id) WHERE resolved_ms IS NULL",
    "CREATE INDEX conflicts_open ON conflicts(found_ms) WHERE resolved_ms IS NULL",
)

CONFLICTS_PG_DDL: Sequence[str] = (
    """CREATE TABLE conflicts(
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        newer_id BIGINT NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        older_id BIGINT NOT NULL REFERENCES drawers(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        reason TEXT NOT NULL,
        similarity DOUBLE PRECISION,
        found_ms BIGINT NOT NULL,
        resolved_ms BIGINT,
        resolution TEXT,
        resolved_by TEXT,
        UNIQUE (newer_id, older_id)
    )""",
    "CREATE INDEX conflicts_older ON conflicts(older_id) WHERE resolved_ms IS NULL",
    "CREATE INDEX conflicts_open ON conflicts(found_ms) WHERE resolved_ms IS NULL",
)
