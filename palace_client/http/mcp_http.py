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
* ``GET /mcp`` (the optional server-to-client stream) is 405: the server sends nothing
  unasked, so the session's palace comes from ``?palace=`` (else ``palace serve``'s project),
  not from the client's roots.

Security is the REST API's (``app.build_app``): the Host check, ``Authorization: Bearer``
with the secret (the web app's cookie is refused here), a foreign ``Origin`` refused, bodies
bounded like the API's.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from palace_client.api.identity import checked
from palace_client.api.projects import default_palace
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


@dataclass
class Session:
    """One MCP session: the stdio bridge's protocol logic over its own toolbox; its messages
    are answered one at a time, as on stdio."""

    bridge: Bridge
    lock: anyio.Lock = field(default_factory=anyio.Lock)


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
            self._live.popitem(last=False)
        return sid

    def get(self, sid: str) -> Session | None:
        """The session ``sid``, or None (unknown, ended or dropped)."""
        session = self._live.get(sid)
        if session is not None:
            self._live.move_to_end(sid)
        return session

    def end(self, sid: str) -> bool:
        """End session ``sid``; whether it was live."""
        return self._live.pop(sid, None) is not None


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
        toolbox = Toolbox(lambda: daemon, palace or default_palace(), toolsets=toolsets)
        return Session(Bridge(toolbox))

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
        # GET: no server-initiated stream (nothing is ever sent unasked).
        return Response(status_code=405, headers={"allow": "POST, DELETE"})

    return [Route(MCP_PATH, authed(endpoint), methods=["GET", "POST", "DELETE"])]
