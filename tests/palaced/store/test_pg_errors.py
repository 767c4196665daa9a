"""How psycopg failures become palace errors (``palaced.store.conn.pg.store_error``)."""

from __future__ import annotations

import psycopg
import psycopg.errors

from palaced.store.conn.pg import store_error
from palaced.wire.errors import StorageError, StoreUnavailable

SERVER = "/tmp/pgb-x:6432/t"


def test_a_connection_out_of_step_is_retryable() -> None:
    """Seen in bench/team_soak.py through PgBouncer while PostgreSQL restarted: psycopg got
    the server's "terminating connection" besides BEGIN's own result. The connection is
    lost, so the request may be retried: STORE_UNAVAILABLE, not a storage failure."""
    exc = psycopg.InternalError("received 2 results from command "
                                "'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'")
    err = store_error(exc, SERVER, "soak")
    assert isinstance(err, StoreUnavailable) and err.retryable
    assert err.details["condition"] == "unreachable" and err.details["server"] == SERVER


def test_the_servers_internal_error_stays_a_storage_error() -> None:
    err = store_error(psycopg.errors.InternalError_("XX000: something broke"), SERVER, "soak")
    assert isinstance(err, StorageError) and not err.retryable
