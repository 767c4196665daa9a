"""Transport: the Unix socket, the per-connection loop, framing and error envelopes.

The connection handler runs over any anyio byte stream, so tests can drive it with memory
streams. It never lets an exception escape into the server's task group: PalaceErrors become
their envelopes, anything else an INTERNAL envelope with an error id that the log repeats next
to the traceback.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from palaced import __version__
from palaced.errors import (
    BadFrame,
    FrameTooLarge,
    HandshakeRequired,
    InternalError,
    PalaceError,
    ShuttingDown,
    Timeout,
    UnsupportedProtocol,
)
from palaced.protocol import (
    HEADER_SIZE,
    HELLO_OP,
    PROTOCOL_VERSION,
    REQUEST_KEYS,
    error_response,
    frame,
    ok_response,
    parse_header,
    socket_peer_uid,
    unpack,
)

log = logging.getLogger("palaced.server")

Dispatch = Callable[[str, "str | None", Any, float | None], Awaitable[dict[str, Any]]]


def peer_uid(stream: ByteStream) -> int | None:
    """The uid of the process on the other end of a Unix socket stream, None if unknown."""
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
    except Exception:
        return None
    return socket_peer_uid(raw)


class ConnectionHandler:
    """Serves one connection: handshake, then sequential requests until EOF."""

    def __init__(self, dispatch: Dispatch, op_names: Callable[[], list[str]], max_frame: int,
                 request_timeout_s: float, max_timeout_s: float,
                 stopping: Callable[[], bool]) -> None:
        self._dispatch = dispatch
        self._op_names = op_names
        self._max_frame = max_frame
        self._timeout = request_timeout_s
        self._max_timeout = max_timeout_s
        self._stopping = stopping

    async def _send(self, stream: ByteStream, msg: dict[str, Any]) -> None:
        try:
            data = frame(msg, self._max_frame)
        except FrameTooLarge as exc:
            data = frame(error_response(msg.get("id"), exc), self._max_frame)
        await stream.send(data)

    async def serve(self, stream: ByteStream) -> None:
        """Run the request loop on ``stream`` and close it at the end."""
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            greeted = False
            while True:
                try:
                    header = await reader.receive_exactly(HEADER_SIZE)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                        anyio.ClosedResourceError, ConnectionError):
                    return
                try:
                    length = parse_header(header, self._max_frame)
                    body = await reader.receive_exactly(length)
                except PalaceError as exc:
                    # The stream position is unknown after a refused frame: answer and close.
                    await self._try_send(stream, error_response(None, exc))
                    return
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                        ConnectionError):
                    return
                req_id: Any = None
                try:
                    msg = unpack(body)
                    if not isinstance(msg, dict):
                        raise BadFrame("request must be a msgpack map")
                    req_id = msg.get("id")
                    if not isinstance(req_id, int | str) or isinstance(req_id, bool):
                        req_id = None
                        raise BadFrame("request id must be an integer or string")
                    extra = sorted(str(k) for k in msg if k not in REQUEST_KEYS)
                    if extra:
                        raise BadFrame(f"unknown envelope keys: {', '.join(extra)}",
                                       details={"unknown": extra})
                    op = msg.get("op")
                    if not isinstance(op, str):
                        raise BadFrame("request op must be a string")
                    if op == HELLO_OP:
                        # A repeated hello is answered again: the op list names it, so a
                        # client may well send it to re-read the server's limits.
                        result = self._hello(msg.get("args"))
                        greeted = True
                    elif not greeted:
                        raise HandshakeRequired(
                            f"the first request must be {HELLO_OP}, got {op[:80]!r}")
                    else:
                        if self._stopping():
                            raise ShuttingDown("palaced is shutting down; retry shortly")
                        result = await self._call(op, msg)
                    await self._send(stream, ok_response(req_id, result))
                except (HandshakeRequired, UnsupportedProtocol) as exc:
                    await self._try_send(stream, error_response(req_id, exc))
                    return
                except PalaceError as exc:
                    if not await self._try_send(stream, error_response(req_id, exc)):
                        return
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                    return
                except Exception as exc:
                    err_id = uuid.uuid4().hex[:12]
                    log.exception("internal error %s while serving a request", err_id)
                    err = InternalError(f"internal error {err_id} ({type(exc).__name__}); "
                                        "see the daemon log", details={"error_id": err_id})
                    if not await self._try_send(stream, error_response(req_id, err)):
                        return

    async def _try_send(self, stream: ByteStream, msg: dict[str, Any]) -> bool:
        try:
            await self._send(stream, msg)
            return True
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            return False

    def _hello(self, args: Any) -> dict[str, Any]:
        """The hello answer.

        Raises:
            UnsupportedProtocol: ``protocol`` is not exactly the integer this daemon speaks
                (``1.0`` and ``True`` compare equal to 1 in Python, but are not it).
        """
        proto = args.get("protocol") if isinstance(args, dict) else None
        if type(proto) is not int or proto != PROTOCOL_VERSION:
            raise UnsupportedProtocol(
                f"this palaced speaks protocol {PROTOCOL_VERSION}, the client asked for {proto!r}",
                details={"supported": [PROTOCOL_VERSION]},
            )
        return {
            "protocol": PROTOCOL_VERSION,
            "server": {"name": "palaced", "version": __version__, "pid": os.getpid()},
            "ops": [HELLO_OP, *self._op_names()],
            "max_frame": self._max_frame,
        }

    async def _call(self, op: str, msg: dict[str, Any]) -> dict[str, Any]:
        timeout = self._timeout
        raw_timeout = msg.get("timeout_ms")
        if raw_timeout is not None:
            if not isinstance(raw_timeout, int) or isinstance(raw_timeout, bool) or (
                raw_timeout <= 0
            ):
                raise BadFrame("timeout_ms must be a positive integer")
            timeout = min(raw_timeout / 1000, self._max_timeout)
        palace = msg.get("palace")
        if palace is not None and not isinstance(palace, str):
            raise BadFrame("palace must be a string or nil")
        try:
            with anyio.fail_after(timeout):
                return await self._dispatch(op, palace, msg.get("args"), timeout)
        except TimeoutError:
            raise Timeout(f"{op} did not finish within {timeout:.1f}s",
                          details={"op": op, "timeout_s": timeout}) from None
