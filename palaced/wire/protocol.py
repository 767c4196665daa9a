"""Wire protocol v1: length-prefixed msgpack frames, and the request and response envelopes.

Leaf module (msgpack + stdlib): the daemon's server and the thin clients both encode and decode
their envelopes here, so the two sides cannot disagree on what a valid one is.

A frame is a 4-byte unsigned big-endian length N followed by N bytes of msgpack. The length
is checked against the maximum *before* the body is read, so a hostile prefix never makes
either side allocate. The first request on every connection is ``daemon.hello``; a repeated
hello is answered again.

Which ops a client may resend after a lost reply is a fact of each op: see ``specs.py``.

Text entering from outside (JSON read by the daemon or a client, strings crossing frames) goes
through :func:`clean`: a lone UTF-16 surrogate (JSON allows ``"\\ud83d"``) becomes U+FFFD.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import struct
import sys
import unicodedata
from dataclasses import dataclass
from typing import Any

import msgpack

from palaced.wire.errors import (
    BadFrame,
    ClientError,
    ContentError,
    FrameTooLarge,
    InternalError,
    InvalidArgs,
    LoadError,
    PalaceError,
    ProtocolError,
    RegistryError,
    error_classes,
    quote,
)

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME = 8 * 1024 * 1024
HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
HELLO_OP = "daemon.hello"

REQUEST_KEYS = frozenset({"id", "op", "palace", "args", "timeout_ms", "agent"})
# Envelope keys a client may send only when the daemon's hello lists them in
# ``request_keys`` (a daemon that predates a key refuses envelopes carrying it).
OPTIONAL_KEYS = frozenset({"agent"})
MAX_AGENT_CHARS = 200

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


# -- text entering ----------------------------------------------------------------------------
_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    # isascii() is a flag of the string (O(1)): most texts never reach the regex.
    return not text.isascii() and _SURROGATE.search(text) is not None


def clean_text(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate replaced by U+FFFD (a high and a low one in
    a row, as CESU-8 bytes decode, join into their character). Never raises."""
    if not _has_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean(value: Any) -> Any:
    """``value`` with :func:`clean_text` applied to every string and key in it: lists and
    dicts in place (iteratively, any depth; a tuple in them becomes a list, as msgpack sends
    it), keys cleaned alike keep the later value (as JSON's duplicates). Never raises."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, tuple):
        value = list(value)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if any(isinstance(k, str) and _has_surrogate(k) for k in node):
                items = list(node.items())
                node.clear()
                node.update((clean_text(k) if isinstance(k, str) else k, v) for k, v in items)
            keys: Any = list(node)
        elif isinstance(node, list):
            keys = range(len(node))
        else:
            continue
        for key in keys:
            item = node[key]
            if isinstance(item, str):
                node[key] = clean_text(item)
            elif isinstance(item, list | dict | tuple):
                node[key] = item = list(item) if isinstance(item, tuple) else item
                stack.append(item)
    return value


def loads_json(data: str | bytes) -> Any:
    """``json.loads(data)`` with every string cleaned by :func:`clean` (only walked when the
    input may hold a surrogate at all: the common case costs a few substring searches).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, or a ``UnicodeDecodeError``).
        RecursionError: nested deeper than the decoder's stack.
    """
    parsed = json.loads(data)
    # Only an escape, non-ASCII text, or in bytes (decoded "surrogatepass") 0xED or NUL can.
    if isinstance(data, str):
        may = "\\u" in data or not data.isascii()
    else:
        may = b"\\u" in data or b"\xed" in data or b"\x00" in data
    return clean(parsed) if may else parsed


# -- msgpack ----------------------------------------------------------------------------------
def pack(obj: Any) -> bytes:
    """Serialise one message to msgpack bytes (no framing); strings holding lone surrogates
    are sent with U+FFFD in their place (see :func:`clean`).

    Raises:
        TypeError, ValueError, OverflowError: a value msgpack has no encoding for.
    """
    try:
        return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # rare: clean a copy (never the caller's objects), pack again
        return msgpack.packb(clean(copy.deepcopy(obj)), use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    """Deserialise msgpack bytes, refusing trailing garbage and extension types; a string
    that is not valid UTF-8 (a surrogate's bytes among them) reads with U+FFFD in place of
    its bad bytes.

    Raises:
        BadFrame: the bytes are not exactly one msgpack object.
    """
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True, ext_hook=_no_ext,
            unicode_errors="replace",
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


# -- requests ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """A decoded request envelope.

    When the envelope is invalid, ``error`` says why and the other fields are not to be used;
    ``id`` is then still the request's id if it could be read, so the error answers it.
    """

    id: int | str | None
    op: str = ""
    palace: str | None = None
    args: Any = None
    timeout_ms: int | None = None
    agent: str | None = None
    error: BadFrame | None = None


def check_agent(value: object) -> str:
    """The caller's identity as stored: a string of 1-MAX_AGENT_CHARS printable characters,
    NFC-normalised and stripped (``user:alice``, ``mcp:claude-code/2.0.1``, ``reviewer``).

    Raises:
        BadFrame: anything else (``details["field"]`` is ``agent``).
    """
    text = unicodedata.normalize("NFC", value).strip() if isinstance(value, str) else ""
    if not text or len(text) > MAX_AGENT_CHARS or not text.isprintable():
        raise BadFrame(f"agent must be 1-{MAX_AGENT_CHARS} printable characters, got "
                       f"{quote(value, 80)}", details={"field": "agent"})
    return text


def encode_request(req_id: int, op: str, palace: str | None = None,
                   args: dict[str, Any] | None = None, timeout_ms: int | None = None,
                   max_frame: int = DEFAULT_MAX_FRAME, agent: str | None = None) -> bytes:
    """The framed request envelope (``agent``: the caller's identity, sent when given).

    Raises:
        FrameTooLarge: the encoded request exceeds ``max_frame``.
        InvalidArgs: an argument cannot be encoded: a value msgpack has no type for (a set,
            an object). A text holding lone surrogates (the undecodable bytes of a
            command-line argument, a JSON string cut inside an emoji) is sent with U+FFFD
            in their place (``pack``).
    """
    env: dict[str, Any] = {"id": req_id, "op": op, "palace": palace, "args": args or {}}
    if timeout_ms is not None:
        env["timeout_ms"] = timeout_ms
    if agent is not None:
        env["agent"] = agent
    try:
        return frame(env, max_frame)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgs(f"{op}: an argument cannot be sent: {exc}",
                          details={"op": op}) from None


def decode_request(body: bytes) -> Request:
    """Decode and check a request frame's body: a map with an integer or string ``id``, a
    string ``op``, a string or nil ``palace``, a positive integer ``timeout_ms`` if any, an
    ``agent`` that passes ``check_agent`` if any, and no other keys than ``REQUEST_KEYS``.
    Never raises: a bad envelope comes back with ``error``.
    """
    try:
        msg = unpack(body)
    except BadFrame as exc:
        return Request(None, error=exc)
    if not isinstance(msg, dict):
        return Request(None, error=BadFrame("request must be a msgpack map"))
    req_id = msg.get("id")
    if not isinstance(req_id, int | str) or isinstance(req_id, bool):
        return Request(None, error=BadFrame("request id must be an integer or string"))
    extra = sorted(str(k) for k in msg if k not in REQUEST_KEYS)
    if extra:
        return Request(req_id, error=BadFrame(f"unknown envelope keys: {', '.join(extra)}",
                                              details={"unknown": extra}))
    op = msg.get("op")
    if not isinstance(op, str):
        return Request(req_id, error=BadFrame("request op must be a string"))
    timeout_ms = msg.get("timeout_ms")
    if timeout_ms is not None and (not isinstance(timeout_ms, int)
                                   or isinstance(timeout_ms, bool) or timeout_ms <= 0):
        return Request(req_id, error=BadFrame("timeout_ms must be a positive integer"))
    palace = msg.get("palace")
    if palace is not None and not isinstance(palace, str):
        return Request(req_id, error=BadFrame("palace must be a string or nil"))
    agent = msg.get("agent")
    if agent is not None:
        try:
            agent = check_agent(agent)
        except BadFrame as exc:
            return Request(req_id, error=exc)
    return Request(req_id, op, palace, msg.get("args"), timeout_ms, agent)


def hello_args(client_name: str, client_version: str) -> dict[str, Any]:
    """Arguments of the daemon.hello request."""
    client = {"name": client_name, "version": client_version}
    return {"protocol": PROTOCOL_VERSION, "client": client}


# -- responses --------------------------------------------------------------------------------
def ok_response(req_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    """Build a success response envelope."""
    return {"id": req_id, "ok": True, "result": result}


def error_response(req_id: Any, error: PalaceError) -> dict[str, Any]:
    """Build an error response envelope."""
    return {"id": req_id, "ok": False, "error": error.to_wire()}


def encode_response(req_id: Any, outcome: dict[str, Any] | PalaceError,
                    max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The framed response answering ``req_id``: a result map or an error.

    A result too large for ``max_frame`` is answered with the FRAME_TOO_LARGE error instead.
    """
    if isinstance(outcome, PalaceError):
        return frame(error_response(req_id, outcome), max_frame)
    try:
        return frame(ok_response(req_id, outcome), max_frame)
    except FrameTooLarge as exc:
        return frame(error_response(req_id, exc), max_frame)


def decode_response(body: bytes) -> dict[str, Any]:
    """The result map of a response frame's body.

    Raises:
        BadFrame: the body is not a msgpack map.
        PalaceError: the response is an error envelope (typed by its code, see
            ``decode_error``).
    """
    msg = unpack(body)
    if not isinstance(msg, dict):
        raise BadFrame("response is not a map")
    if msg.get("ok"):
        result = msg.get("result")
        return result if isinstance(result, dict) else {}
    raise decode_error(msg.get("error"))


# What an unknown code of a newer daemon maps to: the base class of its hundred.
_RANGE_BASE: dict[int, type[PalaceError]] = {
    100: ProtocolError,
    200: RegistryError,
    300: ContentError,
    400: LoadError,
    500: InternalError,
    600: ClientError,
}
_BY_CODE = error_classes()


def decode_error(err: Any) -> PalaceError:
    """Rebuild a typed PalaceError from an error map; unknown codes map to their range's base."""
    if not isinstance(err, dict):
        return InternalError(f"malformed error envelope: {quote(err)}")
    code = err.get("code")
    message = str(err.get("message") or "")
    details = err.get("details") if isinstance(err.get("details"), dict) else {}
    if not isinstance(code, int):
        return InternalError(message or "malformed error envelope", details=details)
    cls = _BY_CODE.get(code) or _RANGE_BASE.get(code // 100 * 100, PalaceError)
    exc = cls(message, details=details)
    if cls.code != code:
        # Keep the exact code of a newer daemon visible even if we only know the range.
        exc.details.setdefault("code", code)
        exc.details.setdefault("name", err.get("name"))
    return exc
