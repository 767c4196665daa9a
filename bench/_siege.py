"""The connection siege of ``fuzz.py --siege``: stalled senders and more connections than the
daemon admits, while its owner keeps using it.

With the fuzz daemon's limits (``SIEGE_LIMITS``, written to its config file):

* ``stalled_frame``: handshaken connections that send half a frame and stall must each get
  TIMEOUT (stage ``frame``) and be closed within the frame deadline plus slack;
* ``no_hello``: connections that never say hello get TIMEOUT (stage ``handshake``);
* ``flood``: ``max_connections`` + ``reserve_connections`` idle handshaken connections fill
  every slot; the next connections are told BUSY at once; a reserve connection runs no
  ``palace.list``; once they all close, the daemon counts one connection again.

Meanwhile the owner's ``daemon.status`` (on a connection opened before the siege) must answer
within a second.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from palace_client import Client
from palaced.wire.protocol import HELLO_OP, hello_args

SIEGE_LIMITS = {"handshake_timeout_s": 1.5, "frame_timeout_s": 1.5, "max_connections": 48,
                "reserve_connections": 4}
SLACK_S = 4.0
HEADER = struct.Struct(">I")


def _frame(obj: Any) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def _read(s: socket.socket) -> dict[str, Any] | None:
    """One envelope, or None when the daemon closed the connection."""
    buf = b""
    try:
        while len(buf) < 4:
            chunk = s.recv(4 - len(buf))
            if not chunk:
                return None
            buf += chunk
        (n,) = HEADER.unpack(buf)
        body = b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                return None
            body += chunk
    except (ConnectionResetError, BrokenPipeError):
        return None
    out: dict[str, Any] = msgpack.unpackb(body, raw=False)
    return out


def _connect(sock: Path, hello: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(SIEGE_LIMITS["frame_timeout_s"] + SLACK_S + 5)
    s.connect(str(sock))
    if hello:
        s.sendall(_frame({"id": 0, "op": HELLO_OP, "palace": None,
                          "args": hello_args("siege", "0")}))
        reply = _read(s)
        if reply is None or not reply.get("ok"):
            raise ConnectionError(f"hello refused: {reply}")
    return s


def run_siege(sock: Path, owner: Client) -> tuple[Counter[str], list[str]]:
    """Run the three sieges; returns (cases by class, failures)."""
    cases: Counter[str] = Counter()
    fails: list[str] = []
    slow: list[float] = []
    stop = threading.Event()
    # One connection, two threads (the watcher and the flood's count of connections): a
    # client connection is not shared between threads, so its calls take turns. Without
    # this the two threads' replies interleaved on the socket (a CI run read a 2 GB header).
    turn = threading.Lock()

    def status() -> dict[str, Any]:
        with turn:
            return owner.status()

    def watch() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            status()
            slow.append(time.monotonic() - t0)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _stalled(sock, cases, fails)
        _flood(sock, status, cases, fails)
    finally:
        stop.set()
        watcher.join(10)
    if slow and max(slow) > 1.0:
        fails.append(f"the owner's status took {max(slow):.2f}s during the siege")
    cases["owner_status_calls"] = len(slow)
    return cases, fails


def _stalled(sock: Path, cases: Counter[str], fails: list[str]) -> None:
    frame = _frame({"id": 1, "op": "palace.list", "palace": None, "args": {}})
    conns = [(_connect(sock, hello=True), "frame") for _ in range(10)]
    conns += [(_connect(sock, hello=False), "handshake") for _ in range(10)]
    t0 = time.monotonic()
    for s, stage in conns:
        if stage == "frame":
            s.sendall(frame[: len(frame) // 2])  # half a frame, then silence
    limit = SIEGE_LIMITS["frame_timeout_s"] + SLACK_S
    for s, stage in conns:
        cases["stalled_frame" if stage == "frame" else "no_hello"] += 1
        reply = _read(s)
        err = (reply or {}).get("error") or {}
        if err.get("name") != "TIMEOUT" or err.get("details", {}).get("stage") != stage:
            fails.append(f"stalled {stage}: got {reply}")
        elif _read(s) is not None:
            fails.append(f"stalled {stage}: not closed after the TIMEOUT")
        s.close()
    if time.monotonic() - t0 > limit:
        fails.append(f"stalled connections took {time.monotonic() - t0:.1f}s to be cut")


def _flood(sock: Path, status: Callable[[], dict[str, Any]], cases: Counter[str],
           fails: list[str]) -> None:
    held: list[socket.socket] = []
    try:
        # The owner's own connection holds one normal slot already.
        for _ in range(SIEGE_LIMITS["max_connections"] - 1 + SIEGE_LIMITS["reserve_connections"]):
            held.append(_connect(sock, hello=True))
            cases["flood_held"] += 1
        # Every slot is taken: the next connections are told BUSY and closed at once.
        for _ in range(10):
            cases["flood_refused"] += 1
            s = _connect(sock, hello=False)
            reply = _read(s)
            if (reply or {}).get("error", {}).get("name") != "BUSY" or _read(s) is not None:
                fails.append(f"flood: a connection past every slot got {reply}")
            s.close()
        # A reserve connection runs control ops only.
        reserve = held[-1]
        reserve.sendall(_frame({"id": 5, "op": "palace.list", "palace": None, "args": {}}))
        reply = _read(reserve)
        if (reply or {}).get("error", {}).get("name") != "BUSY":
            fails.append(f"flood: a reserve connection ran palace.list: {reply}")
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while (n := int(status()["connections"])) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    if n > 1:
        fails.append(f"flood: {n} connections still counted after they all closed")
