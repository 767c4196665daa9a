"""Team palaces on PostgreSQL (issue 15), end to end: two real palaced processes with separate
homes (two "machines", A and B) attached to one team palace on a real PostgreSQL 18 + pgvector
server (``tests/support/pgserver.py``), the real model, the real client.

- storm: 16 writer threads on each daemon, interleaved; every acknowledged write is found by
  recall on both daemons right after its acknowledgement;
- kill -9 of daemon B mid-storm loses nothing acknowledged (through either daemon);
- the PostgreSQL server stopped (and, second round, killed) under load: requests to the team
  palace fail fast with the typed retryable STORE_UNAVAILABLE naming the server, a local
  palace on the same daemons keeps working, and both daemons recover by themselves;
- a daemon whose model is another (the same files configured under another model name, so
  its recorded identity differs, as in ``test_model_switch.py``) refuses to write.

The module has its own server (``pg`` below) since it stops and kills it.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from palaced.wire.errors import PalaceError
from tests.conftest import DaemonProc, base_env, short_home
from tests.support.pgserver import PgServer, dbname_of
from tests.support.team_storm import (
    Outcome,
    Storm,
    error_name,
    lost,
    missing_everywhere,
    recall_finds,
)

pytestmark = pytest.mark.slow

WRITERS = 16  # per daemon
OTHER_MODEL = "thenlper/gte-large"  # the shared MiniLM files under another name: another id


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with PgServer() as server:
        yield server


@pytest.fixture(scope="module")
def machines() -> Iterator[tuple[DaemonProc, DaemonProc]]:
    homes = [short_home(), short_home()]
    daemons = [DaemonProc(h, base_env(h)) for h in homes]
    try:
        for d in daemons:
            d.start()
        yield daemons[0], daemons[1]
    finally:
        for d in daemons:
            d.stop()
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)


def attach(d: DaemonProc, name: str, url: str) -> dict[str, Any]:
    """Create (first machine) or attach to (the others) team palace ``name`` at ``url``."""
    with d.client() as c:
        return c.create_palace(name, store=url, exist_ok=True)


class BothDaemons:
    """A writer's check: recall the acknowledged text on both daemons at once (one client
    per daemon per writer thread)."""

    def __init__(self, palace: str, daemons: dict[str, DaemonProc]) -> None:
        self.palace = palace
        self.daemons = daemons
        self.local = threading.local()

    def clients(self) -> dict[str, Any]:
        if not hasattr(self.local, "clients"):
            self.local.clients = {k: d.client() for k, d in self.daemons.items()}
        c: dict[str, Any] = self.local.clients
        return c

    def __call__(self, out: Outcome) -> list[str]:
        problems = []
        for label, client in self.clients().items():
            try:
                if not recall_finds(client, self.palace, out):
                    problems.append(f"{label} recall misses {out.drawer_id} just acknowledged "
                                    f"to {out.writer}")
            except PalaceError as exc:
                problems.append(f"{label} recall failed: {error_name(exc)}: {exc}")
        return problems


def _team(pg: PgServer, machines: tuple[DaemonProc, DaemonProc], name: str) -> str:
    url = pg.create_database()
    a, b = machines
    made = attach(a, name, url)
    assert made["created"] is True
    attach(b, name, url)
    return url


def test_storm_every_acknowledged_write_is_recalled_on_both(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    a, b = machines
    _team(pg, machines, "storm")
    check = BothDaemons("storm", {"A": a, "B": b})
    storm = Storm("storm", {"A": a.client, "B": b.client}, WRITERS, check=check,
                  items_per_writer=6).start()
    storm.join(timeout=240)
    assert not storm.failed, [(o.writer, o.error, o.message) for o in storm.failed[:5]]
    assert len(storm.acked) == 2 * WRITERS * 6
    assert len({o.drawer_id for o in storm.acked}) == len(storm.acked)
    assert not storm.problems, storm.problems[:10]
    for d in machines:
        with d.client() as c:
            assert c.palace_info("storm")["drawers"] == len(storm.acked)


def test_kill9_of_one_daemon_mid_storm_loses_nothing_acknowledged(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    a, b = machines
    _team(pg, machines, "crash")
    storm = Storm("crash", {"A": a.client, "B": b.client}, WRITERS).start()
    try:
        deadline = time.monotonic() + 60
        while len([o for o in storm.acked if o.writer.startswith("B")]) < 2 * WRITERS:
            assert time.monotonic() < deadline, "the storm made no progress through B"
            time.sleep(0.05)
        b.kill9()
        killed_at = time.monotonic()
        time.sleep(0.5)  # A keeps taking writes while B is down
        b.start()
        restarted_at = time.monotonic()
        while len([o for o in storm.acked if o.writer.startswith("B")
                   and o.started > restarted_at]) < WRITERS:
            assert time.monotonic() < restarted_at + 60, "B took no write after its restart"
            time.sleep(0.05)
    finally:
        storm.stop()
    print(f"kill -9 storm: {len(storm.acked)} acknowledged, {len(storm.failed)} failed")
    # Failures only through B and only while it was down (refused, or lost mid-request).
    for o in storm.failed:
        assert o.writer.startswith("B"), (o.writer, o.error, o.message)
        assert o.error in ("DAEMON_UNREACHABLE", "OUTCOME_UNKNOWN"), (o.error, o.message)
        assert killed_at - 30 < o.started < restarted_at + 5
    acked = storm.acked
    # Every acknowledged write is there, on both daemons; the ones B acknowledged last before
    # its death (most at risk) are found by recall too.
    last_before_kill = {}
    for o in acked:
        if o.writer.startswith("B") and o.started < killed_at:
            last_before_kill[o.writer] = o
    with a.client() as ca, b.client() as cb:
        assert not lost([("A", ca), ("B", cb)], "crash", acked)
        assert not missing_everywhere([("A", ca), ("B", cb)], "crash",
                                      list(last_before_kill.values()))
        # More when a write lost with its daemon (OUTCOME_UNKNOWN) had been committed.
        assert ca.palace_info("crash")["drawers"] == cb.palace_info("crash")["drawers"] \
            >= len({o.drawer_id for o in acked})


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_server_outage_under_load(pg: PgServer, machines: tuple[DaemonProc, DaemonProc],
                                  how: str) -> None:
    a, b = machines
    name = f"outage-{how}"
    url = _team(pg, machines, name)
    for d in machines:
        with d.client() as c:
            c.create_palace(f"local-{how}")
    pids = [a.pid(), b.pid()]
    storm = Storm(name, {"A": a.client, "B": b.client}, 4, pause_on_error=0.2).start()
    try:
        while len(storm.acked) < 16:
            time.sleep(0.05)
        down_at = time.monotonic()
        if how == "stop":
            pg.stop()
        else:
            pg.kill9()
        time.sleep(0.3)
        for d in machines:
            with d.client() as c:
                # The team palace: a typed, retryable error, fast, naming the server.
                t0 = time.monotonic()
                with pytest.raises(PalaceError) as err:
                    c.remember(name, "written while the server is down", dedup=False)
                print(f"team remember failed after {time.monotonic() - t0:.2f} s")
                assert time.monotonic() - t0 < 10
                assert error_name(err.value) == "STORE_UNAVAILABLE", err.value
                assert err.value.retryable
                assert dbname_of(url) in str(err.value) or str(pg.root) in str(err.value)
                with pytest.raises(PalaceError) as err:
                    c.recall(name, "anything at all")
                assert error_name(err.value) == "STORE_UNAVAILABLE", err.value
                # Another palace on the same daemon does not notice.
                t0 = time.monotonic()
                made = c.remember(f"local-{how}", f"the outage drill of {how} went fine")
                assert [r["id"] for r in c.recall(f"local-{how}", "outage drill")][:1] == [made]
                assert time.monotonic() - t0 < 10
        time.sleep(max(0.0, down_at + 2.5 - time.monotonic()))
        print(f"down for {time.monotonic() - down_at:.2f} s")
        pg.start()
        up_at = time.monotonic()
        # Recovery by itself: every writer gets writes through again, no daemon restarted.
        while not all(any(o.started > up_at for o in storm.acked if o.writer == w)
                      for w in {o.writer for o in storm.outcomes}):
            assert time.monotonic() < up_at + 30, "no recovery within 30 s of the restart"
            time.sleep(0.1)
        print(f"recovered {time.monotonic() - up_at:.2f} s after the restart")
    finally:
        storm.stop()
    print(f"outage ({how}) storm: {len(storm.acked)} acknowledged, {len(storm.failed)} failed")
    assert [a.pid(), b.pid()] == pids
    assert storm.failed, "the outage went unnoticed: the storm never hit it"
    for o in storm.failed:
        assert o.error == "STORE_UNAVAILABLE" and o.retryable, (o.error, o.message)
        assert o.seconds < 12, f"a request hung for {o.seconds:.1f} s: {o.message}"
        assert down_at - 12 < o.started < up_at + 15, (o.started - down_at, o.message)
    with a.client() as ca, b.client() as cb:
        assert not missing_everywhere([("A", ca), ("B", cb)], name, storm.acked)


def test_a_daemon_with_another_model_refuses_to_write(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    a, _ = machines
    url = pg.create_database()
    attach(a, "models", url)
    with a.client() as ca:
        kept = ca.remember("models", "The release train leaves every second Thursday")
    home = short_home()
    env = base_env(home)
    env["PALACE_EMBED_MODEL"] = OTHER_MODEL
    other = DaemonProc(home, env)
    other.start()
    try:
        attach(other, "models", url)
        with other.client() as co:
            for write in (lambda: co.remember("models", "Vectors of another space", dedup=False),
                          lambda: co.remember_many("models", [{"text": "another space too"}])):
                with pytest.raises(PalaceError) as err:
                    write()
                assert error_name(err.value) == "EMBEDDER_MISMATCH", err.value
                assert OTHER_MODEL in str(err.value)
            # Reading still works (keyword-only: its query vectors are of another space).
            found = co.recall_ex("models", "when does the release train leave?")
            assert [r["id"] for r in found["results"]][:1] == [kept]
            assert found["mode"] == "keyword"
        with a.client() as ca:
            assert ca.palace_info("models")["drawers"] == 1
    finally:
        other.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_statement_past_its_timeout_is_store_unavailable(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    """A palace table locked by someone else: requests end at the statement timeout with the
    typed retryable error instead of waiting for the lock, and work once it is released."""
    a, _ = machines
    url = pg.create_database()
    attach(a, "locked", url)
    with a.client() as c:
        kept = c.remember("locked", "The on-call handbook lives in the wiki")
    import psycopg

    with psycopg.connect(url) as blocker:
        schema = blocker.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE '%locked%'").fetchone()
        assert schema is not None
        blocker.execute(f'LOCK TABLE "{schema[0]}".drawers IN ACCESS EXCLUSIVE MODE')
        with a.client() as c:
            t0 = time.monotonic()
            with pytest.raises(PalaceError) as err:
                c.recall("locked", "where is the on-call handbook?")
            took = time.monotonic() - t0
        assert error_name(err.value) == "STORE_UNAVAILABLE" and err.value.retryable, err.value
        assert took < 30
        blocker.rollback()
    with a.client() as c:
        assert [r["id"] for r in c.recall("locked", "where is the on-call handbook?")][:1] \
            == [kept]


def test_a_daemon_started_while_the_server_is_down(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    """B restarts during an outage: it starts, serves its local palaces, answers the team
    palace with STORE_UNAVAILABLE, and attaches it by itself once the server is back."""
    a, b = machines
    _team(pg, machines, "coldstart")
    with a.client() as c:
        kept = c.remember("coldstart", "Deploys are frozen during the last week of December")
    t0 = time.monotonic()
    b.stop()
    print(f"B stopped in {time.monotonic() - t0:.1f} s")
    with pg.down():
        t0 = time.monotonic()
        b.start()
        print(f"B started in {time.monotonic() - t0:.1f} s")
        assert time.monotonic() - t0 < 30
        with b.client() as c:
            c.create_palace("coldstart-local", exist_ok=True)
            c.remember("coldstart-local", "local palaces do not care")
            with pytest.raises(PalaceError) as err:
                c.recall("coldstart", "when are deploys frozen?")
            assert error_name(err.value) == "STORE_UNAVAILABLE", err.value
            names = [p["name"] for p in c.list_palaces()]
            assert "coldstart" in names  # still known while unreachable
    deadline = time.monotonic() + 30
    with b.client() as c:
        while True:
            try:
                found = c.recall("coldstart", "when are deploys frozen?")
                break
            except PalaceError as exc:
                assert error_name(exc) == "STORE_UNAVAILABLE", exc
                assert time.monotonic() < deadline, "B never reattached the team palace"
                time.sleep(0.2)
        assert [r["id"] for r in found][:1] == [kept]
    print(f"reattached {time.monotonic() - deadline + 30:.1f} s after the restart")


def test_a_refused_connection_fails_fast(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    """The server down (its socket gone: every connection attempt is refused at once): a
    request to the team palace fails with STORE_UNAVAILABLE in well under the connect timeout
    (3 s, meant for a server that does not answer), so callers are not held up by an outage
    the daemon already knows about."""
    a, _ = machines
    url = pg.create_database()
    attach(a, "refused", url)
    with a.client() as c:
        c.remember("refused", "warm the pool up")
        with pg.down():
            took = []
            for _ in range(3):
                t0 = time.monotonic()
                with pytest.raises(PalaceError) as err:
                    c.recall("refused", "anything")
                took.append(time.monotonic() - t0)
                assert error_name(err.value) == "STORE_UNAVAILABLE", err.value
            assert max(took[1:]) < 1.0, f"each request waited {took} s for a refused server"


def test_keyword_statistics_cached_by_one_daemon_survive_writes_of_the_other(
        pg: PgServer, machines: tuple[DaemonProc, DaemonProc]) -> None:
    """A's BM25 collection statistics are cached from a small palace; B then writes many
    drawers sharing a new word. A's next recall of that word must rank them (a document
    frequency above the cached drawer count is no reason to fail)."""
    a, b = machines
    _team(pg, machines, "stats")
    with a.client() as ca, b.client() as cb:
        ca.remember("stats", "The quarterly planning doc is in the shared drive")
        assert ca.recall("stats", "quarterly planning")
        made = cb.remember_many("stats", [
            {"text": f"Zanzibar office note {i}: the {w} printer is out of toner"}
            for i, w in enumerate(["red", "blue", "green", "grey", "black"] * 8)])
        found = ca.recall("stats", "Zanzibar printer toner", top_k=5)
        assert found and all(int(r["id"]) in made for r in found)
