"""Synchronous reads and writes of a palace's ``meta`` table (key -> text value).

What lives there: ``schema`` (the migrated version), ``embedder`` and ``dims`` (the model the
vectors come from), ``index_saves`` (what the last saved vector index files hold, see
``index_file``), ``decay_ms`` (the last decay) and ``last_write_ms`` (when content last
changed: ``Store.write`` stamps it, and ``palace restore`` compares it with a backup's
time). Every function takes an open
``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

import apsw


def meta_get(conn: apsw.Connection, key: str) -> str | None:
    """The value stored under ``key``, or None."""
    rows = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return str(rows[0][0]) if rows else None


def meta_set(conn: apsw.Connection, key: str, value: str) -> None:
    """Store ``value`` under ``key`` (replacing any previous value)."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES(?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def meta_init(conn: apsw.Connection, key: str, value: str) -> None:
    """Store ``value`` under ``key`` unless a value is there already."""
    conn.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO NOTHING",
                 (key, value))


def meta_delete(conn: apsw.Connection, key: str) -> None:
    """Remove ``key`` (nothing happens when it is absent)."""
    conn.execute("DELETE FROM meta WHERE key = ?", (key,))


def claim_embedder(conn: apsw.Connection, identity: str, dims: int) -> None:
    """Record the model whose vectors this palace holds from now on."""
    meta_set(conn, "embedder", identity)
    meta_set(conn, "dims", str(dims))


LAST_WRITE = "last_write_ms"


def stamp_write(conn: apsw.Connection, ms: int) -> None:
    """Record that the palace's content changed at ``ms`` (epoch milliseconds)."""
    meta_set(conn, LAST_WRITE, str(ms))


def last_write_ms(conn: apsw.Connection) -> int | None:
    """When content last changed (``stamp_write``), or None when never recorded."""
    value = meta_get(conn, LAST_WRITE)
    return int(value) if value is not None and value.strip().isdigit() else None
