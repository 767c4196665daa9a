"""A real PgBouncer in front of a test ``PgServer`` (issue 34): team palaces through a pooler.

PgBouncer comes from the distribution (Debian's ``pgbouncer`` package, 1.18 here:
``/usr/sbin/pgbouncer``, or ``PALACE_TEST_PGBOUNCER``). A bouncer here is:

- ``pgbouncer.ini`` and ``userlist.txt`` in a short temporary directory (``/tmp/pgb-XXXX``);
  every database of the server is served (``* = host=<server socket dir>``) as role
  ``palace``, with ``auth_type = trust`` as the server's own local socket (``userlist.txt``
  still lists the role: PgBouncer accepts only users it knows);
- ``pool_mode`` transaction by default, with a small ``default_pool_size`` (the tests give it
  fewer server connections than the daemons open: transactions of different clients then
  share server connections, which is what breaks session state);
- listening on a Unix socket in its directory only (``listen_addr`` empty: no TCP), port
  6432 (the socket's name);
- run as the server's unprivileged user when the tests run as root (PgBouncer refuses root),
  with a parent-death signal; ``close()`` stops it and removes its directory.

``show(what)`` reads its admin console (``SHOW POOLS``, ``SHOW STATS`` ...).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.support.pgserver import ROLE, PgServer, _child_setup, wait_accepting

PORT = 6432


def pgbouncer_bin() -> Path:
    """The pgbouncer binary: ``PALACE_TEST_PGBOUNCER`` or the Debian package's."""
    found = os.environ.get("PALACE_TEST_PGBOUNCER") or shutil.which("pgbouncer") \
        or "/usr/sbin/pgbouncer"
    path = Path(found)
    if not path.exists():
        raise RuntimeError("the pooler tests need PgBouncer: apt-get install pgbouncer "
                           "(or set PALACE_TEST_PGBOUNCER to its binary)")
    return path


class PgBouncer:
    """One PgBouncer on a Unix socket, pooling the databases of ``server``."""

    def __init__(self, server: PgServer, *, mode: str = "transaction",
                 pool_size: int = 3) -> None:
        self.server = server
        self.mode = mode
        self.root = Path(tempfile.mkdtemp(prefix="pgb-", dir="/tmp"))
        self.log = self.root / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None
        (self.root / "userlist.txt").write_text(f'"{ROLE}" ""\n')
        self.log.touch()  # its log file and its stderr, given to its user below
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.root} port=5432 user={ROLE}\n\n"
            "[pgbouncer]\n"
            "listen_addr =\n"
            f"listen_port = {PORT}\n"
            f"unix_socket_dir = {self.root}\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            f"admin_users = {ROLE}\n"
            f"pool_mode = {mode}\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            "server_login_retry = 1\n"
            f"logfile = {self.log}\n")
        if server.ids is not None:
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, *server.ids)
        os.chmod(self.root, 0o755)
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def start(self, timeout: float = 30) -> None:
        """Start PgBouncer and wait until a query passes through it."""
        if self.proc is not None and self.proc.poll() is None:
            return
        kwargs: dict[str, Any] = {}
        if self.server.ids is not None:
            kwargs = {"user": self.server.ids[0], "group": self.server.ids[1],
                      "extra_groups": []}
        with open(self.log, "ab") as err:  # what it says before its log file is open
            self.proc = subprocess.Popen(
                [str(pgbouncer_bin()), str(self.root / "pgbouncer.ini")],
                stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                preexec_fn=_child_setup, **kwargs)
        wait_accepting("pgbouncer", self.proc, self.url("postgres"), self.log, timeout)

    def url(self, dbname: str) -> str:
        """The libpq URL of database ``dbname`` through this pooler."""
        return f"postgresql:///{dbname}?host={self.root}&port={PORT}&user={ROLE}"

    def show(self, what: str) -> list[dict[str, Any]]:
        """Rows of the admin console's ``SHOW <what>`` (POOLS, STATS, SERVERS ...)."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(self.url("pgbouncer"), autocommit=True,
                             prepare_threshold=None) as conn:
            cur = conn.cursor(row_factory=dict_row)
            return list(cur.execute(f"SHOW {what}").fetchall())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop PgBouncer and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
