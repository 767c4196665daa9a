"""``palace_client.Client``: the synchronous Python API over the daemon socket.

Importable without apsw, usearch, fastembed or numpy. Every method is one request; a broken
connection (daemon restarted) is reopened once and the request retried, which is safe
because writes are idempotent by content hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from palaced.paths import Paths, resolve

from .connection import Connection, connect


class Client:
    """A connection to the machine's palaced, started on demand.

    Args:
        socket_path: talk to this socket instead of the resolved default.
        autostart: start the daemon when it is not running (default True).
        client_name: reported to the daemon in the handshake.

    Every method raises a ``palaced.errors.PalaceError`` subclass on failure
    (e.g. ``PalaceNotFound``, ``InvalidArgs``, ``DaemonUnreachable``).
    """

    def __init__(self, socket_path: str | Path | None = None, *, autostart: bool = True,
                 client_name: str = "palace-client") -> None:
        paths = resolve()
        if socket_path is not None:
            sock = Path(socket_path)
            paths = Paths(paths.data_dir, paths.state_dir, paths.config_file, sock.parent, sock)
        self.paths = paths
        self._autostart = autostart
        self._client_name = client_name
        self._conn: Connection | None = None

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = connect(self.paths, autostart=self._autostart,
                                 client_name=self._client_name)
        return self._conn

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Send one raw request and return its result map (reconnects once if needed)."""
        payload = dict(args or {})
        for attempt in (0, 1):
            conn = self._connection()
            try:
                return conn.call(op, palace, payload, timeout_ms)
            except (ConnectionError, BrokenPipeError, OSError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    @property
    def server_info(self) -> dict[str, Any]:
        """The daemon's hello answer (protocol, server, ops, max_frame)."""
        return self._connection().server_info

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- palaces ----------------------------------------------------------------------------
    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]:
        """Create a palace; returns its info."""
        return self.call("palace.create", name, {"exist_ok": exist_ok})

    def delete_palace(self, name: str) -> None:
        """Delete a palace and all its drawers."""
        self.call("palace.delete", name)

    def list_palaces(self) -> list[dict[str, Any]]:
        """Return one dict per palace (name, path, open)."""
        return list(self.call("palace.list")["palaces"])

    def palace_info(self, name: str) -> dict[str, Any]:
        """Counts, embedder identity and index state of one palace."""
        return self.call("palace.info", name)

    def reembed(self, name: str) -> dict[str, Any]:
        """Re-embed every drawer with the daemon's current model."""
        return self.call("palace.reembed", name, timeout_ms=3_600_000)

    # -- drawers ----------------------------------------------------------------------------
    def remember(self, palace: str, text: str, *, wing: str | None = None,
                 room: str | None = None, tags: Iterable[str] = (), importance: float = 0.5,
                 source: str | None = None, occurred_at: str | None = None,
                 **extra: Any) -> int:
        """Store one drawer; returns its id (the existing id if the same text is stored)."""
        return int(self.remember_ex(palace, text, wing=wing, room=room, tags=tags,
                                    importance=importance, source=source,
                                    occurred_at=occurred_at, **extra)["id"])

    def remember_ex(self, palace: str, text: str, *, wing: str | None = None,
                    room: str | None = None, tags: Iterable[str] = (), importance: float = 0.5,
                    source: str | None = None, occurred_at: str | None = None,
                    **extra: Any) -> dict[str, Any]:
        """Like ``remember`` but returns the full result (``id``, ``created``, ...)."""
        args = _drawer_args(text=text, wing=wing, room=room, tags=tags, importance=importance,
                            source=source, occurred_at=occurred_at, **extra)
        return self.call("memory.remember", palace, args)

    def remember_many(self, palace: str, items: Sequence[Mapping[str, Any]],
                      **options: Any) -> list[int]:
        """Store many drawers in one batch; returns their ids in input order."""
        payload = [_drawer_args(**dict(item)) for item in items]
        result = self.call("memory.remember_many", palace, {"items": payload, **options},
                           timeout_ms=600_000)
        return [int(i) for i in result["ids"]]

    def recall(self, palace: str, query: str, *, top_k: int = 10, wing: str | None = None,
               room: str | None = None, tags: Iterable[str] = (),
               **extra: Any) -> list[dict[str, Any]]:
        """Hybrid search; returns result dicts (``id``, ``text``, ``score``, ``wing``, ``room``)."""
        return list(self.recall_ex(palace, query, top_k=top_k, wing=wing, room=room, tags=tags,
                                   **extra)["results"])

    def recall_ex(self, palace: str, query: str, *, top_k: int = 10, wing: str | None = None,
                  room: str | None = None, tags: Iterable[str] = (),
                  **extra: Any) -> dict[str, Any]:
        """Like ``recall`` but returns the whole response (results, mode, sections...)."""
        args: dict[str, Any] = {"query": query, "top_k": top_k}
        if wing is not None:
            args["wing"] = wing
        if room is not None:
            args["room"] = room
        tag_list = list(tags)
        if tag_list:
            args["tags"] = tag_list
        args.update(extra)
        return self.call("memory.recall", palace, args)

    def get(self, palace: str, drawer_id: int) -> dict[str, Any]:
        """Return one drawer."""
        return dict(self.call("memory.get", palace, {"id": drawer_id})["drawer"])

    def forget(self, palace: str, drawer_id: int) -> None:
        """Delete one drawer (text, keyword index and vectors)."""
        self.call("memory.forget", palace, {"id": drawer_id})

    def drawers(self, palace: str, *, wing: str | None = None, room: str | None = None,
                limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """List drawers newest first: ``{"drawers": [...], "total": n, "next_offset": m|None}``."""
        args: dict[str, Any] = {"limit": limit, "offset": offset}
        if wing is not None:
            args["wing"] = wing
        if room is not None:
            args["room"] = room
        return self.call("memory.list", palace, args)

    # -- daemon -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Daemon version, pid, uptime, model state and per-palace counts."""
        return self.call("daemon.status")

    def stop_daemon(self) -> None:
        """Ask the daemon to shut down gracefully."""
        try:
            self.call("daemon.stop")
        finally:
            self.close()


def _drawer_args(*, text: str, wing: str | None = None, room: str | None = None,
                 tags: Iterable[str] = (), importance: float = 0.5, source: str | None = None,
                 occurred_at: str | None = None, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"text": text, "importance": importance}
    if wing is not None:
        args["wing"] = wing
    if room is not None:
        args["room"] = room
    if isinstance(tags, str):
        args["tags"] = [tags]
    else:
        tag_list = list(tags)
        if tag_list:
            args["tags"] = tag_list
    if source is not None:
        args["source"] = source
    if occurred_at is not None:
        args["occurred_at"] = occurred_at
    args.update(extra)
    return args
