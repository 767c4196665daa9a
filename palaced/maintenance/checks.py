"""What ``palace doctor`` finds out about one palace, and the check record it reports.

``Check`` is one line of the report: a name, ``ok``/``warn``/``fail``, a detail, whether
``--repair`` can fix it and what to do otherwise. ``PalaceFacts`` is everything learnt about
one palace before judging it (``palaced.maintenance.verdicts``): gathered here by synchronous
functions run in worker threads, always on a connection of their own (``read_database``); for an
open palace ``palaced.maintenance.doctor`` adds what needs its write lock.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from palaced.index.vector_file import file_entries, file_state
from palaced.palace.handle import DB_NAME, IDENTITY_NAME, INDEX_NAME, has_database
from palaced.store.conn.db import open_connection, storage_error
from palaced.store.jobs import checks as sql
from palaced.store.lookup.context import stale_contexts
from palaced.store.schema.check import Deviation, schema_deviations
from palaced.store.schema.sqlite import SCHEMA_VERSION
from palaced.text.topics import extract_topics
from palaced.wire.errors import PalaceError, StorageError

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass
class Check:
    """One finding: ``name`` (``palace``-qualified for palace checks), its status and detail.

    ``fixable``: ``palace doctor --repair`` can fix it; ``advice``: what to do otherwise;
    ``repaired``: set in a report after ``--repair`` fixed it.
    """

    name: str
    status: str
    detail: str
    palace: str | None = None
    fixable: bool = False
    advice: str | None = None
    repaired: bool = False

    def wire(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PalaceFacts:
    """Everything gathered about one palace (see the module docstring)."""

    name: str
    directory: Path
    open: bool = False
    damage: str | None = None  # the directory holds palace files but no usable database
    error: str | None = None  # the database could not be opened or read
    problems: list[str] = field(default_factory=list)  # quick_check, other than FTS5
    fts_index: list[str] = field(default_factory=list)  # quick_check's FTS5 complaints
    entities_fts: list[str] | None = None  # None: not checked
    application_id: int = 0
    schema: int = 0
    agreement: sql.Agreement | None = None  # None: not read (the database is unsound)
    record: sql.IndexRecord | None = None
    last_write_ms: int | None = None
    index_file: str = "missing"  # missing | current | behind (replayed at open) | stale
    index_file_entries: int | None = None
    live_index: int | None = None  # vectors in an open palace's index (None: none loaded)
    live_index_agrees: bool | None = None
    mismatch: str | None = None  # the open palace needs a reembed
    identity: str = "ok"  # ok | missing | "not a regular file"
    dir_mode: int = 0o700
    closet_mismatch: list[int] | None = None  # drawers whose closets differ (only --full)
    context_stale: list[int] | None = None  # drawers whose room context differs (--full)
    # Schema objects that are not palace's own for its version (None: not read).
    deviations: list[Deviation] | None = None

    @property
    def sound(self) -> bool:
        """Whether the database opened, passed its check (FTS5 aside) and has our schema
        (with no object palace did not make: the checks that write, even to an FTS5 table,
        are skipped until they are gone)."""
        return (self.damage is None and self.error is None and not self.problems
                and self.agreement is not None and not self.deviations)


def inspect_database(conn: apsw.Connection, facts: PalaceFacts, *, full: bool) -> None:
    """Fill ``facts`` from one read transaction on ``conn``: the integrity check, header,
    schema objects, counts and disagreements, the index record and the last write.

    The deeper reads are skipped when the check finds damage, the database is not a
    palace's or its schema is not this palaced's (an older one is migrated on open), or
    it holds schema objects palace did not make (a view of any cost may stand in for a
    table: nothing of the file's is run before ``--repair`` has removed them).

    Raises:
        apsw.Error: SQLite failed (the caller reports it as an unreadable database).
    """
    for line in sql.integrity_problems(conn, full=full):
        (facts.fts_index if sql.FTS_PROBLEM_MARK in line else facts.problems).append(line)
    facts.application_id, facts.schema = sql.header(conn)
    if not facts.problems:
        facts.deviations = schema_deviations(conn, facts.schema)
    if facts.problems or facts.schema != SCHEMA_VERSION or facts.deviations:
        return
    facts.agreement = sql.agreement(conn)
    facts.record = sql.index_record(conn)
    facts.last_write_ms = sql.last_write(conn)


def closet_mismatches(rows: list[tuple[int, str, str]]) -> list[int]:
    """Drawers whose closets are not the topics their text yields (``extract_topics``)."""
    return [did for did, text, filed in rows
            if sorted(set(extract_topics(text))) != (filed.split("\x1f") if filed else [])]


def inspect_files(facts: PalaceFacts, *, full: bool, keys: list[int] | None = None) -> None:
    """Fill in the identity file, the directory's mode and (for a palace that is not open)
    the saved index file: current, stale or missing, and with ``full`` its exact keys.

    Never raises: what cannot be read is reported as such.
    """
    directory = facts.directory
    try:
        st = os.lstat(directory / IDENTITY_NAME)
        facts.identity = "ok" if stat.S_ISREG(st.st_mode) else "not a regular file"
    except FileNotFoundError:
        facts.identity = "missing"
    except OSError as exc:
        facts.identity = f"unreadable ({exc.strerror})"
    try:
        facts.dir_mode = stat.S_IMODE(os.lstat(directory).st_mode)
    except OSError:
        pass
    record, found = facts.record, facts.agreement
    if facts.open or record is None or found is None:
        return
    path = directory / INDEX_NAME
    facts.index_file_entries = file_entries(path)
    if facts.index_file_entries is None:
        facts.index_file = "missing" if not os.path.lexists(path) else "stale"
        return
    facts.index_file = file_state(path, record.saves, found.vectors, record.top_vector,
                                  keys if full else None)


def read_database(facts: PalaceFacts, *, full: bool, closed: bool) -> None:
    """Fill ``facts`` from a connection opened for this check alone (worker thread).

    Never a pooled reader: FTS5's own check trusts a full-text structure the connection
    cached in an earlier transaction, and reports "corruption" that is not there when
    another connection wrote meanwhile (seen in about one check in six under writes). For
    a palace that is not open (``closed``) it also runs the entity-index check, inside a
    transaction that changes nothing, and with ``full`` reads what the file checks need.
    Never raises: a database that cannot be read is in ``facts.error``.
    """
    db = facts.directory / DB_NAME
    keys: list[int] | None = None
    rows: list[tuple[int, str, str]] = []
    try:
        conn = open_connection(db, palace=facts.name)
    except PalaceError as exc:
        facts.error = exc.message
        return
    try:
        with conn:
            inspect_database(conn, facts, full=full)
            if closed and facts.sound:
                facts.entities_fts = sql.entities_fts_problems(conn)
                keys = sql.vector_keys(conn) if full else None
                rows = sql.closet_rows(conn) if full else []
                facts.context_stale = stale_contexts(conn) if full else None
    except apsw.Error as exc:
        facts.error = storage_error(exc, db, facts.name).message
    finally:
        conn.close()
    if closed and full and facts.sound:
        facts.closet_mismatch = closet_mismatches(rows)
    if closed:
        inspect_files(facts, full=full, keys=keys)


def gather_closed(name: str, directory: Path, *, full: bool) -> PalaceFacts:
    """Everything about a palace that is not open (worker thread).

    The caller keeps the palace from being opened meanwhile (``Registry.held``). Never
    raises for a broken palace: the breakage is in the facts.
    """
    facts = PalaceFacts(name, directory)
    try:
        if not has_database(name, directory):
            facts.error = "no database: the palace directory is gone"
            return facts
    except StorageError as exc:
        facts.damage = exc.message
        return facts
    read_database(facts, full=full, closed=True)
    return facts
