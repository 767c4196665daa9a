"""A team palace's store connection for store-level tests: a ``PgConn`` (autocommit; ``with
conn:`` is a transaction, as on apsw) on a fresh palace schema of a real PostgreSQL database
(``pg_url`` of tests/conftest.py). Store functions run on it exactly as on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SCHEMA = "palace_unit"


def pg_conn(url: str, schema: str = SCHEMA) -> Iterator[Any]:
    """Yield a ``PgConn`` on schema ``schema`` (created, migrated) of the database ``url``."""
    import psycopg

    from palaced.store.conn.pg import PgConn, PgStore

    PgStore(url, schema, palace="unit", create=True).close()
    raw = psycopg.connect(url, autocommit=True,
                          options=f"-c search_path={schema},public -c statement_timeout=20000")
    try:
        yield PgConn(raw)
    finally:
        raw.close()
