"""The HTTP API's Starlette application: routes, the security guard, and the daemon clients.

Routes (docs/http.md): ``GET /login?token=`` (a browser trades the printed URL's secret for
the session cookie), ``GET /`` (an index), ``GET /api/v1/openapi.json``, ``GET
/api/v1/session`` (the CSRF value for a cookie-authenticated page) and ``POST
/api/v1/ops/{op}`` with ``{"palace": ..., "args": {...}}``, and ``/mcp`` (MCP over
Streamable HTTP, ``mcp_http``). Every request passes ``Guard``
(Host check, security headers) and every route but ``/login`` needs the secret. Ops run in
worker threads, each on a pooled ``palace_client.Client`` of the daemon's Unix socket.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from palace_client.api.client import Client
from palace_client.api.identity import checked
from palace_client.http.bodies import MAX_BODY, read_body
from palace_client.http.mcp_http import mcp_routes
from palace_client.http.openapi import API_PREFIX, EXPOSED, error_body, openapi_document, status_of
from palace_client.http.security import (
    COOKIE,
    Keys,
    agent_of,
    authenticate,
    check_host,
    check_origin,
    same,
)
from palaced.wire import errors as E

log = logging.getLogger("palace.serve")
UI_AGENT = "http:palace-ui"  # the agent the web app's reads and edits are recorded as
MAX_CLIENTS = 8  # ops in flight at once (each holds one daemon connection)
SECURITY_HEADERS = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: under no-referrer a browser's form post says `Origin:
    # null`, which check_origin refuses; no page links elsewhere, and no URL after /login
    # carries a secret.
    (b"referrer-policy", b"same-origin"),
    # Scripts and styles only from this server's own files (htmx vendored, docs/ui.md): no
    # inline script or style, no other origin; forms post only here.
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; "
                                 b"img-src 'self'; connect-src 'self'; form-action 'self'; "
                                 b"base-uri 'none'; frame-ancestors 'none'"),
)
STATIC_HEADERS = ((b"cache-control", b"no-cache"), *SECURITY_HEADERS[1:])


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as a JSON response (values JSON lacks shown as text, as ``--json`` does)."""
    body = json.dumps(data, ensure_ascii=False, default=str).encode()
    return Response(body, status_code=status, media_type="application/json")


def error_response(exc: E.PalaceError) -> Response:
    """The typed error ``exc`` with its status (``openapi.STATUS``)."""
    response = json_response(error_body(exc), status_of(exc))
    if isinstance(exc, E.Unauthorized):
        response.headers["www-authenticate"] = 'Bearer realm="palace"'
    return response


class ClientPool:
    """Daemon clients reused across requests; each serves one request at a time."""

    def __init__(self, make: Callable[[], Client], idle: Iterable[Client] = ()) -> None:
        self._make = make
        self._idle: list[Client] = list(idle)
        self._lock = threading.Lock()

    def call(self, agent: str, op: str, palace: str | None,
             args: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``op`` as ``agent`` (blocking: run it in a worker thread).

        Raises:
            PalaceError: the daemon's typed error, or the client's (``Client.call``).
        """
        with self._lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = self._make()
        try:
            client.agent = agent
            return client.call(op, palace, args)
        finally:
            with self._lock:
                self._idle.append(client)

    def close(self) -> None:
        """Close every idle client's connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()


class Guard:
    """ASGI middleware run before any route: refuses a foreign ``Host`` (DNS rebinding) and
    adds the security headers to every response. It never adds a CORS header."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app = app
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        # The package's static files (stylesheet, vendored scripts) hold no secret and change
        # only with palace itself: a browser may keep them if it asks again first (its ETag
        # then gets a bodiless 304), instead of fetching 450 KB of scripts on every page.
        static = str(scope.get("path", "")).startswith("/static/")
        headers = STATIC_HEADERS if static else SECURITY_HEADERS

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
        try:
            check_host(hosts[0] if len(hosts) == 1 else None, self.port)
        except E.RequestRefused as exc:
            await error_response(exc)(scope, receive, secured)
            return
        await self.app(scope, receive, secured)


async def read_json(request: Request, limit: int = MAX_BODY) -> Any:
    """The request's JSON body, at most ``limit`` bytes.

    Raises:
        FrameTooLarge: the body is larger (said by Content-Length or found reading it).
        InvalidArgs: not ``Content-Type: application/json``, or not valid JSON.
    """
    body = await read_body(request, "application/json", limit)
    try:
        return json.loads(body) if body else {}
    except ValueError as exc:
        raise E.InvalidArgs(f"the body is not valid JSON: {exc}") from None


def op_request(body: Any, op: str) -> tuple[str | None, dict[str, Any]]:
    """The palace and args of a request body ``{"palace": ..., "args": {...}}``.

    Raises:
        InvalidArgs: the body is not such an object.
    """
    if not isinstance(body, dict) or set(body) - {"palace", "args"}:
        raise E.InvalidArgs(f"the body of {op} is a JSON object with at most the members "
                            "'palace' and 'args'")
    palace, args = body.get("palace"), body.get("args", {})
    if palace is not None and not isinstance(palace, str):
        raise E.InvalidArgs("'palace' is a palace's name (a string)", details={"arg": "palace"})
    if not isinstance(args, dict):
        raise E.InvalidArgs("'args' is a JSON object of the op's arguments")
    return palace, args


Handler = Callable[[Request], Awaitable[Response]]


def build_app(keys: Keys, port: int, pool: ClientPool, ui: bool = False) -> ASGIApp:
    """The application for a server on ``port`` holding ``keys`` (wrapped in ``Guard``); with
    ``ui``, the web app's pages too (``palace ui``, docs/ui.md), ``/`` being its first."""
    limiter = anyio.CapacityLimiter(MAX_CLIENTS)
    document = openapi_document()

    def authed(handler: Callable[[Request, str], Awaitable[Response]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                how = authenticate(request.headers, request.cookies, keys)
                check_origin(request.method, request.headers, how, keys, port)
                return await handler(request, how)
            except E.PalaceError as exc:
                return error_response(exc)
            except Exception as exc:  # a bug: still a typed answer, the traceback on stderr
                log.exception("palace serve: unexpected error")
                return error_response(E.ClientError(
                    f"unexpected {type(exc).__name__} in palace serve (a bug; its stderr has "
                    "the traceback)", details={"exception": type(exc).__name__}))
        return endpoint

    async def login(request: Request) -> Response:
        if not same(request.query_params.get("token"), keys.secret):
            return error_response(E.Unauthorized(
                "wrong or missing token: open the URL the server printed"))
        # The token leaves the address bar at once: the redirect target carries none.
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, keys.session, httponly=True, samesite="strict", path="/")
        return response

    async def index(request: Request, how: str) -> Response:
        return json_response({"api": API_PREFIX, "openapi": f"{API_PREFIX}/openapi.json",
                              "ops": sorted(EXPOSED), "docs": "docs/http.md"})

    async def openapi(request: Request, how: str) -> Response:
        return json_response(document)

    async def session(request: Request, how: str) -> Response:
        return json_response({"auth": how, "csrf_header": "X-Palace-CSRF",
                              "csrf": keys.csrf, "agent": agent_of(request.headers)})

    async def call_op(request: Request, how: str) -> Response:
        op = request.path_params["op"]
        if op not in EXPOSED:
            raise E.UnknownOp(f"no op {op!r} in the HTTP API (GET {API_PREFIX}/openapi.json "
                              "lists them)", details={"op": op[:100]})
        palace, args = op_request(await read_json(request), op)
        agent = checked(agent_of(request.headers), "X-Palace-Agent")
        result = await anyio.to_thread.run_sync(pool.call, agent, op, palace, args,
                                                limiter=limiter)
        return json_response(result)

    routes: list[BaseRoute] = [
        Route("/login", login, methods=["GET"]),
        Route(f"{API_PREFIX}/openapi.json", authed(openapi), methods=["GET"]),
        Route(f"{API_PREFIX}/session", authed(session), methods=["GET"]),
        Route(f"{API_PREFIX}/ops/{{op}}", authed(call_op), methods=["POST"]),
    ]
    routes += mcp_routes(authed, pool.call, limiter)
    if ui:
        from palace_client.http.ui import ui_routes  # Jinja2 is loaded only for the web app

        async def run_op(op: str, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
            return await anyio.to_thread.run_sync(pool.call, UI_AGENT, op, palace, args,
                                                  limiter=limiter)

        routes += ui_routes(keys, port, run_op)
    else:
        routes.append(Route("/", authed(index), methods=["GET"]))
    app = Starlette(routes=routes)
    return Guard(app, port)
