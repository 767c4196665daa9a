"""Which SQL dialect a store connection speaks: SQLite (apsw) or PostgreSQL (``store.pg``).

Store functions are written once, over SQL both engines accept (``store.pg`` translates the
placeholders and a few SQLite spellings); the few facts only one engine can express (full-text
search, vector search, race-safe inserts) branch on ``is_pg``. Leaf module.
"""

from __future__ import annotations

from typing import Any


def is_pg(conn: Any) -> bool:
    """Whether ``conn`` is a PostgreSQL connection (``store.pg.PgConn``)."""
    return getattr(conn, "dialect", "sqlite") == "pg"


def vector_literal(values: Any) -> str:
    """pgvector's text form of a vector (a sequence or an array of floats)."""
    return "[" + ",".join(f"{float(v):.8g}" for v in values) + "]"


def lock_room(conn: Any, wing: str, room: str) -> None:
    """On PostgreSQL, serialise the writers of one room until the end of the transaction.

    A drawer's keyword context is its room neighbours' text (``store.context``): two daemons
    adding to one room at once would each miss the other's drawer and lock the neighbours'
    rows in different orders. A transaction-scoped advisory lock (a PostgreSQL lock, released
    at commit or rollback, nothing held across machines) makes them take turns. No-op on
    SQLite, whose single writer serialises already.
    """
    if is_pg(conn):
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ?))",
                     (f"\x1f{wing}\x1f{room}",))
