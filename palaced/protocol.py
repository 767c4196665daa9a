"""Wire protocol v1: length-prefixed msgpack frames and request/response envelopes.

Leaf module (msgpack + stdlib): both the daemon and the thin clients import it.

A frame is a 4-byte unsigned big-endian length N followed by N bytes of msgpack. The length
is checked against the maximum *before* the body is read, so a hostile prefix never makes
either side allocate. The first request on every connection is ``daemon.hello``; a repeated
hello is answered again.

Retrying after a broken connection (``RETRY_RULES``, read by the client)
------------------------------------------------------------------------
A client whose connection breaks cannot tell whether the daemon applied the request. If the
request was never written whole (connect or send failed), the daemon cannot have applied it
and any op may be sent again. If it was written and the reply was lost (e.g. the daemon was
killed right after committing), the retry lands on a *new* daemon process, so no request-id
memory in the daemon could recognise it. Correctness must come from the op itself, so every
op has one retry class here, in one table both sides can read (a test checks that every op
the daemon serves has one):

* ``SAFE``: reads, and writes idempotent by nature (``memory.remember`` dedups by content
  hash and returns the same id; ``graph.assert`` returns an already active fact unchanged;
  ``graph.invalidate`` returns a closed fact unchanged; ``palace.reembed`` recomputes the
  same state). Sent again as is.
* ``CONVERGE``: writes whose retry would fail only *because* the lost attempt succeeded.
  The retry is sent with ``retry_args`` merged in (``palace.create`` with ``exist_ok``) and
  the error ``done_code`` on a retry means "already done": the client reports success
  (``memory.forget`` → MEMORY_NOT_FOUND, ``palace.delete`` → PALACE_NOT_FOUND). The price:
  if the lost request in fact never ran and the drawer/palace was already absent (or another
  client created the palace meanwhile), the retry still reports success; the state the
  caller asked for holds either way.
* ``NEVER``: writes whose second run would report something else than the first did
  (``memory.prune`` would prune nothing, ``memory.consolidate`` would find nothing left) or
  that must not reach a successor daemon (``daemon.stop``). After a lost reply the client
  raises ``OutcomeUnknown`` instead of guessing. Ops missing from the table count as NEVER.
"""

from __future__ import annotations

import enum
import socket
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgpack

from palaced.errors import BadFrame, FrameTooLarge, MemoryNotFound, PalaceError, PalaceNotFound

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


# -- retry classes (see the module docstring) -------------------------------------------------
class Retry(enum.Enum):
    """How a client may resend an op whose reply was lost."""

    SAFE = "safe"
    CONVERGE = "converge"
    NEVER = "never"


DoneResult = Callable[["str | None", Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class RetryRule:
    """The retry class of one op and, for CONVERGE, how to resend and read the answer."""

    kind: Retry
    # CONVERGE: the error code that, on a retry, means the lost attempt already did it ...
    done_code: int | None = None
    # ... and the result reported then, from the request's palace and args.
    done_result: DoneResult | None = None
    # CONVERGE: args merged into the resent request.
    retry_args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


SAFE = RetryRule(Retry.SAFE)
NEVER = RetryRule(Retry.NEVER)

RETRY_RULES: Mapping[str, RetryRule] = MappingProxyType({
    HELLO_OP: SAFE,
    "daemon.status": SAFE,
    "daemon.stop": NEVER,  # a resend would stop (or first auto-start) the successor
    "palace.list": SAFE,
    "palace.info": SAFE,
    "palace.create": RetryRule(Retry.CONVERGE, retry_args=MappingProxyType({"exist_ok": True})),
    "palace.delete": RetryRule(
        Retry.CONVERGE, done_code=PalaceNotFound.code,
        done_result=lambda palace, args: {"deleted": palace}),
    "palace.reembed": SAFE,
    "memory.remember": SAFE,
    "memory.remember_many": SAFE,
    "memory.recall": SAFE,
    "memory.wake_up": SAFE,
    "memory.get": SAFE,
    "memory.list": SAFE,
    "memory.forget": RetryRule(
        Retry.CONVERGE, done_code=MemoryNotFound.code,
        done_result=lambda palace, args: {"id": args.get("id"), "forgotten": True}),
    "memory.decay": SAFE,  # recomputes weights from the clock; a rerun's count is its own
    "memory.health": SAFE,
    "memory.prune": NEVER,
    "memory.consolidate": NEVER,
    "graph.assert": SAFE,
    "graph.link": SAFE,
    "graph.invalidate": SAFE,
    "graph.query": SAFE,
    "graph.timeline": SAFE,
    "graph.neighbors": SAFE,
    "graph.path": SAFE,
    "graph.search": SAFE,
})


def retry_rule(op: str) -> RetryRule:
    """The retry rule of ``op``; NEVER for ops this side does not know."""
    return RETRY_RULES.get(op, NEVER)
