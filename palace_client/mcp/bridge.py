"""MCP server over stdio: newline-delimited JSON-RPC 2.0 in front of the palace daemon.

Hand-written on purpose (no MCP SDK at run time): the bridge only needs ``initialize``,
``ping``, ``tools/list`` and ``tools/call``, and staying small keeps its cold start short.
The handshake and ``tools/list`` never touch the daemon; the first ``tools/call`` connects
(starting the daemon if needed). Requests are handled one at a time, in order.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, BinaryIO

from palace_client.slug import default_palace
from palaced import __version__

from .toolbox import DaemonClient, Toolbox

SUPPORTED_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]
MAX_LINE = 16 * 1024 * 1024

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


def instructions(palace: str) -> str:
    """The server instructions an MCP client may add to the agent's context."""
    return (
        f"Palace is your long-term memory, shared across sessions and agents on this machine. "
        f"This project's palace is '{palace}'. At the start of a task call wake_up; before "
        "answering questions about past work or decisions call recall; whenever you learn a "
        "durable fact, decision, preference or outcome, store it with remember (one "
        "self-contained statement per call, filed under a room). recall_all searches the "
        "palaces of every project. For facts that change over time (who owns or works on "
        "what, versions, where things run) use kg_assert and kg_query; relate concepts with "
        "kg_link and explore them with kg_neighbors."
    )


class Bridge:
    """The JSON-RPC side of the bridge: turns request lines into response lines.

    Args:
        toolbox: runs the tools; it connects to the daemon only on the first ``tools/call``.
    """

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self.protocol_version: str | None = None
        self._tools = {"tools": toolbox.list_tools()}

    def handle_line(self, line: bytes) -> bytes | None:
        """Answer one input line; ``None`` for notifications, responses and blank lines."""
        line = line.strip()
        if not line:
            return None
        try:
            message = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return encode(_error(None, PARSE_ERROR, f"Parse error: {exc}"))
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
        has_id = "id" in message
        req_id = message.get("id")
        if has_id and not _valid_id(req_id):
            return _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or integer")
        echo_id = req_id if has_id else None
        method = message.get("method")
        if method is None and has_id and ("result" in message or "error" in message):
            return None  # a client's answer to a server request; this server sends none
        if message.get("jsonrpc") != "2.0":
            return _error(echo_id, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
        if not isinstance(method, str):
            return _error(echo_id, INVALID_REQUEST, "Invalid Request: method must be a string")
        params = message.get("params")
        if params is None:
            params = {}
        if not has_id:
            return None  # notifications (initialized, cancelled, unknown ones) need no answer
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
            if not isinstance(name, str) or not self.toolbox.has_tool(name):
                raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
            return self.toolbox.call(name, params.get("arguments"))
        if method == "tools/list":
            return self._tools
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

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
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": SERVER_NAME, "title": "Palace memory",
                           "version": __version__},
            "instructions": instructions(self.toolbox.palace),
        }


class _Stop(BaseException):
    """Raised by the signal handler to leave the read loop (never caught as an error)."""


class _LoopState:
    def __init__(self) -> None:
        self.writing = False
        self.stop = False


def serve(bridge: Bridge, stdin: BinaryIO, stdout: BinaryIO,
          state: _LoopState | None = None) -> None:
    """Read request lines from ``stdin`` and write answers to ``stdout`` until EOF.

    Returns on end of input or when the peer closed ``stdout`` (broken pipe).
    """
    state = state or _LoopState()
    while not state.stop:
        line = stdin.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while (rest := stdin.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                pass
            answer: bytes | None = encode(
                _error(None, INVALID_REQUEST, f"Invalid Request: longer than {MAX_LINE} bytes"))
        else:
            answer = bridge.handle_line(line)
        if answer is None:
            continue
        # A stop signal during a write must not cut a response line in half.
        state.writing = True
        try:
            stdout.write(answer)
            stdout.flush()
        except BrokenPipeError:
            return
        finally:
            state.writing = False


def _claim_stdout() -> BinaryIO:
    """Return a private writer on the real stdout and point fd 1 (and ``sys.stdout``) at stderr.

    Stray prints and library output then land on stderr and can never corrupt the protocol.
    """
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "wb")


def _set_signal_handlers(state: _LoopState | None) -> None:
    """Make SIGINT/SIGTERM/SIGHUP stop the loop, or (``None``) ignore them while cleaning up."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler: Callable[[int, FrameType | None], None] | signal.Handlers = signal.SIG_IGN
    if state is not None:
        def stop(signum: int, frame: FrameType | None) -> None:
            state.stop = True
            if not state.writing:
                raise _Stop

        handler = stop
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _default_client() -> DaemonClient:
    # Imported on the first tool call only: tools/list never needs the connection code.
    from palace_client.client import Client

    return Client(client_name="palace-mcp")


def run(palace: str | None = None, compact: bool = False,
        client_factory: Callable[[], DaemonClient] = _default_client) -> int:
    """Serve MCP on this process's stdin/stdout until EOF, SIGINT, SIGTERM or SIGHUP.

    Args:
        palace: the palace to use; default derived from ``CLAUDE_PROJECT_DIR`` or the cwd.
        compact: render one line per drawer.
        client_factory: builds the daemon client on the first tool call.

    Returns:
        The process exit code (0 on every clean shutdown).
    """
    state = _LoopState()
    stdout = _claim_stdout()
    toolbox = Toolbox(client_factory, palace or default_palace(), compact=compact)
    try:
        _set_signal_handlers(state)
        serve(Bridge(toolbox), sys.stdin.buffer, stdout, state)
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        _set_signal_handlers(None)
        toolbox.close()
        try:
            stdout.close()
        except BrokenPipeError:
            pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m palace_client.mcp [--palace NAME] [--compact]``."""
    parser = argparse.ArgumentParser(prog="palace mcp", description="Palace MCP stdio server.")
    parser.add_argument("--palace", default=None)
    parser.add_argument("--compact", action="store_true")
    ns = parser.parse_args(argv)
    return run(ns.palace, ns.compact)


if __name__ == "__main__":
    sys.exit(main())
