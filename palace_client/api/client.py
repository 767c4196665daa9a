"""``palace_client.Client``: the synchronous Python API over the daemon socket.

Importable without apsw, usearch, fastembed or numpy. Every method is one request. A broken
connection (daemon restarted or killed) is reopened once and the request retried when that is
correct, as each op's spec (``palaced.wire.specs``, with the reasoning) says: a request that was
never written whole is always resent; after a lost reply, reads and idempotent writes are
resent, ``forget``/``palace.create``/``palace.delete`` are resent and an "already done" answer
counts as success, and the rest raise ``OutcomeUnknown`` rather than run twice. A reply late
past its deadline is a lost reply that is not resent (``Timeout`` or ``OutcomeUnknown``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from palace_client.api import identity
from palace_client.api.identity import resolve as resolve_agent
from palace_client.api.payloads import drawer_args
from palace_client.api.projects import CREATES_PALACE
from palace_client.transport.connection import (
    CONNECT_TIMEOUT_S,
    REPLY_GRACE_S,
    Backoff,
    Connection,
    ReplyLost,
    ReplyTimeout,
    RequestNotSent,
    checked_seconds,
    connect,
    env_seconds,
    outcome_unknown,
)
from palaced.wire.errors import (
    Busy,
    DaemonUnreachable,
    InvalidArgs,
    PalaceError,
    PalaceNotFound,
    Timeout,
    UnknownOp,
)
from palaced.wire.paths import Paths, resolve
from palaced.wire.specs import SPEC_DIGEST, Retry, retry_rule

BULK_TIMEOUT_MS = 600_000  # a batch may embed thousands of texts
# Whole-palace work (a backup or check of a large palace, a restore that rebuilds the vector
# index) may take minutes: the longest deadline the daemon grants.
MAINTENANCE_TIMEOUT_MS = 3_600_000


class Client:
    """A connection to the machine's palaced, started on demand.

    Args:
        socket_path: talk to this socket instead of the resolved default.
        autostart: start the daemon when it is not running (default True).
        client_name: reported to the daemon in the handshake.
        connect_timeout: seconds to connect and handshake (``PALACE_CONNECT_TIMEOUT``, 10).
        request_timeout: seconds a request may run when its method sets none
            (``PALACE_REQUEST_TIMEOUT``, else the daemon's default); see ``call``.
        agent: who the requests come from (else ``PALACE_AGENT``, else ``user:<login>``).

    Raises:
        ClientError: a timeout (argument or variable) is not a number of seconds > 0 and
            <= a week (``connection.MAX_WAIT_S``).

    Every method raises a ``palaced.wire.errors.PalaceError`` subclass on failure
    (e.g. ``PalaceNotFound``, ``InvalidArgs``, ``DaemonUnreachable``). The methods come by
    concern: palaces, drawers, the daemon, knowledge, bulk transfers, maintenance, memoirs,
    governance, editing and upkeep.
    """

    def __init__(self, socket_path: str | Path | None = None, *, autostart: bool = True,
                 client_name: str = "palace-client", connect_timeout: float | None = None,
                 request_timeout: float | None = None, agent: str | None = None) -> None:
        self._agent = resolve_agent(agent)
        paths = resolve()
        if socket_path is not None:
            sock = Path(socket_path)
            paths = Paths(paths.data_dir, paths.state_dir, paths.config_file, sock.parent, sock)
        self.paths = paths
        # A socket chosen explicitly (argument or PALACE_SOCKET) means "that daemon"; a derived
        # one must belong to a daemon of the data directory this client resolved.
        self._check_store = socket_path is None and not os.environ.get("PALACE_SOCKET")
        self._autostart = autostart
        self._client_name = client_name
        self._conn: Connection | None = None
        # Palaces this client's writes created (the first-write rule, ``call``): a person
        # who mistyped a name is told (the CLI says so on stderr).
        self.created: list[str] = []
        self.connect_timeout = (
            checked_seconds("connect_timeout", connect_timeout) if connect_timeout
            else env_seconds("PALACE_CONNECT_TIMEOUT", os.environ.get("PALACE_CONNECT_TIMEOUT"),
                             CONNECT_TIMEOUT_S) or CONNECT_TIMEOUT_S)
        self.request_timeout = (
            checked_seconds("request_timeout", request_timeout) if request_timeout
            else env_seconds("PALACE_REQUEST_TIMEOUT", os.environ.get("PALACE_REQUEST_TIMEOUT"),
                             None))

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = connect(self.paths, autostart=self._autostart,
                                 client_name=self._client_name, check_store=self._check_store,
                                 connect_timeout=self.connect_timeout,
                                 request_timeout=self.request_timeout)
        return self._conn

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Send one raw request and return its result map (see ``_send``).

        The first write to a palace that does not exist yet creates it: an op of
        ``projects.CREATES_PALACE`` answered PALACE_NOT_FOUND creates the palace and is sent
        again, the rule of every client (reads never create one).

        Raises:
            PalaceError: the daemon's typed error, and what ``_send`` raises.
        """
        try:
            try:
                return self._send(op, palace, args, timeout_ms=timeout_ms)
            except PalaceNotFound as exc:
                # A palace deleted under the daemon is reported, not silently made anew.
                if palace is None or op not in CREATES_PALACE or exc.details.get("deleted"):
                    raise
            if self._send("palace.create", palace, {"exist_ok": True}).get("created"):
                self.created.append(palace)
            return self._send(op, palace, args, timeout_ms=timeout_ms)
        except (InvalidArgs, UnknownOp) as exc:
            raise self._stale_daemon(exc) from None

    def _stale_daemon(self, exc: InvalidArgs | UnknownOp) -> InvalidArgs | UnknownOp:
        """``exc`` saying so when the daemon runs other code than this client (its hello's
        ``spec`` digest differs: a palaced started before an upgrade refuses what it does not
        know yet), else ``exc`` as it is."""
        if self._conn is None:
            return exc
        spec = self._conn.server_info.get("spec")
        if spec == SPEC_DIGEST:
            return exc
        return type(exc)(
            f"{exc.message} (the running palaced accepts other ops and arguments than this "
            "client: it was started from another version of palace; `palace daemon restart` "
            "runs this one)", details={**exc.details, "daemon_spec": spec,
                                       "client_spec": SPEC_DIGEST})

    def _send(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
              *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Send one raw request and return its result map.

        A broken connection is reopened and the request resent once, per the op's retry rule.
        The answer is awaited for the op's deadline (``timeout_ms``, else ``request_timeout``,
        else the daemon's default) plus 10 s; a late one is not resent (twice the wait).
        A ``BUSY`` answer (no connection slot free) is retried with jittered exponential
        backoff until the op's deadline: the daemon answers it before running anything.

        Raises:
            PalaceError: the daemon's typed error.
            DaemonUnreachable: the connection broke and the retry could not get through.
            OutcomeUnknown: the connection broke (or the deadline passed) after the request
                was sent, and the op may not be resent: it may or may not have been applied.
            Timeout: a read or SAFE write got no answer by its deadline (safe to send again).
            Busy: the daemon still had no slot free when the op's deadline (or, connecting,
                ``connect_timeout``) ran out.
        """
        payload = dict(args or {})
        rule = retry_rule(op)
        delivered = False  # an earlier attempt was written whole and its reply lost
        lost: Exception | None = None
        started = time.monotonic()
        busy: Backoff | None = None
        attempts = 0
        while attempts < 2:
            attempts += 1
            if delivered:
                payload = {**payload, **rule.retry_args}
            try:
                conn = self._connection()
            except (DaemonUnreachable, Busy) as exc:
                if delivered and rule.kind is not Retry.SAFE:
                    raise outcome_unknown(op, lost) from exc
                raise
            try:
                return conn.call(op, palace, payload, timeout_ms, self._agent)
            except RequestNotSent as exc:
                self.close()
                lost = exc
            except ReplyTimeout as exc:
                self.close()  # a late reply would be read as the next request's
                if rule.kind is Retry.SAFE:
                    raise Timeout(f"{exc} (the client's deadline); it is safe to send again",
                                  details={"op": op, "timeout_s": exc.timeout_s,
                                           "client_deadline": True}) from None
                raise outcome_unknown(op, exc) from None
            except ReplyLost as exc:
                self.close()
                lost = exc
                if rule.kind is Retry.NEVER or (delivered and rule.kind is not Retry.SAFE):
                    raise outcome_unknown(op, exc) from exc
                delivered = True
            except PalaceError as exc:
                if delivered and rule.done_code is not None and exc.code == rule.done_code:
                    # The lost attempt did it: this "not found" is its success.
                    done = rule.done_result(palace, payload) if rule.done_result else {}
                    return {**done, "already_done": True}
                if exc.code != Busy.code:
                    raise
                # The daemon answers BUSY before dispatching (a reserve connection runs only
                # status and stop) and closes the connection: nothing ran, so any op is sent
                # again, on a new connection, which gets a normal slot once one frees up.
                self.close()
                if busy is None:
                    budget_ms = timeout_ms if timeout_ms is not None else (
                        max(int(self.request_timeout * 1000), 1)
                        if self.request_timeout is not None else None)
                    busy = Backoff(started + conn.deadline_s(budget_ms) - REPLY_GRACE_S)
                if not busy.pause():
                    if delivered and rule.kind is not Retry.SAFE:
                        raise outcome_unknown(op, lost) from exc
                    raise
                attempts -= 1  # not a lost connection: the resend budget is untouched
        if delivered and rule.kind is not Retry.SAFE:
            raise outcome_unknown(op, lost)
        raise DaemonUnreachable(f"lost the connection to palaced twice: {lost}",
                                details={"op": op, "socket": str(self.paths.socket)})

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
    def create_palace(self, name: str, *, exist_ok: bool = False, store: str | None = None
                      ) -> dict[str, Any]:
        """Create a palace; returns its info. With ``store`` (a PostgreSQL URL without a
        password, or a ``[stores.NAME]`` name) a team palace, or attach to an existing one."""
        args: dict[str, Any] = {"exist_ok": exist_ok}
        if store is not None:
            args["store"] = store
        return self.call("palace.create", name, args)

    def delete_palace(self, name: str, *, purge: bool = False) -> dict[str, Any]:
        """Delete a palace and all its drawers (a team palace: detach it, unless ``purge``
        drops its schema too)."""
        return self.call("palace.delete", name, {"purge": True} if purge else {})

    def list_palaces(self) -> list[dict[str, Any]]:
        """Return one dict per palace (name, path, open)."""
        return list(self.call("palace.list")["palaces"])

    def palace_info(self, name: str) -> dict[str, Any]:
        """Counts, embedder identity and index state of one palace."""
        return self.call("palace.info", name)

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
        args = drawer_args(text=text, wing=wing, room=room, tags=tags, importance=importance,
                            source=source, occurred_at=occurred_at, **extra)
        return self.call("memory.remember", palace, args)

    def remember_many(self, palace: str, items: Sequence[Mapping[str, Any]],
                      **options: Any) -> list[int]:
        """Store many drawers in one batch; returns their ids in input order."""
        return [int(i) for i in self.remember_many_ex(palace, items, **options)["ids"]]

    def remember_many_ex(self, palace: str, items: Sequence[Mapping[str, Any]],
                         **options: Any) -> dict[str, Any]:
        """Like ``remember_many`` but returns the whole result: ``ids`` and, with ``dedup``,
        the ``conflicts`` found (each ``newer_id``, the older ``id``, ``reason``, ``text``).

        Raises:
            PalaceError: the daemon refused the batch (INVALID_ARGS names the item).
        """
        # An item without a text goes as is: the daemon refuses it with INVALID_ARGS naming
        # the item, where the keyword call would raise a bare TypeError.
        payload = [drawer_args(**dict(item)) if "text" in item else dict(item)
                   for item in items]
        return self.call("memory.remember_many", palace, {"items": payload, **options},
                         timeout_ms=600_000)

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

    def recall_all(self, query: str, *, top_k: int = 10, wing: str | None = None,
                   room: str | None = None, tags: Iterable[str] = (),
                   **extra: Any) -> dict[str, Any]:
        """Recall across every palace (``memory.recall_all``): the merged ``results``, each
        with its ``palace``, plus ``palaces`` searched and ``skipped`` ones.

        Raises:
            PalaceError: the daemon refused the request (e.g. INVALID_ARGS).
        """
        args: dict[str, Any] = {"query": query, "top_k": top_k}
        if wing is not None:
            args["wing"] = wing
        if room is not None:
            args["room"] = room
        if list(tags):
            args["tags"] = list(tags)
        args.update(extra)
        return self.call("memory.recall_all", None, args)

    def wake_up(self, palace: str, *, budget: int = 800) -> dict[str, Any]:
        """L0 identity + L1 essential drawers packed into ``budget`` tokens (session start).

        Returns ``{"sections", "tokens_used", "budget", "cut", "tokenizer"}``.
        """
        return self.call("memory.wake_up", palace, {"budget": budget})

    def get(self, palace: str, drawer_id: int, *, history: bool = False) -> dict[str, Any]:
        """Return one drawer (``versions``: 1 + its edits); with ``history`` also its earlier
        versions as ``history``, newest first (see ``update``)."""
        args: dict[str, Any] = {"id": drawer_id, **({"history": True} if history else {})}
        return dict(self.call("memory.get", palace, args)["drawer"])

    def drawers(self, palace: str, *, wing: str | None = None, room: str | None = None,
                tags: Iterable[str] = (), since: str | int | None = None,
                until: str | int | None = None, created_by: str | None = None,
                limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """List drawers newest first: ``{"drawers": [...], "total": n, "next_offset": m|None}``;
        ``tags`` keeps the drawers holding any of them, ``since``/``until`` bound their dates
        (ISO 8601, epoch ms or a duration back from now: ``7d``), ``created_by`` names the
        agent that remembered them."""
        return self.call("memory.list", palace, {"limit": limit, "offset": offset, **self._some(
            wing=wing, room=room, tags=list(tags) or None, since=since, until=until,
            created_by=created_by)})

    # -- daemon -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Daemon version, pid, uptime, model state and per-palace counts."""
        return self.call("daemon.status")

    def stop_daemon(self) -> None:
        """Ask the daemon to shut down gracefully (never starts one, never retries)."""
        # A held connection may have been closed by the daemon as idle, and a send that fails
        # on it would pass for the daemon closing while it stops: use a fresh one.
        self.close()
        try:
            conn = self._connection()
            conn.call("daemon.stop")
        except (ConnectionError, OSError):
            pass  # the daemon closed the socket while stopping: that is success
        finally:
            self.close()

    # -- knowledge (issue 5) -------------------------------------------------------------------
    def kg_assert(self, palace: str, subject: str, predicate: str, obj: str, *,
                  valid_from: str | int | None = None, confidence: float | None = None,
                  source_drawer: int | None = None, source_url: str | None = None,
                  source_agent: str | None = None, literal: bool = False,
                  multi: bool | None = None) -> dict[str, Any]:
        """Record the fact ``subject predicate obj`` from ``valid_from`` (ISO 8601 or epoch
        ms; default now); returns the fact. A single-valued predicate closes the previous
        fact's interval; ``multi`` chooses (default: the typed relations but
        ``superseded_by`` keep several objects, other predicates one). ``literal`` stores
        ``obj`` as a value instead of an entity.

        Raises ``InvalidContent`` for a self-link or an invalid name, predicate or date, and
        ``MemoryNotFound`` when ``source_drawer`` names no drawer.
        """
        args = self._some(subject=subject, predicate=predicate, object=obj,
                          valid_from=valid_from, confidence=confidence,
                          source_drawer=source_drawer, source_url=source_url,
                          source_agent=source_agent, multi=multi)
        args["literal"] = literal
        return dict(self.call("graph.assert", palace, args)["fact"])

    def kg_invalidate(self, palace: str, fact_id: int, *, at: str | int | None = None
                      ) -> dict[str, Any]:
        """End an active fact at ``at`` (default now); returns the fact.

        Raises ``FactNotFound`` for an unknown id.
        """
        return dict(self.call("graph.invalidate", palace, self._some(id=fact_id, at=at))["fact"])

    def kg_query(self, palace: str, subject: str, *, as_of: str | int | None = None
                 ) -> dict[str, Any]:
        """Facts about ``subject``: the active ones, or those valid at ``as_of``.

        Returns ``{"subject", "entity", "as_of_ms", "facts"}``.
        """
        return self.call("graph.query", palace, self._some(subject=subject, as_of=as_of))

    def kg_timeline(self, palace: str, subject: str) -> dict[str, Any]:
        """Every fact about ``subject`` (as subject or object), closed ones too, oldest first.

        Returns ``{"subject", "entity", "facts"}``.
        """
        return self.call("graph.timeline", palace, {"subject": subject})

    def kg_link(self, palace: str, a: str, relation: str, b: str, *,
                valid_from: str | int | None = None, confidence: float | None = None,
                source_drawer: int | None = None, source_url: str | None = None,
                source_agent: str | None = None) -> dict[str, Any]:
        """Relate two concepts (``part_of``, ``depends_on``, ``related_to``, ...); returns
        the fact. Raises ``InvalidContent`` when ``a`` and ``b`` are the same concept.
        """
        args = self._some(a=a, relation=relation, b=b, valid_from=valid_from,
                          confidence=confidence, source_drawer=source_drawer,
                          source_url=source_url, source_agent=source_agent)
        return dict(self.call("graph.link", palace, args)["fact"])

    def kg_neighbors(self, palace: str, entity: str, *, depth: int = 1,
                     relation: str | None = None, as_of: str | int | None = None,
                     max_nodes: int | None = None) -> dict[str, Any]:
        """Entities within ``depth`` hops: ``{"entity", "nodes", "edges", "truncated"}``;
        ``truncated`` when the walk stopped at ``max_nodes`` entities (the daemon's default
        when None)."""
        return self.call("graph.neighbors", palace,
                         self._some(entity=entity, depth=depth, relation=relation, as_of=as_of,
                                    max_nodes=max_nodes))

    def kg_path(self, palace: str, a: str, b: str, *, max_depth: int | None = None,
                as_of: str | int | None = None) -> dict[str, Any]:
        """A shortest chain of facts from ``a`` to ``b``:
        ``{"from", "to", "found", "length", "path"}`` (``path`` None when not found).
        """
        return self.call("graph.path", palace,
                         self._some(a=a, b=b, max_depth=max_depth, as_of=as_of))

    def kg_search(self, palace: str, query: str, *, limit: int = 20, type: str | None = None
                  ) -> list[dict[str, Any]]:
        """Entities matching ``query`` by name, definition or labels (of ``type`` only, when
        given), best first."""
        res = self.call("graph.search", palace, self._some(query=query, limit=limit, type=type))
        return list(res["entities"])

    def kg_describe(self, palace: str, entity: str, *, type: str | None = None,
                    definition: str | None = None, labels: Iterable[str] | None = None
                    ) -> dict[str, Any]:
        """Set an entity's type, definition and/or labels (labels replace its list; the
        entity is created when new): ``{"entity", "changed"}``. Raises ``InvalidArgs`` when
        none is given, ``InvalidContent`` for a bad value."""
        return self.call("graph.describe", palace, self._some(
            entity=entity, type=type, definition=definition,
            labels=None if labels is None else list(labels)))

    # -- bulk: export, restore, the import ledger, capture -----------------------------------
    def export(self, palace: str, *, limit: int = 1000) -> Iterator[dict[str, Any]]:
        """Every record of the palace's export (``docs/export-format.md``), header first and
        ``end`` last, fetched ``limit`` records a page: write them out as they come."""
        cursor: str | None = None
        while True:
            page = self.call("palace.export", palace, {"cursor": cursor, "limit": limit})
            yield from page["records"]
            cursor = page["next"]
            if cursor is None:
                return

    def import_records(self, palace: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Restore a batch of export records (the first batch starts with the header):
        ``{"stored", "unchanged", "rejected", "dropped_links", "resumed", "finished"}``.

        Raises ``PalaceNotEmpty`` when the palace holds other memories.
        """
        return self.call("palace.import_records", palace, {"records": list(records)},
                         timeout_ms=BULK_TIMEOUT_MS)

    def sources(self, palace: str, importer: str, *, prefix: str = "",
                limit: int = 1000) -> Iterator[dict[str, Any]]:
        """Every source ``importer`` recorded whose key starts with ``prefix``, by key:
        ``{"key", "hash", "imported_ms", "drawers"}``."""
        after: str | None = None
        while True:
            args: dict[str, Any] = {"importer": importer, "prefix": prefix, "limit": limit}
            if after is not None:
                args["after"] = after
            page = self.call("source.list", palace, args)
            yield from page["sources"]
            after = page["next"]
            if after is None:
                return

    def sync_source(self, palace: str, importer: str, key: str, digest: str,
                    items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Make ``items`` (maps with the ``remember`` arguments) the drawers of source ``key``
        unless its recorded hash is ``digest``:
        ``{"changed", "stored", "unchanged", "removed", "ids"}``."""
        return self.call("source.sync", palace, {"importer": importer, "key": key,
                                                 "hash": digest, "items": list(items)},
                         timeout_ms=BULK_TIMEOUT_MS)

    def drop_source(self, palace: str, importer: str, key: str) -> dict[str, Any]:
        """Forget source ``key``: delete the drawers no other source claims
        (``{"found", "removed"}``)."""
        return self.call("source.drop", palace, {"importer": importer, "key": key})

    def capture_transcript(self, palace: str, path: str | os.PathLike[str], **args: Any
                           ) -> dict[str, Any]:
        """Capture what is new in a Claude Code transcript (one drawer per exchange): queued,
        or with ``wait=True`` done and counted; other ``capture.transcript`` arguments by name
        (``session_id``, ``wing``, ``project_wing``, ``create``, ``dry_run``)."""
        return self.call("capture.transcript", palace,
                         {**args, "path": os.path.abspath(os.fspath(path))},
                         timeout_ms=BULK_TIMEOUT_MS if args.get("wait") else None)

    # -- maintenance: reembed, doctor, backup, restore ----------------------------------------
    def reembed(self, name: str) -> dict[str, Any]:
        """Re-embed every drawer of palace ``name`` with the daemon's current model now."""
        return self.call("palace.reembed", name, timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def doctor(self, palace: str | None = None, *, repair: bool = False, full: bool = False
               ) -> dict[str, Any]:
        """Check the daemon and every palace (or ``palace``); with ``repair`` mend what is
        derivable and check again. Returns ``{"healthy", "summary", "checks", "repairs",
        ...}``: each check has ``name``, ``palace``, ``status`` (ok/warn/fail), ``detail``,
        ``fixable``, ``advice`` and ``repaired``.
        """
        return self.call("palace.doctor", palace, {"repair": repair, "full": full},
                         timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def backup(self, palace: str | None = None, *, to: str | Path | None = None,
               keep: int | None = None) -> dict[str, Any]:
        """Back up every palace (or ``palace``) online under ``to`` (default: the daemon's
        ``[backup] dir``), keeping the newest ``keep`` of each: ``{"backups": [...],
        "failed": [...]}``, each backup with its ``path``, ``counts`` and ``removed`` ones.
        A relative ``to`` is taken from the current directory and ``~`` is expanded (the daemon
        takes only absolute paths).
        """
        args: dict[str, Any] = {}
        if to is not None:
            # ``--to=~/x`` reaches us unexpanded by the shell: not a directory named "~".
            args["to"] = os.path.abspath(os.path.expanduser(os.fspath(to)))
        if keep is not None:
            args["keep"] = keep
        return self.call("palace.backup", palace, args, timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def restore(self, path: str | Path, *, palace: str | None = None, force: bool = False
                ) -> dict[str, Any]:
        """Verify the backup at ``path`` and restore it as ``palace`` (default: the palace it
        was taken of). Raises ``BackupInvalid`` for a damaged or altered backup and
        ``PalaceExists`` when the palace was written after the backup (``force`` replaces
        it anyway).
        """
        return self.call("palace.restore", palace,
                         {"path": os.path.abspath(os.fspath(path)), "force": force},
                         timeout_ms=MAINTENANCE_TIMEOUT_MS)

    # -- memoirs: named containers of concepts linked by typed relations (docs/concepts.md) --
    def memoir_create(self, palace: str, memoir: str, *,
                      description: str | None = None,
                      consolidation_threshold: int | None = None, exist_ok: bool = False
                      ) -> dict[str, Any]:
        """Create a memoir: ``{"memoir", "created"}``. Raises ``MemoirExists`` unless
        ``exist_ok`` (then an existing memoir comes back unchanged, ``created`` False)."""
        return self.call("memoir.create", palace, self._some(
            memoir=memoir, description=description,
            consolidation_threshold=consolidation_threshold, exist_ok=exist_ok))

    def memoir_list(self, palace: str) -> list[dict[str, Any]]:
        """Every memoir of the palace with its ``concepts`` and ``links`` counts."""
        return list(self.call("memoir.list", palace)["memoirs"])

    def memoir_show(self, palace: str, memoir: str, *, limit: int = 100,
                    offset: int = 0) -> dict[str, Any]:
        """A memoir and a page of its concepts: ``{"memoir", "stats", "concepts",
        "next_offset"}``. Raises ``MemoirNotFound``."""
        return self.call("memoir.show", palace, {"memoir": memoir, "limit": limit,
                                                 "offset": offset})

    def memoir_delete(self, palace: str, memoir: str) -> dict[str, Any]:
        """Delete a memoir with its concepts and links: ``{"memoir", "concepts", "links",
        "deleted"}``. Raises ``MemoirNotFound``."""
        return self.call("memoir.delete", palace, {"memoir": memoir})

    def memoir_add_concept(self, palace: str, memoir: str, concept: str,
                           definition: str, *, labels: Sequence[str] | None = None,
                           confidence: float | None = None,
                           sources: Sequence[int] | None = None) -> dict[str, Any]:
        """Add a concept: ``{"concept", "created"}`` (the same definition again: unchanged,
        ``created`` False). Raises ``ConceptExists`` for another definition under that name,
        ``InvalidContent`` for a bad label, ``MemoryNotFound`` for an unknown source drawer."""
        return self.call("memoir.add_concept", palace, self._some(
            memoir=memoir, name=concept, definition=definition,
            labels=None if labels is None else list(labels), confidence=confidence,
            sources=None if sources is None else list(sources)))

    def memoir_refine(self, palace: str, memoir: str, concept: str, definition: str,
                      *, labels: Sequence[str] | None = None,
                      sources: Sequence[int] | None = None) -> dict[str, Any]:
        """Refine a concept: ``{"concept", "changed"}``; a change bumps its revision and adds
        0.1 to its confidence (max 1). Raises ``ConceptNotFound``."""
        return self.call("memoir.refine", palace, self._some(
            memoir=memoir, name=concept, definition=definition,
            labels=None if labels is None else list(labels),
            sources=None if sources is None else list(sources)))

    def memoir_search(self, palace: str, query: str | None = None, *,
                      label: str | None = None, memoir: str | None = None, limit: int = 20
                      ) -> list[dict[str, Any]]:
        """Concepts matching ``query`` and/or carrying ``label``, in ``memoir`` or all of
        them, best first (each with its ``memoir`` and ``score``)."""
        return list(self.call("memoir.search", palace, self._some(
            query=query, label=label, memoir=memoir, limit=limit))["concepts"])

    def memoir_inspect(self, palace: str, memoir: str, concept: str, *, depth: int = 1,
                       max_nodes: int | None = None) -> dict[str, Any]:
        """A concept and its neighbourhood within ``depth`` links: ``{"concept", "nodes",
        "links", "truncated"}``. Raises ``ConceptNotFound``."""
        return self.call("memoir.inspect", palace, self._some(
            memoir=memoir, name=concept, depth=depth, max_nodes=max_nodes))

    def memoir_link(self, palace: str, memoir: str, concept: str, relation: str,
                    to: str, *, weight: float | None = None) -> dict[str, Any]:
        """Link ``concept`` to the concept ``to`` (``depends_on``, ``part_of``, ... or camelCase):
        ``{"link", "created"}``. Raises ``InvalidContent`` for a self-link or another
        relation."""
        return self.call("memoir.link", palace, self._some(
            memoir=memoir, name=concept, relation=relation, to=to, weight=weight))

    def memoir_unlink(self, palace: str, memoir: str, concept: str, relation: str,
                      to: str) -> dict[str, Any]:
        """Remove a link: ``{"removed", "link"}`` (``removed`` False when there was none)."""
        return self.call("memoir.unlink", palace, {"memoir": memoir, "name": concept,
                                                   "relation": relation, "to": to})

    def memoir_update(self, palace: str, memoir: str, *, description: str | None = None,
                      consolidation_threshold: int | None = None) -> dict[str, Any]:
        """Change a memoir's description and/or consolidation threshold: ``{"memoir",
        "changed"}`` (the fields changed). Raises ``MemoirNotFound``, ``InvalidArgs`` when
        neither is given."""
        return self.call("memoir.update", palace, self._some(
            memoir=memoir, description=description,
            consolidation_threshold=consolidation_threshold))

    def memoir_rename_concept(self, palace: str, memoir: str, concept: str, new_name: str
                              ) -> dict[str, Any]:
        """Rename a concept (definition, labels, sources and links stay): ``{"concept",
        "changed"}``. Raises ``ConceptNotFound``, ``ConceptExists`` for a taken name."""
        return self.call("memoir.rename_concept", palace,
                         {"memoir": memoir, "name": concept, "new_name": new_name})

    def memoir_delete_concept(self, palace: str, memoir: str, concept: str
                              ) -> dict[str, Any]:
        """Delete a concept with its labels, sources and links: ``{"concept", "links",
        "deleted"}``. Raises ``ConceptNotFound``."""
        return self.call("memoir.delete_concept", palace, {"memoir": memoir, "name": concept})

    # -- governance: forget into the trash, restore, the trash, the audit log, the policy -----
    _agent: str

    @property
    def agent(self) -> str:
        """Who this client says it is in every request (see ``palace_client.api.identity``)."""
        return self._agent

    @agent.setter
    def agent(self, name: str) -> None:
        """Raises ``InvalidArgs`` for a name that is not 1-200 printable characters."""
        self._agent = identity.checked(name)

    def forget(self, palace: str, drawer_id: int, *, purge: bool = False) -> dict[str, Any]:
        """Move one drawer to the trash (restorable for the daemon's ``[trash] keep_days``);
        with ``purge`` delete it, or its trash entry, for good. Returns ``{"id", "trashed",
        "purged", "restorable_until_ms", ...}``."""
        return self.call("memory.forget", palace, {"id": drawer_id, "purge": purge})

    def restore_drawer(self, palace: str, drawer_id: int) -> dict[str, Any]:
        """Bring a drawer back from the trash: ``{"id", "restored", "embedded"}``.

        Raises ``MemoryNotFound`` when it is not in the trash (any more), ``InvalidContent``
        when the same text was stored again in the same room meanwhile.
        """
        return self.call("memory.restore", palace, {"id": drawer_id})

    def trash(self, palace: str, *, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """The restorable drawers, most recently forgotten first:
        ``{"drawers", "total", "next_offset", "keep_days"}``."""
        return self.call("memory.trash", palace, {"limit": limit, "offset": offset})

    def empty_trash(self, palace: str) -> dict[str, Any]:
        """Delete every drawer in the trash for good: ``{"purged": [ids]}``."""
        return self.call("memory.empty_trash", palace)

    def forget_many(self, palace: str, *, wing: str | None = None, room: str | None = None,
                    tags: Iterable[str] | None = None, source: str | None = None,
                    older_than: str | int | None = None, query: str | None = None,
                    dry_run: bool = False, max_drawers: int | None = None,
                    show: int | None = None, expect: str | None = None) -> dict[str, Any]:
        """Move every drawer matching all the selectors given (at least one) to the trash as
        one batch; ``dry_run`` only lists them. Returns ``{"dry_run", "matched", "forgotten",
        "batch", "drawers", "restorable_until_ms", "max_drawers", "selection"}``; a dry
        run's ``selection`` passed back as ``expect`` forgets exactly the set it named.

        Raises ``InvalidArgs`` without a selector, when more than ``max_drawers`` (the
        daemon's default: 1,000) match outside a dry run, or when the selection is not the
        set ``expect`` names.
        """
        return self.call("memory.forget_many", palace, self._some(
            wing=wing, room=room, tags=None if tags is None else list(tags), source=source,
            older_than=older_than, query=query, dry_run=dry_run, max_drawers=max_drawers,
            show=show, expect=expect))

    def restore_batch(self, palace: str, batch: str) -> dict[str, Any]:
        """Bring back every drawer of a bulk forget's or a merge's ``batch`` still in the
        trash: ``{"batch", "restored": [ids], "conflicts": [{"id", "conflict"}]}``.
        Raises ``MemoryNotFound`` when none is left there."""
        return self.call("memory.restore_batch", palace, {"batch": batch})

    def merge(self, palace: str, ids: Iterable[int], *, dry_run: bool = False
              ) -> dict[str, Any]:
        """Merge duplicate drawers into one (the longest text, then the newest, is kept with
        the union of their tags); the others go to the trash as one batch. Returns
        ``{"dry_run", "kept", "merged", "tags", "importance", "batch", ...}``."""
        return self.call("memory.merge", palace, {"ids": list(ids), "dry_run": dry_run})

    def audit(self, palace: str, *, since: str | int | None = None, agent: str | None = None,
              op: str | None = None, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """Audit entries newest first: ``{"entries", "total", "next_offset"}``; ``since`` is a
        time or a duration back from now (``7d``), ``agent`` and ``op`` are globs."""
        args = {k: v for k, v in (("since", since), ("agent", agent), ("op", op))
                if v is not None}
        return self.call("palace.audit", palace, {**args, "limit": limit, "offset": offset})

    def policy(self, palace: str) -> dict[str, Any]:
        """The palace's policy and what this client's agent may do:
        ``{"policy": {permission: [globs]}, "agent", "allowed": {permission: bool}}``."""
        return self.call("palace.policy", palace)

    def set_policy(self, palace: str, permission: str, agents: Iterable[str]) -> dict[str, Any]:
        """Grant ``permission`` (write, delete, admin) to exactly these agent globs (none:
        nobody); answers like ``policy``. Raises ``Forbidden`` without admin."""
        return self.call("palace.policy_set", palace,
                         {"permission": permission, "agents": list(agents)})

    # -- editing and upkeep: update, decay, prune, consolidate, health ------------------------
    @staticmethod
    def _some(**values: Any) -> dict[str, Any]:
        """The arguments that were given (None means "use the daemon's default")."""
        return {k: v for k, v in values.items() if v is not None}

    def update(self, palace: str, drawer_id: int, *, text: str | None = None,
               wing: str | None = None, room: str | None = None,
               tags: Iterable[str] | None = None, importance: float | str | None = None
               ) -> dict[str, Any]:
        """Edit a drawer in place (same id): only the fields given change; a new text is
        re-embedded and the replaced version kept (``get(..., history=True)``).

        Returns ``{"id", "changed", "version", "embedded"}`` (``changed`` empty: nothing to
        change). Raises ``MemoryNotFound``, or ``InvalidContent`` when another drawer already
        holds the new text in that wing/room.
        """
        return self.call("memory.update", palace, self._some(
            id=drawer_id, text=text, wing=wing, room=room,
            tags=None if tags is None else list(tags), importance=importance))

    def decay(self, palace: str) -> dict[str, Any]:
        """Recompute every drawer's decayed weight: ``{"drawers", "updated", "decay_ms"}``."""
        return self.call("memory.decay", palace)

    def prune(self, palace: str, *, threshold: float | None = None, dry_run: bool = False
              ) -> dict[str, Any]:
        """Delete (or with ``dry_run`` only list) low/medium drawers whose weight is below
        ``threshold``: ``{"threshold", "dry_run", "ids", "candidates", "pruned"}``.
        """
        return self.call("memory.prune", palace, self._some(threshold=threshold, dry_run=dry_run))

    def consolidate(self, palace: str, room: str, summary: str, *, wing: str | None = None,
                    ids: Iterable[int] | None = None) -> dict[str, Any]:
        """Store ``summary`` as a summary drawer in ``room`` and mark the sources (``ids``,
        or the room's active drawers) consolidated into it; sources stay retrievable.

        Returns ``{"summary_id", "created", "wing", "room", "source_ids", "missing"}``.
        """
        id_list = None if ids is None else [int(i) for i in ids]
        return self.call("memory.consolidate", palace,
                         self._some(room=room, summary=summary, wing=wing, ids=id_list))

    def health(self, palace: str, *, threshold: float | None = None,
               stale_days: float | None = None, limit: int | None = None) -> dict[str, Any]:
        """Per-room drawer counts, stale drawers, duplicate candidates and consolidation
        hints: ``{"rooms": [...], "totals": {...}, ...}``.
        """
        return self.call("memory.health", palace,
                         self._some(threshold=threshold, stale_days=stale_days, limit=limit))

    def conflicts(self, palace: str, *, include_resolved: bool = False,
                  limit: int | None = None) -> dict[str, Any]:
        """Conflicting drawers newest first (a newer drawer restating an older one with
        another value), open ones unless ``include_resolved``: ``{"conflicts", "total"}``.
        """
        return self.call("memory.conflicts", palace,
                         self._some(include_resolved=include_resolved, limit=limit))

    def resolve_conflict(self, palace: str, conflict_id: int, resolution: str, *,
                         text: str | None = None) -> dict[str, Any]:
        """Resolve a conflict: ``supersede`` (retire the older drawer), ``keep_both``, or
        ``merge`` (store ``text``, retiring both). Returns the conflict with ``retired``.
        Raises ``MemoryNotFound`` (no such conflict) or ``InvalidArgs``.
        """
        return self.call("memory.resolve_conflict", palace,
                         self._some(id=conflict_id, resolution=resolution, text=text))
