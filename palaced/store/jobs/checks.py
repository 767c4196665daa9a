"""Synchronous integrity queries over one palace database, for ``palace doctor``.

Each function takes an open ``apsw.Connection`` and only reads, so it runs on a reader
snapshot (``Store.read``) or on a connection of its own to a palace that is not open; the one
exception, ``entities_fts_problems``, runs an FTS5 command that needs a write transaction.
What is wrong is returned as data: the caller judges it (``palaced.maintenance.checks``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import apsw

from palaced.store.conn.meta import last_write_ms, meta_get

# The message PRAGMA quick_check/integrity_check gives for an FTS5 index that disagrees with
# its own content (since SQLite 3.44 they check FTS5 tables too). Rebuildable, unlike the rest.
FTS_PROBLEM_MARK = "FTS5 table"
MAX_PROBLEMS = 20  # lines of a failed check kept: the first few say what is wrong


def integrity_problems(conn: apsw.Connection, *, full: bool = False) -> list[str]:
    """``PRAGMA quick_check`` (``integrity_check`` with ``full``): its lines other than "ok".

    Raises:
        apsw.Error: SQLite could not even run the check (e.g. a corrupt header).
    """
    pragma = "integrity_check" if full else "quick_check"
    rows = conn.execute(f"PRAGMA {pragma}({MAX_PROBLEMS})").fetchall()
    return [str(r[0]) for r in rows if str(r[0]) != "ok"]


def header(conn: apsw.Connection) -> tuple[int, int]:
    """``(application_id, user_version)`` of the database."""
    app_id = int(conn.execute("PRAGMA application_id").fetchall()[0][0])
    version = int(conn.execute("PRAGMA user_version").fetchall()[0][0])
    return app_id, version


@dataclass
class Agreement:
    """How the derived tables agree with ``drawers`` (counts, plus a few example ids)."""

    drawers: int = 0
    vectors: int = 0
    pending: int = 0  # drawers stored without vectors (embedded = 0), waiting for the model
    embedded_without_vectors: int = 0  # marked embedded, yet no vector row
    orphan_vectors: int = 0  # vector rows of drawers that no longer exist
    fts_missing: int = 0  # drawers without a full-text row
    fts_orphans: int = 0  # full-text rows of drawers that no longer exist
    fts_stale: int = 0  # full-text rows whose text is not the drawer's
    orphan_closets: int = 0
    context_orphans: int = 0  # context vectors of drawers gone or superseded
    facts: int = 0
    entities: int = 0
    examples: dict[str, list[int]] = field(default_factory=dict)


def _count(conn: apsw.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchall()[0][0])


def _ids(conn: apsw.Connection, sql: str) -> list[int]:
    return [int(r[0]) for r in conn.execute(sql + " LIMIT 5")]


DERIVED_SQL = {
    "embedded_without_vectors": "SELECT d.id FROM drawers d WHERE d.embedded = 1 AND NOT EXISTS"
                                " (SELECT 1 FROM vectors v WHERE v.drawer_id = d.id)",
    "orphan_vectors": "SELECT v.id FROM vectors v WHERE NOT EXISTS"
                      " (SELECT 1 FROM drawers d WHERE d.id = v.drawer_id)",
    "fts_missing": "SELECT d.id FROM drawers d WHERE NOT EXISTS"
                   " (SELECT 1 FROM drawers_fts f WHERE f.rowid = d.id)",
    "fts_orphans": "SELECT f.rowid FROM drawers_fts f WHERE NOT EXISTS"
                   " (SELECT 1 FROM drawers d WHERE d.id = f.rowid)",
    "fts_stale": "SELECT d.id FROM drawers d JOIN drawers_fts f ON f.rowid = d.id"
                 " WHERE f.text IS NOT d.text",
    "orphan_closets": "SELECT c.drawer_id FROM closets c WHERE NOT EXISTS"
                      " (SELECT 1 FROM drawers d WHERE d.id = c.drawer_id)",
    "context_orphans": "SELECT c.drawer_id FROM context_vectors c WHERE NOT EXISTS"
                       " (SELECT 1 FROM drawers d WHERE d.id = c.drawer_id"
                       " AND d.superseded_by IS NULL)",
}


def agreement(conn: apsw.Connection) -> Agreement:
    """Counts of drawers, vectors and facts, and every disagreement of the derived tables."""
    out = Agreement(
        drawers=_count(conn, "SELECT count(*) FROM drawers"),
        vectors=_count(conn, "SELECT count(*) FROM vectors"),
        pending=_count(conn, "SELECT count(*) FROM drawers WHERE embedded = 0"),
        facts=_count(conn, "SELECT count(*) FROM facts"),
        entities=_count(conn, "SELECT count(*) FROM entities"),
    )
    for name, sql in DERIVED_SQL.items():
        found = _count(conn, f"SELECT count(*) FROM ({sql})")
        setattr(out, name, found)
        if found:
            out.examples[name] = _ids(conn, sql)
    return out


# The full-text indexes whose text lives in another table (external content).
EXTERNAL_FTS = ("entities_fts", "drawers_trigram")


def entities_fts_problems(conn: apsw.Connection) -> list[str]:
    """FTS5's own check of the entity index and the drawers' substring index against the
    tables they index (``EXTERNAL_FTS``; an index not in this schema yet is skipped).

    The ``rank`` 1 form also compares with the external content table (the PRAGMA does not).
    An INSERT, so it needs a write transaction: run it on the writer, under the write lock.
    """
    problems = []
    for table in EXTERNAL_FTS:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchall():
            continue
        try:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
        except (apsw.CorruptError, apsw.SQLError) as exc:
            problems.append(f"{table}: {exc}")
    return problems


@dataclass(frozen=True)
class IndexRecord:
    """What the database says about its saved vector index files and its vectors."""

    saves: list[dict[str, Any]]  # the last saves (``index_file``): crc, bytes, watermark...
    embedder: str | None
    dims: int | None
    top_vector: int  # the highest vector id


def index_record(conn: apsw.Connection) -> IndexRecord:
    """The records of the saved index files, the embedder and the highest vector id."""
    dims = meta_get(conn, "dims")
    try:
        saves = json.loads(meta_get(conn, "index_saves") or "[]")
    except ValueError:
        saves = []
    top = conn.execute("SELECT coalesce(max(id), 0) FROM vectors").fetchall()[0][0]
    return IndexRecord(saves=saves if isinstance(saves, list) else [],
                       embedder=meta_get(conn, "embedder"),
                       dims=int(dims) if dims and dims.isdigit() else None,
                       top_vector=int(top))


def vector_key_summary(conn: apsw.Connection) -> tuple[int, int, int]:
    """``(count, sum, max)`` of the vector ids: what an index holding them must match."""
    row = conn.execute("SELECT count(*), coalesce(sum(id), 0), coalesce(max(id), 0) "
                       "FROM vectors").fetchall()[0]
    return int(row[0]), int(row[1]), int(row[2])


def vector_keys(conn: apsw.Connection) -> list[int]:
    """Every vector id (the keys the index must hold)."""
    return [int(r[0]) for r in conn.execute("SELECT id FROM vectors ORDER BY id")]


def closet_rows(conn: apsw.Connection) -> list[tuple[int, str, str]]:
    """``(drawer_id, text, topics)`` of every drawer, topics ``\\x1f``-joined and sorted."""
    return [(int(r[0]), str(r[1]), str(r[2] or "")) for r in conn.execute(
        "SELECT d.id, d.text, (SELECT group_concat(topic, char(31)) FROM "
        "(SELECT topic FROM closets c WHERE c.drawer_id = d.id ORDER BY topic)) "
        "FROM drawers d ORDER BY d.id")]


def last_write(conn: apsw.Connection) -> int | None:
    """When the palace's content last changed (meta ``last_write_ms``), if recorded."""
    return last_write_ms(conn)


def holds_nothing(conn: apsw.Connection) -> bool:
    """Whether the palace holds no drawer and no fact."""
    return bool(conn.execute("SELECT NOT EXISTS (SELECT 1 FROM drawers) AND NOT EXISTS "
                             "(SELECT 1 FROM facts)").fetchall()[0][0])
