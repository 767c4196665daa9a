"""A team palace with a read replica (issue 34): a real streaming replica
(``tests/support/pgreplica.py``, ``pg_basebackup -R`` of the module's primary, same binaries).

- two real daemons configured with ``[stores.team] url = <primary>, replica = <replica>``:
  with the replica's replay paused, A's write is recalled by A at once (the primary serves
  it: the replica is behind A's write), while B, which has seen nothing newer, is served by
  the replica (it does not find the write yet: that is how we know where B's read went); once
  replay resumes B finds it through the replica; the replica stopped, both are served by
  the primary and ``palace status`` says the replica is down; started again, it serves again;
- in-process (``PgStore``): the lag bound. A replica paused longer than
  ``replica_max_lag_s`` serves nothing newer than that bound allows: the next read after the
  bound goes to the primary, and from then on the replica is "behind".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from palaced.config.team_settings import TeamSettings
from palaced.store.conn.pg import PgStore
from tests.support.machines import machines
from tests.support.pgreplica import PgReplica
from tests.support.pgserver import PgServer, dbname_of

pytestmark = pytest.mark.daemon


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with PgServer() as server:
        yield server


@pytest.fixture(scope="module")
def replica(pg: PgServer) -> Iterator[PgReplica]:
    with PgReplica(pg) as r:
        yield r


def _ready(replica: PgReplica) -> None:
    """The replica running and replaying, whatever an earlier (failed) test left."""
    replica.start()
    replica.resume()
    replica.caught_up()


def _replica_of(client: Any, palace: str) -> dict[str, Any]:
    info: dict[str, Any] = client.palace_info(palace)["replica"]
    return info


def _wait_state(client: Any, palace: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """Recall until the palace's replica reports ``state``; its description."""
    deadline = time.monotonic() + timeout
    while True:
        client.recall(palace, "anything at all")
        got = _replica_of(client, palace)
        if got["state"] == state:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"replica still {got}, not {state}")
        time.sleep(0.3)


def test_writer_reads_its_write_others_read_the_replica(pg: PgServer,
                                                        replica: PgReplica) -> None:
    db = dbname_of(pg.create_database())
    _ready(replica)
    config = ("[team]\nreplica_max_lag_s = 120\n\n"
              f'[stores.team]\nurl = "{pg.url(db)}"\nreplica = "{replica.url(db)}"\n')
    with machines(2, config) as daemons:
        a, b = daemons
        with a.client() as ca, b.client() as cb:
            assert ca.create_palace("mirrored", store="team")["created"] is True
            cb.create_palace("mirrored", store="team", exist_ok=True)
            ca.remember("mirrored", "The staging database is refreshed every Sunday night")
            replica.caught_up()
            _wait_state(cb, "mirrored", "serving")
            _wait_state(ca, "mirrored", "serving")
            replica.pause()
            did = ca.remember("mirrored", "The quarterly audit moved to the first of March")
            before_a = _replica_of(ca, "mirrored")["reads"]
            hits = ca.recall("mirrored", "quarterly audit moved")
            assert any(h["id"] == did for h in hits), "the writer did not read its own write"
            after_a = _replica_of(ca, "mirrored")
            assert after_a["state"] == "behind", after_a
            assert after_a["reads"]["primary"] > before_a["primary"]
            before_b = _replica_of(cb, "mirrored")["reads"]
            hits = cb.recall("mirrored", "quarterly audit moved")
            assert all(h["id"] != did for h in hits), "B's read was not served by the replica"
            after_b = _replica_of(cb, "mirrored")
            assert after_b["reads"]["replica"] > before_b["replica"], after_b
            replica.resume()
            replica.caught_up()
            before_b = _replica_of(cb, "mirrored")["reads"]
            hits = cb.recall("mirrored", "quarterly audit moved")
            assert any(h["id"] == did for h in hits)
            # (B's recall touched what it found: a write of B's, so a read right after it
            # may be served by the primary until the replica replays it.)
            assert _replica_of(cb, "mirrored")["reads"]["replica"] > before_b["replica"]
            # the replica down: the primary serves, status says so; back: it serves again
            replica.stop()
            for c in (ca, cb):
                hits = c.recall("mirrored", "quarterly audit moved")
                assert any(h["id"] == did for h in hits)
                down = _replica_of(c, "mirrored")
                assert down["state"] == "down" and down["error"], down
            shown = a.cli("status", check=True).stdout
            assert f"read replica {down['server']} DOWN: the primary serves reads" in shown
            replica.start()
            _wait_state(cb, "mirrored", "serving")


def _count(c: Any) -> int:
    return int(c.execute("SELECT count(*) FROM meta WHERE key LIKE 'k%'").fetchall()[0][0])


def test_a_replica_lagging_past_the_bound_serves_no_read(pg: PgServer,
                                                        replica: PgReplica) -> None:
    url = pg.create_database()
    _ready(replica)
    bound = 1.0
    st = PgStore(url, "palace_lag", palace="lag", create=True,
                 replica=replica.url(dbname_of(url)),
                 settings=TeamSettings(replica_max_lag_s=bound))
    other = PgStore(url, "palace_lag", palace="lag")
    try:
        st.write(lambda c: c.execute("INSERT INTO meta(key, value) VALUES('k1', '')"))
        assert st.read(_count) == 1  # its own write: the primary, the replica is behind
        replica.caught_up()
        assert st.read(_count) == 1
        assert st.replica is not None and st.replica.describe()["state"] == "serving"
        replica.pause()
        synced = time.monotonic()
        st.read(_count)  # within the bound: may be the replica
        other.write(lambda c: c.execute("INSERT INTO meta(key, value) VALUES('k2', '')"))
        time.sleep(max(0.0, bound - (time.monotonic() - synced)) + 0.05)
        # Past the bound the primary's counter is read again: the other store's write shows,
        # and the paused replica serves nothing from then on.
        assert st.read(_count) == 2
        assert st.read(_count) == 2
        assert st.replica.describe()["state"] == "behind"
    finally:
        replica.resume()
        st.close()
        other.close()
