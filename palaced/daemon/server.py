"""Transport: the Unix socket, the per-connection loop, framing and error envelopes.

The connection handler runs over any anyio byte stream, so tests can drive it with memory
streams. It never lets an exception escape into the server's task group: PalaceErrors become
their envelopes, anything else an INTERNAL envelope with an error id that the log repeats next
to the traceback.

No peer can hold a connection by stalling: the hello frame must arrive within
``handshake_timeout_s`` of the accept, a frame whose first byte arrived must be complete within
its frame deadline, a response must be taken within its frame deadline, and a connection with
no request for ``idle_timeout_s`` is closed (clients reconnect transparently). Connections
accepted beyond the normal limit are reserve connections that may only run ``CONTROL_OPS``
(``Gate`` admits connections and keeps that count).
"""

from __future__ import annotations

import contextlib
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
from palaced.wire.errors import (
    Busy,
    HandshakeRequired,
    InternalError,
    PalaceError,
    ShuttingDown,
    Timeout,
    UnsupportedProtocol,
)
from palaced.wire.protocol import (
    HEADER_SIZE,
    HELLO_OP,
    OPTIONAL_KEYS,
    PROTOCOL_VERSION,
    Request,
    decode_request,
    encode_response,
    parse_header,
    socket_peer_uid,
)
from palaced.wire.specs import SPEC_DIGEST

log = logging.getLogger("palaced.daemon.server")

# Runs one decoded request: (op, palace, raw args, agent) -> result map; raises PalaceError.
Dispatch = Callable[[str, "str | None", Any, "str | None"], Awaitable[dict[str, Any]]]

# What the owner needs to see and stop a daemon whose normal slots are all taken: the only ops
# a reserve connection may run.
CONTROL_OPS = frozenset({HELLO_OP, "daemon.status", "daemon.stop"})
# A frame's deadline grows by one second per MiB on top of frame_timeout_s, so a legitimate
# maximal frame from a loaded client is not cut off while a stalled one still is.
FRAME_BYTES_PER_S = 1 << 20
# Telling a peer why its connection closes must never keep us waiting on that peer.
CLOSING_SEND_S = 1.0


class _Stalled(Exception):
    """The peer did not take our response within its deadline."""


# The peer is gone or stalled: nothing more can be said on this connection.
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError, _Stalled)
_EOF = (anyio.EndOfStream, anyio.IncompleteRead, *_GONE)


def peer_uid(stream: ByteStream) -> int | None:
    """The uid of the process on the other end of a Unix socket stream, None if unknown."""
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
    except Exception:
        return None
    return socket_peer_uid(raw)


def _input_waiting(stream: ByteStream) -> bool:
    """Whether the peer's socket has unread bytes (False when that cannot be known)."""
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        return bool(raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except Exception:  # no raw socket (memory streams), nothing waiting, or already broken
        return False


class ConnectionHandler:
    """Serves one connection: handshake, then sequential requests until EOF or a deadline."""

    def __init__(self, dispatch: Dispatch, op_names: Callable[[], list[str]], max_frame: int,
                 request_timeout_s: float, max_timeout_s: float,
                 stopping: Callable[[], bool], *, handshake_timeout_s: float = 5.0,
                 frame_timeout_s: float = 10.0, idle_timeout_s: float = 300.0,
                 data_dir: str | None = None) -> None:
        self._dispatch = dispatch
        self._op_names = op_names
        self._max_frame = max_frame
        self._timeout = request_timeout_s
        self._max_timeout = max_timeout_s
        self._stopping = stopping
        self._handshake_timeout = handshake_timeout_s
        self._frame_timeout = frame_timeout_s
        self._idle_timeout = idle_timeout_s
        self._data_dir = data_dir  # in the hello, so clients can tell another store's daemon

    async def _send(self, stream: ByteStream, req_id: Any,
                    outcome: dict[str, Any] | PalaceError) -> None:
        """Send the response to ``req_id`` (a result or an error) within its frame deadline.

        Raises:
            _Stalled: the peer did not take the frame in time (the connection must close).
            anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError: peer gone.
        """
        data = encode_response(req_id, outcome, self._max_frame)
        with anyio.move_on_after(self._frame_timeout + len(data) / FRAME_BYTES_PER_S) as scope:
            await stream.send(data)
        if scope.cancelled_caught:
            raise _Stalled

    async def _receive_frame(self, stream: ByteStream, reader: BufferedByteReceiveStream,
                             wait_s: float, frame_s: float,
                             never_started: PalaceError | None = None) -> bytes | None:
        """The next frame's body, or None when the connection should close.

        Waits up to ``wait_s`` for the frame's first byte (if none came, the peer is told
        ``never_started`` when given), then up to ``frame_s`` plus the size allowance for the
        rest (a peer that stalls mid-frame is told TIMEOUT). EOF returns None silently.

        Raises:
            PalaceError: the header announced a frame this daemon refuses.
        """
        first = b""
        with anyio.move_on_after(max(wait_s, 0.0)):
            try:
                first = await reader.receive_exactly(1)
            except _EOF:
                return None
        # A request that arrived just as the wait ran out is served, not dropped unread: the
        # client could not tell that from a request lost after it was read.
        if not first and not (reader.buffer or _input_waiting(stream)):
            if never_started is not None:
                await self._closing_error(stream, never_started)
            return None
        with anyio.CancelScope(deadline=anyio.current_time() + frame_s) as scope:
            try:
                if not first:
                    first = await reader.receive_exactly(1)
                header = first + await reader.receive_exactly(HEADER_SIZE - 1)
                length = parse_header(header, self._max_frame)
                scope.deadline += length / FRAME_BYTES_PER_S
                return await reader.receive_exactly(length)
            except _EOF:
                return None
        # Only the deadline gets here: the frame was started but never finished.
        await self._closing_error(stream, Timeout(
            f"frame not completed within {frame_s:.1f}s; closing the connection",
            details={"stage": "frame", "timeout_s": frame_s}))
        return None

    async def _closing_error(self, stream: ByteStream, exc: PalaceError,
                             req_id: Any = None) -> None:
        """Tell the peer why its connection is closing, without ever waiting long on it."""
        with anyio.move_on_after(CLOSING_SEND_S):
            await self._try_send(stream, req_id, exc)

    async def serve(self, stream: ByteStream, *, control_only: bool = False) -> None:
        """Run the request loop on ``stream`` and close it at the end.

        ``control_only`` marks a reserve connection: it may run only ``CONTROL_OPS`` (anything
        else is answered BUSY and the connection closed), and it is closed after
        ``handshake_timeout_s`` without a request, so the reserve frees up quickly.
        """
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            greeted = False
            handshake_by = anyio.current_time() + self._handshake_timeout
            idle_s = (min(self._idle_timeout, self._handshake_timeout) if control_only
                      else self._idle_timeout)
            while True:
                never_started: PalaceError | None = None
                if greeted:
                    wait_s, frame_s = idle_s, self._frame_timeout
                else:
                    # The whole hello frame, not just its first byte, is due by handshake_by.
                    wait_s = handshake_by - anyio.current_time()
                    frame_s = min(self._frame_timeout, max(wait_s, 0.0))
                    never_started = Timeout(
                        f"no {HELLO_OP} within {self._handshake_timeout:.1f}s of connecting",
                        details={"stage": "handshake", "timeout_s": self._handshake_timeout})
                try:
                    body = await self._receive_frame(stream, reader, wait_s, frame_s,
                                                     never_started)
                except PalaceError as exc:
                    # The stream position is unknown after a refused frame: answer and close.
                    await self._closing_error(stream, exc)
                    return
                if body is None:
                    # EOF, a deadline, or idleness. An idle connection closes silently: an
                    # unsolicited envelope would be read as the answer to the client's next
                    # request; clients reconnect on a closed connection.
                    return
                req = decode_request(body)
                try:
                    result = await self._handle(stream, req, greeted, control_only)
                    if result is None:
                        return
                    greeted = True  # only a hello (or, once greeted, any op) gets here
                    await self._send(stream, req.id, result)
                except (HandshakeRequired, UnsupportedProtocol) as exc:
                    await self._closing_error(stream, exc, req.id)
                    return
                except PalaceError as exc:
                    if not await self._try_send(stream, req.id, exc):
                        return
                except _GONE:
                    return
                except Exception as exc:
                    err_id = uuid.uuid4().hex[:12]
                    log.exception("internal error %s while serving a request", err_id)
                    err = InternalError(f"internal error {err_id} ({type(exc).__name__}); "
                                        "see the daemon log", details={"error_id": err_id})
                    if not await self._try_send(stream, req.id, err):
                        return

    async def _handle(self, stream: ByteStream, req: Request, greeted: bool,
                      control_only: bool) -> dict[str, Any] | None:
        """The result of one request, or None when the connection must close (the peer was
        told why).

        Raises:
            PalaceError: the request failed; HandshakeRequired and UnsupportedProtocol also
                close the connection.
        """
        if req.error is not None:
            raise req.error
        if req.op == HELLO_OP:
            # A repeated hello is answered again: the op list names it, so a client may well
            # send it to re-read the server's limits.
            return self._hello(req.args)
        if not greeted:
            raise HandshakeRequired(f"the first request must be {HELLO_OP}, got {req.op[:80]!r}")
        if control_only and req.op not in CONTROL_OPS:
            # Closing makes the client's next call reconnect, and so take a normal slot once
            # one is free.
            await self._closing_error(stream, Busy(
                "every connection slot is taken; this reserve connection serves only "
                f"{', '.join(sorted(CONTROL_OPS))}; retry shortly",
                details={"allowed": sorted(CONTROL_OPS)}), req.id)
            return None
        if self._stopping():
            raise ShuttingDown("palaced is shutting down; retry shortly")
        return await self._call(req)

    async def _try_send(self, stream: ByteStream, req_id: Any, exc: PalaceError) -> bool:
        """Send an error response; False when the peer is gone (the connection must close)."""
        try:
            await self._send(stream, req_id, exc)
            return True
        except _GONE:
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
            "server": {"name": "palaced", "version": __version__, "pid": os.getpid(),
                       "data_dir": self._data_dir},
            "ops": [HELLO_OP, *self._op_names()],
            "spec": SPEC_DIGEST,  # what it accepts: a client tells an older daemon by it
            "max_frame": self._max_frame,
            # So that clients wait for a reply as long as the daemon may work on it.
            "request_timeout_s": self._timeout,
            "max_request_timeout_s": self._max_timeout,
            # The optional envelope keys this daemon accepts (a client sends one only then).
            "request_keys": sorted(OPTIONAL_KEYS),
        }

    async def _call(self, req: Request) -> dict[str, Any]:
        """Dispatch ``req`` under its deadline (``timeout_ms``, capped; else the default).

        Raises:
            Timeout: the op did not finish in time.
        """
        timeout = self._timeout
        if req.timeout_ms is not None:
            timeout = min(req.timeout_ms / 1000, self._max_timeout)
        try:
            with anyio.fail_after(timeout):
                return await self._dispatch(req.op, req.palace, req.args, req.agent)
        except TimeoutError:
            raise Timeout(f"{req.op} did not finish within {timeout:.1f}s",
                          details={"op": req.op, "timeout_s": timeout}) from None


class Gate:
    """Admits connections to a ConnectionHandler.

    Refuses peers of another uid (root excepted). Up to ``max_connections`` peers get a normal
    slot; past that, up to ``reserve_connections`` more get a reserve slot that serves only
    ``CONTROL_OPS``, so the owner can still see and stop a daemon whose slots are all taken;
    anyone beyond is told BUSY and closed rather than let thousands of idle clients starve the
    rest.
    """

    def __init__(self, handler: ConnectionHandler, max_connections: int,
                 reserve_connections: int) -> None:
        self._handler = handler
        self._max = max_connections
        self._max_reserve = reserve_connections
        self.connections = 0  # normal slots in use
        self.reserve_connections = 0  # control-only slots in use
        self._uid = os.getuid()

    async def __call__(self, stream: ByteStream) -> None:
        """Serve one accepted connection to its end (never raises)."""
        uid = peer_uid(stream)
        if uid is not None and uid not in (self._uid, 0):
            log.warning("refused a connection from uid %s", uid)
            await stream.aclose()
            return
        reserve = self.connections >= self._max
        if reserve and self.reserve_connections >= self._max_reserve:
            with contextlib.suppress(Exception), anyio.move_on_after(CLOSING_SEND_S):
                await stream.send(encode_response(None, Busy(
                    f"too many connections ({self.connections}); retry shortly")))
            await stream.aclose()
            return
        if reserve:
            self.reserve_connections += 1
        else:
            self.connections += 1
        try:
            await self._handler.serve(stream, control_only=reserve)
        except Exception:
            log.exception("connection handler crashed")
        finally:
            if reserve:
                self.reserve_connections -= 1
            else:
                self.connections -= 1
