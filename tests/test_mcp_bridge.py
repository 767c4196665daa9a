"""The MCP stdio bridge: JSON-RPC handling, tools, rendering, process behaviour, real daemon."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_client.mcp.bridge import (
    LATEST_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    Bridge,
    serve,
)
from palace_client.mcp.toolbox import NUDGE_AFTER, NUDGE_TEXT, Toolbox
from palace_client.mcp.tools import TOOLS
from palace_client.slug import default_palace, is_palace_name, palace_name_for, slugify
from palaced.errors import InvalidArgs, MemoryNotFound, PalaceNotFound, ShuttingDown
from tests.conftest import DaemonProc, base_env

REPO = Path(__file__).resolve().parents[1]
BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]


# -- a duck-typed stand-in for palace_client.Client -------------------------------------------
class FakeClient:
    """Enough of the daemon, in memory, to drive every tool."""

    RECALL_ARGS = frozenset({"query", "top_k", "wing", "room", "tags", "budget", "levels",
                             "deep"})

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, dict[str, Any]]] = []
        self.palaces: dict[str, dict[int, dict[str, Any]]] = {}
        self.next_id = 1
        self.closed = 0
        self.shutting_down_once = False

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]:
        return self.call("palace.create", name, {"exist_ok": exist_ok})

    def list_palaces(self) -> list[dict[str, Any]]:
        return list(self.call("palace.list")["palaces"])

    def close(self) -> None:
        self.closed += 1

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        args = dict(args or {})
        self.calls.append((op, palace, args))
        if self.shutting_down_once:
            self.shutting_down_once = False
            raise ShuttingDown("daemon is shutting down")
        if op == "daemon.status":
            return {"version": "0.1.0", "model": {"state": "ready"},
                    "palaces": [{"name": n, "drawers": len(d)} for n, d in self.palaces.items()]}
        if op == "palace.list":
            return {"palaces": [{"name": n, "path": f"/x/{n}", "open": True}
                                for n in self.palaces]}
        if op == "palace.create":
            self.palaces.setdefault(str(palace), {})
            return {"name": palace}
        drawers = self.palaces.get(str(palace))
        if drawers is None:
            raise PalaceNotFound(f"no palace {palace!r}")
        if op == "palace.info":
            return {"name": palace, "drawers": len(drawers), "embedder": {"dims": 384}}
        if op == "memory.remember":
            for drawer in drawers.values():
                if drawer["text"] == args["text"]:
                    return {"id": drawer["id"], "created": False}
            drawer = {"id": self.next_id, "wing": "general", "room": "general", **args,
                      "created_ms": 1_700_000_000_000}
            drawers[self.next_id] = drawer
            self.next_id += 1
            return {"id": drawer["id"], "created": True}
        if op == "memory.recall":
            unknown = set(args) - self.RECALL_ARGS
            if unknown:
                raise InvalidArgs(f"unknown argument(s): {sorted(unknown)}",
                                  details={"unknown": sorted(unknown)})
            words = set(args["query"].lower().split())
            hits = [{**d, "score": len(words & set(d["text"].lower().split())) / len(words)}
                    for d in drawers.values()]
            hits = sorted((h for h in hits if h["score"] > 0), key=lambda h: -h["score"])
            hits = hits[: args.get("top_k", 10)]
            out: dict[str, Any] = {"results": hits, "mode": "hybrid"}
            if "levels" in args:
                out["sections"] = [{"level": 3, "title": "Search", "items": hits}]
                out["tokens_used"] = 42
            return out
        if op == "memory.wake_up":
            items = sorted(drawers.values(), key=lambda d: -float(d.get("importance", 0.5)))
            return {"sections": [{"level": 0, "title": "Identity", "items": []},
                                 {"level": 1, "title": "Essential story", "items": items}],
                    "tokens_used": 7}
        if op == "memory.forget":
            if args["id"] not in drawers:
                raise MemoryNotFound(f"no drawer {args['id']} in palace {palace!r}",
                                     details={"id": args["id"]})
            del drawers[args["id"]]
            return {"id": args["id"], "forgotten": True}
        if op == "memory.list":
            limit, offset = args.get("limit", 50), args.get("offset", 0)
            rows = sorted(drawers.values(), key=lambda d: -d["id"])
            page = rows[offset: offset + limit]
            nxt = offset + len(page)
            return {"drawers": page, "total": len(rows),
                    "next_offset": nxt if nxt < len(rows) else None}
        raise AssertionError(f"unexpected op {op}")


def make_bridge(palace: str = "proj", compact: bool = False) -> tuple[Bridge, FakeClient]:
    fake = FakeClient()
    return Bridge(Toolbox(lambda: fake, palace, compact=compact)), fake


def rpc(bridge: Bridge, message: object) -> Any:
    answer = bridge.handle_line(json.dumps(message).encode())
    return None if answer is None else json.loads(answer)


def call_tool(bridge: Bridge, name: str, arguments: object = None, req_id: int = 1
              ) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    answer = rpc(bridge, {"jsonrpc": "2.0", "id": req_id, "method": "tools/call",
                          "params": params})
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def text_of(result: Mapping[str, Any]) -> str:
    assert [block["type"] for block in result["content"]] == ["text"]
    return str(result["content"][0]["text"])


def initialize(version: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    if version is not None:
        params["protocolVersion"] = version
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}


# -- JSON-RPC layer -----------------------------------------------------------------------------
@pytest.mark.parametrize("version", SUPPORTED_PROTOCOL_VERSIONS)
def test_initialize_echoes_supported_versions(version: str) -> None:
    bridge, fake = make_bridge()
    answer = rpc(bridge, initialize(version))
    assert answer["id"] == 0
    result = answer["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "palace"
    assert "proj" in result["instructions"]
    assert fake.calls == []


@pytest.mark.parametrize("version", ["1999-01-01", "2026-01-01", "", None, 7])
def test_initialize_unknown_version_gets_newest(version: Any) -> None:
    bridge, _ = make_bridge()
    assert rpc(bridge, initialize(version))["result"]["protocolVersion"] == (
        LATEST_PROTOCOL_VERSION)
    assert LATEST_PROTOCOL_VERSION == "2025-11-25"


def test_client_name_becomes_the_drawer_source() -> None:
    bridge, fake = make_bridge()
    rpc(bridge, initialize("2025-06-18"))
    call_tool(bridge, "remember", {"text": "we deploy on fridays"})
    assert fake.calls[-1][2]["source"] == "mcp:t"


@pytest.mark.parametrize("method", ["server/discover", "resources/list", "prompts/list",
                                    "logging/setLevel", "completion/complete"])
def test_other_methods_are_not_found(method: str) -> None:
    bridge, _ = make_bridge()
    answer = rpc(bridge, {"jsonrpc": "2.0", "id": "a", "method": method, "params": {}})
    assert answer["id"] == "a"
    assert answer["error"]["code"] == -32601


@pytest.mark.parametrize("line", [b"garbage", b"{", b'{"jsonrpc": "2.0", "id": 1,',
                                  b"\xff\xfe not utf-8", b"[1, 2"])
def test_garbage_is_a_parse_error(line: bytes) -> None:
    bridge, _ = make_bridge()
    answer = json.loads(bridge.handle_line(line) or b"null")
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700


@pytest.mark.parametrize("message, echo", [
    (1, None),
    ("ping", None),
    ({"id": 1, "method": "ping"}, 1),
    ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, 1),
    ({"jsonrpc": "2.0", "id": 1, "method": 5}, 1),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
    ({"jsonrpc": "2.0", "method": 3}, None),
    ([], None),
])
def test_invalid_requests(message: object, echo: object) -> None:
    bridge, _ = make_bridge()
    answer = rpc(bridge, message)
    assert answer["error"]["code"] == -32600
    assert answer["id"] == echo


def test_params_must_be_an_object() -> None:
    bridge, _ = make_bridge()
    answer = rpc(bridge, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": [1]})
    assert answer["error"]["code"] == -32602


@pytest.mark.parametrize("method", ["notifications/initialized", "notifications/cancelled",
                                    "notifications/whatever", "tools/list", "nope"])
def test_notifications_get_no_answer(method: str) -> None:
    bridge, fake = make_bridge()
    assert rpc(bridge, {"jsonrpc": "2.0", "method": method, "params": {}}) is None
    assert fake.calls == []


def test_client_responses_and_blank_lines_are_ignored() -> None:
    bridge, _ = make_bridge()
    assert rpc(bridge, {"jsonrpc": "2.0", "id": 9, "result": {}}) is None
    assert bridge.handle_line(b"  \r\n") is None


def test_ping() -> None:
    bridge, _ = make_bridge()
    assert rpc(bridge, {"jsonrpc": "2.0", "id": 3, "method": "ping"}) == {
        "jsonrpc": "2.0", "id": 3, "result": {}}


def test_batch_answers_requests_only() -> None:
    bridge, _ = make_bridge()
    answer = rpc(bridge, [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                          {"jsonrpc": "2.0", "method": "notifications/initialized"},
                          {"jsonrpc": "2.0", "id": 2, "method": "nope"}])
    assert [a["id"] for a in answer] == [1, 2]
    assert answer[1]["error"]["code"] == -32601


def test_tools_list_order_and_schemas() -> None:
    bridge, fake = make_bridge()
    tools = rpc(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]
    assert [t["name"] for t in tools] == [
        "remember", "recall", "recall_all", "wake_up", "forget", "list_drawers",
        "list_palaces", "palace_info", "status", "kg_assert", "kg_query", "kg_timeline",
        "kg_invalidate", "kg_link", "kg_neighbors"]
    by_name = {t["name"]: t for t in tools}
    for tool in tools:
        schema = tool["inputSchema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert tool["description"] and "outputSchema" not in tool
        assert set(schema.get("required", [])) <= set(schema["properties"])
    assert by_name["remember"]["inputSchema"]["required"] == ["text"]
    assert set(by_name["remember"]["inputSchema"]["properties"]) == {
        "text", "room", "wing", "tags", "importance", "occurred_at", "supersedes", "ttl",
        "dedup"}
    assert set(by_name["recall"]["inputSchema"]["properties"]) == {
        "query", "budget", "levels", "deep", "top_k", "wing", "room", "tags",
        "include_superseded"}
    assert by_name["forget"]["inputSchema"]["required"] == ["id"]
    read_only = {t["name"] for t in tools if t["annotations"]["readOnlyHint"]}
    assert read_only == {"recall", "recall_all", "wake_up", "list_drawers", "list_palaces",
                         "palace_info", "status", "kg_query", "kg_timeline", "kg_neighbors"}
    assert {t["name"] for t in tools if t["annotations"]["destructiveHint"]} == {"forget"}
    assert fake.calls == []


def test_tool_specs_match_runners() -> None:
    toolbox = Toolbox(FakeClient, "p")
    assert all(toolbox.has_tool(spec.name) for spec in TOOLS)
    assert not toolbox.has_tool("nope")


@pytest.mark.parametrize("params", [{"name": "nope"}, {"name": 3}, {}])
def test_unknown_tool_is_invalid_params(params: dict[str, Any]) -> None:
    bridge, fake = make_bridge()
    answer = rpc(bridge, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
    assert answer["error"]["code"] == -32602
    assert fake.calls == []


# -- tools ----------------------------------------------------------------------------------
def test_lazy_connect_and_palace_created_once() -> None:
    made: list[FakeClient] = []

    def factory() -> FakeClient:
        made.append(FakeClient())
        return made[-1]

    bridge = Bridge(Toolbox(factory, "proj"))
    rpc(bridge, initialize("2025-06-18"))
    rpc(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert made == []
    call_tool(bridge, "remember", {"text": "alpha"})
    call_tool(bridge, "remember", {"text": "beta"})
    assert len(made) == 1
    assert [c[0] for c in made[0].calls].count("palace.create") == 1
    assert made[0].calls[0] == ("palace.create", "proj", {"exist_ok": True})


def test_remember_then_recall_renders_drawers() -> None:
    bridge, fake = make_bridge()
    stored = call_tool(bridge, "remember", {"text": "The API uses JWT tokens\nrotated daily",
                                            "room": "auth", "wing": "backend",
                                            "tags": ["security"], "importance": 0.9})
    assert stored["isError"] is False
    assert "Stored drawer #1 [backend/auth]" in text_of(stored)
    assert fake.calls[-1][2]["tags"] == ["security"]
    again = call_tool(bridge, "remember", {"text": "The API uses JWT tokens\nrotated daily"})
    assert "Already stored as drawer #1" in text_of(again)
    recall = text_of(call_tool(bridge, "recall", {"query": "JWT tokens"}))
    assert "#1 [backend/auth] score 1.000" in recall
    assert "  The API uses JWT tokens\n  rotated daily" in recall
    assert "mode hybrid" in recall


def test_recall_passes_budget_levels_deep_and_renders_sections() -> None:
    bridge, fake = make_bridge()
    call_tool(bridge, "remember", {"text": "deploys happen on fridays", "room": "ops"})
    text = text_of(call_tool(bridge, "recall", {"query": "fridays", "budget": 300,
                                                "levels": [3], "deep": True, "top_k": 5.0}))
    assert fake.calls[-1] == ("memory.recall", "proj", {"query": "fridays", "budget": 300,
                                                        "levels": [3], "deep": True,
                                                        "top_k": 5})
    assert "## L3 · Search" in text
    assert "42 tokens" in text


def test_recall_daemon_rejection_is_not_hidden() -> None:
    bridge, fake = make_bridge()
    fake.RECALL_ARGS = frozenset({"query", "top_k"})  # a daemon without budget/levels yet
    result = call_tool(bridge, "recall", {"query": "x", "budget": 10})
    assert result["isError"] is True
    assert "INVALID_ARGS" in text_of(result) and "budget" in text_of(result)


def test_compact_mode_one_line_per_drawer() -> None:
    bridge, _ = make_bridge(compact=True)
    call_tool(bridge, "remember", {"text": "line one\nline two", "room": "r"})
    call_tool(bridge, "remember", {"text": "line three", "room": "r"})
    text = text_of(call_tool(bridge, "recall", {"query": "line"}))
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("#") and lines[1].endswith("line one line two")


def test_recall_without_hits_suggests_next_step() -> None:
    bridge, _ = make_bridge()
    text = text_of(call_tool(bridge, "recall", {"query": "nothing here"}))
    assert "No drawers matched" in text and "recall_all" in text


def test_recall_all_merges_palaces_by_score() -> None:
    bridge, fake = make_bridge()
    fake.palaces = {"a": {}, "b": {}}
    fake.palaces["a"][1] = {"id": 1, "text": "red apple", "room": "fruit"}
    fake.palaces["b"][1] = {"id": 1, "text": "red apple pie", "room": "food"}
    fake.palaces["b"][2] = {"id": 2, "text": "green pie", "room": "food"}
    text = text_of(call_tool(bridge, "recall_all", {"query": "red apple pie", "top_k": 2}))
    assert "across 2 palace(s)" in text
    hits = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(hits) == 2
    assert hits[0].startswith("- #1 [b:food] score 1.000")
    assert hits[1].startswith("- #1 [a:fruit]")
    assert ("palace.create", "proj", {"exist_ok": True}) not in fake.calls


def test_wake_up_forget_list_info_status() -> None:
    bridge, _ = make_bridge()
    empty = text_of(call_tool(bridge, "wake_up", {}))
    assert "empty so far" in empty
    for i in range(3):
        call_tool(bridge, "remember", {"text": f"fact number {i}", "importance": i / 3})
    wake = text_of(call_tool(bridge, "wake_up", {"budget": 500}))
    assert "## L1 · Essential story" in wake and "## L0 · Identity" in wake
    assert wake.index("fact number 2") < wake.index("fact number 0")
    listing = text_of(call_tool(bridge, "list_drawers", {"limit": 2}))
    assert "Drawers 1-2 of 3" in listing and "offset=2" in listing
    assert text_of(call_tool(bridge, "forget", {"id": 2})) == "Forgot drawer #2 in palace 'proj'."
    missing = call_tool(bridge, "forget", {"id": 2})
    assert missing["isError"] is True
    assert "MEMORY_NOT_FOUND (300)" in text_of(missing) and "list_drawers" in text_of(missing)
    info = text_of(call_tool(bridge, "palace_info"))
    assert "drawers: 2" in info and "dims: 384" in info
    palaces = text_of(call_tool(bridge, "list_palaces", {}))
    assert "- proj (this project)" in palaces
    status = text_of(call_tool(bridge, "status"))
    assert status.startswith("Palace daemon status:") and "version: 0.1.0" in status


@pytest.mark.parametrize("arguments, fragment", [
    ({"text": 5}, "'text' must be a string"),
    ({}, "missing required argument(s): text"),
    ({"text": "x", "bogus": 1}, "unknown argument(s) 'bogus'"),
    ({"text": "x", "tags": "a"}, "'tags' must be an array"),
    ({"text": "x", "tags": [1]}, "'tags[0]' must be a string"),
    ({"text": "x", "importance": True}, "'importance' must be a number"),
    ([1, 2], "arguments must be a JSON object"),
])
def test_bad_arguments_are_tool_errors(arguments: object, fragment: str) -> None:
    bridge, fake = make_bridge()
    result = call_tool(bridge, "remember", arguments)
    assert result["isError"] is True
    assert fragment in text_of(result)
    assert "INVALID_ARGS" in text_of(result)
    assert fake.calls == []


def test_null_optional_arguments_are_dropped() -> None:
    bridge, fake = make_bridge()
    call_tool(bridge, "list_drawers", {"room": None, "limit": 3})
    assert fake.calls[-1] == ("memory.list", "proj", {"limit": 3})


def test_daemon_errors_become_tool_errors() -> None:
    def unreachable() -> FakeClient:
        raise OSError("no socket")

    bridge = Bridge(Toolbox(unreachable, "proj"))
    result = call_tool(bridge, "status")
    assert result["isError"] is True
    assert "DAEMON_UNREACHABLE" in text_of(result)


def test_shutting_down_daemon_is_retried_on_a_fresh_connection() -> None:
    bridge, fake = make_bridge()
    call_tool(bridge, "remember", {"text": "first"})
    fake.shutting_down_once = True
    result = call_tool(bridge, "remember", {"text": "second"})
    assert result["isError"] is False
    assert fake.closed == 1


def test_nudge_after_ten_calls_without_remember() -> None:
    bridge, _ = make_bridge()
    texts = [text_of(call_tool(bridge, "status")) for _ in range(NUDGE_AFTER)]
    assert all(NUDGE_TEXT not in t for t in texts[:-1])
    assert texts[-1].endswith("\n\n" + NUDGE_TEXT)
    assert NUDGE_TEXT not in text_of(call_tool(bridge, "status"))
    call_tool(bridge, "remember", {"text": "a fact"})
    texts = [text_of(call_tool(bridge, "status")) for _ in range(NUDGE_AFTER - 1)]
    assert all(NUDGE_TEXT not in t for t in texts)


def test_serve_loop_over_memory_streams() -> None:
    bridge, _ = make_bridge()
    lines = [initialize("2025-03-26"), {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    stdin = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in lines) + b"oops\n")
    stdout = io.BytesIO()
    serve(bridge, stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a.get("id") for a in answers] == [0, 1, None]
    assert answers[2]["error"]["code"] == -32700


def test_unicode_round_trips_on_one_line() -> None:
    bridge, _ = make_bridge()
    call_tool(bridge, "remember", {"text": "café ☕ line\u2028sep\nnext"})
    raw = bridge.handle_line(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                         "params": {"name": "recall",
                                                    "arguments": {"query": "café"}}}).encode())
    assert raw is not None and raw.count(b"\n") == 1 and raw.endswith(b"\n")
    assert "café ☕" in json.loads(raw)["result"]["content"][0]["text"]


# -- palace naming ------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, slug", [
    ("palace", "palace"), ("My Project", "my-project"), ("myProject", "my-project"),
    ("XMLParser2", "xml-parser2"), ("Café_Ünïcode", "cafe-unicode"), ("--a--b--", "a-b"),
    ("日本語", ""), ("x" * 80, "x" * 64), ("a" * 63 + "-b", "a" * 63),
])
def test_slugify(raw: str, slug: str) -> None:
    assert slugify(raw) == slug


@given(st.text(max_size=120))
def test_slugify_is_a_valid_palace_name_or_empty(raw: str) -> None:
    slug = slugify(raw)
    assert slug == "" or is_palace_name(slug)


def test_palace_name_from_git_root(tmp_path: Path) -> None:
    root = tmp_path / "Cool Repo"
    (root / ".git").mkdir(parents=True)
    deep = root / "src" / "pkg"
    deep.mkdir(parents=True)
    assert palace_name_for(deep, home=tmp_path) == "cool-repo"
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: elsewhere\n")
    assert palace_name_for(worktree, home=tmp_path) == "wt"


def test_palace_name_without_git(tmp_path: Path) -> None:
    plain = tmp_path / "notes_2024"
    plain.mkdir()
    assert palace_name_for(plain, home=tmp_path) == "notes-2024"
    assert palace_name_for(tmp_path, home=tmp_path) == "default"
    assert palace_name_for(Path("/"), home=tmp_path) == "default"
    odd = tmp_path / "日本"
    odd.mkdir()
    assert palace_name_for(odd, home=tmp_path) == "default"


def test_default_palace_prefers_claude_project_dir(tmp_path: Path) -> None:
    proj = tmp_path / "ClaudeProj"
    (proj / ".git").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    assert default_palace({"CLAUDE_PROJECT_DIR": str(proj)}, cwd=other) == "claude-proj"
    assert default_palace({}, cwd=other) == "other"


# -- the real process ---------------------------------------------------------------------------
@pytest.fixture
def bridge_env(home: Path) -> dict[str, str]:
    """Environment for a bridge whose daemon (if one were started) lives under ``home``."""
    return base_env(home)


class Proc:
    """A bridge subprocess with line-oriented JSON-RPC helpers."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.p = subprocess.Popen(BRIDGE + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, cwd=cwd)

    def send(self, message: object) -> None:
        assert self.p.stdin is not None
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.p.stdin.write(raw + b"\n")
        self.p.stdin.flush()

    def recv(self) -> Any:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line.endswith(b"\n"), (line, self.p.stderr.read() if self.p.stderr else b"")
        return json.loads(line)

    def request(self, message: dict[str, Any]) -> Any:
        self.send(message)
        return self.recv()

    def close(self, timeout: float = 10) -> tuple[int, bytes, bytes]:
        """Wait for the process to end (closing stdin first if still open)."""
        if self.p.stdin is not None:
            if not self.p.stdin.closed:
                self.p.stdin.close()
            self.p.stdin = None
        out, err = self.p.communicate(timeout=timeout)
        return self.p.returncode, out, err


@pytest.fixture
def proc(bridge_env: dict[str, str]) -> Iterator[Proc]:
    p = Proc(["--palace", "t"], bridge_env)
    yield p
    if p.p.poll() is None:
        p.p.kill()
        p.p.communicate()


def test_process_handshake_and_errors(proc: Proc, home: Path) -> None:
    assert proc.request(initialize("2025-06-18"))["result"]["protocolVersion"] == "2025-06-18"
    proc.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    proc.send({"jsonrpc": "2.0", "method": "notifications/unknown"})
    assert proc.request({"jsonrpc": "2.0", "id": 1, "method": "ping"})["result"] == {}
    tools = proc.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
    assert tools[0]["name"] == "remember"
    assert proc.request({"jsonrpc": "2.0", "id": 3, "method": "server/discover"})["error"][
        "code"] == -32601
    proc.send(b"{not json")
    assert proc.recv() == {"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32700, "message": proc_parse_message()}}
    answer = proc.request({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                           "params": {"name": "missing", "arguments": {}}})
    assert answer["error"]["code"] == -32602
    rc, out, _ = proc.close()
    assert rc == 0
    assert out == b""
    assert list(home.iterdir()) == []  # no daemon was started, nothing was created


def proc_parse_message() -> str:
    try:
        json.loads("{not json")
    except ValueError as exc:
        return f"Parse error: {exc}"
    raise AssertionError("unreachable")


def test_process_answers_unknown_version_with_newest(proc: Proc) -> None:
    answer = proc.request(initialize("2099-01-01"))
    assert answer["result"]["protocolVersion"] == LATEST_PROTOCOL_VERSION


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_process_exits_zero_on_signal(proc: Proc, sig: signal.Signals) -> None:
    proc.request(initialize("2025-11-25"))
    proc.p.send_signal(sig)
    rc, out, err = proc.close()
    assert rc == 0, err
    assert out == b""
    assert b"Traceback" not in err


def test_process_exits_zero_on_eof(bridge_env: dict[str, str]) -> None:
    result = subprocess.run([*BRIDGE, "--palace", "t"], input=b"", capture_output=True,
                            env=bridge_env, timeout=30)
    assert result.returncode == 0
    assert result.stdout == b""


def test_stray_output_never_reaches_the_protocol_stream(bridge_env: dict[str, str]) -> None:
    """A client that prints and writes to fd 1 directly must not corrupt stdout."""
    script = (
        "import os, sys\n"
        "from palace_client.mcp import bridge as mcp_bridge\n"
        "from tests.test_mcp_bridge import FakeClient\n"
        "class Noisy(FakeClient):\n"
        "    def call(self, *a, **k):\n"
        "        print('stray print')\n"
        "        os.write(1, b'raw fd1 write\\n')\n"
        "        return super().call(*a, **k)\n"
        "sys.exit(mcp_bridge.run('t', client_factory=Noisy))\n"
    )
    messages = [initialize("2025-06-18"),
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "remember", "arguments": {"text": "hello"}}},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "status", "arguments": {}}}]
    result = subprocess.run([sys.executable, "-c", script],
                            input=b"".join(json.dumps(m).encode() + b"\n" for m in messages),
                            capture_output=True, env=bridge_env, cwd=REPO, timeout=30)
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert b"stray print" in result.stderr and b"raw fd1 write" in result.stderr


def test_signal_during_a_tool_call_exits_zero(bridge_env: dict[str, str]) -> None:
    script = (
        "import sys, time\n"
        "from palace_client.mcp import bridge as mcp_bridge\n"
        "from tests.test_mcp_bridge import FakeClient\n"
        "class Slow(FakeClient):\n"
        "    def call(self, *a, **k):\n"
        "        print('calling', flush=True)\n"
        "        time.sleep(60)\n"
        "sys.exit(mcp_bridge.run('t', client_factory=Slow))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=bridge_env, cwd=REPO)
    assert p.stdin is not None and p.stderr is not None
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "status"}}).encode() + b"\n")
    p.stdin.flush()
    assert p.stderr.readline() == b"calling\n"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    assert out == b"" and b"Traceback" not in err


# -- against the real daemon ----------------------------------------------------------------
def test_live_tools_against_the_daemon(shared_daemon: DaemonProc, tmp_path: Path) -> None:
    proj = tmp_path / "Live Project"
    (proj / ".git").mkdir(parents=True)
    p = Proc([], shared_daemon.env, cwd=proj)
    try:
        p.request(initialize("2025-06-18"))
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "remember",
                           "arguments": {"text": "The staging database is Postgres 16 on "
                                         "port 5433", "room": "infra"}}}
        stored = p.request(call)["result"]
        assert stored["isError"] is False, stored
        assert "in palace 'live-project'" in text_of(stored)
        recall = p.request({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": "recall",
                                       "arguments": {"query": "which SQL server runs in "
                                                     "staging?"}}})
        text = text_of(recall["result"])
        assert "Postgres 16" in text and "[general/infra]" in text
        assert "mode hybrid" in text
        bad = p.request({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                         "params": {"name": "forget", "arguments": {"id": 999999}}})
        assert bad["result"]["isError"] is True
        assert "MEMORY_NOT_FOUND" in text_of(bad["result"])
        everywhere = p.request({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                "params": {"name": "recall_all",
                                           "arguments": {"query": "Postgres"}}})
        assert "live-project:general/infra" in text_of(everywhere["result"])
        status = p.request({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                            "params": {"name": "status"}})
        assert "live-project" in text_of(status["result"])
    finally:
        rc, out, _ = p.close(timeout=30)
    assert rc == 0 and out == b""


def test_live_bridge_reconnects_after_daemon_restart(daemon: DaemonProc) -> None:
    p = Proc(["--palace", "restart-test"], daemon.env)
    try:
        p.request(initialize("2025-06-18"))
        first = p.request({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "remember", "arguments": {"text": "before"}}})
        assert first["result"]["isError"] is False
        old_pid = daemon.pid()
        daemon.stop()
        second = p.request({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": "list_drawers", "arguments": {}}})
        assert second["result"]["isError"] is False, second
        assert "before" in text_of(second["result"])
        assert daemon.pid() != old_pid
    finally:
        p.close(timeout=30)
