"""Bounded protocol fuzzer: hostile frames and hostile arguments against a private palaced.

Starts its own ``palaced`` under a scratch ``PALACE_HOME`` (keyword-only, unless ``--model
PATH`` names a model directory), stores ``--keep`` known drawers in palace ``fuzz-keep`` and
snapshots them, then sends fuzz cases until ``--frames`` frames were sent or ``--duration``
seconds passed, whichever comes first (``--seed`` makes the case sequence repeatable):

raw frames (each on a fresh connection)
    random bytes, truncated headers, length prefixes over ``max_frame``, zero-length and
    half-sent frames then close, valid msgpack of the wrong shape (list, int, nil, ...),
    broken envelopes (id float/bool, op not a string, unknown keys, palace not a string,
    bad ``timeout_ms``), msgpack extension types, nesting 100 to 200,000 deep, trailing
    garbage, invalid UTF-8, requests before the handshake and bad handshakes, pipelined
    bursts, byte-by-byte slow frames, and a frame of exactly ``max_frame`` bytes;
structured requests (one persistent connection)
    well-framed envelopes for every op the daemon advertises in ``daemon.hello`` (except
    ``daemon.stop``) with arguments built from the op's spec and hostile values: ints 0, -1,
    2^31, 2^63-1, 2^63, 2^64-1 (and -2^63-1, which msgpack cannot carry as an int, sent as a
    float), floats nan/inf/1e308, strings empty / NUL / 10 KB / 2 MB / FTS5 syntax / unicode /
    surrogate escapes, mixed lists, durations ``infs`` and ``1e400d``, palace names ``../x``,
    ``/abs``, ``a/b``, ``CON``, 65 characters and empty, unknown keys and non-map args.
    Destructive ops never name ``fuzz-keep``; read-only ops do.

MCP bridge lines (``--mcp-lines``, ``_mcp_fuzz.py``)
    a real ``palace mcp --palace fuzz-play`` against the same daemon gets invalid JSON and
    UTF-8, NUL bytes, wrong ``jsonrpc`` versions, non-objects, unknown methods, bad ids and
    params, unknown tools, tool arguments of wrong types, NaN and huge numbers, deep nesting,
    lines past its 16 MiB limit, batches, notifications, duplicate ids and FTS5 queries:
    each must get the JSON-RPC answers its case calls for, never an internal error.
connection siege (``--siege``, ``_siege.py``)
    senders that stall mid-frame or never say hello are cut off with TIMEOUT; every
    connection slot and the reserve are filled, and the next connections told BUSY; the
    owner's status stays fast throughout.

Every reply must be one well-formed envelope (``id`` echoed, ``ok``, a result map or an
error map with an int code in 100-599, name, message, retryable and details). Checked at the
end: the daemon (same pid) still answers ``daemon.status`` and holds no leftover connection;
every ``fuzz-keep`` drawer is unchanged (text, wing, room, tags), no drawer was added or
removed there, keyword search still finds a sample of them, and the SHA-256 of its
canonical dump (drawers without their access counters, knowledge-graph timelines, identity)
is the one taken before; every palace reports a consistent index; the daemon log has no
ERROR line; the daemon's RSS grew by at most ``--rss-growth`` MB.

Output: a table of frames sent, cases by kind, replies by code (``OK`` or ``105
INVALID_ARGS``...), connections the daemon closed, the largest reply, the longest error
message, then the INTERNAL errors (the request that caused each, truncated, its message and
the exception the daemon logged), then ``RESULT: PASS`` or ``RESULT: FAIL -- reasons``.

Exit status 1 when any invariant fails: a 500-502 reply (INTERNAL, STORAGE_ERROR,
INDEX_ERROR), a malformed reply, a
well-framed request dropped without a reply, a reply slower than ``--reply-timeout``, an
error message longer than 1,000 characters, a frame-level case answered with the wrong code
(e.g. an oversized length prefix not refused with FRAME_TOO_LARGE), the daemon dead or
restarted, changed data, or ERROR lines in the daemon log. The scratch home is deleted on
PASS and kept (path printed) on FAIL.

    python bench/fuzz.py                       # 20,000 frames or 45 s + 3,000 MCP lines
    python bench/fuzz.py --frames 300 --seed 7
    python bench/fuzz.py --frames 20000 --mcp-lines 5000 --siege   # the soak: > 25,000 cases
    python bench/fuzz.py --duration 600 --frames 1000000 --seed 42 --json /tmp/fuzz.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from _daemon import PrivateDaemon, add_daemon_args, all_drawers
from _mcp_fuzz import McpFuzzer, McpTally
from _siege import SIEGE_LIMITS, run_siege

from palace_client import Client
from palaced.wire.args import Arg
from palaced.wire.errors import PalaceError
from palaced.wire.protocol import HEADER, HELLO_OP, PROTOCOL_VERSION, hello_args
from palaced.wire.specs import SPECS

KEEP = "fuzz-keep"
PLAY = "fuzz-play"
MAX_MESSAGE = 1000  # an error message longer than this fails the run
MAX_EXAMPLES = 8
# INTERNAL, STORAGE_ERROR, INDEX_ERROR: no request, however hostile, may cause one.
# (503 EMBEDDER_UNAVAILABLE is the expected answer of a keyword-only daemon.)
CLOSING_CODES = frozenset({102, 103})  # UNSUPPORTED_PROTOCOL, HANDSHAKE_REQUIRED
SERVER_FAULTS = frozenset({500, 501, 502})
REPLY_LIMIT = 64 * 1024 * 1024  # a reply header announcing more is malformed

# Ops that never change drawers: the only ones allowed to name fuzz-keep.
KEEP_SAFE = frozenset({
    "daemon.status", "palace.list", "palace.info", "memory.recall", "memory.wake_up",
    "memory.get", "memory.list", "memory.health", "graph.query", "graph.timeline",
    "graph.neighbors", "graph.path", "graph.search",
})
NEVER = frozenset({"daemon.stop"})  # would end the run
OP_WEIGHT = {"palace.delete": 0.3, "palace.create": 0.5, "palace.reembed": 0.3,
             "memory.prune": 0.5, "memory.consolidate": 0.7}

# -- hostile values -------------------------------------------------------------------------
INTS: tuple[int | float, ...] = (
    0, -1, 1, 2, 7, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**31),
    -(2**63), float(-(2**63) - 1),
)
FLOATS: tuple[float, ...] = (math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0.5, -0.0,
                             1.0000001, 0.0, 1e-300)
FTS = ('"foo" OR NEAR(a b)', "*", "^", "col:term", "text:foo", "NOT", "AND OR NOT", '"',
       "(", ")", "foo*", "NEAR(", "a NEAR/3 b", "{a b}: c", "-x", "+", "'", "\\", "%", "_",
       'x" OR "1"="1', "drawers; DROP TABLE drawers; --", "MATCH", "rank:", "^foo*")
UNICODE = ("日本語のテキスト", "🧠💾🔥", "\u202eevil", "Ä\u0308", "ﷺ", "\u200b", "e\u0301",
           "\\ud800", "\\udcff\\ud83d", "\ufffd", "\U0010ffff", "ǅ", "İstanbul", "\u00a0",
           "\t\n\r", "\x7f", "\x1b[31mred")
STRS: tuple[str, ...] = ("", " ", "\x00", "a\x00b", "\x00" * 64, "x" * 201, "y" * 10_000,
                         "z" * 65, "ok text", "none", "null", "-1", "0", "1e400", *FTS,
                         *UNICODE)
HUGE_STR_CHARS = 2_000_000
DURATIONS = ("infs", "1e400d", "nan", "nanh", "-5m", "0", "0s", "9" * 400, "1e308w", "1.5h",
             "", "inf", "10x", "7d", "2w", "-inf", "1e-9s", " 5 m", "5mm", "١٢s", "1_000s")
TIMES = ("infs", "1e400d", "2024-13-45", "9999-12-31T23:59:59", "0001-01-01", "0000-01-01",
         "-1", "now", "1e400", "yesterday", "2024-02-30", "2024-01-01T25:00:00Z",
         "2024-01-01T00:00:00+99:00", "10000-01-01", "", "T", "2024-01-01" + "0" * 300)
IMPORTANCE = ("critical", "high", "medium", "low", "CRITICAL", "bogus", "", "0.5", "nan")
NAMES = ("../x", "/abs", "a/b", "CON", "a" * 65, "", "a" * 64, ".", "..", "a b", "Ä",
         "nul\x00", "-a", "a-", "a--b", "fuzz-x", "fuzz-y", "x" * 10_000, "aux", "lpt1",
         "com1", "\u202eabc", "0", "a.b", "a\\b", "~", "$HOME")
KEYS = ("", "\x00", "id", "ID", "text ", "__proto__", "constructor", "k" * 300, "ünï",
        "args", "op", "palace")


def hostile_int(rnd: random.Random) -> Any:
    return rnd.choice(INTS)


def hostile_str(rnd: random.Random, huge: bool = True) -> str:
    if huge and rnd.random() < 0.004:
        return "x" * HUGE_STR_CHARS  # 2 MB
    s = rnd.choice(STRS)
    if rnd.random() < 0.2:
        s = s + " " + rnd.choice(STRS)
    return s


def any_value(rnd: random.Random, depth: int = 0) -> Any:
    """A value of any msgpack type (bounded depth)."""
    roll = rnd.random()
    if roll < 0.2:
        return hostile_int(rnd)
    if roll < 0.3:
        return rnd.choice(FLOATS)
    if roll < 0.55:
        return hostile_str(rnd)
    if roll < 0.62:
        return rnd.choice((None, True, False))
    if roll < 0.7:
        return rnd.choice((b"", b"\x00\xff", bytes(300)))
    if depth >= 3:
        return None
    if roll < 0.85:
        return [any_value(rnd, depth + 1) for _ in range(rnd.randrange(6))]
    return {rnd.choice(KEYS): any_value(rnd, depth + 1) for _ in range(rnd.randrange(4))}


def mixed_list(rnd: random.Random) -> list[Any]:
    return [1, "a", None, 1.5, True, {"k": 1}, [1], b"\x00", math.nan][: rnd.randrange(1, 10)]


def value_for(spec: Arg, rnd: random.Random, ids: list[int]) -> Any:
    """A hostile value for one argument: mostly of the right type, sometimes not."""
    if rnd.random() < 0.12:
        return any_value(rnd)
    kind = spec.kind
    if kind == "int":
        if ids and rnd.random() < 0.3:
            return rnd.choice(ids)
        return hostile_int(rnd)
    if kind == "float":
        return rnd.choice((*FLOATS, 0, 1, -1, 2**64 - 1))
    if kind == "bool":
        return rnd.choice((True, False, True, False, 0, 1, "true", None))
    if kind == "str":
        return hostile_str(rnd)
    if kind == "str|int":
        return rnd.choice((*DURATIONS, *TIMES, *INTS))
    if kind == "str|float":
        return rnd.choice((*IMPORTANCE, *FLOATS, 2**64 - 1))
    if kind == "strlist":
        if rnd.random() < 0.15:
            return mixed_list(rnd)
        return [hostile_str(rnd, huge=False) for _ in range(rnd.choice((0, 1, 3, 64, 65)))]
    if kind == "intlist":
        if rnd.random() < 0.1:
            return list(range(1, 10_002))
        if rnd.random() < 0.15:
            return mixed_list(rnd)
        pool = [*INTS, *ids]
        return [rnd.choice(pool) for _ in range(rnd.choice((0, 1, 2, 4, 5)))]
    if kind == "list":  # remember_many items
        if rnd.random() < 0.03:
            return [{"text": f"batch {i}"} for i in range(10_001)]
        return [drawer_item(rnd) for _ in range(rnd.randrange(5))]
    return any_value(rnd)


DRAWER_SPEC = SPECS["memory.remember"].args


def drawer_item(rnd: random.Random) -> Any:
    if rnd.random() < 0.1:
        return any_value(rnd)
    return {name: value_for(spec, rnd, []) for name, spec in DRAWER_SPEC.items()
            if name == "text" or rnd.random() < 0.3}


# -- reading and checking replies -----------------------------------------------------------
class Closed(Exception):
    """The daemon closed the connection (EOF or reset) before a whole reply arrived."""


class Wire:
    """One raw Unix-socket connection: bytes out, frames in, nothing validated."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(str(path))
        self.next_id = 1

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def recv_exactly(self, n: int) -> bytes:
        chunks: list[bytes] = []
        while n:
            try:
                chunk = self.sock.recv(min(n, 1 << 20))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        """One reply body. Raises Closed, TimeoutError, or ValueError (absurd length)."""
        (length,) = HEADER.unpack(self.recv_exactly(HEADER.size))
        if length > REPLY_LIMIT:
            raise ValueError(f"reply header announces {length} bytes")
        return self.recv_exactly(length)

    def half_close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def framed(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


def envelope_problem(msg: Any, req_id: Any) -> str | None:
    """Why ``msg`` is not a well-formed reply to request ``req_id`` (None when it is)."""
    if not isinstance(msg, dict):
        return f"reply is a {type(msg).__name__}, not a map"
    ok = msg.get("ok")
    if not isinstance(ok, bool):
        return f"reply 'ok' is {ok!r}"
    want = {"id", "ok", "result" if ok else "error"}
    if set(msg) != want:
        return f"reply keys {sorted(map(str, msg))}, expected {sorted(want)}"
    if msg["id"] != req_id and not (msg["id"] is None and not ok):
        return f"reply id {msg['id']!r} for request id {req_id!r}"
    if ok:
        return None if isinstance(msg["result"], dict) else "result is not a map"
    err = msg["error"]
    if not isinstance(err, dict):
        return "error is not a map"
    types = {"code": int, "name": str, "message": str, "retryable": bool, "details": dict}
    for key, typ in types.items():
        if not isinstance(err.get(key), typ):
            return f"error {key} is {type(err.get(key)).__name__}, expected {typ.__name__}"
    if not 100 <= err["code"] <= 599:
        return f"error code {err['code']} outside 100-599"
    return None


def short(value: Any, limit: int = 60) -> Any:
    """``value`` with long strings, bytes and lists cut, for printing a request."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…<{len(value)} chars>"
    if isinstance(value, bytes) and len(value) > limit:
        return f"<{len(value)} bytes>"
    if isinstance(value, list):
        head = [short(v, limit) for v in value[:8]]
        return head + ([f"…<{len(value)} items>"] if len(value) > 8 else [])
    if isinstance(value, dict):
        return {short(k, limit): short(v, limit) for k, v in list(value.items())[:12]}
    return value


@dataclass
class Internal:
    """One INTERNAL reply and what caused it."""

    case: str
    request: str
    message: str
    error_id: str | None
    cause: str = ""


@dataclass
class Tally:
    """Everything counted during the run."""

    frames: int = 0
    cases: Counter[str] = field(default_factory=Counter)
    replies: Counter[str] = field(default_factory=Counter)
    by_op: dict[str, Counter[str]] = field(default_factory=dict)
    closed: Counter[str] = field(default_factory=Counter)
    internals: list[Internal] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_reply: int = 0
    max_reply_case: str = ""
    max_message: int = 0
    max_message_case: str = ""

    def fail(self, kind: str, example: str) -> None:
        self.failures[kind] += 1
        self.example(kind, example)

    def example(self, kind: str, example: str) -> None:
        ex = self.examples.setdefault(kind, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(example[:400])


class Fuzzer:
    """Sends the cases and classifies every reply."""

    def __init__(self, daemon: PrivateDaemon, seed: int, reply_timeout: float) -> None:
        self.daemon = daemon
        self.rnd = random.Random(seed)
        self.timeout = reply_timeout
        self.t = Tally()
        self.ctl = daemon.client("fuzz-control")
        hello = self.ctl.server_info
        self.max_frame = int(hello["max_frame"])
        self.ops = [op for op in hello["ops"] if op not in NEVER]
        table = SPECS
        self.specs: dict[str, dict[str, Arg]] = {op: table[op].args for op in self.ops
                                                 if op in table}
        self.weights = [OP_WEIGHT.get(op, 1.0) for op in self.ops]
        self.conn: Wire | None = None
        self.play_ids: list[int] = []
        self.play_gone = True
        self.died = False

    # -- plumbing -----------------------------------------------------------------------------
    def wire(self, greet: bool = True) -> Wire:
        w = Wire(self.daemon.sock, self.timeout)
        if greet:
            rid = self.next_id(w)
            body = pack({"id": rid, "op": HELLO_OP, "palace": None,
                         "args": hello_args("fuzz", "0")})
            if not self.send(w, framed(body)):
                raise Closed
            self.read(w, "hello", "daemon.hello", rid, expect_ok=True)
        return w

    def next_id(self, w: Wire) -> int:
        rid = w.next_id
        w.next_id += 1
        return rid

    def send(self, w: Wire, data: bytes, frames: int = 1) -> bool:
        self.t.frames += frames
        return w.send(data)

    def read(self, w: Wire, case: str, request: str, req_id: Any, *,
             expect: set[int] | None = None, expect_ok: bool = False,
             may_close: bool = False, op: str | None = None) -> dict[str, Any] | None:
        """Read and check one reply; returns it, or None when the daemon closed instead."""
        try:
            body = w.recv_frame()
        except Closed:
            if may_close:
                self.t.closed[case] += 1
            else:
                self.t.fail("dropped", f"{case}: no reply to {request}")
            return None
        except TimeoutError:
            self.t.fail("hung", f"{case}: no reply within {self.timeout:.0f}s to {request}")
            return None
        except ValueError as exc:
            self.t.fail("malformed", f"{case}: {exc} (request {request})")
            return None
        if len(body) > self.t.max_reply:
            self.t.max_reply, self.t.max_reply_case = len(body), f"{case} {request[:120]}"
        try:
            msg = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as exc:
            self.t.fail("malformed", f"{case}: reply not msgpack ({exc}) to {request}")
            return None
        problem = envelope_problem(msg, req_id)
        if problem is not None:
            self.t.fail("malformed", f"{case}: {problem}; request {request}")
            return None
        key = "OK" if msg["ok"] else f"{msg['error']['code']} {msg['error']['name']}"
        self.t.replies[key] += 1
        if op is not None:
            self.t.by_op.setdefault(op, Counter())[key] += 1
        if not msg["ok"]:
            self.check_error(case, request, msg["error"])
        code = 0 if msg["ok"] else msg["error"]["code"]
        if expect_ok and code:
            self.t.fail("wrong_code", f"{case}: expected success, got {key}: "
                        f"{msg['error']['message'][:200]}")
        if expect is not None and code not in expect:
            self.t.fail("wrong_code", f"{case}: expected code {sorted(expect)}, got {key}; "
                        f"request {request}")
        return msg  # type: ignore[no-any-return]

    def check_error(self, case: str, request: str, err: dict[str, Any]) -> None:
        message = err["message"]
        if len(message) > self.t.max_message:
            self.t.max_message, self.t.max_message_case = len(message), f"{case} {err['name']}"
        if len(message) > MAX_MESSAGE:
            self.t.fail("long_message", f"{case} {err['name']}: {len(message)} chars: "
                        f"{message[:150]}")
        if err["code"] in SERVER_FAULTS:
            eid = err["details"].get("error_id")
            self.t.internals.append(Internal(case, request[:600],
                                             f"{err['name']}: {message[:300]}",
                                             eid if isinstance(eid, str) else None))

    def note(self, kind: str, example: str) -> None:
        """Something worth reporting that is not a failure."""
        self.t.notes[kind] += 1
        self.t.example(kind, example)

    def alive(self) -> bool:
        if self.daemon.proc is not None and self.daemon.proc.poll() is not None:
            self.died = True
        return not self.died

    # -- structured cases -----------------------------------------------------------------------
    def ensure_play(self) -> None:
        """(Re)create fuzz-play with a few drawers whose ids the fuzzer can aim at."""
        if not self.play_gone:
            return
        self.ctl.create_palace(PLAY, exist_ok=True)
        self.play_ids = [self.ctl.remember(PLAY, f"play drawer {i} {self.rnd.random()}",
                                           room=f"r{i % 3}") for i in range(8)]
        self.play_gone = False

    def pick_palace(self, op: str) -> Any:
        roll = self.rnd.random()
        if op in KEEP_SAFE and roll < 0.25:
            return KEEP
        if roll < 0.65:
            return PLAY
        if roll < 0.9:
            return self.rnd.choice(NAMES)
        return self.rnd.choice((None, None, 7, ["fuzz-play"], b"fuzz-play"))

    def build_args(self, op: str) -> Any:
        rnd = self.rnd
        if rnd.random() < 0.04:
            return rnd.choice(([], "args", 5, ["text", "x"], True, math.nan))
        spec = self.specs.get(op)
        if spec is None:  # an op this fuzzer has no spec for: random keys
            return {rnd.choice(KEYS): any_value(rnd) for _ in range(rnd.randrange(4))}
        args: dict[Any, Any] = {}
        for name, arg in spec.items():
            if rnd.random() < (0.92 if arg.required else 0.5):
                args[name] = value_for(arg, rnd, self.play_ids)
        if rnd.random() < 0.07:
            args[rnd.choice(KEYS)] = any_value(rnd)
        return args

    def structured(self) -> None:
        rnd = self.rnd
        if rnd.random() < 0.03:
            op = rnd.choice(("", "memory.", "x" * 1000, "Memory.Get", "daemon.hello",
                             "memory.get\x00", "palace.*", "🧠"))
        else:
            op = rnd.choices(self.ops, self.weights)[0]
        palace = self.pick_palace(op)
        args = self.build_args(op)
        env: dict[str, Any] = {"op": op, "palace": palace, "args": args}
        if rnd.random() < 0.05:
            env["timeout_ms"] = rnd.choice((1, 0, -1, 2**63 - 1, 2**64 - 1, 1.5, "5", True))
        self.ensure_play()
        if self.conn is None:
            self.conn = self.wire()
        rid = self.next_id(self.conn)
        env["id"] = rid
        request = f"op={short(op)!r} palace={short(palace)!r} args={short(args)!r}"
        if "timeout_ms" in env:
            request += f" timeout_ms={env['timeout_ms']!r}"
        self.t.cases["structured"] += 1
        body = pack(env)
        if len(body) > self.max_frame:  # refused by length; the daemon then closes
            self.send(self.conn, framed(body))
            self.read(self.conn, "structured", request, None, expect={101}, op=str(op)[:40])
            self.conn.close()
            self.conn = None
            return
        if not self.send(self.conn, framed(body)):
            self.t.fail("dropped", f"structured: daemon closed before {request}")
            self.conn = None
            return
        msg = self.read(self.conn, "structured", request, rid, op=str(op)[:40])
        if msg is None or (not msg["ok"] and msg["error"]["code"] in CLOSING_CODES):
            # A refused (repeated) hello ends the connection, as the first one does.
            self.conn.close()
            self.conn = None
            return
        if msg["ok"] and op == "palace.delete" and palace == PLAY:
            self.play_gone = True
        if msg["ok"] and op == "memory.remember" and palace == PLAY:
            self.play_ids.append(int(msg["result"].get("id", 0)))

    # -- raw cases: each on a fresh connection ------------------------------------------------
    def raw_random_bytes(self) -> None:
        w = self.wire()
        data = self.rnd.randbytes(self.rnd.randrange(1, 65))
        self.send(w, data)
        w.half_close()
        for _ in range(4):  # random bytes may happen to form a frame or two
            if self.read(w, "random_bytes", f"bytes {data.hex()[:80]}", None, may_close=True,
                         expect={100, 101, 103, 104, 105}) is None:
                break
        w.close()

    def raw_truncated_header(self) -> None:
        w = self.wire(greet=self.rnd.random() < 0.7)
        self.send(w, self.rnd.randbytes(self.rnd.randrange(1, 4)))
        w.half_close()
        self.read(w, "truncated_header", "1-3 header bytes then EOF", None, may_close=True,
                  expect=set())
        w.close()

    def raw_oversize(self) -> None:
        w = self.wire(greet=self.rnd.random() < 0.8)
        n = self.rnd.choice((self.max_frame + 1, self.max_frame * 2, 2**31, 2**32 - 1,
                             self.rnd.randrange(self.max_frame + 1, 2**32)))
        tail = self.rnd.randbytes(self.rnd.choice((0, 10, 4096)))
        self.send(w, HEADER.pack(n) + tail)
        self.read(w, "oversize_length", f"length prefix {n}", None, expect={101})
        w.close()

    def raw_half_frame(self) -> None:
        w = self.wire(greet=self.rnd.random() < 0.8)
        n = self.rnd.randrange(2, 70_000)
        body = pack({"id": 1, "op": "daemon.status", "palace": None,
                     "args": {"pad": "p" * n}})
        cut = self.rnd.randrange(0, len(body))
        self.send(w, HEADER.pack(len(body)) + body[:cut])
        if self.rnd.random() < 0.5:
            w.half_close()
            self.read(w, "half_frame", f"{cut} of {len(body)} body bytes then EOF", None,
                      may_close=True, expect=set())
        self.t.cases["half_frame_closed"] += 1
        w.close()

    def raw_zero_length(self) -> None:
        w = self.wire()
        self.send(w, HEADER.pack(0))
        self.read(w, "zero_length", "zero-length frame", None, expect={100}, may_close=True)
        w.close()

    def raw_wrong_shape(self) -> None:
        w = self.wire()
        shapes: list[Any] = [[], [1, 2], 0, -1, 2**64 - 1, "daemon.status", None, True,
                             b"\x00", 1.5, ["id", 1, "op", "daemon.status"], [{"id": 1}]]
        obj = self.rnd.choice(shapes)
        self.send(w, framed(pack(obj)))
        self.read(w, "wrong_shape", f"{short(obj)!r}", None, expect={100})
        self.check_still_serving(w, "wrong_shape")
        w.close()

    def check_still_serving(self, w: Wire, case: str) -> None:
        """After a refused (but whole) frame the connection must go on serving."""
        rid = self.next_id(w)
        if self.send(w, framed(pack({"id": rid, "op": "palace.list", "palace": None,
                                     "args": {}}))):
            self.read(w, case, "palace.list after a refused frame", rid, expect_ok=True)

    def raw_bad_envelope(self) -> None:
        w = self.wire()
        rnd = self.rnd
        good: dict[Any, Any] = {"id": 5, "op": "daemon.status", "palace": None, "args": {}}
        variants: list[tuple[str, dict[Any, Any], set[int] | None]] = [
            ("no id", {k: v for k, v in good.items() if k != "id"}, {100}),
            ("id float", {**good, "id": 1.5}, {100}),
            ("id bool", {**good, "id": True}, {100}),
            ("id list", {**good, "id": [1]}, {100}),
            ("id nil", {**good, "id": None}, {100}),
            ("id 2^64-1", {**good, "id": 2**64 - 1}, None),
            ("id -2^63", {**good, "id": -(2**63)}, None),
            ("id 10 KB str", {**good, "id": "i" * 10_000}, None),
            ("no op", {k: v for k, v in good.items() if k != "op"}, {100}),
            ("op int", {**good, "op": 7}, {100}),
            ("op nil", {**good, "op": None}, {100}),
            ("op bytes", {**good, "op": b"daemon.status"}, {100}),
            ("unknown key", {**good, "extra": 1}, {100}),
            ("unknown keys x50", {**good, **{f"k{i}": i for i in range(50)}}, {100}),
            ("int key", {**good, 1: 2}, {100}),
            ("palace int", {**good, "op": "palace.info", "palace": 5}, {100, 105, 205}),
            ("palace list", {**good, "op": "palace.info", "palace": ["a"]}, {100, 105, 205}),
            ("args list", {**good, "args": [1]}, {100, 105}),
            ("args str", {**good, "args": "x"}, {100, 105}),
            ("timeout 0", {**good, "timeout_ms": 0}, {100}),
            ("timeout -1", {**good, "timeout_ms": -1}, {100}),
            ("timeout float", {**good, "timeout_ms": 1.5}, {100}),
            ("timeout str", {**good, "timeout_ms": "5"}, {100}),
            ("timeout bool", {**good, "timeout_ms": True}, {100}),
            ("timeout 2^63", {**good, "timeout_ms": 2**63}, None),
            ("timeout 2^64-1", {**good, "timeout_ms": 2**64 - 1}, None),
            ("timeout 1 ms", {**good, "timeout_ms": 1}, {0, 401}),
        ]
        name, env, expect = rnd.choice(variants)
        rid = env.get("id") if isinstance(env.get("id"), int | str) and not isinstance(
            env.get("id"), bool) else None
        self.send(w, framed(pack(env)))
        self.read(w, "bad_envelope", name, rid, expect=expect)
        self.check_still_serving(w, "bad_envelope")
        w.close()

    def raw_ext_type(self) -> None:
        w = self.wire()
        code = self.rnd.choice((5, 0, 127, -1))
        where = self.rnd.choice(("args", "id", "op", "top", "deep"))
        marker = "\x00ext\x00"
        env: Any = {"id": 3, "op": "memory.recall", "palace": PLAY,
                    "args": {"query": "x", "tags": ["a"]}}
        if where == "top":
            env = marker
        elif where == "deep":
            env["args"]["tags"] = [[{"k": marker}]]
        else:
            env[where] = marker
        # Splice the extension in by hand: msgpack-python only packs codes 0-127, and -1 is
        # the reserved timestamp type (which msgpack decodes itself, bypassing ext_hook).
        ext = bytes([0xD6, code & 0xFF]) + self.rnd.randbytes(4)
        body = pack(env).replace(pack(marker), ext)
        self.send(w, framed(body))
        request = f"ext type {code} in {where}"
        msg = self.read(w, "ext_type", request, None if where in ("top", "id") else 3,
                        expect={100, 105} if code == -1 else {100})
        if code == -1 and msg is not None and not msg["ok"] and msg["error"]["code"] != 100:
            self.note("timestamp_ext_decoded", f"{request}: {msg['error']['message'][:120]}")
        self.check_still_serving(w, "ext_type")
        w.close()

    def raw_deep_nesting(self) -> None:
        w = self.wire()
        depth = self.rnd.choice((100, 1000, 5000, 100_000, 200_000))
        kind = self.rnd.choice(("array", "map", "args"))
        if kind == "array":
            body = b"\x91" * depth + b"\xc0"
        elif kind == "map":
            body = b"\x81\xa1k" * depth + b"\xc0"
        else:  # a valid envelope whose args are nested maps
            head = pack({"id": 9, "op": "memory.list", "palace": PLAY})
            body = bytes([0x84]) + head[1:] + pack("args") + b"\x81\xa1k" * depth + b"\xc0"
        sent = self.send(w, framed(body)) if len(body) <= self.max_frame else False
        if sent:
            self.read(w, "deep_nesting", f"{kind} nested {depth} deep", 9 if kind == "args"
                      else None, expect={100, 105})
        w.close()

    def raw_trailing_garbage(self) -> None:
        w = self.wire()
        body = pack({"id": 4, "op": "palace.list", "palace": None, "args": {}})
        self.send(w, framed(body + self.rnd.randbytes(self.rnd.randrange(1, 20))))
        self.read(w, "trailing_garbage", "request + trailing bytes", None, expect={100})
        w.close()

    def raw_bad_utf8(self) -> None:
        w = self.wire()
        bad = self.rnd.choice((b"\xed\xa0\x80", b"\xff", b"\xc0\xaf", b"a\xe2\x82", b"\xf8\x88"))
        where = self.rnd.choice(("op", "query"))
        raw_str = bytes([0xA0 | len(bad)]) + bad  # fixstr holding invalid UTF-8
        if where == "op":
            body = (bytes([0x84]) + pack("id") + pack(6) + pack("op") + raw_str
                    + pack("palace") + pack(None) + pack("args") + pack({}))
        else:
            body = (bytes([0x84]) + pack("id") + pack(6) + pack("op") + pack("memory.recall")
                    + pack("palace") + pack(PLAY) + pack("args") + bytes([0x81])
                    + pack("query") + raw_str)
        self.send(w, framed(body))
        # Invalid UTF-8 reads as U+FFFD (as lone surrogates do), so the request is answered
        # under its id: an op so named is unknown, a query so spelled is searched.
        self.read(w, "bad_utf8", f"invalid UTF-8 {bad.hex()} in {where}", 6,
                  expect={104} if where == "op" else None, expect_ok=where == "query")
        w.close()

    def raw_pre_hello(self) -> None:
        w = self.wire(greet=False)
        rnd = self.rnd
        choice = rnd.randrange(3)
        if choice == 0:
            op = rnd.choice(("daemon.status", "daemon.stop", "palace.delete", "", "x" * 5000))
            env: dict[str, Any] = {"id": 1, "op": op, "palace": KEEP, "args": {}}
            expect = {103}
            name = f"{short(op)!r} before hello"
        elif choice == 1:
            proto = rnd.choice((0, 2, -1, "1", 1.0, 2**64 - 1, None, [1], True))
            env = {"id": 1, "op": HELLO_OP, "palace": None,
                   "args": {"protocol": proto, "client": {"name": "fuzz"}}}
            # Only the integer 1 is protocol 1 (True and 1.0 compare equal to it, but are not).
            expect = {0} if type(proto) is int and proto == 1 else {102}
            name = f"hello with protocol {proto!r}"
        else:
            args = rnd.choice((None, [], "x", {"client": "x" * 100_000,
                                               "protocol": PROTOCOL_VERSION},
                               {"protocol": PROTOCOL_VERSION, "extra": any_value(rnd)}))
            env = {"id": 1, "op": HELLO_OP, "palace": None, "args": args}
            proto = args.get("protocol") if isinstance(args, dict) else None
            ok = type(proto) is int and proto == PROTOCOL_VERSION
            expect = {0} if ok else {102}
            name = f"hello with args {short(args)!r}"
        self.send(w, framed(pack(env)))
        self.read(w, "pre_hello", name, 1, expect=expect)
        w.close()

    def raw_pipelined(self) -> None:
        w = self.wire()
        n = self.rnd.randrange(10, 120)
        out = b""
        ids: list[tuple[int, str]] = []
        for _ in range(n):
            rid = self.next_id(w)
            op = self.rnd.choice(("daemon.status", "memory.get", "memory.recall", "palace.info",
                                  "memory.list"))
            args = self.build_args(op)
            out += framed(pack({"id": rid, "op": op, "palace": self.pick_palace(op),
                                "args": args}))
            ids.append((rid, f"pipelined {op} args={short(args)!r}"))
        # Send from a thread while reading: the replies (up to ~100 KB each) would fill the
        # socket buffers and deadlock a sender that reads only after sending everything.
        sender = threading.Thread(target=self.send, args=(w, out, n), daemon=True)
        sender.start()
        for rid, what in ids:
            if self.read(w, "pipelined", what, rid) is None:
                break
        w.close()
        sender.join(self.timeout)

    def raw_slow_drip(self) -> None:
        w = self.wire()
        rid = self.next_id(w)
        data = framed(pack({"id": rid, "op": "palace.list", "palace": None, "args": {}}))
        step = max(1, len(data) // 40)
        for i in range(0, len(data), step):
            if not w.send(data[i:i + step]):
                break
        self.t.frames += 1
        self.read(w, "slow_drip", "palace.list sent in 40 pieces", rid, expect_ok=True)
        w.close()

    def raw_max_frame(self) -> None:
        w = self.wire()
        env = {"id": 2, "op": "memory.remember", "palace": PLAY, "args": {"text": ""}}
        # "" packs as a 1-byte fixstr, a text over 65,535 chars as a 5-byte str32 header.
        text = "m" * (self.max_frame - len(pack(env)) - 4)
        env["args"] = {"text": text}
        body = pack(env)
        self.send(w, framed(body))
        self.read(w, "max_frame", f"remember of {len(text)} chars in a {len(body)}-byte frame",
                  2, expect={301})
        w.close()

    # -- the run ------------------------------------------------------------------------------
    def cases(self) -> list[tuple[Callable[[], None], float]]:
        return [
            (self.structured, 70.0), (self.raw_random_bytes, 3.0),
            (self.raw_truncated_header, 2.0), (self.raw_oversize, 2.0),
            (self.raw_half_frame, 3.0), (self.raw_zero_length, 1.0),
            (self.raw_wrong_shape, 2.0), (self.raw_bad_envelope, 4.0),
            (self.raw_ext_type, 2.0), (self.raw_deep_nesting, 1.5),
            (self.raw_trailing_garbage, 1.0), (self.raw_bad_utf8, 1.5),
            (self.raw_pre_hello, 2.0), (self.raw_pipelined, 0.8),
            (self.raw_slow_drip, 0.5), (self.raw_max_frame, 0.05),
        ]

    def run(self, max_frames: int, duration_s: float) -> float:
        fns, weights = zip(*self.cases(), strict=True)
        t0 = time.monotonic()
        while self.t.frames < max_frames and time.monotonic() - t0 < duration_s:
            fn = self.rnd.choices(fns, weights)[0]
            name = fn.__name__.removeprefix("raw_")
            if name != "structured":
                self.t.cases[name] += 1
            try:
                fn()
            except (Closed, ConnectionError, FileNotFoundError, PalaceError) as exc:
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                if not self.alive():
                    break
                self.t.fail("connect", f"{name}: {type(exc).__name__}: {exc}")
            except TimeoutError:
                self.t.fail("hung", f"{name}: no answer within {self.timeout:.0f}s")
        if self.conn is not None:
            self.conn.close()
        self.ctl.close()
        return time.monotonic() - t0


# -- known drawers and the end checks -------------------------------------------------------
SNAP_KEYS = ("id", "text", "wing", "room", "tags", "kind", "content_hash")


def seed_keep(ctl: Client, n: int) -> dict[int, dict[str, Any]]:
    """Store ``n`` known drawers in fuzz-keep; returns their snapshots by id."""
    ctl.create_palace(KEEP)
    extras = ("日本語 🧠 text", '"foo" OR NEAR(a b) col:term ^ *', "y" * 10_000,
              "line one\nline two\ttab", "Ä\u0308 combining", "\\ud800 escaped surrogate")
    for i in range(n):
        text = f"keepzq{i} known drawer {extras[i % len(extras)]} end{i}"
        ctl.remember(KEEP, text, wing=f"w{i % 3}", room=f"r{i % 4}", tags=[f"t{i % 5}"],
                     dedup=False)
    for subject, predicate, obj in KEEP_FACTS:
        ctl.kg_assert(KEEP, subject, predicate, obj)
    return snapshot(ctl, KEEP)


def snapshot(ctl: Client, palace: str) -> dict[int, dict[str, Any]]:
    return {int(d["id"]): {k: d.get(k) for k in SNAP_KEYS} for d in all_drawers(ctl, palace)}


# A drawer's fields that no request may change in fuzz-keep (recalls do move its access
# counters and weight: those are left out).
DUMP_KEYS = ("id", "text", "wing", "room", "tags", "importance", "source", "occurred_ms",
             "expires_ms", "superseded_by", "consolidated_into", "kind", "content_hash",
             "created_ms", "updated_ms")
KEEP_FACTS = (("keepzq-otter", "eats", "urchins"), ("keepzq-otter", "lives_in", "kelp forest"),
              ("keepzq-heron", "related_to", "keepzq-otter"))


def canonical_dump(ctl: Client, palace: str) -> str:
    """SHA-256 of a palace's canonical dump: drawers, the facts of the seeded entities and
    the identity text."""
    drawers = sorted(({k: d.get(k) for k in DUMP_KEYS} for d in all_drawers(ctl, palace)),
                     key=lambda d: d["id"])
    facts = {e: ctl.call("graph.timeline", palace, {"subject": e})
             for e in sorted({f[0] for f in KEEP_FACTS})}
    identity = ctl.palace_info(palace)["identity"]
    blob = json.dumps([drawers, facts, identity], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def end_checks(fz: Fuzzer, keep: dict[int, dict[str, Any]], pid: int) -> dict[str, Any]:
    """Daemon alive, connections, fuzz-keep unchanged, palaces consistent, log clean."""
    t = fz.t
    out: dict[str, Any] = {"alive": False}
    if not fz.alive():
        t.fail("daemon_died", f"palaced exited with {fz.daemon.proc and fz.daemon.proc.poll()}")
        return out
    try:
        with fz.daemon.client("fuzz-check") as c:
            status = c.status()
            out["alive"] = True
            if int(status["pid"]) != pid:
                t.fail("daemon_restarted", f"pid {pid} -> {status['pid']}")
            for _ in range(50):  # closed fuzz connections may take a moment to be noticed
                conns = int(c.status()["connections"])
                if conns <= 1:
                    break
                time.sleep(0.1)
            out["connections_at_end"] = conns
            if conns > 1:
                t.fail("connections_left", f"{conns} connections open with one client left")
            info = c.palace_info(KEEP)
            now = snapshot(c, KEEP)
            out["keep"] = {"before": len(keep), "after": len(now), "info_drawers":
                           info["drawers"]}
            if info["drawers"] != len(keep) or set(now) != set(keep):
                added = sorted(set(now) - set(keep))[:10]
                missing = sorted(set(keep) - set(now))[:10]
                t.fail("data_changed", f"fuzz-keep had {len(keep)} drawers, now "
                       f"{info['drawers']} (listed {len(now)}); added {added}, missing {missing}")
            for did, snap in keep.items():
                if did not in now:
                    continue
                got = {k: c.get(KEEP, did).get(k) for k in SNAP_KEYS}
                if got != snap or now[did] != snap:
                    t.fail("data_changed", f"drawer {did} changed: {short(snap)} -> {short(got)}")
            missed = 0
            for did in list(keep)[:10]:
                token = keep[did]["text"].split()[0]
                if did not in {int(r["id"]) for r in c.recall(KEEP, token, top_k=5)}:
                    missed += 1
            out["keep"]["search_misses"] = missed
            if missed:
                t.fail("search_broken", f"{missed}/10 known drawers not found by their token")
            bad = []
            for p in c.list_palaces():
                pinfo = c.palace_info(p["name"])
                if pinfo.get("consistent") is False or pinfo.get("mismatch"):
                    bad.append(f"{p['name']}: {short(pinfo)}")
            out["palaces"] = len(c.list_palaces())
            if bad:
                t.fail("inconsistent", "; ".join(bad)[:400])
    except (PalaceError, OSError) as exc:
        t.fail("daemon_unreachable", f"end checks: {type(exc).__name__}: {exc}")
    return out


def internal_causes(internals: list[Internal], log_file: Path) -> None:
    """Attach to each INTERNAL the exception line the daemon logged under its error id."""
    if not log_file.exists():
        return
    lines = log_file.read_text("utf-8", errors="replace").splitlines()
    for item in internals:
        if item.error_id is None:
            continue
        for i, line in enumerate(lines):
            if item.error_id in line:
                trace = []
                for nxt in lines[i + 1:i + 200]:
                    if re.match(r"\d{4}-\d\d-\d\d ", nxt):
                        break
                    trace.append(nxt)
                where = [ln.strip() for ln in trace if ln.strip().startswith("File ")]
                last = trace[-1].strip() if trace else ""
                item.cause = f"{last[:300]} at {where[-1][:200] if where else '?'}"
                break


def print_report(r: dict[str, Any], t: Tally, internals: list[Internal], mcp: McpTally
                 ) -> None:
    print(f"palace fuzz: seed {r['seed']}, {r['elapsed_s']} s, mode {r['mode']}, "
          f"max_frame {r['max_frame']}")
    print(f"{'frames sent':<34}{t.frames:>10,}")
    for name, n in sorted(t.cases.items(), key=lambda kv: -kv[1]):
        print(f"  case {name:<29}{n:>10,}")
    print(f"{'replies':<34}{sum(t.replies.values()):>10,}")
    for key, n in sorted(t.replies.items(), key=lambda kv: kv[0]):
        print(f"  {key:<32}{n:>10,}")
    print(f"{'closed by daemon (allowed)':<34}{sum(t.closed.values()):>10,}  {dict(t.closed)}")
    print(f"{'INTERNAL replies (500-502)':<34}{len(internals):>10,}")
    print(f"{'max reply size (bytes)':<34}{t.max_reply:>10,}  ({t.max_reply_case[:70]})")
    print(f"{'longest error message (chars)':<34}{t.max_message:>10,}  ({t.max_message_case})")
    print(f"{'daemon alive at end':<34}{r['checks'].get('alive')!s:>10}  "
          f"connections {r['checks'].get('connections_at_end')}")
    keep = r["checks"].get("keep", {})
    before_after = f"{keep.get('before')}/{keep.get('after')}"
    print(f"{'fuzz-keep drawers before/after':<34}{before_after:>10}"
          f"  search misses {keep.get('search_misses')}; palaces at end "
          f"{r['checks'].get('palaces')}")
    print(f"{'daemon log ERROR lines':<34}{len(r['log_errors']):>10,}")
    for kind, n in sorted(t.notes.items()):
        print(f"NOTE {kind}: {n}")
        for ex in t.examples.get(kind, [])[:2]:
            print(f"    {ex}")
    for kind, n in sorted(t.failures.items()):
        print(f"FAIL {kind}: {n}")
        for ex in t.examples.get(kind, []):
            print(f"    {ex}")
    seen: Counter[str] = Counter()
    for item in internals:
        sig = item.cause or item.message
        seen[sig] += 1
        if seen[sig] > 2:
            continue
        print(f"  INTERNAL [{item.case}] {item.request[:300]}")
        print(f"      -> {item.message[:160]}")
        print(f"      cause: {item.cause or '(not found in the log)'}")
    if len(seen) or internals:
        print(f"  INTERNAL by cause: {dict(seen)}" if len(seen) < 12 else
              f"  {len(seen)} distinct INTERNAL causes")
    print_mcp_report(r, mcp)
    print(f"RESULT: {r['result']}" + ("" if not r["reasons"] else
                                      "  -- " + "; ".join(r["reasons"])))


def print_mcp_report(r: dict[str, Any], t: McpTally) -> None:
    """The MCP part, the dump and the RSS (after ``print_report``'s lines)."""
    print(f"{'MCP lines sent':<34}{sum(t.cases.values()):>10,}  ({r.get('mcp_s', 0)} s, "
          f"bridge exit {r.get('mcp_exit')})")
    for name, n in sorted(t.cases.items(), key=lambda kv: -kv[1]):
        print(f"  mcp case {name:<25}{n:>10,}")
    for key, n in sorted(t.answers.items()):
        print(f"  mcp answer {key:<23}{n:>10,}")
    for kind, n in sorted(t.failures.items()):
        print(f"FAIL MCP {kind}: {n}")
    for ex in t.examples:
        print(f"    {ex}")
    dump = r.get("dump", {})
    same = dump.get("before") is not None and dump.get("before") == dump.get("after")
    print(f"{'fuzz-keep canonical dump':<34}{'unchanged' if same else 'CHANGED':>10}  "
          f"sha256 {str(dump.get('after'))[:16]}")
    rss = r.get("rss_mb", {})
    print(f"{'daemon RSS before/after (MB)':<34}{rss.get('before')!s:>10} / {rss.get('after')}")
    siege = r.get("siege")
    if siege:
        print(f"{'siege (stalled, flood)':<34}{sum(siege.values()):>10,}  {siege}")
    total = r.get("frames", 0) + sum(t.cases.values()) + sum((siege or {}).values())
    print(f"{'hostile cases in all':<34}{total:>10,}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=20_000, help="stop after this many frames")
    ap.add_argument("--duration", type=float, default=45.0, help="stop after this many seconds")
    ap.add_argument("--seed", type=int, default=1, help="seed of the case sequence")
    ap.add_argument("--keep", type=int, default=40, help="known drawers checked at the end")
    ap.add_argument("--reply-timeout", type=float, default=30.0,
                    help="seconds a reply may take before the case counts as hung")
    ap.add_argument("--mcp-lines", type=int, default=3000,
                    help="hostile JSON-RPC lines for a real palace mcp bridge (0: none)")
    ap.add_argument("--siege", action="store_true",
                    help="also stall senders and flood the connection slots (_siege.py; the "
                         "daemon then runs with short deadlines and 48+4 slots)")
    ap.add_argument("--rss-growth", type=float, default=150.0,
                    help="MB the daemon's RSS may grow over the run")
    add_daemon_args(ap)
    args = ap.parse_args()

    daemon = PrivateDaemon("palfuzz-", args.model, args.tiktoken)
    if args.siege:
        (daemon.home / "config.toml").write_text(
            "[limits]\n" + "".join(f"{k} = {v}\n" for k, v in SIEGE_LIMITS.items()))
    report: dict[str, Any] = {"seed": args.seed, "home": str(daemon.home), "checks": {},
                              "log_errors": [], "elapsed_s": 0.0, "mode": "?", "max_frame": 0}
    reasons: list[str] = []
    fz: Fuzzer | None = None
    mcp_tally = McpTally()
    try:
        status = daemon.start()
        pid = int(status["pid"])
        report["mode"] = status["mode"]
        fz = Fuzzer(daemon, args.seed, args.reply_timeout)
        report["max_frame"] = fz.max_frame
        keep = seed_keep(fz.ctl, args.keep)
        dump_before = canonical_dump(fz.ctl, KEEP)
        rss_before = rss_mb(pid)
        fz.ctl.close()
        report["elapsed_s"] = round(fz.run(args.frames, args.duration), 1)
        if args.siege and fz.alive():
            with daemon.client("fuzz-owner") as owner:
                siege_cases, siege_fails = run_siege(daemon.sock, owner)
            report["siege"] = dict(siege_cases)
            reasons.extend(f"siege: {f}" for f in siege_fails[:10])
        if args.mcp_lines and fz.alive():
            t_mcp = time.monotonic()
            mcp = McpFuzzer(daemon.env, PLAY, args.seed)
            mcp.run(args.mcp_lines)
            report["mcp_exit"] = mcp.close()
            mcp_tally = mcp.t
            report["mcp_s"] = round(time.monotonic() - t_mcp, 1)
        report["checks"] = end_checks(fz, keep, pid)
        if report["checks"].get("alive"):
            with daemon.client("fuzz-dump") as c:
                dump_after = canonical_dump(c, KEEP)
            rss_after = rss_mb(pid)
            report["dump"] = {"before": dump_before, "after": dump_after}
            report["rss_mb"] = {"before": round(rss_before, 1), "after": round(rss_after, 1)}
            if dump_after != dump_before:
                reasons.append("fuzz-keep's canonical dump changed")
            if rss_after - rss_before > args.rss_growth:
                reasons.append(f"daemon RSS grew {rss_after - rss_before:.0f} MB "
                               f"(> {args.rss_growth:.0f})")
        fz.ctl.close()
    except Exception as exc:
        reasons.append(f"fuzz aborted: {exc!r}")
    finally:
        report["log_errors"] = daemon.log_errors()
        report["shutdown"] = daemon.stop()
    tally = fz.t if fz is not None else Tally()
    internal_causes(tally.internals, daemon.log_file)
    if tally.internals:
        reasons.append(f"{len(tally.internals)} INTERNAL (500-502) replies")
    reasons.extend(f"{n} {kind}" for kind, n in sorted(tally.failures.items()))
    reasons.extend(f"{n} MCP {kind}" for kind, n in sorted(mcp_tally.failures.items()))
    if report["log_errors"]:
        reasons.append(f"{len(report['log_errors'])} ERROR lines in the daemon log")
    report["result"] = "FAIL" if reasons else "PASS"
    report["reasons"] = reasons
    report["frames"] = tally.frames
    print_report(report, tally, tally.internals, mcp_tally)
    if args.json:
        report.update(mcp_cases=dict(mcp_tally.cases), mcp_answers=dict(mcp_tally.answers),
                      mcp_failures=dict(mcp_tally.failures))
        report.update(frames=tally.frames, cases=dict(tally.cases),
                      replies=dict(tally.replies),
                      replies_by_op={k: dict(v) for k, v in tally.by_op.items()},
                      failures=dict(tally.failures), notes=dict(tally.notes),
                      examples=tally.examples,
                      internals=[vars(i) for i in tally.internals])
        args.json.write_text(json.dumps(report, indent=2, default=str))
    daemon.cleanup(keep=bool(reasons) or args.keep_home)
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main())
