"""PgStore: the PostgreSQL side of a team palace, with the ``write(fn)``/``read(fn)`` contract
of ``Store``.

Every store function (``palaced.store.*``) runs unchanged on a ``PgConn``: it has apsw's
``execute``/``executemany`` and translates, once per statement text (cached), SQLite's
spellings into PostgreSQL's: ``?``/``:name`` placeholders, ``INSERT OR IGNORE``,
two-argument ``max``/``min``, ``json_each`` and the null-safe ``IS``/``IS NOT`` of a value.
The few facts only one engine can express branch on ``store.conn.dialect.is_pg`` (full-text and
vector search, race-safe inserts).

One schema per palace holds its tables (``store.schema.pg``); connections come from a
``psycopg_pool.ConnectionPool`` whose connections have the palace schema on their
``search_path`` and a ``statement_timeout``. A connection that cannot be had within the connect
timeout, a statement past its timeout, a server that went away or a transaction that lost a
deadlock is a ``StoreUnavailable`` (retryable) naming the server, never a hang; the pool
checks each connection as it hands it out, so it reconnects by itself once the server is back.

Credentials never reach palace's files or messages: URLs with a password are refused
(``check_url``) and errors show host, port and database only (``where``).

psycopg is imported here only: this module is imported when a team palace is opened, so a
daemon without one never loads it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, cast

import apsw
import psycopg
import psycopg.errors
import psycopg.sql
from psycopg import conninfo as pg_conninfo
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolTimeout

from palaced.config.team_settings import TeamSettings
from palaced.store import Store
from palaced.wire.errors import InvalidArgs, PalaceError, StorageError, StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("palaced.store.conn.pg")

POOL_MAX = 8
# HNSW candidates per vector search: recall asks for its pool (100) of drawers, and a long
# drawer has several chunks among them.
HNSW_EF_SEARCH = 400
# The planner's statistics: a table whose rows changed by a tenth (and ANALYZE_MIN_ROWS)
# since its last ANALYZE is analysed again (vacuumed too when they were inserted), looked at
# every ANALYZE_EVERY writes and when a palace opens. Autovacuum has the same rule but looks
# once a minute: right after a bulk load a team recall at 10k drawers took 277 ms p50
# without statistics, 47 ms with them (bench/pg.py --scale 10000).
ANALYZE_MIN_ROWS = 500
ANALYZE_EVERY = 16


# -- URLs -----------------------------------------------------------------------------------
def check_url(url: str) -> dict[str, str]:
    """The parsed libpq parameters of ``url``, refused when it holds a password.

    Raises:
        InvalidArgs: not a libpq URL or key/value string, or it carries a password (palace
            never stores one: use PGPASSWORD, ~/.pgpass or a pg_service.conf service).
    """
    try:
        params = pg_conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise InvalidArgs(f"not a PostgreSQL connection URL: {exc}",
                          details={"store": "(unparsable)"}) from exc
    if params.get("password"):
        raise InvalidArgs(
            "the store URL holds a password, which palace never stores: remove it and give "
            "it through PGPASSWORD, ~/.pgpass or a pg_service.conf service instead",
            details={"store": where(params)})
    return {k: str(v) for k, v in params.items() if v is not None}


def where(params: dict[str, Any]) -> str:
    """``host:port/dbname`` (or ``service=name``) of a connection: what messages and logs show
    of it (never a user or password)."""
    if params.get("service") and not params.get("dbname"):
        return f"service={params['service']}"
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    db = str(params.get("dbname") or "")
    return f"{host}:{port}/{db}"


# -- SQL translation ------------------------------------------------------------------------
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|:(\w+)|\?|%")
_PAIR = r"\(\s*([^(),]+?)\s*,\s*([^(),]+?)\s*\)"
_MAX2 = re.compile(r"\bmax" + _PAIR, re.IGNORECASE)
_MIN2 = re.compile(r"\bmin" + _PAIR, re.IGNORECASE)
_JSON_IDS = re.compile(r"SELECT value FROM json_each\(([^()]*)\)")
_JSON_EACH = re.compile(r"json_each\(([^()]*)\)")
_OR_IGNORE = re.compile(r"INSERT OR IGNORE INTO", re.IGNORECASE)
_RETURNING = re.compile(r"\sRETURNING\s", re.IGNORECASE)
# SQLite's null-safe comparison with a value: ``x IS ?``, ``x IS NOT :v``.
_IS_NOT_VALUE = re.compile(r"\bIS\s+NOT\s+(?=\?|:\w|\()")
_IS_VALUE = re.compile(r"\bIS\s+(?=\?|:\w|\()")


# ``PRAGMA table_info(t)``: rows whose second column is a column name, in table order.
_TABLE_INFO = re.compile(r"^\s*PRAGMA table_info\((\w+)\)\s*$", re.IGNORECASE)


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """SQLite statement text -> PostgreSQL statement text (see the module docstring)."""
    info = _TABLE_INFO.match(sql)
    if info:
        return ("SELECT ordinal_position, column_name FROM information_schema.columns "
                f"WHERE table_schema = current_schema() AND table_name = '{info.group(1)}' "
                "ORDER BY ordinal_position")
    out = _MAX2.sub(r"GREATEST(\1, \2)", sql)
    out = _MIN2.sub(r"LEAST(\1, \2)", out)
    out = _JSON_IDS.sub(
        r"SELECT value::bigint FROM jsonb_array_elements_text((\1)::jsonb) AS j(value)", out)
    out = _IS_NOT_VALUE.sub("IS DISTINCT FROM ", out)
    out = _IS_VALUE.sub("IS NOT DISTINCT FROM ", out)
    out = _JSON_EACH.sub(r"jsonb_array_elements_text((\1)::jsonb) AS j(value)", out)
    if _OR_IGNORE.search(out):
        out = _OR_IGNORE.sub("INSERT INTO", out)
        m = _RETURNING.search(out)
        out = (out[:m.start()] + " ON CONFLICT DO NOTHING" + out[m.start():] if m
               else out + " ON CONFLICT DO NOTHING")

    def sub(m: re.Match[str]) -> str:
        s = m.group(0)
        if s[0] in "'\"":  # a literal: no placeholder inside, but psycopg reads every "%"
            return s.replace("%", "%%")
        if s == "::":
            return s
        if s == "?":
            return "%s"
        if s == "%":
            return "%%"
        return f"%({m.group(1)})s"

    return _TOKEN.sub(sub, out)


class _NoRows:
    """The result of a statement that returns no rows: empty, as apsw's cursor is."""

    def fetchall(self) -> list[Any]:
        return []

    def fetchone(self) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        return iter(())


_NO_ROWS = _NoRows()


class _Cursor:
    """A psycopg cursor with the part of apsw's cursor the store functions use."""

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall()

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)

    def getdescription(self) -> list[tuple[str, Any]]:
        """``(column name, type)`` per column, as apsw's."""
        return [(c.name, c.type_code) for c in self._cur.description or ()]


class PgConn:
    """A psycopg connection inside one transaction, with the part of apsw's interface the
    store functions use."""

    dialect = "pg"

    def __init__(self, conn: psycopg.Connection[Any], cache: dict[str, Any] | None = None,
                 changes: int | None = None) -> None:
        self.raw = conn
        self._savepoints: list[Any] = []
        # The store's cache of derived values (``pg_search``'s BM25 statistics) and the
        # palace's change counter at the start of this read (None: unknown).
        self.cache: dict[str, Any] = {} if cache is None else cache
        self.changes = changes
        # The advisory locks (``dialect.serialise`` keys) this transaction holds: forgotten
        # when a ``with`` block ends by an error (a rolled-back savepoint releases the
        # locks taken in it) or the outermost one ends (its transaction is over).
        self.held: set[str] = set()

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
                ) -> _Cursor | _NoRows:
        """Run one statement; a constraint violation is raised as ``apsw.ConstraintError``,
        the exception the store functions' callers already handle (a refused record)."""
        # Always parameters (none: an empty tuple), so psycopg always reads "%%" as "%".
        args = params if isinstance(params, dict) else tuple(params or ())
        try:
            cur = self.raw.execute(translate(sql), args)
        except psycopg.IntegrityError as exc:
            raise apsw.ConstraintError(f"PostgreSQL: {exc}") from exc
        return _Cursor(cur) if cur.description is not None else _NO_ROWS

    def execute_indexed(self, sql: str, params: dict[str, Any]) -> list[Any]:
        """The rows of one SELECT planned without sequential scans, so an index that serves
        its ORDER BY ... LIMIT is used: PostgreSQL's cost model misses the detoasting of
        every vector a full scan reads, and at 10k vectors of 384 dimensions it preferred
        the scan (70-120 ms) to the HNSW index (~9 ms, the same top 100; docs/teams.md).

        The setting is transaction-local (``set_config(..., true)``: nothing outlives the
        transaction, as PgBouncer's transaction pooling requires) and put back right after
        the statement; the three statements go in one pipeline, one round trip."""
        cursors = [self.raw.cursor() for _ in range(3)]
        try:
            with self.raw.pipeline():
                cursors[0].execute(
                    "SELECT set_config('palace.seqscan', current_setting('enable_seqscan'), "
                    "true), set_config('enable_seqscan', 'off', true)")
                cursors[1].execute(translate(sql), params)
                cursors[2].execute("SELECT set_config('enable_seqscan', "
                                   "current_setting('palace.seqscan'), true)")
            return cursors[1].fetchall()
        finally:
            for cur in cursors:
                cur.close()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = [tuple(r) for r in rows]
        if batch:
            try:
                with self.raw.cursor() as cur:
                    cur.executemany(translate(sql), batch)
            except psycopg.IntegrityError as exc:
                raise apsw.ConstraintError(f"PostgreSQL: {exc}") from exc

    # ``with conn:`` is a savepoint, as on apsw.
    def __enter__(self) -> PgConn:
        tx = self.raw.transaction()
        tx.__enter__()
        self._savepoints.append(tx)
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        if exc[0] is not None or len(self._savepoints) == 1:
            self.held.clear()
        return bool(self._savepoints.pop().__exit__(*exc))


# -- errors ---------------------------------------------------------------------------------
def store_error(exc: BaseException, server: str, palace: str | None) -> PalaceError:
    """The typed error of a psycopg failure on ``server`` (``where``) for ``palace``."""
    owner = f"palace {palace!r}'s PostgreSQL server" if palace else "PostgreSQL server"
    details: dict[str, Any] = {"server": server, "cause": type(exc).__name__}
    if palace:
        details["palace"] = palace
    if isinstance(exc, psycopg.errors.QueryCanceled):
        details["condition"] = "timeout"
        return StoreUnavailable(f"{owner} {server} did not answer within the statement "
                                "timeout; retry", details=details)
    if isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
        details["condition"] = "conflict"
        return StoreUnavailable(f"{owner} {server}: a concurrent write conflicted; retry",
                                details=details)
    if isinstance(exc, psycopg.InternalError) and getattr(exc, "sqlstate", None) is None:
        # psycopg's own, not the server's: the connection said more than the command asked
        # ("received 2 results from command 'BEGIN ...'"), as when a server restarting
        # behind PgBouncer ends the session mid-request. The connection is lost, not the data.
        details["condition"] = "unreachable"
        return StoreUnavailable(f"{owner} {server} dropped the connection mid-request ({exc}); "
                                "retry (the daemon reconnects by itself)", details=details)
    if isinstance(exc, PoolTimeout | psycopg.OperationalError):
        details["condition"] = "unreachable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreUnavailable(f"{owner} {server} is unreachable ({first}); retry once it "
                                "is back (the daemon reconnects by itself)", details=details)
    details["condition"] = "postgres"
    return StorageError(f"{owner} {server} failed: {type(exc).__name__}: {exc}",
                        details=details)


def check_idle(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection it hands out, without a round trip while nothing
    came from the server since its last use: a server that ended the session (restart,
    kill, ``pg_terminate_backend``) has sent its FATAL message or closed the socket, which
    then reads as ready, and only then is the connection asked (``check_connection``'s
    empty statement) and dropped by the pool if that fails. (The empty statement was one
    round trip of every transaction.)

    Raises:
        psycopg.Error: the connection is broken.
    """
    raw = conn.pgconn
    if raw.status == pq.ConnStatus.OK and raw.transaction_status == pq.TransactionStatus.IDLE:
        try:
            ready = select.select([raw.socket], [], [], 0)[0]
        except (OSError, ValueError, psycopg.Error):
            ready = [True]
        if not ready:
            return
    ConnectionPool.check_connection(conn)


# -- the store ------------------------------------------------------------------------------
class _Behind(Exception):
    """A replica's snapshot is older than the change counter this daemon has seen."""

    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


class PgStore(Store):
    """The connection pool of one team palace (schema ``schema`` of the database at ``url``).

    Same contract as ``Store``: ``write(fn)`` runs ``fn(conn)`` in one transaction (READ
    COMMITTED: remember's races are settled by unique indexes), ``read(fn)`` in one read-only
    REPEATABLE READ transaction (a consistent snapshot). ``changes`` is the palace's change
    counter as last seen (see ``write``), which caches of every daemon key on.
    """

    def __init__(self, url: str, schema: str, *, palace: str | None = None,
                 settings: TeamSettings | None = None, create: bool = False,
                 replica: str | None = None, pooler: str = "none") -> None:
        """Connect and migrate (creating the schema with ``create``); reads may go to the
        read ``replica`` (a libpq URL, see ``read``); ``pooler`` "transaction": the servers
        are behind PgBouncer's transaction pooling (no server-side prepared statements).

        Raises:
            InvalidArgs: a URL with a password. StoreUnavailable: the server cannot be
                reached. PalaceNotFound: no such schema and not ``create``. SchemaTooNew,
                StorageError: see ``pg_schema.migrate``.
        """
        from palaced.store.schema.pg import migrate

        settings = settings or TeamSettings()
        params = check_url(url)
        self.path = None  # type: ignore[assignment]  # no file: see ``server``
        self.palace = palace
        self.schema = schema
        self.server = where(params)
        self.changes = 0
        self._changes_lock = threading.Lock()
        self._cache: dict[str, Any] = {}  # see PgConn.cache
        timeout_ms = int(settings.statement_timeout_s * 1000)
        self._url, self._timeout = url, settings.connect_timeout_s
        # No session state: a pooler in transaction mode may run each transaction on another
        # server connection, so every transaction sets what it needs itself, with
        # ``set_config(..., true)`` (SET LOCAL) in its first statement (``_begin``), and
        # statements outside one name the palace's objects with the schema.
        self._settings = (f'"{schema}", public', str(timeout_ms), str(HNSW_EF_SEARCH))
        self._counter = f'"{schema}".changes'
        self._kwargs: dict[str, Any] = {
            "autocommit": True, "application_name": "palaced",
            "connect_timeout": max(1, int(settings.connect_timeout_s + 0.999))}
        if pooler == "transaction":
            # A statement psycopg prepared on one server connection is unknown on the next.
            self._kwargs["prepare_threshold"] = None
        # Since when the server is known unreachable (None: it is not): requests then probe
        # it with one connection attempt instead of waiting for the pool (see ``_pooled``).
        self._down: float | None = None
        # Set by ``closing``: every request then probes the server first, as while it is down.
        self._closing = False
        self._writes = 0  # since the statistics were last looked at (``analyze_soon``)
        self._analyzing = threading.Lock()  # one ``analyze_soon`` thread at a time
        try:
            # The schema is checked on a connection of its own: a server that refuses it (or
            # lost the database) fails the open at once, where opening the pool retried until
            # its timeout, for each team palace ``palace status`` lists during an outage.
            with psycopg.connect(self._url, **self._kwargs) as conn:
                self.created = migrate(conn, schema, palace=palace, create=create,
                                       wrap=PgConn) == 0
        except psycopg.Error as exc:
            raise store_error(exc, self.server, palace) from exc
        self._pool = self._new_pool()
        self._pool.open(wait=False)
        self.replica = (Replica(self, replica, settings.replica_max_lag_s)
                        if replica else None)

    def _new_pool(self, url: str | None = None, timeout: float | None = None
                  ) -> ConnectionPool:
        return ConnectionPool(
            url or self._url, min_size=1, max_size=POOL_MAX, open=False,
            name=f"palace-{self.schema}", timeout=self._timeout if timeout is None else timeout,
            check=check_idle, reconnect_timeout=0, kwargs=self._kwargs)

    def closing(self) -> None:
        """The palace is closing: its last writes (the closing checkpoint) try one direct
        connection first, so a server that refuses them, or lost the database, fails them
        at once instead of after the pool's connect timeout (a daemon's stop waited it)."""
        self._closing = True

    def _pooled(self) -> Any:
        """A connection of the pool (a context manager). While the server is known down (or
        the palace is ``closing``), one direct connection attempt first: refused at once, the
        request fails at once instead of waiting the connect timeout for the pool; accepted,
        the server is back and a fresh pool replaces the one backing off its reconnections."""
        if self._down is not None or self._closing:
            try:
                psycopg.connect(self._url, **self._kwargs).close()
            except psycopg.Error as exc:
                raise store_error(exc, self.server, self.palace) from exc
            with self._changes_lock:
                if self._down is not None:
                    old, self._pool, self._down = self._pool, self._new_pool(), None
                    self._pool.open(wait=False)
                    old.close(timeout=0.1)
        return self._pool.connection()

    def _failed(self, exc: BaseException) -> PalaceError:
        """The typed error of ``exc``; an unreachable server is remembered (``_pooled``)."""
        err = store_error(exc, self.server, self.palace)
        if err.details.get("condition") == "unreachable" and self._down is None:
            self._down = time.monotonic()
        return err

    def _note(self, value: int) -> None:
        with self._changes_lock:
            self.changes = max(self.changes, value)

    def _begin(self, conn: psycopg.Connection[Any], tx: contextlib.ExitStack, *,
               read: bool) -> int:
        """Start a transaction on ``conn`` (its ``conn.transaction()`` entered on ``tx``)
        with this palace's search_path, statement timeout and HNSW breadth, all local to
        it; a read also gets the change counter of its snapshot (returned; 0 for a write).
        One round trip: BEGIN and the one statement of settings and counter are pipelined."""
        counter = (f", (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "
                   f"{self._counter})" if read else "")
        with conn.pipeline():
            # Not ``conn.transaction()``: in a pipeline it keeps the whole block pipelined.
            tx.enter_context(psycopg.Transaction(conn))
            cur = conn.execute(
                "SELECT set_config('search_path', %s, true), "
                "set_config('statement_timeout', %s, true), "
                f"set_config('hnsw.ef_search', %s, true){counter}", self._settings)
        row = cur.fetchone()
        return int(row[3]) if read and row is not None else 0

    def write(self, fn: Callable[[Any], T], *, stamp: bool = True,
              counted: Callable[[T], bool] | None = None) -> T:
        """Run ``fn`` in one write transaction (rolled back if it raises), then bump the
        palace's change counter: after the commit, so a daemon that sees the new counter
        also sees the data (``read``). The bump is a ``setval``, which PostgreSQL logs every
        time (a ``nextval`` alone is logged 32 values ahead, which is what a replica would
        read): a replica's counter is then exactly the writes it has replayed. ``stamp`` is
        accepted for ``Store``'s sake: the last-write time serves backup restores, which
        team palaces leave to PostgreSQL.

        ``counted(result)`` false: the write changed nothing a read computes (recall's
        access counts, not what ranks or filters), so the counter stays: snapshots and
        caches compared on it stay valid (a recall's early vector snapshot and its main
        one; the rooms, L1, BM25 statistics), as on SQLite, whose touches move neither its
        write counter nor its keyword log. Such a write may reach a replica's reads late."""
        try:
            with self._pooled() as conn:
                conn.read_only, conn.isolation_level = False, None
                with contextlib.ExitStack() as tx:
                    self._begin(conn, tx, read=False)
                    result = fn(PgConn(conn))
                if counted is not None and not counted(result):
                    return result
                row = self._bump(conn)
            if row is not None:
                self._note(int(row[0]))
            self._writes += 1
            if self._writes >= ANALYZE_EVERY:
                self._writes = 0
                self.analyze_soon()
            return result
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._failed(exc) from exc
        except apsw.ConstraintError as exc:
            raise StorageError(f"palace {self.palace!r}'s PostgreSQL server {self.server} "
                               f"refused a write: {exc}", details={
                                   "condition": "constraint", "server": self.server}) from exc

    def analyze_stale(self, *, quiet: bool = False) -> list[str]:
        """ANALYZE this palace's tables whose rows changed by a tenth, and at least
        ``ANALYZE_MIN_ROWS``, since their last ANALYZE, and VACUUM (ANALYZE) those that many
        rows were inserted into since their last VACUUM; returns their names. A table this
        role does not own is skipped by PostgreSQL with a warning.

        The VACUUM is for the visibility map: until a page is marked all-visible, an
        index-only scan reads the table row of every entry it returns, and BM25 reads its
        postings by index-only scans (every posting of a query lexeme). Right after a bulk
        load, before autovacuum's next look, a team recall at 10k drawers paid that for every
        posting (docs/teams.md, "The planner's statistics").

        Raises:
            StoreUnavailable, StorageError: the server failed (``quiet``: logged instead,
                for a write that has committed already).
        """
        try:
            with self._pooled() as conn:
                conn.read_only, conn.isolation_level = False, None
                stale = conn.execute(
                    "SELECT relname, n_ins_since_vacuum >= greatest(%s, 0.1 * n_live_tup) "
                    "FROM pg_stat_user_tables WHERE schemaname = %s AND (n_mod_since_analyze "
                    ">= greatest(%s, 0.1 * n_live_tup) OR n_ins_since_vacuum >= greatest(%s, "
                    "0.1 * n_live_tup)) ORDER BY relname",
                    (ANALYZE_MIN_ROWS, self.schema, ANALYZE_MIN_ROWS, ANALYZE_MIN_ROWS)
                ).fetchall()
                conn.commit()
                conn.autocommit = True  # VACUUM runs outside a transaction
                try:
                    for name, vacuum in stale:
                        conn.execute(psycopg.sql.SQL(
                            "VACUUM (ANALYZE) {}.{}" if vacuum else "ANALYZE {}.{}").format(
                                psycopg.sql.Identifier(self.schema),
                                psycopg.sql.Identifier(name)))
                finally:
                    conn.autocommit = False
            return [str(name) for name, _ in stale]
        except (psycopg.Error, PoolTimeout, PalaceError) as exc:
            if quiet:
                log.warning("palace %s: ANALYZE of its tables failed: %s", self.palace, exc)
                return []
            if isinstance(exc, PalaceError):
                raise
            raise self._failed(exc) from exc

    def analyze_soon(self) -> None:
        """``analyze_stale`` on a thread of its own, one at a time: an ANALYZE (~0.5 s at
        10k drawers) must hold up neither the write that happened to be the sixteenth (the
        palace's writes wait for it) nor a palace's open. Failures are logged."""
        if not self._analyzing.acquire(blocking=False):
            return

        def run() -> None:
            try:
                self.analyze_stale(quiet=True)
            except Exception:  # a pool closed under it with the palace: nothing to save
                log.debug("palace %s: ANALYZE ended early", self.palace, exc_info=True)
            finally:
                self._analyzing.release()

        threading.Thread(target=run, name=f"analyze-{self.schema}", daemon=True).start()

    def _bump(self, conn: psycopg.Connection[Any]) -> Any:
        """Move the change counter one step on (its own short transaction, one round trip);
        returns its row. The bumps of all daemons take turns under a transaction-scoped
        advisory lock: ``setval(nextval())`` is two steps, and two writers interleaving them
        (A takes 5, B takes and sets 6, A sets 5) would move the counter back, so a third
        write would reuse 6 and a cache filled at 6 would miss it."""
        with conn.pipeline():
            with psycopg.Transaction(conn):
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                             (f"palace-changes:{self.schema}",))
                cur = conn.execute(f"SELECT setval('{self._counter}', "
                                   f"nextval('{self._counter}'))")
        return cur.fetchone()

    def read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` in one read-only snapshot; notes the change counter at its start. With
        a replica, the replica serves it when it is up and as recent as this daemon needs
        (``Replica.run``), else the primary."""
        if self.replica is not None:
            served, result = self.replica.run(fn)
            if served:
                return cast(T, result)
        try:
            with self._pooled() as conn:
                return self._snapshot(conn, fn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._failed(exc) from exc

    def _snapshot(self, conn: psycopg.Connection[Any], fn: Callable[[Any], T],
                  least: int | None = None) -> T:
        """``fn`` in a read-only REPEATABLE READ transaction on ``conn``, its counter noted;
        with ``least``, a snapshot older than that counter raises ``_Behind`` instead."""
        conn.read_only, conn.isolation_level = True, psycopg.IsolationLevel.REPEATABLE_READ
        with contextlib.ExitStack() as tx:
            seen = self._begin(conn, tx, read=True)
            if least is not None and seen < least:
                raise _Behind(seen)
            self._note(seen)
            return fn(PgConn(conn, self._cache, seen))

    def checkpoint(self) -> None:
        """Nothing to fold: PostgreSQL checkpoints itself."""

    def abandon(self) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close(timeout=1.0)
        if self.replica is not None:
            self.replica.close()



class Replica:
    """The read replica of one team palace's store (``[stores.NAME] replica``).

    A read goes to the replica when its snapshot is at least as recent as this daemon's
    view of the palace: the change counter it has seen (``PgStore.changes``), which its own
    writes bump after their commit. So a daemon reads back its own writes (and never goes
    back in time): a replica that has not replayed them yet is "behind" and the primary
    serves that read. The counter, read in the same snapshot as the data, stands for the
    commit's WAL position (compared with ``pg_last_wal_replay_lsn()``) at no extra round
    trip, and keeps every cache keyed on it consistent with what was read. The primary's
    counter is read again at least every ``max_lag_s`` (that read goes to the primary), so
    a replica that lags further than that serves nothing until it has caught up. A replica
    that cannot be reached is "down": the primary serves the reads and the replica is tried
    again after ``RETRY_S``, with one direct connection first (refused at once while down).
    """

    RETRY_S = 5.0

    def __init__(self, store: PgStore, url: str, max_lag_s: float) -> None:
        """Raises: InvalidArgs: a URL with a password."""
        self.server = where(check_url(url))
        self.store, self.url, self.max_lag_s = store, url, max_lag_s
        # The pool waits at most a second for a connection: a replica is never worth more.
        self._timeout = min(1.0, store._timeout)
        self.pool = store._new_pool(url, self._timeout)
        self.pool.open(wait=False)
        self._lock = threading.Lock()
        self._synced: float | None = None  # when the primary's counter was last read
        self._down_until: float | None = None
        self.state, self.error = "unused", ""
        self.reads = {"replica": 0, "primary": 0}

    def _count(self, where_: str, state: str | None = None) -> None:
        with self._lock:
            self.reads[where_] += 1
            if state is not None:
                self.state = state

    def run(self, fn: Callable[[Any], T]) -> tuple[bool, Any]:
        """``(True, fn's result)`` when the replica served the read; ``(False, None)`` when
        the primary must (the replica is down, behind, or the primary's counter is due)."""
        now = time.monotonic()
        if self._synced is None or now - self._synced >= self.max_lag_s:
            self._synced = now  # this read, on the primary, refreshes the counter
            self._count("primary")
            return False, None
        if self._down_until is not None:
            if now < self._down_until:
                self._count("primary")
                return False, None
            if not self._back():
                return False, None
        try:
            with self.pool.connection() as conn:
                result = self.store._snapshot(conn, fn, least=self.store.changes)
        except _Behind:
            self._count("primary", "behind")
            return False, None
        except (psycopg.OperationalError, PoolTimeout) as exc:
            self._gone(exc)
            return False, None
        except psycopg.Error as exc:  # e.g. cancelled by a conflict with recovery: retry
            log.info("replica %s failed a read (%s); the primary serves it", self.server,
                     type(exc).__name__)
            self._count("primary")
            return False, None
        self._count("replica", "serving")
        return True, result

    def _gone(self, exc: BaseException) -> None:
        """The replica is unreachable: the primary serves this read (counted) and the next
        ones for RETRY_S."""
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        with self._lock:
            if self.state != "down":
                log.warning("read replica %s of palace %r is unreachable (%s): the primary "
                            "serves its reads", self.server, self.store.palace, first)
            self._down_until = time.monotonic() + self.RETRY_S
            self.state, self.error = "down", first
            self.reads["primary"] += 1

    def _back(self) -> bool:
        """One direct connection to a replica known down: accepted, a fresh pool replaces
        the one backing off its reconnections; refused, it stays down (``_gone``)."""
        try:
            psycopg.connect(self.url, **{**self.store._kwargs,
                                         "connect_timeout": 1}).close()
        except psycopg.Error as exc:
            self._gone(exc)
            return False
        with self._lock:
            old, self.pool, self._down_until = self.pool, self.store._new_pool(
                self.url, self._timeout), None
            self.pool.open(wait=False)
        old.close(timeout=0.1)
        log.info("read replica %s of palace %r is back", self.server, self.store.palace)
        return True

    def describe(self) -> dict[str, Any]:
        """What ``palace status`` shows of it: server, state (unused, serving, behind: the
        primary served the last read, down: unreachable, with the error) and reads served
        by each."""
        with self._lock:
            out: dict[str, Any] = {"server": self.server, "state": self.state,
                                   "reads": dict(self.reads)}
            if self.state == "down":
                out["error"] = self.error
        return out

    def close(self) -> None:
        self.pool.close(timeout=1.0)
