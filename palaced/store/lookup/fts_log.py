"""The change log of the drawers' full-text rows (``fts_changes``, schema v11), and the reads
of those rows the keyword engine is built from.

Every write of a ``drawers_fts`` row (insert, delete, text or context rewrite) appends the
drawer's id here in the same transaction, so the keyword engine (``palaced.palace.keywords``, a
rebuildable cache of those rows) learns in any later snapshot which rows changed past the
sequence number it was built at, without rebuilding per write. ``seq`` is AUTOINCREMENT:
never reused, so a watermark stays meaningful after pruning. On PostgreSQL (team palaces,
which keep their own keyword search) the log is not kept: a no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import apsw

from palaced.store.conn.dialect import is_pg
from palaced.store.conn.meta import meta_delete

T = TypeVar("T")
FtsRow = tuple[int, str, str, str]  # rowid (the drawer id), text, context, dates


def note_changed(conn: apsw.Connection, ids: Iterable[int]) -> None:
    """Log that the full-text rows of ``ids`` changed (inside the writer's transaction)."""
    if is_pg(conn):
        return
    conn.executemany("INSERT INTO fts_changes(drawer_id) VALUES(?)", [(int(i),) for i in ids])


def last_seq(conn: apsw.Connection) -> int:
    """The newest sequence number ever logged in this snapshot (0 if none)."""
    rows = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'fts_changes'").fetchall()
    return int(rows[0][0]) if rows else 0


def change_stamp(conn: apsw.Connection) -> int:
    """A number that moves in this snapshot whenever a write that may change keyword hits
    committed before it: the newest ``last_seq``; on PostgreSQL (no log) the palace's change
    counter as read at the start of this read (``PgConn.changes``)."""
    if is_pg(conn):
        return int(getattr(conn, "changes", None) or 0)
    return last_seq(conn)


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


def all_rows(conn: apsw.Connection) -> Iterator[FtsRow]:
    """Every full-text row of this snapshot, by rowid."""
    for rowid, text, context, dates in conn.execute(
            "SELECT rowid, text, context, dates FROM drawers_fts"):
        yield int(rowid), str(text or ""), str(context or ""), str(dates or "")


def rows_of(conn: apsw.Connection, ids: Sequence[int]) -> list[FtsRow]:
    """The full-text rows of ``ids`` that exist in this snapshot."""
    out: list[FtsRow] = []
    for i in range(0, len(ids), 500):
        marks = ",".join(str(int(x)) for x in ids[i:i + 500])
        out += [(int(r[0]), str(r[1] or ""), str(r[2] or ""), str(r[3] or "")) for r in
                conn.execute("SELECT rowid, text, context, dates FROM drawers_fts "
                             f"WHERE rowid IN ({marks})")]
    return out


def in_snapshot(path: Path, fn: Callable[[apsw.Connection], T]) -> T:
    """``fn(conn)`` in one read transaction on a connection of its own to the database at
    ``path`` (a process apart from the daemon's Store: the keyword engine's build), never
    migrating or writing. Raises apsw.Error."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.set_busy_timeout(10_000)
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def forget_log(conn: apsw.Connection, keep: int, build_key: str) -> int:
    """Empty the log once it spans ``keep`` entries, and forget the build it was kept for
    (meta ``build_key``); returns how many rows went. Two index seeks when it is shorter."""
    lo, hi = conn.execute("SELECT min(seq), max(seq) FROM fts_changes").fetchall()[0]
    if lo is None or int(hi) - int(lo) < keep:
        return 0
    conn.execute("DELETE FROM fts_changes")
    gone = int(conn.changes())
    meta_delete(conn, build_key)
    return gone
