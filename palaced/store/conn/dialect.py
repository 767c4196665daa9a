"""Which SQL dialect a store connection speaks: SQLite (apsw) or PostgreSQL (``store.conn.pg``).

Store functions are written once, over SQL both engines accept (``store.conn.pg`` translates the
placeholders and a few SQLite spellings); the few facts only one engine can express (full-text
search, vector search, race-safe inserts) branch on ``is_pg``. Leaf module.
"""

from __future__ import annotations

from typing import Any


def is_pg(conn: Any) -> bool:
    """Whether ``conn`` is a PostgreSQL connection (``store.conn.pg.PgConn``)."""
    return getattr(conn, "dialect", "sqlite") == "pg"


def has_memoirs(conn: Any) -> bool:
    """Whether ``conn``'s schema holds memoirs (concepts and their links): SQLite's does; a
    team palace's PostgreSQL schema has none (docs/teams.md)."""
    return not is_pg(conn)


def vector_literal(values: Any) -> str:
    """pgvector's text form of a vector (a sequence or an array of floats)."""
    return "[" + ",".join(f"{float(v):.8g}" for v in values) + "]"


def json_ids(ids: Any) -> str:
    """One SQL parameter for any number of ids, for ``IN (SELECT value FROM json_each(?))``
    (both engines: ``store.conn.pg`` translates ``json_each``)."""
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


def lock_room(conn: Any, wing: str, room: str) -> None:
    """On PostgreSQL, serialise the writers of one room until the end of the transaction.

    A drawer's keyword context is its room neighbours' text (``store.lookup.context``): two daemons
    adding to one room at once would each miss the other's drawer and lock the neighbours'
    rows in different orders. A transaction-scoped advisory lock (a PostgreSQL lock, released
    at commit or rollback, nothing held across machines) makes them take turns. No-op on
    SQLite, whose single writer serialises already.
    """
    serialise(conn, f"\x1f{wing}\x1f{room}")


def lock_room_of(conn: Any, drawer_id: int) -> None:
    """``lock_room`` of the room drawer ``drawer_id`` is in (PostgreSQL; no-op on SQLite,
    which does not even look the room up)."""
    if is_pg(conn):
        rows = conn.execute("SELECT wing, room FROM drawers WHERE id = ?", (drawer_id,))
        for wing, room in rows.fetchall():
            lock_room(conn, str(wing), str(room))


def serialise(conn: Any, key: str) -> None:
    """On PostgreSQL, make the transactions that call this with ``key`` take turns (a
    transaction-scoped advisory lock of the palace's schema); no-op on SQLite (one writer).
    A lock this transaction holds already is not asked for again (``PgConn.held``: a batch
    of a hundred drawers in five rooms takes five locks, in five round trips)."""
    if not is_pg(conn):
        return
    held: set[str] | None = getattr(conn, "held", None)
    if held is not None and key in held:
        return
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ?))", (key,))
    if held is not None:
        held.add(key)


def for_update(conn: Any) -> str:
    """`` FOR UPDATE`` on PostgreSQL, to end a SELECT of rows the transaction will move or
    delete: a second daemon doing the same waits, then finds them gone, instead of failing
    on a duplicate key. Empty on SQLite (one writer)."""
    return " FOR UPDATE" if is_pg(conn) else ""


def ignore_conflict(conn: Any, column: str) -> str:
    """`` ON CONFLICT (column) DO NOTHING`` on PostgreSQL, to end an INSERT another daemon
    may race (the unique index settles it and the loser finds the winner's row); empty on
    SQLite, whose one writer looked the row up first in the same transaction."""
    return f" ON CONFLICT ({column}) DO NOTHING" if is_pg(conn) else ""


def indexed_by(conn: Any, table: str, index: str) -> str:
    """``table INDEXED BY index`` on SQLite (to overrule its planner), ``table`` on
    PostgreSQL, whose planner has no such hint (nor needs it)."""
    return table if is_pg(conn) else f"{table} INDEXED BY {index}"


def sequence_value(conn: Any, table: str) -> int:
    """The highest id ever handed out for ``table``'s rows (deleted ones included; 0 if
    none): SQLite's ``sqlite_sequence`` (AUTOINCREMENT), PostgreSQL's ``<table>_id_seq``."""
    if is_pg(conn):
        return int(conn.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END "
                                f"FROM {table}_id_seq").fetchall()[0][0])
    rows = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchall()
    return int(rows[0][0]) if rows else 0


def raise_sequence(conn: Any, table: str, seq: int) -> None:
    """Make sure no id of ``table`` up to ``seq`` is handed out again."""
    if seq <= sequence_value(conn, table):
        return
    if is_pg(conn):
        conn.execute(f"SELECT setval('{table}_id_seq', ?)", (seq,))
    elif conn.execute("SELECT 1 FROM sqlite_sequence WHERE name = ?", (table,)).fetchall():
        conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (seq, table))
    else:
        conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES(?, ?)", (table, seq))


def glob_test(conn: Any, column: str, param: str) -> str:
    """SQL that tests ``column`` against the glob in the named parameter ``param``, whose
    value ``glob_value`` gives: SQLite's ``GLOB``, a regular expression on PostgreSQL (which
    has no GLOB). Case-sensitive on both."""
    return f"{column} ~ :{param}" if is_pg(conn) else f"{column} GLOB :{param}"


def glob_value(conn: Any, glob: str) -> str:
    """The value of ``glob_test``'s parameter for ``glob`` (SQLite GLOB syntax)."""
    return glob_regex(glob) if is_pg(conn) else glob


def glob_regex(glob: str) -> str:
    """A SQLite GLOB (``*``, ``?``, ``[...]`` with ``^`` negating) as an anchored PostgreSQL
    regular expression matching the same strings (tests/e2e/test_team_governance.py compares
    them)."""
    out = ["^"]
    i = 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + 1
            j += glob[j:j + 1] == "^"
            j += glob[j:j + 1] == "]"  # a "]" first is a member, as in GLOB
            end = glob.find("]", j)
            if end < 0:
                return "(?!)"  # an unclosed "[": GLOB matches nothing, nor does this
            else:
                body = glob[i + 1:end]
                negate = body.startswith("^")
                members = body[1:] if negate else body
                out.append("[" + ("^" if negate else "") + members.replace("\\", "\\\\") + "]")
                i = end
        elif ch.isalnum() or ch == "_" or ord(ch) > 127:
            out.append(ch)
        else:
            out.append("\\" + ch)
        i += 1
    return "".join(out) + "$"
