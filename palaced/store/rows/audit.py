"""Synchronous queries of a palace's audit log: who changed what, when, and how it ended.

An entry names the agent, the op, the drawer and fact ids it touched, an outcome word
(``created``, ``trashed``, ``restored``, ``denied``...) and a small ``detail`` map of counts
and reasons. It never holds a memory's text: callers pass ids and words, and ``append``
refuses a detail value that is not a number, a boolean or a short word.

Writers run inside the caller's transaction, so an entry commits together with the change it
records, or not at all. Rows are only appended (a trigger refuses updates) and dropped, oldest
first, by ``trim``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import apsw

from palaced.store.conn.dialect import glob_test, glob_value

# The agent of the daemon's own upkeep (expiry, emptying the trash).
SYSTEM_AGENT = "palaced"
# The agent of a request that named none (a client older than agents).
UNKNOWN_AGENT = "unknown"
# A detail string longer than this is not a reason or a word, and might be content.
MAX_DETAIL_WORD = 64


@dataclass(frozen=True)
class Actor:
    """Who is changing a palace: the caller's agent and the op it called."""

    agent: str
    op: str


SYSTEM = Actor(SYSTEM_AGENT, "upkeep")


def _ids(ids: Iterable[int]) -> str:
    return json.dumps([int(i) for i in ids])


def _detail(detail: Mapping[str, Any] | None) -> str:
    """``detail`` as JSON; only numbers, booleans, None and short words pass.

    Raises:
        ValueError: a value of another kind (a programming error: it could carry content).
    """
    for key, value in (detail or {}).items():
        ok = value is None or isinstance(value, bool | int | float) or (
            isinstance(value, str) and len(value) <= MAX_DETAIL_WORD)
        if not ok:
            raise ValueError(f"audit detail {key!r} must be a number or a short word")
    return json.dumps(dict(detail or {}), sort_keys=True)


def append(conn: apsw.Connection, actor: Actor, outcome: str, now_ms: int, *,
           drawer_ids: Iterable[int] = (), fact_ids: Iterable[int] = (),
           detail: Mapping[str, Any] | None = None) -> None:
    """Record one change (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO audit(at_ms, agent, op, drawer_ids, fact_ids, outcome, detail) "
        "VALUES(?,?,?,?,?,?,?)",
        (now_ms, actor.agent, actor.op, _ids(drawer_ids), _ids(fact_ids), outcome,
         _detail(detail)))


def entries(conn: apsw.Connection, *, since_ms: int | None = None, agent: str | None = None,
            op: str | None = None, limit: int = 50, offset: int = 0
            ) -> tuple[list[dict[str, Any]], int]:
    """Entries newest first, and how many match in all.

    ``agent`` and ``op`` are globs (SQLite ``GLOB``: ``*``, ``?``, ``[...]``, case-sensitive;
    a regular expression of the same strings on PostgreSQL, see ``dialect.glob_test``).
    """
    # Only the filters given: SQLite then counts an unfiltered log from the table's b-tree
    # and a ``since`` from the at_ms index, instead of testing every row.
    given: dict[str, Any] = {"since": since_ms,
                             "agent": None if agent is None else glob_value(conn, agent),
                             "op": None if op is None else glob_value(conn, op)}
    tests = {"since": "at_ms >= :since", "agent": glob_test(conn, "agent", "agent"),
             "op": glob_test(conn, "op", "op")}
    sql = " AND ".join(tests[k] for k, v in given.items() if v is not None) or "TRUE"
    params: dict[str, Any] = {**{k: v for k, v in given.items() if v is not None},
                              "limit": limit, "offset": offset}
    total = int(conn.execute(f"SELECT count(*) FROM audit WHERE {sql}", params)
                .fetchall()[0][0])
    rows = conn.execute(
        "SELECT id, at_ms, agent, op, drawer_ids, fact_ids, outcome, detail FROM audit "
        f"WHERE {sql} ORDER BY id DESC LIMIT :limit OFFSET :offset", params).fetchall()
    return [{"id": int(r[0]), "at_ms": int(r[1]), "agent": r[2], "op": r[3],
             "drawer_ids": json.loads(r[4]), "fact_ids": json.loads(r[5]), "outcome": r[6],
             "detail": json.loads(r[7])} for r in rows], total


def trim(conn: apsw.Connection, *, before_ms: int, keep: int) -> int:
    """Drop entries older than ``before_ms`` and all but the newest ``keep``; how many."""
    # Counted from RETURNING: both engines have it (apsw's changes() is SQLite's own).
    dropped = conn.execute("DELETE FROM audit WHERE at_ms < ? RETURNING id",
                           (before_ms,)).fetchall()
    dropped += conn.execute("DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - ? "
                            "RETURNING id", (keep,)).fetchall()
    return len(dropped)


def over(conn: apsw.Connection, *, before_ms: int, keep: int) -> bool:
    """Whether ``trim`` with these bounds would drop anything."""
    # One aggregate per SELECT: each is then an index lookup, not a scan.
    oldest, first, last = conn.execute(
        "SELECT (SELECT min(at_ms) FROM audit), (SELECT min(id) FROM audit), "
        "(SELECT max(id) FROM audit)").fetchall()[0]
    return oldest is not None and (oldest < before_ms or last - first + 1 > keep)


def oldest_ms(conn: apsw.Connection) -> int | None:
    """When the oldest entry was written (None: the log is empty)."""
    row = conn.execute("SELECT min(at_ms) FROM audit").fetchall()[0][0]
    return None if row is None else int(row)
