"""A daemon stops, and answers ``palace status``, promptly when its team palaces' servers
are out. Stopping with their databases gone, each team palace still tries its closing
checkpoint (the uses recall counted): its last writes try one direct connection first, which
the server refuses at once, instead of waiting out the connection pool's timeout; and the
palaces close concurrently, so a server that does not answer costs one timeout, not one per
palace. Real palaced (keyword-only), real PostgreSQL (``tests/support/pgserver.py``)."""

from __future__ import annotations

import json
import socket
import time
import tomllib
from pathlib import Path

from tests.conftest import DaemonProc, base_env
from tests.support.pgserver import PgServer, dbname_of

PALACES = 4
POOL_TIMEOUT_S = 3.0  # store/conn/pg.py: how long a write waits for a connection
CONNECT_S = 2.0  # [team] connect_timeout_s of the status test


def test_stop_does_not_wait_for_team_palaces_whose_database_is_gone(
        keyword_daemon: DaemonProc, pg_server: PgServer) -> None:
    pg_server.start()
    urls = [pg_server.create_database() for _ in range(PALACES)]
    with keyword_daemon.client() as c:
        for k, url in enumerate(urls):
            c.create_palace(f"team{k}", store=url)
            c.remember(f"team{k}", f"the deploy checklist, copy {k}")
            # A recall counts the drawer as used: the closing checkpoint has a write to do.
            assert c.recall(f"team{k}", "deploy checklist")
    for url in urls:
        pg_server.drop_database(dbname_of(url))  # the server no longer has them
    start = time.monotonic()
    keyword_daemon.stop()
    took = time.monotonic() - start
    print(f"stopped in {took:.2f} s")
    assert keyword_daemon.proc is not None and keyword_daemon.proc.returncode == 0
    # One after another this took PALACES x POOL_TIMEOUT_S (12 s), together one (3.2 s);
    # with the direct attempt, well under one.
    assert took < POOL_TIMEOUT_S, took


def test_status_during_an_outage_waits_one_connect_timeout_for_all_team_palaces(
        home: Path, pg_server: PgServer) -> None:
    """``palace status`` lists every palace, which opens each team palace: one whose server
    refuses (no such socket) fails at once, and those whose server accepts and never answers
    wait their connect timeout together, not one after another."""
    (home / "config.toml").write_text(f"[team]\nconnect_timeout_s = {CONNECT_S}\n")
    d = DaemonProc(home, {**base_env(home, model=False),
                          "PALACE_CONFIG": str(home / "config.toml")})
    pg_server.start()
    d.start(wait_model=False)
    try:
        with d.client() as c:
            c.create_palace("local")
            for k in range(3):
                c.create_palace(f"team{k}", store=pg_server.create_database())
        d.stop()
        with socket.socket() as mute:  # accepts connections (the backlog) and never answers
            mute.bind(("127.0.0.1", 0))
            mute.listen(8)
            port = mute.getsockname()[1]
            stores = [f"postgresql://palace@127.0.0.1:{port}/palace"] * 2 + [
                "postgresql:///palace?host=/tmp/no-such-pg-dir&user=palace"]
            for k, store in enumerate(stores):
                path = home / "palaces" / f"team{k}" / "store.toml"
                text = path.read_text()
                old = tomllib.loads(text)["store"]
                path.write_text(text.replace(json.dumps(old), json.dumps(store)))
            d.start(wait_model=False)
            with d.client() as c:
                start = time.monotonic()
                listed = {p["name"]: p for p in c.status()["palaces"]}
                took = time.monotonic() - start
        print(f"status in {took:.2f} s")
        assert "error" not in listed["local"]
        for k in range(3):
            assert "StoreUnavailable" in listed[f"team{k}"]["error"], listed[f"team{k}"]
        # One after another: two connect timeouts (and, before the direct attempt, the pool's
        # retries of the refused one for a third).
        assert took < 1.75 * CONNECT_S, took
    finally:
        d.stop()
