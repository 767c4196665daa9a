"""The PostgreSQL test server itself (``tests/support/pgserver.py``): real PostgreSQL 18 with
pgvector on a private Unix socket, its failure helpers, and no leftovers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.pgserver import PgServer, dbname_of


def test_vector_extension_and_hnsw_cosine(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        version = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert version is not None and version[0] >= "0.8"
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v vector(3))")
        conn.execute("INSERT INTO items SELECT i, ARRAY[cos(i), sin(i), 0.5]::vector "
                     "FROM generate_series(1, 500) AS i")
        conn.execute("CREATE INDEX ON items USING hnsw (v vector_cosine_ops)")
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM items ORDER BY v <=> '[1,0,0.5]' LIMIT 5").fetchall())
        assert "items_v_idx" in plan
        top = conn.execute(
            "SELECT id FROM items ORDER BY v <=> ARRAY[cos(42), sin(42), 0.5]::vector LIMIT 1"
        ).fetchone()
        assert top == (42,)


def test_each_test_gets_a_fresh_database(pg_server: PgServer, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                              ).fetchone()
    assert tables == (0,)
    assert dbname_of(pg_url).startswith("t_")
    assert pg_url.startswith("postgresql:///") and f"host={pg_server.root}" in pg_url


def test_socket_only_and_unprivileged(pg_server: PgServer) -> None:
    with pg_server.admin() as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
    uid = os.stat(f"/proc/{pg_server.pid}").st_uid
    assert uid != 0 if os.geteuid() == 0 else uid == os.geteuid()
    assert len(str(pg_server.root / ".s.PGSQL.5432")) < 107


def test_stop_start_and_kill9(pg_private: PgServer) -> None:
    url = pg_private.create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")

    held = psycopg.connect(url)
    with pg_private.down():
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=2)
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")  # the old session was cut by the shutdown
    held.close()

    backends = []
    with psycopg.connect(url) as conn:
        backends.append(conn.info.backend_pid)
        pg_private.kill9()
        assert not Path(f"/proc/{backends[0]}").exists() or \
            Path(f"/proc/{backends[0]}/stat").read_text().split(")")[1].split()[0] == "Z"
        t0 = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        assert time.monotonic() - t0 < 5
    pg_private.start()
    with psycopg.connect(url) as conn:  # a committed row survives a crash (WAL replay)
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]


@pytest.mark.daemon
def test_close_leaves_nothing() -> None:
    server = PgServer()
    pid, root = server.pid, server.root
    assert server.start_seconds < 30
    server.close()
    assert not root.exists()
    assert not Path(f"/proc/{pid}").exists()
