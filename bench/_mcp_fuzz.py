"""Hostile JSON-RPC for a real ``palace mcp`` bridge process (``fuzz.py --mcp-lines N``).

The bridge (``palace mcp --palace fuzz-play``) runs against the fuzzer's private daemon. Each
case is one input line: invalid JSON, invalid UTF-8, NUL bytes, a wrong ``jsonrpc``, messages
that are not objects, unknown methods, ids of every wrong type, params of the wrong type,
``tools/call`` without or with a wrong tool name, tool arguments of the wrong types, NaN and
huge numbers, deep nesting, lines past the bridge's 16 MiB limit, batches, notifications,
duplicate ids, FTS5 syntax as queries. After each, a ``ping`` with a fresh id: every answer
before the ping's must be well-formed JSON-RPC (a result, an error with an int code, a tool
result with ``content`` and ``isError``), their number must be what the case calls for (none
for a notification), and no answer may be an internal error (-32603). The bridge must then
answer a last ping and exit 0 at end of input.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

INTERNAL_ERROR = -32603
TOOLS = ("remember", "recall", "wake_up", "forget", "list_drawers", "kg_assert", "kg_query",
         "kg_invalidate", "kg_neighbors")
WRONG = (5, -1, 2**63, 1e308, "x", "", "\x00", "y" * 10_000, [], [1, "a"], {}, {"a": 1}, True,
         None, "NaN", "../x", '"foo" OR NEAR(a b)', "*", "日本語🧠")
MAX_LINE = 16 * 1024 * 1024  # palace_client.mcp.stdio.MAX_LINE


@dataclass
class McpTally:
    """Counts of the MCP run."""

    cases: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def fail(self, kind: str, example: str) -> None:
        self.failures[kind] += 1
        if len(self.examples) < 12:
            self.examples.append(f"{kind}: {example[:300]}")


def _j(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


class McpFuzzer:
    """One bridge process and the hostile lines sent to it."""

    def __init__(self, env: dict[str, str], palace: str, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.t = McpTally()
        # Every toolset: the kg tools it fuzzes are opt-in.
        self.p = subprocess.Popen([sys.executable, "-m", "palace_client", "mcp", "--palace",
                                   palace, "--tools", "all"], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.sync = 0
        self._stderr: list[bytes] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.send(_j({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "fuzz", "version": "0"}}}))
        self.send(_j({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def _drain(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            if len(self._stderr) < 200:
                self._stderr.append(line)

    def send(self, line: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + b"\n")
        self.p.stdin.flush()

    # -- the cases: each returns (line, answers expected: 0, 1, or -1 for "one list") -------
    def cases(self) -> list[tuple[Callable[[], tuple[bytes, int]], float]]:
        return [(self.invalid_json, 3), (self.invalid_utf8, 1), (self.nul, 1),
                (self.wrong_version, 1), (self.not_object, 1), (self.unknown_method, 1),
                (self.bad_id, 1), (self.params_type, 1), (self.call_no_tool, 1),
                (self.bad_arguments, 6), (self.numbers, 1), (self.deep_nesting, 0.5),
                (self.batch, 1), (self.notification, 1), (self.duplicate_id, 0.5),
                (self.fts_query, 2), (self.huge_string, 0.3), (self.huge_line, 0.01)]

    def req(self, method: str, params: Any = None, req_id: Any = 1) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            msg["params"] = params
        return msg

    def invalid_json(self) -> tuple[bytes, int]:
        rnd = self.rnd
        line = rnd.choice((b"garbage", b"{", b'{"jsonrpc": "2.0", "id": 1,', b"[1, 2", b"}",
                           b"{'single': 'quotes'}", b'{"a" 1}', b"nul", b"tru", b"0x10",
                           bytes(rnd.randrange(33, 127) for _ in range(rnd.randrange(1, 80)))))
        try:
            json.loads(line)
            return self.not_object()  # happened to be valid JSON
        except ValueError:
            return line, 1

    def invalid_utf8(self) -> tuple[bytes, int]:
        return b'{"jsonrpc": "2.0", "id": 1, "method": "ping\xff\xfe"}', 1

    def nul(self) -> tuple[bytes, int]:
        if self.rnd.random() < 0.5:
            return b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\x00}', 1
        return _j(self.req("tools/call", {"name": "remember",
                                          "arguments": {"text": "nul\x00byte"}})), 1

    def wrong_version(self) -> tuple[bytes, int]:
        msg = self.req("ping")
        version = self.rnd.choice(("1.0", 2.0, 2, None, "", "2.0 ", ["2.0"]))
        if version is None:
            del msg["jsonrpc"]
        else:
            msg["jsonrpc"] = version
        return _j(msg), 1

    def not_object(self) -> tuple[bytes, int]:
        return _j(self.rnd.choice((5, "x", None, True, 1.5, "ping"))), 1

    def unknown_method(self) -> tuple[bytes, int]:
        method = self.rnd.choice(("resources/list", "tools/run", "", "x" * 5000, "ping ",
                                  "initialize/", "tools/call\x00", "🧠", "rpc.discover"))
        return _j(self.req(method, {})), 1

    def bad_id(self) -> tuple[bytes, int]:
        msg = self.req("ping", {}, self.rnd.choice((1.5, True, [1], {"a": 1}, None)))
        return _j(msg), 1

    def params_type(self) -> tuple[bytes, int]:
        return _j(self.req(self.rnd.choice(("ping", "tools/call", "tools/list")),
                           self.rnd.choice(([], "x", 5, True, [1, 2])))), 1

    def call_no_tool(self) -> tuple[bytes, int]:
        params = self.rnd.choice(({}, {"name": 5}, {"name": None}, {"name": "nope"},
                                  {"name": "x" * 1000}, {"name": "remember\x00"},
                                  {"name": ["recall"]}, {"arguments": {"text": "x"}}))
        return _j(self.req("tools/call", params)), 1

    def bad_arguments(self) -> tuple[bytes, int]:
        rnd = self.rnd
        tool = rnd.choice(TOOLS)
        keys = ("text", "query", "id", "top_k", "budget", "levels", "tags", "importance",
                "ttl", "occurred_at", "supersedes", "scope", "subject", "predicate",
                "object", "entity", "depth", "limit", "offset", "room", "wing", "deep",
                "as_of", "fact_id", "bogus", "")
        if rnd.random() < 0.15:
            args: Any = rnd.choice(([], "text", 5, None, True))
        else:
            args = {rnd.choice(keys): rnd.choice(WRONG) for _ in range(rnd.randrange(1, 4))}
        return _j(self.req("tools/call", {"name": tool, "arguments": args})), 1

    def numbers(self) -> tuple[bytes, int]:
        rnd = self.rnd
        kind = rnd.randrange(4)
        if kind == 0:
            return b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', 1
        if kind == 1:
            return _j(self.req("tools/call", {"name": "recall", "arguments": {
                "query": "x", "top_k": rnd.choice((math.nan, math.inf, -math.inf))}})), 1
        if kind == 2:
            return (b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}'), 1
        return _j(self.req("ping", {}, 10**30)), 1

    def deep_nesting(self) -> tuple[bytes, int]:
        # 100 decodes (a batch whose one item is not an object: one list answered); 5,000
        # and more exceed the decoder's stack (a parse error). Nothing near the limit.
        depth = self.rnd.choice((100, 5000, 100_000))
        if self.rnd.random() < 0.5:
            return b"[" * depth + b"]" * depth, (-1 if depth == 100 else 1)
        inner = b'{"a":' * depth + b"1" + b"}" * depth
        return (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
                b'"recall", "arguments": {"query": "x", "deep": ' + inner + b"}}}"), 1

    def batch(self) -> tuple[bytes, int]:
        kind = self.rnd.randrange(3)
        if kind == 0:
            return b"[]", 1
        if kind == 1:
            return _j([self.req("ping", {}, 1), 5, {"jsonrpc": "2.0", "method": "x"}]), -1
        return _j([{"jsonrpc": "2.0", "method": "notifications/whatever"}]), 0

    def notification(self) -> tuple[bytes, int]:
        return _j({"jsonrpc": "2.0", "method": self.rnd.choice(
            ("notifications/cancelled", "notifications/progress", "x", "tools/call"))}), 0

    def duplicate_id(self) -> tuple[bytes, int]:
        msg = _j(self.req("tools/list", {}, 42))
        self.send(msg)  # the same id twice: answered twice, in order
        return msg, 2

    def fts_query(self) -> tuple[bytes, int]:
        q = self.rnd.choice(('"foo" OR NEAR(a b)', "*", "^", "col:term", "NOT", "(", '"',
                             "drawers; DROP TABLE drawers; --", "a NEAR/3 b", "{a b}: c",
                             "\u202eevil", "%", "_"))
        scope = self.rnd.choice(("palace", "all"))
        return _j(self.req("tools/call", {"name": "recall",
                                          "arguments": {"query": q, "scope": scope}})), 1

    def huge_string(self) -> tuple[bytes, int]:
        text = "z" * self.rnd.choice((200_001, 2_000_000))
        return _j(self.req("tools/call", {"name": "remember", "arguments": {"text": text}})), 1

    def huge_line(self) -> tuple[bytes, int]:
        return b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"q" * (
            MAX_LINE + 10) + b'"}', 1

    # -- the run ----------------------------------------------------------------------------
    def read_until(self, sync_id: str) -> list[Any]:
        """Answers read before the one to ``sync_id`` (which is checked and dropped)."""
        assert self.p.stdout is not None
        got: list[Any] = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise EOFError("the bridge closed its output")
            msg = json.loads(line)
            if isinstance(msg, dict) and msg.get("id") == sync_id:
                if msg.get("result") != {}:
                    self.t.fail("bad_ping", repr(msg))
                return got
            got.append(msg)

    def check_answer(self, case: str, msg: Any) -> None:
        if isinstance(msg, list):
            for m in msg:
                self.check_answer(case, m)
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or (
                ("result" in msg) == ("error" in msg)):
            self.t.fail("malformed", f"{case}: {str(msg)[:200]}")
            return
        if "error" in msg:
            code = msg["error"].get("code")
            if not isinstance(code, int) or not isinstance(msg["error"].get("message"), str):
                self.t.fail("malformed", f"{case}: {str(msg)[:200]}")
            elif code == INTERNAL_ERROR:
                self.t.fail("internal_error", f"{case}: {msg['error']['message'][:200]}")
            self.t.answers[f"error {code}"] += 1
            return
        result = msg["result"]
        if isinstance(result, dict) and "content" in result:
            if not isinstance(result.get("isError"), bool):
                self.t.fail("malformed", f"{case}: tool result {str(result)[:200]}")
            self.t.answers["tool error" if result.get("isError") else "tool result"] += 1
        else:
            self.t.answers["result"] += 1

    def run(self, n: int) -> None:
        fns, weights = zip(*self.cases(), strict=True)
        self.read_until_init()
        for _ in range(n):
            fn = self.rnd.choices(fns, weights)[0]
            case = fn.__name__
            line, expect = fn()
            self.t.cases[case] += 1
            self.send(line)
            self.sync += 1
            sync_id = f"sync-{self.sync}"
            self.send(_j(self.req("ping", {}, sync_id)))
            try:
                got = self.read_until(sync_id)
            except (EOFError, ValueError, BrokenPipeError) as exc:
                self.t.fail("bridge_died", f"{case}: {exc!r}")
                return
            for msg in got:
                self.check_answer(case, msg)
            count_ok = (len(got) == 1 and isinstance(got[0], list)) if expect == -1 else (
                len(got) == expect)
            if not count_ok:
                self.t.fail("answer_count", f"{case}: {len(got)} answers, expected {expect}: "
                            f"{str(got)[:200]} for {line[:120]!r}")

    def read_until_init(self) -> None:
        assert self.p.stdout is not None
        msg = json.loads(self.p.stdout.readline())
        if msg.get("id") != "init" or "result" not in msg:
            self.t.fail("init", str(msg)[:200])

    def close(self) -> int | None:
        """End of input: the bridge must exit 0; returns its exit code (None if hung)."""
        assert self.p.stdin is not None
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None
        if rc != 0:
            self.t.fail("bridge_exit", f"exit {rc}: {b''.join(self._stderr)[-300:]!r}")
        tracebacks = sum(1 for ln in self._stderr if ln.startswith(b"Traceback"))
        if tracebacks:
            self.t.fail("bridge_traceback", b"".join(self._stderr)[-300:].decode(
                "utf-8", "replace"))
        return rc
