"""Team palaces through PgBouncer in transaction pooling mode (issue 34), end to end.

A real PgBouncer (``tests/support/pgbouncer.py``) in front of a real PostgreSQL, with fewer
server connections (``default_pool_size`` 3) than the two daemons open (up to 8 each): each
transaction may run on another server connection than the last, so nothing may rest on
session state (search_path, statement_timeout, prepared statements, session advisory locks).
Two real daemons reach the palace through it as ``[stores.team] pooler = "transaction"``:

- the palace is created (its migrations) and attached through the pooler;
- a storm of writers on both daemons, each acknowledged write recalled on both at once;
- forget in one daemon is seen by the other; a kg fact asserted in one is queried in the
  other;
- in-process: two palaces' stores sharing one server connection each read their own schema,
  and a store configured without ``pooler`` behind the bouncer fails on psycopg's prepared
  statements while the configured one never does (why the key exists).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest

from palaced.store.conn.pg import PgStore
from palaced.wire.errors import PalaceError
from tests.conftest import DaemonProc
from tests.e2e.test_team_palaces import BothDaemons
from tests.support.machines import machines
from tests.support.pgbouncer import PgBouncer
from tests.support.pgserver import PgServer, dbname_of
from tests.support.team_storm import Storm, lost

pytestmark = pytest.mark.daemon

WRITERS = 4  # per daemon


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with PgServer() as server:
        yield server


@pytest.fixture(scope="module")
def bouncer(pg: PgServer) -> Iterator[PgBouncer]:
    with PgBouncer(pg, mode="transaction", pool_size=3) as b:
        yield b


@pytest.fixture(scope="module")
def pair(pg: PgServer, bouncer: PgBouncer) -> Iterator[tuple[DaemonProc, DaemonProc]]:
    url = bouncer.url(dbname_of(pg.create_database()))
    with machines(2, f'[stores.team]\nurl = "{url}"\npooler = "transaction"\n') as (a, b):
        yield a, b


def test_two_daemons_through_transaction_pooling(
        pair: tuple[DaemonProc, DaemonProc], bouncer: PgBouncer) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        assert ca.create_palace("pooled", store="team")["created"] is True  # migrations
        assert cb.create_palace("pooled", store="team", exist_ok=True)["created"] is False
    storm = Storm("pooled", {"A": a.client, "B": b.client}, WRITERS,
                  check=BothDaemons("pooled", {"A": a, "B": b}), items_per_writer=5).start()
    storm.join(timeout=240)
    assert not storm.failed, [(o.writer, o.error, o.message) for o in storm.failed[:5]]
    assert len(storm.acked) == 2 * WRITERS * 5
    assert not storm.problems, storm.problems[:10]
    with a.client() as ca, b.client() as cb:
        assert not lost([("A", ca), ("B", cb)], "pooled", storm.acked)
        # forget in B, gone from A's recall at once
        did = ca.remember("pooled", "The pooled release train leaves on Thursdays")
        assert any(r["id"] == did for r in cb.recall("pooled", "pooled release train"))
        assert cb.forget("pooled", did)["trashed"] is True
        assert all(r["id"] != did for r in ca.recall("pooled", "pooled release train"))
        # the knowledge graph: asserted in A, queried in B
        ca.kg_assert("pooled", "billing service", "owned by", "Dana")
        facts = cb.kg_query("pooled", "billing service")
        assert "Dana" in str(facts), facts
        status = ca.palace_info("pooled")
        assert status["store"].startswith(str(bouncer.root))
    # The daemons' transactions really shared the bouncer's few server connections.
    pools = [p for p in bouncer.show("POOLS") if p["database"] != "pgbouncer"]
    assert all(p["pool_mode"] == "transaction" for p in pools)
    servers = bouncer.show("SERVERS")
    assert 0 < len(servers) <= 3 * len(pools), servers


def _set_colour(c: Any, colour: str) -> None:
    c.execute("INSERT INTO meta(key, value) VALUES('colour', ?)", (colour,))


def test_no_session_state_through_the_pooler(pg: PgServer) -> None:
    """One server connection (pool size 1) under two palaces' stores: each transaction sets
    its own schema; and psycopg's prepared statements break a store not told of the pooler."""
    with PgBouncer(pg, mode="transaction", pool_size=1) as one:
        url = one.url(dbname_of(pg.create_database()))
        stores = [PgStore(url, f"palace_{n}", palace=n, create=True, pooler="transaction")
                  for n in ("red", "blue")]
        try:
            for st in stores:
                colour = str(st.palace)
                st.write(partial(_set_colour, colour=colour))
            errors: list[str] = []

            def reader(st: PgStore) -> None:
                for _ in range(40):
                    got = st.read(lambda c: c.execute(
                        "SELECT value, current_schema() FROM meta WHERE key = 'colour'"
                    ).fetchall())
                    if got != [(st.palace, f"palace_{st.palace}")]:
                        errors.append(f"{st.palace} read {got}")
            threads = [threading.Thread(target=reader, args=(st,)) for st in stores * 2]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[:5]
        finally:
            for st in stores:
                st.close()
        # Not told of the pooler: psycopg prepares a statement run 5 times on one server
        # connection, and the next transaction finds it unknown (or already there).
        unaware = PgStore(url, "palace_red", palace="red")
        try:
            with pytest.raises(PalaceError) as err:
                for _ in range(30):
                    unaware.read(lambda c: c.execute("SELECT count(*) FROM meta").fetchall())
                    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as o:
                        o.execute("SELECT 1")  # another client's transaction in between
            assert "prepared statement" in str(err.value), err.value
        finally:
            unaware.close()
