"""Count what a team palace sends PostgreSQL: statements and round trips (issue 34).

``counting()`` patches psycopg's cursor (``execute``, ``executemany``) and the connection's
command path (``BEGIN``, ``COMMIT``, ``SAVEPOINT``, ...) for the duration of a ``with``, in this
process: run the daemon in-process (``tests/support/inproc.py``) and every statement a request
makes is seen. A ``Count`` has the statement texts in order; ``round_trips`` counts each
execute and each transaction command as one, except that what one pipeline sends
(``conn.pipeline()``: a snapshot's BEGIN with its settings, ``PgConn.execute_indexed``'s three
statements) counts once (an ``executemany`` is pipelined by psycopg: one); ``statements`` the
executes alone (the pool's liveness check, an empty statement, included when it is sent).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Count:
    """What was sent: ``("execute" | "many" | "command", text)`` in order."""

    sent: list[tuple[str, str]] = field(default_factory=list)
    conns: list[int] = field(default_factory=list)  # per ``sent``: the connection's id()
    piped: int = 0  # of ``sent``, those sent inside a pipeline
    pipelines: int = 0  # outermost pipelines: one round trip each
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, text: Any, piped: bool = False, conn: Any = None) -> None:
        if not isinstance(text, str | bytes):
            text = text.as_string(None) if hasattr(text, "as_string") else str(text)
        if isinstance(text, bytes):
            text = text.decode()
        with self.lock:
            self.sent.append((kind, " ".join(text.split())))
            self.conns.append(id(conn))
            self.piped += piped

    @property
    def statements(self) -> list[str]:
        """The texts of executes and executemanys (not transaction commands)."""
        return [t for k, t in self.sent if k != "command"]

    @property
    def round_trips(self) -> int:
        return len(self.sent) - self.piped + self.pipelines

    def summary(self) -> str:
        return "\n".join(f"{k:8} {t[:160]}" for k, t in self.sent)


@contextlib.contextmanager
def counting() -> Iterator[Count]:
    """Count every statement psycopg sends in this process until the ``with`` ends."""
    import psycopg
    from psycopg import _connection_base

    count = Count()
    cur_execute, cur_many = psycopg.Cursor.execute, psycopg.Cursor.executemany
    exec_command = _connection_base.BaseConnection._exec_command
    pipeline = psycopg.Connection.pipeline

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        count.add("execute", query, self._conn._pipeline is not None, self._conn)
        return cur_execute(self, query, *args, **kwargs)

    def many(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        count.add("many", query, False, self._conn)
        return cur_many(self, query, *args, **kwargs)

    def command(self: Any, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        count.add("command", cmd, self._pipeline is not None, self)
        return exec_command(self, cmd, *args, **kwargs)

    @contextlib.contextmanager
    def piped(self: Any) -> Iterator[Any]:
        if self._pipeline is None:
            with count.lock:
                count.pipelines += 1
        with pipeline(self) as p:
            yield p

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = piped  # type: ignore[method-assign]
    psycopg.Cursor.executemany = many  # type: ignore[method-assign]
    _connection_base.BaseConnection._exec_command = command  # type: ignore[method-assign,assignment]
    try:
        yield count
    finally:
        psycopg.Cursor.execute = cur_execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]
        psycopg.Cursor.executemany = cur_many  # type: ignore[method-assign]
        _connection_base.BaseConnection._exec_command = exec_command  # type: ignore[method-assign]
