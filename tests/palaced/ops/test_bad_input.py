"""Hostile and malformed input: typed errors, the daemon stays up, nothing changes.

Runs against the in-process daemon core (``tests/support/inproc.py``): the real connection handler,
decoders and handlers behind a socketpair.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palaced.wire import errors as E
from palaced.wire.protocol import HELLO_OP
from tests.support.inproc import InProcDaemon
from tests.support.wire import Raw

PALACE = "hostile"


@pytest.fixture(scope="module")
def target(inproc: InProcDaemon) -> InProcDaemon:
    with inproc.client() as c:
        c.create_palace(PALACE, exist_ok=True)
        c.remember(PALACE, "baseline drawer about the staging database")
    return inproc


def snapshot(d: InProcDaemon) -> tuple[int, int, list[str]]:
    with d.client() as c:
        info = c.palace_info(PALACE)
        names = [p["name"] for p in c.list_palaces()]
    return info["drawers"], info["vectors"], names


def assert_alive_and_unchanged(d: InProcDaemon, before: tuple[int, int, list[str]]) -> None:
    assert snapshot(d) == before


def test_malformed_frames(target: InProcDaemon) -> None:
    before = snapshot(target)
    # Garbage body inside a valid frame.
    r = Raw(target.connect())
    r.send_bytes(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
    reply = r.read()
    assert reply is not None and reply["error"]["name"] == "BAD_FRAME"
    r.close()
    # Oversize length prefix: refused before reading the body, then closed.
    r = Raw(target.connect())
    r.send_bytes(struct.pack(">I", 0xFFFFFFF0))
    reply = r.read()
    assert reply is not None and reply["error"]["code"] == 101
    assert r.closed_by_peer()
    r.close()
    # A valid msgpack value that is not a request map.
    r = Raw(target.connect())
    for body in ([1, 2, 3], "op", {"id": 1}, {"id": True, "op": "daemon.status"},
                 {"id": 1, "op": "daemon.status", "bogus": 1}):
        reply = r.request(body)
        assert reply["ok"] is False and reply["error"]["code"] == 100, body
    r.close()
    # No handshake first.
    r = Raw(target.connect(), hello=False)
    reply = r.request({"id": 1, "op": "daemon.status", "palace": None, "args": {}})
    assert reply["error"]["name"] == "HANDSHAKE_REQUIRED"
    r.close()
    # Wrong protocol version.
    r = Raw(target.connect(), hello=False)
    reply = r.request({"id": 1, "op": HELLO_OP, "args": {"protocol": 99}})
    assert reply["error"]["name"] == "UNSUPPORTED_PROTOCOL"
    r.close()
    # Truncated frame then hang-up: the daemon just drops the connection.
    r = Raw(target.connect())
    r.send_bytes(struct.pack(">I", 100) + b"\x80")
    r.close()
    assert_alive_and_unchanged(target, before)


def test_ops_and_args_refused(target: InProcDaemon) -> None:
    before = snapshot(target)
    r = Raw(target.connect())

    def call(op: str, palace: Any, args: Any) -> dict[str, Any]:
        return r.request({"id": 7, "op": op, "palace": palace, "args": args})

    reply = call("memory.explode", PALACE, {})
    assert reply["id"] == 7 and reply["error"]["name"] == "UNKNOWN_OP"
    reply = call("memory.remember", PALACE, {"text": "x", "colour": "red", "size": 1})
    assert reply["error"]["name"] == "INVALID_ARGS"
    assert reply["error"]["details"]["unknown"] == ["colour", "size"]
    for args in ({"text": 5}, {"text": ["a"]}, {"text": "ok", "importance": 7},
                 {"text": "ok", "importance": "urgent"}, {"text": "ok", "tags": "x"},
                 {"text": "ok", "tags": [1]}, {"text": "ok", "room": ""},
                 {"text": "ok", "occurred_at": "yesterday-ish"}, {}, "text"):
        reply = call("memory.remember", PALACE, args)
        assert reply["ok"] is False, args
        assert reply["error"]["code"] in (105, 303), (args, reply)
    reply = call("memory.recall", PALACE, {"query": "x", "top_k": 0})
    assert reply["error"]["name"] == "INVALID_ARGS"
    reply = call("memory.get", PALACE, {"id": "1"})
    assert reply["error"]["name"] == "INVALID_ARGS"
    for name in ("../x", "/abs", "", "a\x00b", "UPPER", "a--b", "x" * 65, "-a", "a_b", 5):
        reply = call("palace.create", name, {})
        assert reply["ok"] is False, name
        assert reply["error"]["code"] in (100, 105, 205), (name, reply)
    reply = call("memory.remember", None, {"text": "no palace"})
    assert reply["error"]["name"] == "INVALID_ARGS"
    r.close()
    assert_alive_and_unchanged(target, before)


def test_content_limits_and_fts_syntax(target: InProcDaemon) -> None:
    before = snapshot(target)
    with target.client() as c:
        with pytest.raises(E.InvalidContent):
            c.remember(PALACE, "nul\x00byte")
        with pytest.raises(E.InvalidContent):
            c.remember(PALACE, "   \n\t ")
        with pytest.raises(E.TextTooLarge):
            c.remember(PALACE, "x" * 200_001)
        with pytest.raises(E.InvalidArgs):
            c.recall(PALACE, "nul\x00query")
        with pytest.raises(E.PalaceNotFound):  # a read never creates the palace
            c.recall("no-such-palace", "text")
        # A bad item anywhere in a batch rejects the whole batch.
        with pytest.raises(E.InvalidContent) as err:
            c.remember_many(PALACE, [{"text": "fine one"}, {"text": ""}])
        assert err.value.details["index"] == 1
        for q in ('"unbalanced', "a AND OR NOT b", "NEAR(a b, 2)", "col:value", "*", "a*",
                  "(((", "^start", "-x", '"" AND ""', "title:(x OR y)", "'; DROP TABLE x;--",
                  "{a b}", "+", "   "):
            out = c.recall_ex(PALACE, q, top_k=3)
            assert isinstance(out["results"], list), q
        hit = c.recall(PALACE, 'staging "database" AND NOT*', top_k=1)
        assert hit and "staging database" in hit[0]["text"]
    assert_alive_and_unchanged(target, before)


def test_update_refuses_bad_input(target: InProcDaemon) -> None:
    """Every bad edit is a typed error and leaves the drawer as it was (no new version)."""
    before = snapshot(target)
    with target.client() as c:
        did = next(d["id"] for d in c.drawers(PALACE, limit=1000)["drawers"]
                   if d["text"] == "baseline drawer about the staging database")
        drawer = c.get(PALACE, did)
        r = Raw(target.connect())
        for args in ({"id": did}, {"id": did, "text": ""}, {"id": did, "text": "nul\x00"},
                     {"id": did, "text": 5}, {"id": did, "importance": "urgent"},
                     {"id": did, "importance": 1.5}, {"id": did, "tags": ["ok", "\x07"]},
                     {"id": did, "room": " "}, {"id": did, "wing": "x" * 201},
                     {"id": 0, "text": "x"}, {"id": 2**63, "text": "x"}, {"text": "x"},
                     {"id": did, "text": "x", "colour": "red"}, [did]):
            reply = r.request({"id": 3, "op": "memory.update", "palace": PALACE,
                               "args": args})
            assert reply["ok"] is False, args
            assert reply["error"]["code"] in (105, 301, 303), (args, reply)
        r.close()
        with pytest.raises(E.TextTooLarge):
            c.update(PALACE, did, text="x" * 200_001)
        with pytest.raises(E.MemoryNotFound):
            c.update(PALACE, 10**12, text="nobody")
        assert c.get(PALACE, did) == drawer
    assert_alive_and_unchanged(target, before)


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True) | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(["memory.remember", "memory.recall", "memory.get", "memory.forget",
                           "memory.list", "memory.remember_many", "memory.update",
                           "palace.info", "palace.create", "nope"]),
       palace=st.one_of(st.none(), st.just(PALACE), st.text(max_size=12),
                        st.integers(min_value=-(2**63), max_value=2**64 - 1)),
       args=msgpack_values)
def test_fuzzed_requests_get_typed_errors(target: InProcDaemon, op: str, palace: Any,
                                          args: Any) -> None:
    before = snapshot(target)
    r = Raw(target.connect())
    try:
        reply = r.request({"id": 1, "op": op, "palace": palace, "args": args})
    finally:
        r.close()
    assert reply["id"] == 1
    if reply["ok"]:
        # Only read-only ops (or idempotent no-ops) may succeed on random input.
        assert op in ("memory.recall", "memory.list", "palace.info") or (
            # (no args, None or {}, is a valid palace.create)
            op == "palace.create" and palace != PALACE and (args is None or args == {})
        ), reply
        if op == "palace.create":
            with target.client() as c:
                c.delete_palace(palace)
    else:
        err = reply["error"]
        assert err["code"] != 500, err  # never an internal error
        assert err["name"] and err["message"]
    assert_alive_and_unchanged(target, before)
