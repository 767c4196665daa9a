"""A daemon stops promptly when its team palaces' server is gone: each team palace still
tries its closing checkpoint (the uses recall counted), which waits out the connection
pool's timeout; the palaces close concurrently, so the stop costs one timeout, not one per
palace. Real palaced (keyword-only), real PostgreSQL (``tests/pgserver.py``)."""

from __future__ import annotations

import time

from .conftest import DaemonProc
from .pgserver import PgServer, dbname_of

PALACES = 4
POOL_TIMEOUT_S = 3.0  # store/pg.py: how long a write waits for a connection


def test_stop_waits_one_pool_timeout_for_all_unreachable_team_palaces(
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
    assert keyword_daemon.proc is not None and keyword_daemon.proc.returncode == 0
    # One after another this took PALACES x POOL_TIMEOUT_S (12 s); together about one.
    assert took < (PALACES - 1) * POOL_TIMEOUT_S, took
