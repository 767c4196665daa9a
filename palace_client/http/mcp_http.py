"""MCP over Streamable HTTP at ``/mcp`` in ``palace serve`` (docs/http.md#mcp-over-http).

For MCP clients that cannot spawn ``palace mcp``: the same tools and the same output, because
each HTTP session is the stdio bridge's own ``Bridge`` over its own ``Toolbox``
(``palace_client.mcp``); only the transport differs. The transport is the spec's Streamable
HTTP (revisions 2025-03-26 to 2025-11-25), the small subset a tool server needs:

* ``POST /mcp``: one JSON-RPC message (or, as 2025-03-26 allowed, a batch). A request is
  answered with ``application/json``, or with one ``text/event-stream`` event when the client
  accepts only SSE; notifications and responses with ``202 Accepted``.
* ``initialize`` (sent without ``Mcp-Session-Id``) starts a session and answers with its
  ``Mcp-Session-Id``; every later message must carry it (400 without, 404 for an unknown or
  ended one). ``DELETE /mcp`` ends it. ``MCP-Protocol-Version`` must be a version the bridge
  speaks (400 otherwise; absent, 2025-03-26 is assumed, as the spec says).
* ``GET /mcp`` opens the session's stream of what the server sends unasked: the bridge's
  ``roots/list`` when the URL names no palace (``?palace=``) and the client has roots, as on
  stdio; the client's answer is a POST. The stream ends after ``STREAM_IDLE_S`` idle (the
  client opens it again: the spec's polling), so none holds a graceful stop.

Security is the REST API's (``app.build_app``): the Host check, ``Authorization: Bearer``
with the secret (the web app's cookie is refused here), a foreign ``Origin`` refused, bodies
bounded like the API's.
"""

from __future__ import annotations

import contextlib
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from palace_client.api.identity import checked
from palace_client.api.projects import default_palace, project_dir_palace
from palace_client.http.bodies import MAX_BODY, read_body
from palace_client.http.security import AGENT_HEADER, agent_of
from palace_client.mcp.bridge import (
    INVALID_REQUEST,
    PARSE_ERROR,
    SUPPORTED_PROTOCOL_VERSIONS,
    Bridge,
    _error,
    encode,
)
from palace_client.mcp.stdio import served_toolsets
from palace_client.mcp.toolbox import Toolbox
from palaced.wire import errors as E
from palaced.wire.protocol import loads_json
from palaced.wire.specs import parse_toolsets

MCP_PATH = "/mcp"
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
ASSUMED_VERSION = "2025-03-26"  # the spec's rule for a request without the header
MAX_SESSIONS = 64  # sessions kept; the least recently used one is ended beyond
OUTBOX_SIZE = 16  # server-to-client messages waiting for a session's GET stream
STREAM_IDLE_S = 2.0  # a GET stream with nothing to send ends (below uvicorn's 5 s grace)
STREAM_RETRY_MS = 1000  # the SSE `retry` the client waits before opening it again
NOT_BEARER = ("MCP over HTTP takes `Authorization: Bearer <secret>` (the secret file's "
              "content); the session cookie is the web app's")


class PooledDaemon:
    """The ``DaemonClient`` a session's ``Toolbox`` uses: calls go through ``palace serve``'s
    client pool (no connection per session), as ``agent``."""

    def __init__(self, call: Callable[[str, str, str | None, Mapping[str, Any]],
                                      dict[str, Any]], agent: str) -> None:
        self._call = call
        self.agent = agent

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        """Send ``op`` through the pool (blocking; see ``ClientPool.call``)."""
        return self._call(self.agent, op, palace, args or {})

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]:
        """Create palace ``name`` (``palace.create``)."""
        return self.call("palace.create", name, {"exist_ok": exist_ok})

    def list_palaces(self) -> list[dict[str, Any]]:
        """Every palace's info (``palace.list``)."""
        return list(self.call("palace.list")["palaces"])

    def close(self) -> None:
        """Nothing to close: the pool owns the connections."""


class Session:
    """One MCP session: the stdio bridge's protocol logic over its own toolbox; its messages
    are answered one at a time, as on stdio. What the bridge sends unasked (``roots/list``)
    waits in ``outbox`` (at most ``OUTBOX_SIZE``) for the client's ``GET /mcp`` stream."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.lock = anyio.Lock()
        self._outbox, self.outgoing = anyio.create_memory_object_stream[dict[str, Any]](
            OUTBOX_SIZE)
        bridge.send = self._send

    def _send(self, message: dict[str, Any]) -> None:
        """The bridge's ``send`` (called in a worker thread): queue ``message`` for the
        stream; dropped when the queue is full or the session ended (the bridge's wait for
        the answer is bounded)."""
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError,
                                 anyio.BrokenResourceError):
            anyio.from_thread.run_sync(self._outbox.send_nowait, message)

    def close(self) -> None:
        """End the session's stream (on the event loop)."""
        self._outbox.close()


class Sessions:
    """The live sessions by id, at most ``limit`` (the least recently used is dropped)."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self._limit = limit
        self._live: OrderedDict[str, Session] = OrderedDict()

    def add(self, session: Session) -> str:
        """Keep ``session``; returns its new id (256 random bits, visible ASCII)."""
        sid = secrets.token_urlsafe(32)
        self._live[sid] = session
        while len(self._live) > self._limit:
            self._live.popitem(last=False)[1].close()
        return sid

    def get(self, sid: str) -> Session | None:
        """The session ``sid``, or None (unknown, ended or dropped)."""
        session = self._live.get(sid)
        if session is not None:
            self._live.move_to_end(sid)
        return session

    def end(self, sid: str) -> bool:
        """End session ``sid``; whether it was live."""
        session = self._live.pop(sid, None)
        if session is not None:
            session.close()
        return session is not None


def _rpc_error(status: int, code: int, message: str) -> Response:
    """A JSON-RPC error (id null) as the HTTP answer ``status``, which the SDK clients surface
    as the error rather than a bare status."""
    return Response(encode(_error(None, code, message)), status_code=status,
                    media_type="application/json")


def _answer(line: bytes, accept: str, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON-RPC answer ``line``: JSON, or one SSE event for a client that accepts only
    ``text/event-stream``."""
    wants_json = not accept or "application/json" in accept or "*/*" in accept
    if wants_json or "text/event-stream" not in accept:
        return Response(line, media_type="application/json", headers=dict(headers or {}))
    event = b"event: message\ndata: " + line.rstrip(b"\n") + b"\n\n"
    return Response(event, media_type="text/event-stream", headers=dict(headers or {}))


def _is_initialize(message: object) -> bool:
    return isinstance(message, dict) and message.get("method") == "initialize"


def _is_response(message: object) -> bool:
    return (isinstance(message, dict) and "method" not in message and "id" in message
            and ("result" in message or "error" in message))


def _events(session: Session) -> AsyncIterator[bytes]:
    """The SSE events of a session's stream: each message the bridge sends. The stream ends
    after ``STREAM_IDLE_S`` without one (the client opens it again ``retry`` ms later, the
    spec's polling), when the session ends, or when the client goes; so no stream holds
    ``palace serve``'s graceful stop (uvicorn waits for open responses)."""
    async def events() -> AsyncIterator[bytes]:
        yield f"retry: {STREAM_RETRY_MS}\n\n".encode()
        while True:
            message: dict[str, Any] | None = None
            with anyio.move_on_after(STREAM_IDLE_S):  # never yield inside a cancel scope
                try:
                    message = await session.outgoing.receive()
                except anyio.EndOfStream:
                    return
            if message is None:
                return
            yield b"event: message\ndata: " + encode(message).rstrip(b"\n") + b"\n\n"
    return events()


def mcp_routes(authed: Callable[[Callable[[Request, str], Awaitable[Response]]],
                                Callable[[Request], Awaitable[Response]]],
               call: Callable[[str, str, str | None, Mapping[str, Any]], dict[str, Any]],
               limiter: anyio.CapacityLimiter) -> list[BaseRoute]:
    """The ``/mcp`` route. ``authed`` wraps a handler in the API's authentication, Origin
    check and typed errors; ``call`` is the client pool's (agent, op, palace, args);
    tool calls run in worker threads under ``limiter``."""
    sessions = Sessions()

    def open_session(request: Request) -> Session:
        """A new session for an ``initialize`` request.

        Raises:
            InvalidArgs: ``?tools=`` names an unknown toolset, or ``?palace=`` is empty.
        """
        tools = request.query_params.get("tools")
        toolsets = parse_toolsets(tools) if tools is not None else served_toolsets(None)
        palace = request.query_params.get("palace")
        if palace is not None and not palace.strip():
            raise E.InvalidArgs("?palace= names a palace", details={"arg": "palace"})
        # Until initialize names the client (the bridge's rule), the agent is the API's.
        daemon = PooledDaemon(call, checked(agent_of(request.headers), "X-Palace-Agent"))
        decided = palace or project_dir_palace()
        toolbox = Toolbox(lambda: daemon, decided or default_palace(), toolsets=toolsets)
        # As on stdio: no palace named, the client's roots (when it has them) decide.
        return Session(Bridge(toolbox, roots=decided is None))

    async def post(request: Request) -> Response:
        body = await read_body(request, "application/json", MAX_BODY)
        try:
            message = loads_json(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return _rpc_error(400, PARSE_ERROR, f"Parse error: {exc}")
        sid = request.headers.get(SESSION_HEADER)
        headers: dict[str, str] = {}
        if _is_initialize(message):
            # Off the event loop: it reads config.toml and looks for the project's directory.
            session = await anyio.to_thread.run_sync(open_session, request)
            headers["Mcp-Session-Id"] = sessions.add(session)
        elif isinstance(message, list) and any(map(_is_initialize, message)):
            return _rpc_error(400, INVALID_REQUEST,
                              "Invalid Request: initialize must not be part of a batch")
        elif sid is None:
            return _rpc_error(400, INVALID_REQUEST, "Bad Request: no Mcp-Session-Id header; "
                              "a session starts with initialize")
        else:
            found = sessions.get(sid)
            if found is None:
                return _rpc_error(404, INVALID_REQUEST, "Session not found: it ended (DELETE, "
                                  "or palace serve restarted); initialize a new one")
            session = found
            version = request.headers.get(VERSION_HEADER, ASSUMED_VERSION)
            if version not in SUPPORTED_PROTOCOL_VERSIONS:
                return _rpc_error(400, INVALID_REQUEST, f"Bad Request: unsupported "
                                  f"MCP-Protocol-Version {version[:40]!r}; supported: "
                                  f"{', '.join(SUPPORTED_PROTOCOL_VERSIONS)}")
        if _is_response(message):
            # The client's answer to roots/list: a tool call may be waiting for it while it
            # holds the session's lock.
            await anyio.to_thread.run_sync(session.bridge.accept_response, message)
            return Response(status_code=202)
        explicit = request.headers.get(AGENT_HEADER, "").strip()
        async with session.lock:
            line = await anyio.to_thread.run_sync(session.bridge.answer, message,
                                                  limiter=limiter)
            if explicit and _is_initialize(message):
                # X-Palace-Agent outranks the client's name, as PALACE_AGENT does on stdio.
                session.bridge.toolbox.agent = checked(explicit, "X-Palace-Agent")
        if line is None:
            return Response(status_code=202, headers=headers)
        return _answer(line, request.headers.get("accept", "").lower(), headers)

    async def endpoint(request: Request, how: str) -> Response:
        if how != "bearer":
            raise E.Unauthorized(NOT_BEARER)
        if request.method == "POST":
            return await post(request)
        if request.method == "DELETE":
            sid = request.headers.get(SESSION_HEADER)
            if sid is None:
                return _rpc_error(400, INVALID_REQUEST, "Bad Request: no Mcp-Session-Id")
            if not sessions.end(sid):
                return _rpc_error(404, INVALID_REQUEST, "Session not found")
            return Response(status_code=204)
        # GET: the stream of what the server sends unasked (roots/list).
        sid = request.headers.get(SESSION_HEADER)
        found = sessions.get(sid) if sid is not None else None
        if found is None:
            return _rpc_error(400 if sid is None else 404, INVALID_REQUEST,
                              "Bad Request: GET /mcp opens the stream of a session "
                              "(Mcp-Session-Id)" if sid is None else "Session not found")
        return StreamingResponse(_events(found), media_type="text/event-stream")

    return [Route(MCP_PATH, authed(endpoint), methods=["GET", "POST", "DELETE"])]
