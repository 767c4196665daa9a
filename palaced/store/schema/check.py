"""A palace database's schema objects against palace's own: what is foreign, changed or
missing, and the repair of what can be mended.

A database file can come from anywhere (a backup, a copied-in palace, a hand edit). Schema
objects palace did not make would run or be read as if they were palace's: a trigger planted
on ``drawers`` deletes every drawer on the next remember, one on ``audit`` wipes the log. So
the objects of ``sqlite_schema`` (type, name, table and SQL text) must be exactly the ones
palace's migrations make for the database's schema version: ``expected_objects`` derives
them by running the migrations themselves on an in-memory database, so the expected set
cannot drift from the DDL (FTS5's shadow tables, SQLite's automatic indexes and
``sqlite_sequence`` included). Reading ``sqlite_schema`` fires nothing, so the comparison is
safe on any file. SQLite's statistics tables (``ANALYZE``) are SQLite's own and accepted.

Synchronous; each function takes an open ``apsw.Connection``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import apsw

from palaced.store.conn.db import APPLICATION_ID, storage_errors
from palaced.store.schema.sqlite import MIGRATIONS, SCHEMA_VERSION
from palaced.wire.errors import StorageError

# Tables SQLite itself makes on ANALYZE: they carry no code and cannot have triggers.
SQLITE_STATS = frozenset({"sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})
# Objects whose definition can be dropped and made again without losing anything stored.
REMAKEABLE = frozenset({"index", "trigger", "view"})
MAX_NAMED = 5  # objects named in an error message; the details list them all


@dataclass(frozen=True)
class SchemaObject:
    """One row of ``sqlite_schema``."""

    type: str  # table | index | view | trigger
    name: str
    table: str
    sql: str | None

    def describe(self) -> str:
        """``trigger 'w' on drawers``, ``view 'v'``, ``table 'x'``."""
        on = f" on {self.table}" if self.type in ("index", "trigger") else ""
        return f"{self.type} {self.name!r}{on}"


@dataclass(frozen=True)
class Deviation:
    """One difference from palace's schema: ``kind`` is ``foreign`` (palace never makes
    it), ``changed`` (palace's name, another definition) or ``missing``."""

    kind: str
    found: SchemaObject | None  # None when missing
    expected: SchemaObject | None  # None when foreign

    @property
    def object(self) -> SchemaObject:
        """The object concerned (the one found, else the one expected)."""
        obj = self.found or self.expected
        assert obj is not None
        return obj

    @property
    def fixable(self) -> bool:
        """Whether ``mend`` can set it right without losing stored data: a foreign object
        is dropped; an index, trigger or view of palace's is made again from its DDL."""
        if self.kind == "foreign":
            return True
        return (self.expected is not None and self.expected.type in REMAKEABLE
                and self.expected.sql is not None
                and (self.found is None or self.found.type == self.expected.type))

    def describe(self) -> str:
        """The deviation in words, e.g. ``foreign trigger 'w' on drawers``."""
        if self.kind == "changed":
            return f"{self.object.describe()} with a definition that is not palace's"
        return f"{self.kind} {self.object.describe()}"

    def wire(self) -> dict[str, str]:
        """The deviation as error or report details."""
        return {"kind": self.kind, "type": self.object.type, "name": self.object.name,
                "table": self.object.table}


def read_objects(conn: apsw.Connection) -> dict[tuple[str, str], SchemaObject]:
    """Every object of the database's main schema, keyed by ``(type, name)`` (triggers have
    their own namespace, so a trigger may share a table's name)."""
    return {(str(t), str(n)): SchemaObject(str(t), str(n), str(tbl), None if s is None else str(s))
            for t, n, tbl, s in conn.execute(
                "SELECT type, name, tbl_name, sql FROM main.sqlite_schema")}


def compare(found: Mapping[tuple[str, str], SchemaObject],
            expected: Mapping[tuple[str, str], SchemaObject]) -> list[Deviation]:
    """What in ``found`` differs from ``expected``: foreign, changed, then missing objects."""
    out: list[Deviation] = []
    for key, obj in found.items():
        if key not in expected:
            if not (obj.type == "table" and obj.name in SQLITE_STATS):
                out.append(Deviation("foreign", obj, None))
        elif expected[key] != obj:
            out.append(Deviation("changed", obj, expected[key]))
    out += [Deviation("missing", None, obj) for key, obj in expected.items() if key not in found]
    return out


@functools.cache
def expected_objects(version: int) -> Mapping[tuple[str, str], SchemaObject]:
    """The schema objects of a palace database at ``version``: what the migrations up to it
    make, read back from an in-memory database they ran on (so never a hand-kept list)."""
    conn = apsw.Connection(":memory:")
    try:
        for step in MIGRATIONS[:version]:
            with conn:
                step(conn)
        return read_objects(conn)
    finally:
        conn.close()


def schema_deviations(conn: apsw.Connection, version: int | None = None) -> list[Deviation]:
    """How the database's schema objects differ from palace's own at ``version`` (default:
    its ``user_version``; a version this palaced does not know is not compared). Only reads.
    """
    if version is None:
        version = int(conn.execute("PRAGMA user_version").fetchall()[0][0])
    if not 0 <= version <= SCHEMA_VERSION:
        return []
    return compare(read_objects(conn), expected_objects(version))


def refuse_foreign(conn: apsw.Connection, palace: str | None = None) -> None:
    """Refuse a palace database whose schema objects are not palace's own for its version,
    before anything (a migration, a write) runs in it and could fire a planted trigger.

    A database that is not palace's (application_id) or of a newer schema is left to
    ``schema.migrate``, which refuses it with its own error.

    Raises:
        StorageError: condition ``foreign_schema``, naming the objects and pointing at
            ``palace doctor --repair``; or SQLite failed.
    """
    path = conn.filename or None
    with storage_errors(Path(path) if path else None, palace):
        app_id = int(conn.execute("PRAGMA application_id").fetchall()[0][0])
        if app_id not in (0, APPLICATION_ID):
            return
        deviations = schema_deviations(conn)
    if deviations:
        repair = "palace doctor" + (f" --palace {palace}" if palace else "") + " --repair"
        raise StorageError(
            f"refusing to open {path}: its schema is not palace's ({summary(deviations)}); "
            f"nothing in it was run or changed. `{repair}` removes the objects palace did "
            "not make", details={"condition": "foreign_schema", "path": path,
                                 "palace": palace, "objects": [d.wire() for d in deviations]})


def summary(deviations: list[Deviation]) -> str:
    """The first few deviations in words, with how many more there are."""
    shown = "; ".join(d.describe() for d in deviations[:MAX_NAMED])
    more = len(deviations) - MAX_NAMED
    return shown + (f" (+{more} more)" if more > 0 else "")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _drop(conn: apsw.Connection, obj: SchemaObject) -> None:
    kind = "TABLE" if obj.type == "table" else obj.type.upper()
    # IF EXISTS: dropping a table or virtual table already took its indexes, triggers and
    # shadow tables with it.
    conn.execute(f"DROP {kind} IF EXISTS {_quote(obj.name)}")


def mend(conn: apsw.Connection, deviations: list[Deviation]) -> list[str]:
    """Drop the foreign objects and make palace's changed or missing indexes, triggers and
    views again from their DDL, inside the caller's transaction; what was done, in words.

    Triggers and views go first (they may name the tables that follow), then tables, then
    indexes. Deviations that are not ``fixable`` (a table of palace's defined otherwise, or
    missing) are left alone: they take a backup.

    Raises:
        apsw.Error: SQLite refused a statement (e.g. a virtual table of an unknown module).
    """
    order = {"trigger": 0, "view": 1, "table": 2, "index": 3}
    fixable = [d for d in deviations if d.fixable]
    done: list[str] = []
    for d in sorted(fixable, key=lambda d: order.get(d.object.type, 4)):
        if d.found is not None:
            _drop(conn, d.found)
            if d.kind == "foreign":
                done.append(f"dropped the {d.describe()}")
    for d in fixable:
        if d.expected is not None and d.expected.sql is not None:
            conn.execute(d.expected.sql)
            done.append(f"made palace's {d.expected.describe()} again "
                        f"({'it was missing' if d.kind == 'missing' else 'it had been changed'})")
    return done
