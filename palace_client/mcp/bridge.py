"""MCP server over stdio: newline-delimited JSON-RPC 2.0 in front of the palace daemon.

Hand-written on purpose (no MCP SDK at run time): the bridge only needs ``initialize``,
``ping``, ``tools/list``, ``tools/call`` and the client's ``roots/list``, and staying small
keeps its cold start short. The handshake and ``tools/list`` never touch the daemon; the first
``tools/call`` connects (starting the daemon if needed). ``server/discover`` (the probe of
the 2026 protocol's clients) is "method not found", which makes those clients fall back to
the ``initialize`` handshake at once.

Which palace (see ``run``): ``--palace``, else ``CLAUDE_PROJECT_DIR``'s project, else the
project of the client's first root, else the working directory's project. Roots are asked
for after ``notifications/initialized`` (and again on ``notifications/roots/list_changed``)
when the client advertises them; the answer is awaited, at most ``ROOTS_TIMEOUT`` seconds,
only by the first tool call that follows, so neither the handshake nor ``tools/list`` waits.

The stdio loop, ``run`` and ``main`` live in ``stdio``; this module is the protocol logic only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from palace_client.api import identity
from palace_client.api.projects import root_palace
from palace_client.api.slug import root_uri_path
from palace_client.mcp.toolbox import Toolbox
from palaced import __version__
from palaced.wire.protocol import loads_json

SUPPORTED_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]
ROOTS_TIMEOUT = 2.0  # seconds a tool call waits for the client's roots/list answer

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

SERVER_NAME = "palace"


class RpcError(Exception):
    """A JSON-RPC error answer to one request."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(req_id: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}}


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encode(message: object) -> bytes:
    """One JSON-RPC message as a UTF-8 line (JSON escapes every newline inside strings)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8") + b"\n"


def instructions(palace: str | None, toolsets: tuple[str, ...] = ("core",)) -> str:
    """The server instructions an MCP client may add to the agent's context.

    ``palace`` is named when it is already known (not still to come from the client's roots);
    the knowledge graph is mentioned when its toolset is served.
    """
    which = f"This project's palace is '{palace}'. " if palace else ""
    kg = (" For facts that change over time (who owns what, versions, where things run) use "
          "kg_assert and kg_query.") if "kg" in toolsets else ""
    return (
        "Palace is your long-term memory, shared across sessions and agents on this machine. "
        f"{which}Call wake_up at the start of a task, and recall before answering about past "
        "work, decisions or preferences; store each durable fact, decision, preference or "
        "outcome with remember (one self-contained statement per call), under the wings and "
        "rooms that rooms lists. get reads a drawer whole. recall with scope='all' searches "
        f"every project's palace.{kg}"
    )


def _log(text: str) -> None:
    """One line on stderr, which MCP clients keep in their server logs."""
    sys.stderr.write(f"palace mcp: {text}\n")
    sys.stderr.flush()


class Bridge:
    """The JSON-RPC side of the bridge: turns request lines into response lines.

    Args:
        toolbox: runs the tools; it connects to the daemon only on the first ``tools/call``.
            Its palace is used until (and unless) the client's roots name another.
        roots: ask the client for its roots (when it advertises them) and use the first
            local root's project palace; false when ``--palace`` or ``CLAUDE_PROJECT_DIR``
            decided the palace.
        roots_timeout: seconds a tool call waits for the answer to ``roots/list``.

    Requests to the client are passed to ``send`` (by default kept in ``outgoing``; ``serve``
    writes them to stdout).
    """

    def __init__(self, toolbox: Toolbox, *, roots: bool = False,
                 roots_timeout: float = ROOTS_TIMEOUT) -> None:
        self.toolbox = toolbox
        self.protocol_version: str | None = None
        self._tools = {"tools": toolbox.list_tools()}
        self.outgoing: list[dict[str, Any]] = []
        self.send: Callable[[dict[str, Any]], None] = self.outgoing.append
        self._use_roots = roots
        self._roots_timeout = roots_timeout
        self._client_roots = False  # the client advertised the roots capability
        self._fallback = toolbox.palace  # the palace when the roots name none
        self._lock = threading.Lock()  # guards the roots state below (reader thread)
        self._asked: str | None = None  # id of the roots/list request still unanswered
        self._waited: str | None = None  # the request a tool call already waited for
        self._answered = threading.Event()
        self._answered.set()
        self._roots_palace: str | None = None  # the latest answer's palace, not yet applied
        self._requests = 0

    # -- input ------------------------------------------------------------------------------
    def handle_line(self, line: bytes) -> bytes | None:
        """Answer one input line; ``None`` for notifications, responses and blank lines."""
        line = line.strip()
        if not line:
            return None
        try:
            message = loads_json(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # too deep: parse error
            return encode(_error(None, PARSE_ERROR, f"Parse error: {exc}"))
        return self.answer(message)

    def answer(self, message: object) -> bytes | None:
        """Answer one decoded message or batch as an encoded line; ``None`` when none is due."""
        answer = self.handle_message(message)
        if answer is None:
            return None
        try:
            return encode(answer)
        except (TypeError, ValueError) as exc:
            traceback.print_exc(file=sys.stderr)
            req_id = answer.get("id") if isinstance(answer, dict) else None
            return encode(_error(req_id, INTERNAL_ERROR, f"cannot encode the result: {exc}"))

    def handle_message(self, message: object) -> dict[str, Any] | list[dict[str, Any]] | None:
        """Answer one decoded message or batch; ``None`` when no answer is due."""
        if isinstance(message, list):
            if not message:
                return _error(None, INVALID_REQUEST, "Invalid Request: empty batch")
            answers = [a for a in map(self._handle_one, message) if a is not None]
            return answers or None
        return self._handle_one(message)

    def _handle_one(self, message: object) -> dict[str, Any] | None:
        if not isinstance(message, dict):
            return _error(None, INVALID_REQUEST, "Invalid Request: not a JSON object")
        if self.accept_response(message):
            return None
        has_id = "id" in message
        req_id = message.get("id")
        if has_id and not _valid_id(req_id):
            return _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or integer")
        echo_id = req_id if has_id else None
        method = message.get("method")
        if message.get("jsonrpc") != "2.0":
            return _error(echo_id, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
        if not isinstance(method, str):
            return _error(echo_id, INVALID_REQUEST, "Invalid Request: method must be a string")
        params = message.get("params")
        if params is None:
            params = {}
        if not has_id:
            # Notifications need no answer; two make the bridge ask for the client's roots.
            if method in ("notifications/initialized", "notifications/roots/list_changed"):
                self._ask_roots()
            return None
        if not isinstance(params, dict):
            return _error(req_id, INVALID_PARAMS, "Invalid params: params must be an object")
        try:
            result = self._dispatch(method, params)
        except RpcError as exc:
            return _error(req_id, exc.code, exc.message)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            return _error(req_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}")
        return {"jsonrpc": "2.0", "id": req_id, "result": result}

    def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/call":
            name = params.get("name")
            if name is None:
                raise RpcError(INVALID_PARAMS, "Invalid params: tools/call needs the tool's "
                               f"name (params.name); the tools are: {self._names()}")
            if not isinstance(name, str):
                raise RpcError(INVALID_PARAMS, "Invalid params: the tool name (params.name) "
                               f"must be a string, got {json.dumps(name)[:80]}")
            if not self.toolbox.has_tool(name):
                raise RpcError(INVALID_PARAMS, f"Unknown tool {json.dumps(name)[:80]}; the "
                               f"tools are: {self._names()}")
            self._settle_palace()
            return self.toolbox.call(name, params.get("arguments"))
        if method == "tools/list":
            return self._tools
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _names(self) -> str:
        return ", ".join(tool["name"] for tool in self._tools["tools"])

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        version = (requested if requested in SUPPORTED_PROTOCOL_VERSIONS
                   else LATEST_PROTOCOL_VERSION)
        self.protocol_version = version
        client_info = params.get("clientInfo")
        if isinstance(client_info, dict) and isinstance(client_info.get("name"), str):
            name = "".join(ch for ch in client_info["name"] if ch.isprintable()).strip()
            if name:
                self.toolbox.source = f"mcp:{name}"[:200]
                # The agent's identity on every request, unless PALACE_AGENT names it.
                if not os.environ.get(identity.ENV, "").strip():
                    self.toolbox.agent = identity.mcp_agent(name, client_info.get("version"))
        capabilities = params.get("capabilities")
        self._client_roots = (self._use_roots and isinstance(capabilities, dict)
                              and isinstance(capabilities.get("roots"), dict))
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": SERVER_NAME, "title": "Palace memory",
                           "version": __version__},
            "instructions": instructions(None if self._client_roots else self.toolbox.palace,
                                         self.toolbox.toolsets),
        }

    # -- roots ------------------------------------------------------------------------------
    def _ask_roots(self) -> None:
        """Send ``roots/list`` to a client that advertised roots (a newer ask replaces any
        unanswered one)."""
        if not self._client_roots:
            return
        with self._lock:
            self._requests += 1
            self._asked = f"palace-roots-{self._requests}"
            self._answered.clear()
            request = {"jsonrpc": "2.0", "id": self._asked, "method": "roots/list"}
        self.send(request)

    def accept_response(self, message: object) -> bool:
        """Take the client's answer to a request of this bridge; False for any other message.

        Safe to call from the reader thread: the answer to the pending ``roots/list`` sets
        the palace that the next tool call applies. Answers to superseded or unknown requests
        are dropped.
        """
        if not (isinstance(message, dict) and "method" not in message and "id" in message
                and ("result" in message or "error" in message)):
            return False
        with self._lock:
            if message["id"] is None or message["id"] != self._asked:
                return True
            self._asked = None
            self._roots_palace = self._palace_of(message)
            self._answered.set()
        return True

    def _palace_of(self, answer: dict[str, Any]) -> str:
        """The palace named by a ``roots/list`` answer: the first local root's project."""
        result = answer.get("result")
        roots = result.get("roots") if isinstance(result, dict) else None
        for root in roots if isinstance(roots, list) else []:
            uri = root.get("uri") if isinstance(root, dict) else None
            palace = root_palace(uri) if isinstance(uri, str) else None
            if palace is not None:
                _log(f"palace '{palace}' (from the client's root {root_uri_path(str(uri))})")
                return palace
        why = ("the client's roots/list failed" if "error" in answer
               else "the client's roots name no local directory")
        _log(f"palace '{self._fallback}' ({why})")
        return self._fallback

    def input_closed(self) -> None:
        """The client's input ended: no answer will come, so no tool call may wait for one."""
        self._answered.set()

    def _settle_palace(self) -> None:
        """Before a tool call: wait (once per ask, at most ``roots_timeout``) for the answer
        to ``roots/list``, then apply the palace of the latest answer.

        A client that advertised roots but called a tool without ``notifications/initialized``
        is asked now.
        """
        if self._client_roots and self._requests == 0:
            self._ask_roots()
        with self._lock:
            pending = self._asked if self._asked != self._waited else None
            self._waited = self._asked
        if pending is not None and not self._answered.wait(self._roots_timeout):
            _log(f"no answer to roots/list within {self._roots_timeout:g} s; palace "
                 f"'{self.toolbox.palace}' for now")
        with self._lock:
            if self._roots_palace is not None:
                self.toolbox.palace = self._roots_palace
