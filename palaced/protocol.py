"""Wire protocol v1: length-prefixed msgpack frames and request/response envelopes.

Leaf module (msgpack + stdlib): both the daemon and the thin clients import it.

A frame is a 4-byte unsigned big-endian length N followed by N bytes of msgpack. The length
is checked against the maximum *before* the body is read, so a hostile prefix never makes
either side allocate. The first request on every connection is ``daemon.hello``; a repeated
hello is answered again.

Which ops a client may resend after a lost reply is a fact of each op: see ``specs.py``.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any

import msgpack

from palaced.errors import BadFrame, FrameTooLarge, PalaceError

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME = 8 * 1024 * 1024
HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
HELLO_OP = "daemon.hello"

REQUEST_KEYS = frozenset({"id", "op", "palace", "args", "timeout_ms"})

# struct ucred {pid_t pid; uid_t uid; gid_t gid;} (Linux SO_PEERCRED)
_UCRED = struct.Struct("iII")
# struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16];}
# (macOS/BSD LOCAL_PEERCRED at level SOL_LOCAL = 0)
_XUCRED = struct.Struct("IIh16I")
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 0x001


def socket_peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process on the other end of a connected Unix socket.

    The kernel records it at connect/listen time (Linux ``SO_PEERCRED``, macOS/BSD
    ``LOCAL_PEERCRED``), so the peer cannot forge it. Both the daemon (who is calling?) and
    the clients (who is serving?) use it. Returns None where the platform offers neither or
    the socket is not a connected Unix socket.
    """
    try:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            return int(_UCRED.unpack(raw)[1])
        if sys.platform == "darwin" or "bsd" in sys.platform:
            option = getattr(socket, "LOCAL_PEERCRED", _LOCAL_PEERCRED)
            raw = sock.getsockopt(_SOL_LOCAL, option, _XUCRED.size)
            return int(_XUCRED.unpack(raw[:_XUCRED.size])[1])
    except (OSError, struct.error):
        return None
    return None


def pack(obj: Any) -> bytes:
    """Serialise one message to msgpack bytes (no framing)."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    """Deserialise msgpack bytes, refusing trailing garbage and extension types.

    Raises:
        BadFrame: the bytes are not exactly one msgpack object.
    """
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True, ext_hook=_no_ext
        )
    except BadFrame:
        raise
    except Exception as exc:  # msgpack raises several unrelated types
        raise BadFrame(f"frame is not valid msgpack: {type(exc).__name__}") from None


def _no_ext(code: int, data: bytes) -> Any:
    raise BadFrame("msgpack extension types are not allowed")


def frame(obj: Any, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Return the framed bytes of ``obj``.

    Raises:
        FrameTooLarge: the encoded body exceeds ``max_frame``.
    """
    body = pack(obj)
    if len(body) > max_frame:
        raise FrameTooLarge(
            f"message of {len(body)} bytes exceeds the {max_frame}-byte frame limit",
            details={"size": len(body), "max_frame": max_frame},
        )
    return HEADER.pack(len(body)) + body


def parse_header(header: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> int:
    """Return the body length announced by a 4-byte header.

    Raises:
        BadFrame: the header is not 4 bytes.
        FrameTooLarge: the announced length exceeds ``max_frame``.
    """
    if len(header) != HEADER_SIZE:
        raise BadFrame("truncated frame header")
    (length,) = HEADER.unpack(header)
    if length > max_frame:
        raise FrameTooLarge(
            f"frame of {length} bytes exceeds the {max_frame}-byte limit",
            details={"size": length, "max_frame": max_frame},
        )
    return int(length)


def request(
    req_id: int,
    op: str,
    palace: str | None = None,
    args: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
) -> dict[str, Any]:
    """Build a request envelope."""
    env: dict[str, Any] = {"id": req_id, "op": op, "palace": palace, "args": args or {}}
    if timeout_ms is not None:
        env["timeout_ms"] = timeout_ms
    return env


def ok_response(req_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    """Build a success response envelope."""
    return {"id": req_id, "ok": True, "result": result}


def error_response(req_id: Any, error: PalaceError) -> dict[str, Any]:
    """Build an error response envelope."""
    return {"id": req_id, "ok": False, "error": error.to_wire()}


def hello_args(client_name: str, client_version: str) -> dict[str, Any]:
    """Arguments of the daemon.hello request."""
    client = {"name": client_name, "version": client_version}
    return {"protocol": PROTOCOL_VERSION, "client": client}
