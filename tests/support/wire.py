"""A raw protocol socket for tests that send what no well-behaved client would.

Frames are read and written by hand (not through ``palace_client``) so that tests can stop
mid-frame, skip the handshake, send garbage and see exactly what the daemon answers.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import msgpack

from palaced.wire.protocol import HELLO_OP, frame, hello_args


class Raw:
    """A raw socket speaking (or mis-speaking) the protocol."""

    def __init__(self, sock: socket.socket, *, hello: bool = True) -> None:
        self.s = sock
        self.last_size = 0  # bytes of the last envelope read
        if hello:
            reply = self.call(HELLO_OP, hello_args("raw", "0"))
            assert reply["ok"], reply

    @classmethod
    def connect(cls, path: Path, *, hello: bool = True, timeout: float = 10) -> Raw:
        """A raw connection to the socket at ``path`` (socket.timeout after ``timeout``)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(str(path))
        return cls(s, hello=hello)

    def send_bytes(self, data: bytes) -> None:
        self.s.sendall(data)

    def read(self) -> dict[str, Any] | None:
        """The next envelope, or None at EOF."""
        head = self._exact(4)
        if head is None:
            return None
        (n,) = struct.unpack(">I", head)
        body = self._exact(n)
        assert body is not None, "connection closed mid-frame"
        self.last_size = n
        out = msgpack.unpackb(body, raw=False)
        assert isinstance(out, dict)
        return out

    def _exact(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.s.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def request(self, env: Any) -> dict[str, Any]:
        """Send the envelope ``env`` and return the reply (fails if the daemon closes)."""
        self.send_bytes(frame(env))
        out = self.read()
        assert out is not None, "connection closed"
        return out

    def call(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """``request`` with a plain envelope for ``op``."""
        return self.request({"id": 1, "op": op, "palace": None, "args": args or {}})

    def closed_by_peer(self) -> bool:
        try:
            return self.s.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True

    def close(self) -> None:
        self.s.close()
