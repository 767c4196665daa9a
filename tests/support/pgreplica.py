"""A streaming replica of a test ``PgServer`` (issue 34): team palaces' read replica.

Made from the same binaries as the primary (``tests/support/pgserver.py``):
``pg_basebackup -R -X stream -c fast`` (an immediate checkpoint: the default spread one
waits minutes) over the primary's Unix socket (initdb's trust setup already allows local
replication connections, and ``wal_level`` ``replica`` is the default) into a short temporary
directory, then ``postgres`` as a hot standby on a Unix socket of its own directory, as the
same unprivileged user. ``pause()``/``resume()`` stop and restart WAL replay
(``pg_wal_replay_pause()``): the replica then lags on purpose; ``caught_up()`` waits until it
has replayed everything the primary has written.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from tests.support.pgserver import ROLE, PgServer


class PgReplica(PgServer):
    """A hot standby of ``primary``, started at once; ``close()`` removes it."""

    def __init__(self, primary: PgServer) -> None:  # not PgServer's: no initdb
        self.primary = primary
        self.ids = primary.ids
        self.bin = primary.bin
        self.root = Path(tempfile.mkdtemp(prefix="pgr-", dir="/tmp"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.settings = {**primary.settings, "unix_socket_directories": str(self.root),
                         "hot_standby": "on"}
        self.proc = None
        if self.ids is not None:
            os.chown(self.root, *self.ids)
        os.chmod(self.root, 0o755)
        t0 = time.perf_counter()
        try:
            self._run("pg_basebackup", "-D", str(self.data), "-R", "-X", "stream",
                      "-c", "fast", "-d", f"host={primary.root} user={ROLE}", "--no-sync")
            self.start()
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.perf_counter() - t0

    def pause(self) -> None:
        """Stop replaying WAL: the replica keeps answering, from the past."""
        with self.admin() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone() != (
                    "paused",):
                time.sleep(0.01)

    def resume(self) -> None:
        with self.admin() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def caught_up(self, timeout: float = 30) -> None:
        """Wait until the replica has replayed all the WAL the primary has written."""
        with self.primary.admin() as p:
            target = p.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        with self.admin() as r:
            while True:
                done = r.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                 (target,)).fetchone()
                if done is not None and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replica did not replay up to {target}")
                time.sleep(0.02)

    def __enter__(self) -> PgReplica:
        return self

    def create_database(self, name: str | None = None, *, vector: bool = True) -> str:
        raise RuntimeError("a replica is read-only: create databases on the primary")
