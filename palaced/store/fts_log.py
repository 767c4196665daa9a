"""The change log of the drawers' full-text rows (``fts_changes``, schema v10).

Every write of a ``drawers_fts`` row (insert, delete, text or context rewrite) appends the
drawer's id here in the same transaction, so the keyword engine (``palaced.keywords``, a
rebuildable cache of those rows) learns in any later snapshot which rows changed past the
sequence number it was built at, without rebuilding per write. ``seq`` is AUTOINCREMENT:
never reused, so a watermark stays meaningful after pruning. On PostgreSQL (team palaces,
which keep their own keyword search) the log is not kept: a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable

import apsw

from .dialect import is_pg

DDL: list[str] = [
    """CREATE TABLE fts_changes(
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        drawer_id INTEGER NOT NULL
    )""",
]


def note_changed(conn: apsw.Connection, ids: Iterable[int]) -> None:
    """Log that the full-text rows of ``ids`` changed (inside the writer's transaction)."""
    if is_pg(conn):
        return
    conn.executemany("INSERT INTO fts_changes(drawer_id) VALUES(?)", [(int(i),) for i in ids])


def last_seq(conn: apsw.Connection) -> int:
    """The newest sequence number ever logged in this snapshot (0 if none)."""
    rows = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'fts_changes'").fetchall()
    return int(rows[0][0]) if rows else 0


def changed_since(conn: apsw.Connection, seq: int) -> tuple[list[int], int]:
    """The distinct drawers whose rows changed after ``seq`` and the newest seq seen."""
    rows = conn.execute("SELECT seq, drawer_id FROM fts_changes WHERE seq > ? ORDER BY seq",
                        (int(seq),)).fetchall()
    if not rows:
        return [], int(seq)
    return list(dict.fromkeys(int(r[1]) for r in rows)), int(rows[-1][0])


def prune(conn: apsw.Connection, upto: int) -> int:
    """Drop the log rows at or below ``upto`` (a saved engine holds them); returns how many."""
    conn.execute("DELETE FROM fts_changes WHERE seq <= ?", (int(upto),))
    return int(conn.changes())
