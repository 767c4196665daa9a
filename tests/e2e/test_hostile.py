"""Hostile input against the live daemon's socket and a live ``palace mcp`` bridge, generated
by Hypothesis: every request gets a typed error envelope (never INTERNAL, STORAGE_ERROR or
INDEX_ERROR) or a JSON-RPC error, the daemon stays up (same pid) with bounded memory, and the
palace the input may not touch is unchanged (checksum of its canonical dump).

``test_bad_input.py`` runs such cases against the daemon core in-process; the corpus of
malformed frames and JSON-RPC lines (truncated, oversize, deep, slow, pipelined...) is
``bench/fuzz.py``, run bounded by ``test_bench_checks.py``. Stalled senders and connections
held past the limits are ``test_connections.py``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palaced.wire.protocol import HELLO_OP
from tests.conftest import DaemonProc, base_env, short_home
from tests.support.wire import Raw

KEEP = "hostile-keep"
PLAY = "hostile-play"
SERVER_FAULTS = {500, 501, 502}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def dump(d: DaemonProc) -> str:
    """SHA-256 of the kept palace: drawers (not their access counters), facts, identity."""
    keys = ("id", "text", "wing", "room", "tags", "importance", "kind", "content_hash",
            "superseded_by", "updated_ms")
    with d.client() as c:
        drawers = [{k: x.get(k) for k in keys} for x in c.drawers(KEEP, limit=1000)["drawers"]]
        facts = c.call("graph.timeline", KEEP, {"subject": "otter"})
        identity = c.palace_info(KEEP)["identity"]
    return hashlib.sha256(json.dumps([drawers, facts, identity], sort_keys=True,
                                     default=str).encode()).hexdigest()


@pytest.fixture(scope="module")
def live() -> Iterator[DaemonProc]:
    home = short_home()
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    with d.client() as c:
        for name in (KEEP, PLAY):
            c.create_palace(name)
        c.remember_many(KEEP, [{"text": f"kept drawer {i} about otters"} for i in range(20)])
        c.kg_assert(KEEP, "otter", "eats", "urchins")
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def baseline(live: DaemonProc) -> Iterator[tuple[int, float, str]]:
    """(pid, RSS, dump) before the module's hostile tests; checked again after them."""
    pid = live.pid()
    before = (pid, rss_mb(pid), dump(live))
    yield before
    assert live.pid() == pid
    assert dump(live) == before[2], "the kept palace changed"
    assert rss_mb(pid) - before[1] < 100, (before[1], rss_mb(pid))


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True) | st.text(max_size=30) | st.binary(max_size=30),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=16,
)
ops = st.sampled_from(["memory.remember", "memory.remember_many", "memory.recall",
                       "memory.get", "memory.forget", "memory.list", "palace.info",
                       "palace.create", "palace.delete", "graph.assert", "graph.query",
                       "memory.consolidate", "memory.prune", "nope", HELLO_OP])
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check_reply(reply: dict[str, Any], req_id: Any) -> None:
    assert reply["id"] == req_id or reply["id"] is None
    if not reply["ok"]:
        err = reply["error"]
        assert isinstance(err["code"], int) and 100 <= err["code"] < 600, err
        assert err["code"] not in SERVER_FAULTS, err
        assert err["name"] and err["message"] and len(err["message"]) <= 1000


@SETTINGS
@given(op=ops, palace=st.one_of(st.none(), st.just(PLAY), st.text(max_size=12),
                                st.integers(min_value=-(2**63), max_value=2**64 - 1)),
       args=msgpack_values, extra=st.dictionaries(st.text(max_size=6), msgpack_values,
                                                  max_size=2))
def test_envelopes_on_the_live_socket(live: DaemonProc, baseline: Any, op: str, palace: Any,
                                      args: Any, extra: dict[str, Any]) -> None:
    raw = Raw.connect(live.socket)
    try:
        env = {"id": 9, "op": op, "palace": palace, "args": args, **extra}
        reply = raw.request(env)
        _check_reply(reply, 9)
        if reply["ok"] and op in ("palace.create", "palace.delete") and palace != PLAY:
            with live.client() as c:  # a palace the input made: not the kept one
                assert palace != KEEP
                if op == "palace.create":
                    c.delete_palace(palace)
    finally:
        raw.close()


@SETTINGS
@given(body=st.binary(max_size=200), greet=st.booleans())
def test_raw_bytes_on_the_live_socket(live: DaemonProc, baseline: Any, body: bytes,
                                      greet: bool) -> None:
    raw = Raw.connect(live.socket, hello=greet)
    try:
        raw.send_bytes(struct.pack(">I", len(body)) + body)
        reply = raw.read()  # a typed answer, or a closed connection; never a hang
        if reply is not None:
            _check_reply(reply, reply.get("id"))
    finally:
        raw.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
rpc_messages = st.fixed_dictionaries(
    {}, optional={"jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
                  "id": st.integers() | st.text(max_size=8) | json_values,
                  "method": st.sampled_from(["tools/call", "tools/list", "ping", "initialize",
                                             "nope"]) | st.text(max_size=12),
                  "params": json_values | st.fixed_dictionaries(
                      {"name": st.sampled_from(["remember", "recall", "forget",
                                                "list_drawers", "kg_assert", "wake_up"])
                       | json_values, "arguments": json_values})})
lines = st.one_of(rpc_messages.map(json.dumps).map(str.encode), json_values.map(
    json.dumps).map(str.encode), st.binary(max_size=60).filter(lambda b: b"\n" not in b))


SYNC = b'{"jsonrpc": "2.0", "id": "sync-9f3a7c", "method": "ping"}\n'


@pytest.fixture(scope="module")
def bridge(live: DaemonProc) -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-m", "palace_client", "mcp", "--palace", PLAY],
                         env=live.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    yield p
    assert p.poll() is None, "the bridge died"
    assert p.stdin is not None
    p.stdin.close()
    assert p.wait(timeout=30) == 0
    assert p.stderr is not None and b"Traceback" not in p.stderr.read()


@SETTINGS
@given(line=lines)
def test_json_rpc_garbage_on_a_live_bridge(bridge: subprocess.Popen[bytes], baseline: Any,
                                           line: bytes) -> None:
    assert bridge.stdin is not None and bridge.stdout is not None
    bridge.stdin.write(line + b"\n" + SYNC)
    bridge.stdin.flush()
    while True:
        answer = json.loads(bridge.stdout.readline())
        if isinstance(answer, dict) and answer.get("id") == "sync-9f3a7c":  # SYNC's
            assert answer["result"] == {}
            return
        for msg in answer if isinstance(answer, list) else [answer]:
            assert msg["jsonrpc"] == "2.0" and ("result" in msg) != ("error" in msg), msg
            if "error" in msg:
                assert msg["error"]["code"] != -32603, msg  # never an internal error
