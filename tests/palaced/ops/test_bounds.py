"""Bounds on every argument, and error texts that never grow with their input.

Out-of-range ids, offsets, durations and times get INVALID_ARGS (never INTERNAL) and change
nothing; an error quotes at most a short excerpt of a bad value, so a huge one can neither
blow up the message nor make the reply too large to send. Requests go to the in-process
daemon core (``tests/support/inproc.py``).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.ops.fields import parse_ttl
from palaced.text.timeparse import parse_when
from palaced.wire import args as A
from palaced.wire import errors as E
from palaced.wire import specs
from palaced.wire.protocol import HELLO_OP, hello_args
from palaced.wire.specs import MAX_TTL_S
from tests.support.inproc import InProcDaemon
from tests.support.wire import Raw

PALACE = "bounds"
I63 = 2**63
U64 = 2**64 - 1
TEXT = "The staging database runs on port 5433"


@pytest.fixture(scope="module")
def target(inproc: InProcDaemon) -> InProcDaemon:
    """The in-process daemon core holding a palace with a drawer and a fact."""
    with inproc.client() as c:
        c.create_palace(PALACE)
        drawer = c.remember(PALACE, TEXT)
        c.call("graph.assert", PALACE, {"subject": "staging", "predicate": "port",
                                        "object": "5433", "literal": True,
                                        "source_drawer": drawer})
    return inproc


def snapshot(d: InProcDaemon) -> tuple[Any, ...]:
    """Everything a refused request could have changed."""
    with d.client() as c:
        info = c.palace_info(PALACE)
        drawers = c.call("memory.list", PALACE, {"limit": 1000})["drawers"]
        facts = c.call("graph.timeline", PALACE, {"subject": "staging"})
        palaces = [p["name"] for p in c.list_palaces()]
    counts = {k: info[k] for k in ("drawers", "vectors", "pending_embeddings")}
    return counts, drawers, facts, palaces


FACT = {"subject": "staging", "predicate": "owner", "object": "ops", "literal": True}
HOSTILE: list[tuple[str, dict[str, Any]]] = [
    # ids of 2^63 and 2^64-1: apsw raised OverflowError (INTERNAL).
    ("memory.get", {"id": I63}),
    ("memory.get", {"id": U64}),
    ("memory.forget", {"id": I63}),
    ("memory.forget", {"id": U64}),
    ("memory.remember", {"text": "a correction", "supersedes": I63}),
    ("memory.remember", {"text": "a correction", "supersedes": U64}),
    ("memory.remember_many", {"items": [{"text": "fine"}, {"text": "x", "supersedes": U64}]}),
    ("graph.assert", {**FACT, "source_drawer": I63}),
    ("graph.link", {"a": "staging", "relation": "part_of", "b": "infra",
                    "source_drawer": U64}),
    ("graph.invalidate", {"id": I63}),
    ("graph.invalidate", {"id": U64}),
    ("memoir.add_concept", {"memoir": "m", "name": "n", "definition": "d", "sources": [U64]}),
    ("memoir.refine", {"memoir": "m", "name": "n", "definition": "d", "sources": [0]}),
    ("memoir.show", {"memoir": "m", "offset": I63}),
    ("memoir.inspect", {"memoir": "m", "name": "n", "depth": U64}),
    # list offsets >= 2^63.
    ("memory.list", {"offset": I63}),
    ("memory.list", {"offset": U64}),
    # ttl: not finite, overflowing, or absurdly long (10^15 s was accepted).
    ("memory.remember", {"text": "temporary", "ttl": "infs"}),
    ("memory.remember", {"text": "temporary", "ttl": "1e400d"}),
    ("memory.remember", {"text": "temporary", "ttl": "1e308w"}),
    ("memory.remember", {"text": "temporary", "ttl": I63}),
    ("memory.remember", {"text": "temporary", "ttl": U64}),
    ("memory.remember", {"text": "temporary", "ttl": 10**15}),
    ("memory.remember", {"text": "temporary", "ttl": f"{10**15}s"}),
    ("memory.remember", {"text": "temporary", "ttl": MAX_TTL_S + 1}),
    # times of 5,000 digits (int() refused them with ValueError: INTERNAL).
    ("memory.remember", {"text": "dated", "occurred_at": "9" * 5000}),
    ("memory.remember", {"text": "dated", "expires_at": "9" * 5000}),
    ("graph.query", {"subject": "staging", "as_of": "9" * 5000}),
    ("graph.assert", {**FACT, "valid_from": "1" * 5000}),
    ("graph.invalidate", {"id": 1, "at": "2" * 5000}),
]


@pytest.mark.parametrize(("op", "args"), HOSTILE,
                         ids=[f"{op}-{next(iter(a.items()))[0]}-{i}"
                              for i, (op, a) in enumerate(HOSTILE)])
def test_out_of_range_values_are_invalid_args(target: InProcDaemon, op: str,
                                              args: dict[str, Any]) -> None:
    before = snapshot(target)
    with target.client() as c, pytest.raises(E.PalaceError) as err:
        c.call(op, PALACE, args)
    assert err.value.name == "INVALID_ARGS", (err.value.name, err.value.message)
    assert len(err.value.message) <= 300
    assert snapshot(target) == before


def test_range_messages_and_largest_values(target: InProcDaemon) -> None:
    with target.client() as c:
        with pytest.raises(E.InvalidArgs) as err:
            c.call("memory.get", PALACE, {"id": I63})
        assert "between 1 and 9223372036854775807" in err.value.message
        with pytest.raises(E.InvalidArgs) as err:
            c.call("memory.remember", PALACE, {"text": "x", "ttl": 10**15})
        assert "100 years" in err.value.message or "3155760000" in err.value.message
        assert "None" not in err.value.message
    # The largest values in range still work.
    before = snapshot(target)
    with target.client() as c:
        with pytest.raises(E.MemoryNotFound):
            c.call("memory.get", PALACE, {"id": I63 - 1})
        with pytest.raises(E.FactNotFound):
            c.call("graph.invalidate", PALACE, {"id": I63 - 1})
        out = c.call("memory.list", PALACE, {"offset": A.MAX_OFFSET})
        assert out["drawers"] == [] and out["next_offset"] is None
    assert snapshot(target) == before


# -- error texts stay small ------------------------------------------------------------------
def _raw_reply(d: InProcDaemon, requests: list[dict[str, Any]]
               ) -> tuple[dict[str, Any], int]:
    """Send raw requests on one connection; the last reply and its size in bytes."""
    raw = Raw(d.connect(), hello=False)
    try:
        reply: dict[str, Any] = {}
        for req in requests:
            reply = raw.request(req)
        return reply, raw.last_size
    finally:
        raw.close()


HELLO = {"id": 0, "op": HELLO_OP, "palace": None, "args": hello_args("tests", "0")}


@pytest.mark.parametrize("size", [2_500_000, 7_000_000])
@pytest.mark.parametrize("arg", ["occurred_at", "expires_at", "importance", "unknown-key"])
def test_huge_bad_value_gives_a_small_error(target: InProcDaemon, arg: str, size: int) -> None:
    before = snapshot(target)
    big = "x" * size
    args: dict[str, Any] = {"text": "a drawer with a bad field"}
    if arg == "unknown-key":
        args[big] = 1
    else:
        args[arg] = big
    reply, nbytes = _raw_reply(target, [HELLO, {"id": 1, "op": "memory.remember",
                                                "palace": PALACE, "args": args}])
    assert reply["ok"] is False
    err = reply["error"]
    assert err["name"] in ("INVALID_ARGS", "INVALID_CONTENT"), err["name"]
    assert len(err["message"]) <= 1_000
    assert nbytes <= 4_000
    assert snapshot(target) == before


def test_huge_hello_value_gives_a_small_error(target: InProcDaemon) -> None:
    # The handshake echoes the protocol it was asked for: the central cap bounds it.
    reply, nbytes = _raw_reply(target, [{"id": 0, "op": HELLO_OP, "palace": None,
                                         "args": {"protocol": "9" * 2_500_000}}])
    assert reply["error"]["name"] == "UNSUPPORTED_PROTOCOL"
    assert len(reply["error"]["message"]) <= 1_000
    assert nbytes <= 4_000


def test_quote_is_short_and_says_the_length() -> None:
    assert E.quote("abc") == "'abc'"
    assert E.quote(5) == "5"
    big = E.quote("x" * 2_500_000)
    assert len(big) <= 200 and "2500000 chars" in big and big.startswith("'xxx")
    for value in ("\x00" * 1000, "\u2028" * 1000, b"\xff" * 1000, "é" * 10**6):
        assert len(E.quote(value)) <= 200
    assert len(E.quote(10**5000)) <= 200
    assert len(E.quote(list(range(10**5)))) <= 200
    assert len(E.quote({"k": "v" * 10**6})) <= 200
    assert len(E.quote("y" * 1000, 60)) <= 60


def test_to_wire_caps_message_and_details() -> None:
    exc = E.InvalidArgs("m" * 5_000_000, details={
        "value": "v" * 2_500_000, "list": ["w" * 1000] * 10_000, "nested": {"a": {"b": "c" * 999}},
        "blob": b"\x00" * 10_000, "n": I63, "ok": True})
    wire = exc.to_wire()
    assert len(wire["message"]) <= 1_000 and "5000000 chars" in wire["message"]
    det = wire["details"]
    assert len(det["value"]) <= 200
    assert len(det["list"]) <= 101 and all(len(x) <= 200 for x in det["list"])
    assert len(det["nested"]["a"]["b"]) <= 200
    assert len(det["blob"]) <= 200
    assert det["n"] == I63 and det["ok"] is True
    assert len(msgpack.packb(wire)) < 50_000
    # The exception itself keeps its full text for the daemon's own log.
    assert len(exc.message) == 5_000_000


# -- parsers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["infs", "-infs", "1e400d", "1e308w", f"{10**15}s", I63, U64,
                                   10**15, 10**400, MAX_TTL_S + 1, "5218w", "36525.1d"],
                         ids=lambda v: E.quote(v, 30))
def test_parse_ttl_refuses_infinite_and_huge(value: Any) -> None:
    with pytest.raises(E.InvalidArgs) as err:
        parse_ttl(value)
    assert len(err.value.message) <= 200


def test_parse_ttl_limit_is_100_years() -> None:
    assert MAX_TTL_S == 100 * 36_525 * 864  # 100 years of 365.25 days
    for value, seconds in [(1, 1), ("90s", 90), ("15m", 900), ("12h", 43_200), ("2w", 1_209_600),
                           ("1.5h", 5400), (" 7d ", 604_800), (MAX_TTL_S, MAX_TTL_S),
                           ("5217w", 5217 * 604_800), ("36525d", MAX_TTL_S)]:
        assert parse_ttl(value) == seconds
    for value in (MAX_TTL_S + 1, "5218w", "36526d", 10**15):
        with pytest.raises(E.InvalidArgs):
            parse_ttl(value)


@pytest.mark.parametrize("value", ["9" * 5000, "1" * 4301, "x" * 2_500_000,
                                   "2023-05-08" + " " * 100], ids=lambda v: E.quote(v, 30))
def test_parse_when_refuses_long_input(value: str) -> None:
    with pytest.raises(E.InvalidContent) as err:
        parse_when(value, now_ms=0)
    assert len(err.value.message) <= 300
    assert len(str(err.value.details)) <= 300


# -- the decoder --------------------------------------------------------------------------------
def _op(**args: A.Arg) -> specs.OpSpec:
    return specs.OpSpec("t.op", dict(args), retry=specs.NEVER)


def _refused(op: specs.OpSpec, raw: dict[str, Any]) -> str:
    with pytest.raises(E.InvalidArgs) as err:
        A.decode_args(op, raw)
    return err.value.message


def test_decoder_applies_structural_bounds() -> None:
    op = _op(n=A.Arg("int"), f=A.Arg("float"), s=A.Arg("str"), t=A.Arg("str|int"),
             tags=A.Arg("strlist"), ids=A.Arg("intlist"), items=A.Arg("list"),
             w=A.Arg("str|float"))
    assert A.decode_args(op, {"n": I63 - 1, "t": -I63})["n"] == I63 - 1
    for raw in ({"n": I63}, {"n": -I63 - 1}, {"t": U64}, {"ids": [1, I63]},
                {"s": "x" * (A.DEFAULT_MAX_STR + 1)}, {"t": "x" * (A.DEFAULT_MAX_STR + 1)},
                {"tags": ["x" * (A.DEFAULT_MAX_STR + 1)]},
                {"tags": ["x"] * (A.DEFAULT_MAX_ITEMS + 1)},
                {"items": [{}] * (A.DEFAULT_MAX_ITEMS + 1)},
                {"f": 10**400}, {"w": 10**400}, {"f": math.inf}, {"w": -math.inf},
                {"f": math.nan}):
        msg = _refused(op, raw)
        assert len(msg) <= 300, msg


def test_decoder_range_messages_have_no_open_none() -> None:
    op = _op(lo=A.Arg("float", min=0.0), hi=A.Arg("float", max=1.0),
             both=A.Arg("int", min=1, max=9), ids=A.Arg("intlist", min=1))
    assert "at least 0.0" in _refused(op, {"lo": -1.0})
    assert "at most 1.0" in _refused(op, {"hi": 2})
    assert "between 1 and 9" in _refused(op, {"both": 10})
    assert "item 1" in _refused(op, {"ids": [1, 0]})
    for raw in ({"lo": -1.0}, {"hi": 2}, {"both": 0}, {"ids": [0]}):
        assert "None" not in _refused(op, raw)


def test_unknown_argument_names_are_quoted() -> None:
    op = _op(a=A.Arg("int"))
    msg = _refused(op, {"k" * 2_500_000: 1, 5: 2, b"raw": 3})
    assert len(msg) <= 500
    with pytest.raises(E.InvalidArgs) as err:
        A.decode_args(op, {f"k{i}": i for i in range(10_000)})
    assert len(err.value.message) <= 1_000
    assert len(err.value.details["unknown"]) <= 21


ARGS = [(op, name) for op in specs.SPECS.values() for name in op.args]
SAMPLE = {"str": "x", "int": 1, "float": 0.5, "bool": True, "strlist": [], "intlist": [],
          "list": [], "str|int": 1, "str|float": 0.5, "any": 1}


@settings(max_examples=200, deadline=None)
@given(where=st.sampled_from(ARGS),
       value=st.one_of(st.integers(), st.integers(min_value=2**62, max_value=2**70),
                       st.floats(), st.text(max_size=3000),
                       st.lists(st.integers(), max_size=5)))
def test_decoder_never_lets_out_of_range_values_through(where: tuple[specs.OpSpec, str],
                                                        value: Any) -> None:
    op, name = where
    raw = {n: SAMPLE[a.kind] for n, a in op.args.items() if a.required}
    raw[name] = value
    try:
        out = A.decode_args(op, raw)[name]
    except E.InvalidArgs as exc:
        assert len(exc.to_wire()["message"]) <= 1_000
        return
    spec = op.args[name]
    if isinstance(out, int) and not isinstance(out, bool):
        assert A.INT64_MIN <= out <= A.INT64_MAX or "float" in spec.kind
        assert spec.min is None or out >= spec.min
        assert spec.max is None or out <= spec.max
    elif isinstance(out, float):
        assert math.isfinite(out)
        assert spec.min is None or out >= spec.min
        assert spec.max is None or out <= spec.max
    elif isinstance(out, str):
        assert len(out) <= (spec.max_len or A.DEFAULT_MAX_STR)
    elif isinstance(out, list):
        assert len(out) <= (spec.max_len or A.DEFAULT_MAX_ITEMS)
        if spec.kind == "intlist":
            assert all(A.INT64_MIN <= i <= A.INT64_MAX for i in out)
