"""Governance on team palaces (issues 13 and 15 together): two real palaced processes with
separate homes (two "machines") attached to one team palace in a real PostgreSQL share its
agents, trash, audit log and policy; a policy set through one daemon binds the other at once;
forgets and restores of one drawer racing through both converge; and the governance tables
and SQL mean the same on both engines (the tables' columns, GLOB).

The single-daemon op-level behaviour (trash, restore, purge, expiry, audit, policy) runs on
both backends in tests/e2e/test_governance.py."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from palaced.store.conn.dialect import glob_regex
from palaced.wire import errors as E
from tests.conftest import DaemonProc, base_env, short_home


@pytest.fixture(scope="module")
def two() -> Iterator[tuple[DaemonProc, DaemonProc]]:
    """Two keyword-only daemons (no model: governance needs none), homes of their own."""
    homes = [short_home(), short_home()]
    daemons = [DaemonProc(h, base_env(h, model=False)) for h in homes]
    try:
        for d in daemons:
            d.start(wait_model=False)
        yield daemons[0], daemons[1]
    finally:
        for d in daemons:
            d.stop()
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` in threads released together; their results or exceptions, in order."""
    start = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:  # the caller checks which it was
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_two_daemons_share_agents_trash_audit_and_policy(
        two: tuple[DaemonProc, DaemonProc], pg_url: str) -> None:
    a, b = two
    name = _name("gov")
    with a.client() as ca, b.client() as cb:
        ca.agent, cb.agent = "alice", "bob"
        assert ca.create_palace(name, store=pg_url)["created"] is True
        assert cb.create_palace(name, store=pg_url, exist_ok=True)["created"] is False
        did = ca.remember(name, "The release train leaves every second Wednesday")
        assert cb.get(name, did)["created_by"] == "alice"
        # Forgotten through B: in the trash for A too, restored through A.
        assert cb.forget(name, did)["trashed"] is True
        with pytest.raises(E.MemoryNotFound) as gone:
            ca.get(name, did)
        assert gone.value.details["in_trash"] is True
        listed = ca.trash(name)["drawers"]
        assert [(x["id"], x["trashed_by"]) for x in listed] == [(did, "bob")]
        assert ca.restore_drawer(name, did)["restored"] is True
        back = cb.get(name, did)
        assert (back["created_by"], back["updated_by"]) == ("alice", "alice")
        assert cb.recall(name, "release train Wednesday")[0]["id"] == did
        # A policy set through A binds B at once (no daemon caches a team palace's policy).
        ca.set_policy(name, "delete", ["alice"])
        assert cb.policy(name)["policy"]["delete"] == ["alice"]
        with pytest.raises(E.Forbidden) as refused:
            cb.forget(name, did)
        assert refused.value.details["allowed"] == ["alice"]
        assert ca.get(name, did)["text"].startswith("The release train")
        ca.set_policy(name, "delete", ["*"])
        cb.forget(name, did)  # open again, at once
        ca.restore_drawer(name, did)
        # One log, written by both daemons, read by either.
        log = [(e["agent"], e["op"], e["outcome"]) for e in cb.audit(name, limit=20)["entries"]]
    assert log == [
        ("alice", "memory.restore", "restored"), ("bob", "memory.forget", "trashed"),
        ("alice", "palace.policy_set", "set"), ("bob", "memory.forget", "denied"),
        ("alice", "palace.policy_set", "set"), ("alice", "memory.restore", "restored"),
        ("bob", "memory.forget", "trashed"), ("alice", "memory.remember", "created"),
        ("alice", "palace.create", "created")]


def test_racing_forgets_and_restores_through_two_daemons_converge(
        two: tuple[DaemonProc, DaemonProc], pg_url: str) -> None:
    """Both daemons forget one drawer at the same moment, then both restore it: one of each
    wins, the other gets the answer it would get a moment later, never a storage error."""
    a, b = two
    name = _name("race")
    with a.client() as ca, b.client() as cb:
        ca.create_palace(name, store=pg_url)
        cb.create_palace(name, store=pg_url, exist_ok=True)
        for round_ in range(5):
            did = ca.remember(name, f"Racing drawer number {round_} of the team palace")
            forgot = _at_once(lambda d=did: ca.forget(name, d), lambda d=did: cb.forget(name, d))
            won = [r for r in forgot if isinstance(r, dict)]
            lost = [r for r in forgot if not isinstance(r, dict)]
            assert len(won) == 1 and won[0]["trashed"] is True, forgot
            assert len(lost) == 1 and isinstance(lost[0], E.MemoryNotFound), forgot
            assert lost[0].details["in_trash"] is True
            restored = _at_once(lambda d=did: ca.restore_drawer(name, d),
                                lambda d=did: cb.restore_drawer(name, d))
            assert sorted(r["restored"] for r in restored) == [False, True], restored
            assert cb.get(name, did)["id"] == did
        assert ca.trash(name)["total"] == 0
        outcomes = [e["outcome"] for e in ca.audit(name, op="memory.*", limit=50)["entries"]]
    assert outcomes.count("trashed") == outcomes.count("restored") == 5


def _columns(conn: Any, table: str) -> list[str]:
    """A table's column names, in order: ``sqlite3`` or a ``PgConn`` (which translates the
    PRAGMA)."""
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def test_the_governance_tables_are_the_same_on_both_engines(pg_url: str,
                                                             tmp_path: Path) -> None:
    """The trash, audit and policy tables (written for each engine: store/rows/trash.py,
    store/rows/audit.py, store/rows/policy.py and store/schema/pg.py) have the same columns in the same
    order (a trash entry is restored by column name), and the agent columns exist on both."""
    from palaced.store import Store
    from tests.support.pgstore_support import pg_conn

    Store(tmp_path / "palace.db", palace="unit").close()
    connections = pg_conn(pg_url)
    with sqlite3.connect(tmp_path / "palace.db") as lite:
        conn = next(connections)
        for table in ("trash", "audit", "policy"):
            assert _columns(conn, table) == _columns(lite, table), table
        for table, added in (("drawers", ("created_by", "updated_by")),
                             ("facts", ("created_by", "invalidated_by"))):
            assert set(added) <= set(_columns(conn, table))
            assert set(added) <= set(_columns(lite, table))
    connections.close()


GLOBS = ["*", "mcp:*", "user:?ob", "[ab]*", "[^ab]*", "[]x]*", "a.b*", "*(1)", "x[", "memory.*",
         "*\\*", "%_", "ünï*", "[a-c]?"]
NAMES = ["mcp:claude/1", "user:bob", "user:rob", "alice", "bob", "carl", "]x", "xylo",
         "a.b.c", "axb", "job(1)", "x[", "x", "memory.forget", "memoryxforget", "a\\*", "%_",
         "%x", "ünïcode", "b", "c7", "d7", ""]


def test_glob_regex_matches_what_sqlite_glob_matches(pg_url: str) -> None:
    """The audit filters' globs: SQLite GLOB and PostgreSQL ``~ glob_regex`` agree."""
    import psycopg

    lite = sqlite3.connect(":memory:")
    with psycopg.connect(pg_url) as pg:
        for glob in GLOBS:
            want = [n for n in NAMES if lite.execute("SELECT ? GLOB ?", (n, glob)).fetchone()[0]]
            got = [n for n in NAMES
                   if pg.execute("SELECT %s ~ %s", (n, glob_regex(glob))).fetchone()[0]]
            assert got == want, (glob, glob_regex(glob))


def _trim_case(c: Any) -> tuple[int, int, int, int]:
    """Ten entries at 1000..1009 ms; trim by age, then by count; ``(dropped by age, dropped
    by count, left, left by agent glob)``."""
    from palaced.store.rows import audit
    for i in range(10):
        audit.append(c, audit.Actor("ab" if i % 2 else "cd", "memory.remember"), "created",
                     1000 + i, drawer_ids=[i])
    by_age = audit.trim(c, before_ms=1003, keep=100)
    by_count = audit.trim(c, before_ms=0, keep=4)
    return (by_age, by_count, audit.entries(c, limit=100)[1],
            audit.entries(c, agent="[a]*", limit=100)[1])


def test_audit_trim_counts_the_same_on_both_engines(pg_url: str, tmp_path: Path) -> None:
    """The retention upkeep's trim (RETURNING counts, apsw's changes() being SQLite's own) and
    an agent-glob filter, on SQLite and on PostgreSQL."""
    from palaced.store import Store
    from tests.support.pgstore_support import pg_conn

    lite = Store(tmp_path / "palace.db", palace="unit")
    try:
        assert lite.write(_trim_case) == (3, 3, 4, 2)
    finally:
        lite.close()
    connections = pg_conn(pg_url)
    conn = next(connections)
    with conn:
        assert _trim_case(conn) == (3, 3, 4, 2)
    connections.close()
