"""Synchronous reads and writes of ``captures``: how far each captured transcript was stored.

One row per transcript (``key``: its session id, else its path): the byte ``offset`` and
line count where the next capture resumes (the start of the first exchange not yet complete),
``scanned`` (bytes already checked for malformed lines), and the exchange stored while still
open (``open_drawer``, ``open_hash``), which a later capture replaces when its answer grew.
Writers run inside the caller's transaction: the state advances in the same transaction as
the drawers it covers, so a crash loses or repeats nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from palaced.store.rows.drawers import delete_drawers


@dataclass(frozen=True)
class CaptureState:
    """Where the capture of one transcript stands (see the module docstring)."""

    key: str
    path: str
    wing: str
    room: str
    offset: int
    line: int
    scanned: int = 0
    open_drawer: int | None = None
    open_hash: str | None = None
    exchanges: int = 0


_COLUMNS = "key, path, wing, room, offset, line, scanned, open_drawer, open_hash, exchanges"


def get_state(conn: apsw.Connection, key: str) -> CaptureState | None:
    """The capture state of ``key``, or None when it was never captured."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM captures WHERE key = ?", (key,)).fetchall()
    return CaptureState(*rows[0]) if rows else None


def put_state(conn: apsw.Connection, state: CaptureState, now_ms: int) -> None:
    """Insert or replace the capture state of ``state.key``."""
    conn.execute(
        f"INSERT INTO captures({_COLUMNS}, updated_ms) VALUES(?,?,?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT(key) DO UPDATE SET path=excluded.path, wing=excluded.wing, "
        "room=excluded.room, offset=excluded.offset, line=excluded.line, "
        "scanned=excluded.scanned, open_drawer=excluded.open_drawer, "
        "open_hash=excluded.open_hash, exchanges=excluded.exchanges, "
        "updated_ms=excluded.updated_ms",
        (state.key, state.path, state.wing, state.room, state.offset, state.line,
         state.scanned, state.open_drawer, state.open_hash, state.exchanges, now_ms),
    )


def drop_open_drawer(conn: apsw.Connection, drawer_id: int, digest: str) -> list[int] | None:
    """Delete the superseded open drawer if it still holds that content; its vector ids.

    A drawer whose content changed meanwhile (it is no longer ours), or that is gone, is left
    alone: None.
    """
    rows = conn.execute("SELECT content_hash FROM drawers WHERE id = ?", (drawer_id,)).fetchall()
    if not rows or rows[0][0] != digest:
        return None
    return delete_drawers(conn, [drawer_id]) or []
