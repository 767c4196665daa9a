"""The MCP stdio bridge: JSON-RPC handling, tools, rendering, process behaviour, real daemon."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_client.api.projects import (
    CREATES_PALACE,
    default_palace,
    project_dir_palace,
    root_palace,
)
from palace_client.api.slug import is_palace_name, palace_name_for, root_uri_path, slugify
from palace_client.mcp import stdio as mcp_stdio
from palace_client.mcp.bridge import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, Bridge
from palace_client.mcp.results import render_error
from palace_client.mcp.stdio import MAX_LINE, serve
from palace_client.mcp.toolbox import NUDGE_AFTER, NUDGE_TEXT, Toolbox
from palace_client.mcp.tools import TOOLS
from palaced.wire.errors import InvalidArgs, MemoryNotFound, PalaceNotFound, ShuttingDown
from palaced.wire.recall_text import Frame, answer_text
from palaced.wire.specs import MCP_TOOLSETS, SPECS
from tests.conftest import DaemonProc, base_env

REPO = Path(__file__).resolve().parents[3]
BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]


@pytest.fixture(autouse=True)
def _own_project_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process bridges record their projects' palaces (``projects.json``) under a temporary
    ``PALACE_HOME``, never in the user's data directory."""
    monkeypatch.setenv("PALACE_HOME", str(tmp_path / "palace-home"))


# -- a duck-typed stand-in for palace_client.Client -------------------------------------------
class FakeClient:
    """Enough of the daemon, in memory, to drive every tool."""

    # The daemon's own argument lists (one definition: palaced.wire.specs).
    RECALL_ARGS = frozenset(SPECS["memory.recall"].args)
    RECALL_ALL_ARGS = frozenset(SPECS["memory.recall_all"].args)

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, dict[str, Any]]] = []
        self.palaces: dict[str, dict[int, dict[str, Any]]] = {}
        self.next_id = 1
        self.closed = 0
        self.shutting_down_once = False
        self.sections = False  # recall answers with L0-L3 sections too

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
        if op == "memory.recall_all":
            unknown = set(args) - self.RECALL_ALL_ARGS
            if unknown:
                raise InvalidArgs(f"unknown argument(s): {sorted(unknown)}")
            merged = [{**hit, "palace": name} for name in self.palaces
                      for hit in self.call("memory.recall", name, args)["results"]]
            merged.sort(key=lambda hit: -float(hit["score"]))
            return {"results": merged[: args.get("top_k", 10)], "palaces": list(self.palaces),
                    "skipped": [], "mode": "hybrid", "nothing_relevant": not merged}
        drawers = self.palaces.get(str(palace))
        if drawers is None and op in CREATES_PALACE:  # the real Client's rule: writes create
            drawers = self.palaces.setdefault(str(palace), {})
        if drawers is None:
            raise PalaceNotFound(f"no palace {palace!r}", details={"palace": palace})
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
            sections = [{"level": 3 if self.sections else None,
                         "title": "Search" if self.sections else "Best matches", "items": hits}]
            # The daemon renders the text an agent is shown (palaced.wire.recall_text).
            frame = Frame("recall", str(palace), bool(args.get("compact")), "hybrid")
            return {"results": hits, "mode": "hybrid", "sections": sections, "tokens_used": 42,
                    "budget": 1500, "text": answer_text(frame, sections, 42, 1500)}
        if op == "memory.wake_up":
            items = sorted(drawers.values(), key=lambda d: -float(d.get("importance", 0.5)))
            sections = [{"level": 0, "title": "Identity", "items": []},
                        {"level": 1, "title": "Essential story", "items": items}]
            frame = Frame("wake_up", str(palace), bool(args.get("compact")))
            return {"sections": sections, "tokens_used": 7, "budget": 800,
                    "text": answer_text(frame, sections, 7, 800)}
        if op == "memory.forget":
            if args["id"] not in drawers:
                raise MemoryNotFound(f"no drawer {args['id']} in palace {palace!r}",
                                     details={"id": args["id"]})
            del drawers[args["id"]]
            return {"id": args["id"], "forgotten": True, "trashed": True,
                    "restorable_until_ms": 1_767_225_600_000}  # 2026-01-01
        if op == "memory.list":
            limit, offset = args.get("limit", 50), args.get("offset", 0)
            rows = sorted(drawers.values(), key=lambda d: -d["id"])
            page = rows[offset: offset + limit]
            nxt = offset + len(page)
            return {"drawers": page, "total": len(rows),
                    "next_offset": nxt if nxt < len(rows) else None}
        raise AssertionError(f"unexpected op {op}")


def make_bridge(palace: str = "proj", compact: bool = False,
                toolsets: tuple[str, ...] = tuple(MCP_TOOLSETS)) -> tuple[Bridge, FakeClient]:
    """A bridge on a fake daemon, serving every toolset unless told otherwise."""
    fake = FakeClient()
    return Bridge(Toolbox(lambda: fake, palace, compact=compact, toolsets=toolsets)), fake


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
                                  b"\xff\xfe not utf-8", b"[1, 2",
                                  b"[" * 100_000 + b"]" * 100_000])  # RecursionError inside
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


TOOL_NAMES = ["remember", "recall", "wake_up", "forget", "get", "list_drawers", "rooms",
              "upkeep", "kg_assert", "kg_query", "kg_invalidate", "memoir"]
MAX_TOOLS = 12
# Every toolset together (issue 29; the default set's bound is in test_mcp_toolsets.py).
MAX_TOOLS_LIST_TOKENS = 2200


def test_tools_list_is_lean() -> None:
    """Every toolset served: at most twelve tools, and the whole tools/list answer within
    2,200 cl100k tokens."""
    from palaced.engine.tokens import Tokenizer
    from tests.conftest import TIKTOKEN_FILE

    tokenizer = Tokenizer.load(TIKTOKEN_FILE)
    assert tokenizer.exact, tokenizer.reason
    bridge, _ = make_bridge()
    raw = bridge.handle_line(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
    assert raw is not None
    result = json.loads(raw)["result"]
    tokens = tokenizer.count(json.dumps(result, separators=(",", ":")))
    print(f"\ntools/list: {len(result['tools'])} tools, {tokens} cl100k tokens, "
          f"{len(raw)} bytes")
    for tool in result["tools"]:
        each = tokenizer.count(json.dumps(tool, separators=(",", ":")))
        print(f"  {tool['name']:<14} {each:4d} tokens")
    assert len(result["tools"]) <= MAX_TOOLS
    assert tokens <= MAX_TOOLS_LIST_TOKENS
    for tool in result["tools"]:
        # One line that says when to call it.
        assert "\n" not in tool["description"] and len(tool["description"]) <= 220, tool
        for name, prop in tool["inputSchema"]["properties"].items():
            assert len(prop.get("description", "")) <= 60, (tool["name"], name)


def test_tools_list_order_and_schemas() -> None:
    bridge, fake = make_bridge()
    tools = rpc(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]
    assert [t["name"] for t in tools] == TOOL_NAMES
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
    recall = by_name["recall"]["inputSchema"]["properties"]
    assert set(recall) == {"query", "scope", "top_k", "wing", "room", "tags", "budget",
                           "levels", "deep", "include_superseded"}
    assert recall["scope"] == {"type": "string", "enum": ["palace", "all"], "default": "palace",
                               "description": recall["scope"]["description"]}
    assert by_name["kg_query"]["inputSchema"]["properties"]["history"]["type"] == "boolean"
    assert by_name["forget"]["inputSchema"]["required"] == ["id"]
    # Only the hints that differ from MCP's defaults are sent.
    hints = {t["name"]: t["annotations"] for t in tools}
    read_only = {n for n, h in hints.items() if h.get("readOnlyHint", False)}
    assert read_only == {"recall", "wake_up", "get", "list_drawers", "rooms", "kg_query"}
    destructive = {n for n, h in hints.items()
                   if not h.get("readOnlyHint", False) and h.get("destructiveHint", True)}
    assert destructive == {"forget", "upkeep", "memoir"}  # upkeep forget/merge, delete_concept
    assert all("openWorldHint" not in h for h in hints.values())  # 60 tokens, no reader
    assert all(h == {"readOnlyHint": True} for n, h in hints.items() if n in read_only)
    assert fake.calls == []


def test_tool_specs_match_runners() -> None:
    toolbox = Toolbox(FakeClient, "p")
    assert all(toolbox.has_tool(spec.name) for spec in TOOLS)
    assert not toolbox.has_tool("nope")


@pytest.mark.parametrize("params, message", [
    ({"name": "nope"}, 'Unknown tool "nope"; the tools are: remember, recall, wake_up'),
    ({"name": 3}, "the tool name (params.name) must be a string, got 3"),
    ({}, "tools/call needs the tool's name (params.name); the tools are: remember, recall"),
    ({"name": None, "arguments": {}}, "tools/call needs the tool's name"),
])
def test_unknown_tool_is_invalid_params(params: dict[str, Any], message: str) -> None:
    bridge, fake = make_bridge()
    answer = rpc(bridge, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
    assert answer["error"]["code"] == -32602
    assert message in answer["error"]["message"]
    assert "None" not in answer["error"]["message"]
    assert fake.calls == []


@pytest.mark.parametrize("old, new", [
    ("recall_all", "recall with scope='all'"), ("kg_timeline", "kg_query with history=true"),
    ("kg_link", "kg_assert with subject=a, predicate=relation, object=b"),
    ("status", "palace status"), ("palace_info", "palace info"),
    ("list_palaces", "recall with scope='all'"),
])
def test_retired_tools_name_their_replacement(old: str, new: str) -> None:
    bridge, fake = make_bridge()
    result = call_tool(bridge, old, {"query": "x"})
    assert result["isError"] is True
    assert text_of(result).startswith(f"Error: the tool '{old}' was retired; ")
    assert new in text_of(result)
    assert fake.calls == []


# -- tools ----------------------------------------------------------------------------------
def test_lazy_connect_and_no_palace_created_by_the_bridge() -> None:
    """The bridge connects on the first tool call; it creates no palace itself (the first
    write does, by the client's rule, ``projects.CREATES_PALACE``)."""
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
    assert [c[:2] for c in made[0].calls] == [("memory.remember", "proj")] * 2
    assert made[0].palaces["proj"]


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


def test_recall_passes_its_arguments_and_renders_sections() -> None:
    bridge, fake = make_bridge()
    fake.sections = True
    call_tool(bridge, "remember", {"text": "deploys happen on fridays", "room": "ops"})
    text = text_of(call_tool(bridge, "recall", {"query": "fridays", "deep": True, "top_k": 5.0,
                                                "room": "ops", "scope": "palace",
                                                "budget": 300, "levels": [3]}))
    assert fake.calls[-1] == ("memory.recall", "proj", {"query": "fridays", "deep": True,
                                                        "top_k": 5, "room": "ops",
                                                        "budget": 300, "levels": [3],
                                                        "for_agent": True})
    assert "## L3 · Search" in text
    assert "(mode hybrid, 42 of 1500 tokens)" in text


def test_recall_daemon_rejection_is_not_hidden() -> None:
    bridge, fake = make_bridge()
    call_tool(bridge, "remember", {"text": "a drawer, so that the palace exists"})
    fake.RECALL_ARGS = frozenset({"query", "top_k"})  # a daemon without deep yet
    result = call_tool(bridge, "recall", {"query": "x", "deep": True})
    assert result["isError"] is True
    assert "INVALID_ARGS" in text_of(result) and "deep" in text_of(result)


def test_compact_mode_one_line_per_drawer() -> None:
    bridge, _ = make_bridge(compact=True)
    call_tool(bridge, "remember", {"text": "line one\nline two", "room": "r"})
    call_tool(bridge, "remember", {"text": "line three", "room": "r"})
    text = text_of(call_tool(bridge, "recall", {"query": "line"}))
    lines = text.splitlines()
    assert len(lines) == 4 and lines[1] == "Best matches"
    assert lines[2].startswith("#") and lines[2].endswith("line one line two")


def test_recall_without_hits_suggests_next_step() -> None:
    bridge, _ = make_bridge()
    call_tool(bridge, "remember", {"text": "unrelated"})
    text = text_of(call_tool(bridge, "recall", {"query": "nothing here"}))
    assert "No drawers matched" in text and "scope='all'" in text


def test_recall_all_merges_palaces_by_score() -> None:
    bridge, fake = make_bridge()
    fake.palaces = {"a": {}, "b": {}}
    fake.palaces["a"][1] = {"id": 1, "text": "red apple", "room": "fruit"}
    fake.palaces["b"][1] = {"id": 1, "text": "red apple pie", "room": "food"}
    fake.palaces["b"][2] = {"id": 2, "text": "green pie", "room": "food"}
    text = text_of(call_tool(bridge, "recall", {"query": "red apple pie", "top_k": 2,
                                                "scope": "all", "budget": 300, "deep": True}))
    assert "across 2 palace(s); this project's is 'proj'" in text
    hits = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(hits) == 2
    assert hits[0].startswith("- #1 [b:food] score 1.000")
    assert hits[1].startswith("- #1 [a:fruit]")
    assert ("palace.create", "proj", {"exist_ok": True}) not in fake.calls
    # One daemon op ranks every palace on one scale; palace-only arguments are dropped.
    assert fake.calls[0] == ("memory.recall_all", None, {"query": "red apple pie", "top_k": 2})


def test_wake_up_forget_list() -> None:
    bridge, _ = make_bridge()
    empty = text_of(call_tool(bridge, "wake_up", {}))
    assert "Palace 'proj' holds nothing yet" in empty
    for i in range(3):
        call_tool(bridge, "remember", {"text": f"fact number {i}", "importance": i / 3})
    wake = text_of(call_tool(bridge, "wake_up", {"budget": 500}))
    assert "## L1 · Essential story" in wake and "## L0 · Identity" in wake
    assert wake.index("fact number 2") < wake.index("fact number 0")
    listing = text_of(call_tool(bridge, "list_drawers", {"limit": 2}))
    assert "Drawers 1-2 of 3" in listing and "offset=2" in listing
    # A long drawer is listed as its start, never whole: get has all of it.
    call_tool(bridge, "remember", {"text": "long memo " + "word " * 40_000})
    listing = text_of(call_tool(bridge, "list_drawers", {"limit": 1}))
    assert len(listing) < 2_000 and "get ids=[4] for all" in listing, listing[:300]
    assert text_of(call_tool(bridge, "forget", {"id": 2})) == (
        "Moved drawer #2 of palace 'proj' to the trash; it is no longer recalled. Until "
        "2026-01-01 a human can bring it back with `palace restore-drawer 2 --palace proj`.")
    missing = call_tool(bridge, "forget", {"id": 2})
    assert missing["isError"] is True
    assert "MEMORY_NOT_FOUND (300)" in text_of(missing) and "list_drawers" in text_of(missing)


@pytest.mark.parametrize("arguments, fragment", [
    ({"text": 5}, "'text' must be a string"),
    ({}, "missing required argument(s): text"),
    ({"text": "x", "bogus": 1}, "unknown argument(s) 'bogus'"),
    ({"text": "x", "tags": "a"}, "'tags' must be an array"),
    ({"text": "x", "tags": [1]}, "'tags[0]' must be a string"),
    ({"text": "x", "importance": True}, "'importance' must be one of critical, high, medium, "
                                        "low or a number between 0.0 and 1.0, got true"),
    ([1, 2], "arguments must be a JSON object"),
    ({"text": ""}, "argument 'text' must not be empty"),
    ({"text": "x", "importance": 1.5}, "argument 'importance' must be one of critical, high, "
                                       "medium, low or a number between 0.0 and 1.0, "
                                       "got 1.5"),
    ({"text": "x", "supersedes": 0}, "argument 'supersedes' must be at least 1, got 0"),
    ({"text": "x", "room": "r" * 201}, "argument 'room' is longer than 200 characters (201)"),
    ({"text": "x", "tags": ["t"] * 65}, "argument 'tags' has more than 64 items (65)"),
    ({"text": "x", "tags": ["t" * 1001]}, "argument 'tags[0]' is longer than 1000 characters"),
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
    result = call_tool(bridge, "wake_up")
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
    texts = [text_of(call_tool(bridge, "wake_up")) for _ in range(NUDGE_AFTER)]
    assert all(NUDGE_TEXT not in t for t in texts[:-1])
    assert texts[-1].endswith("\n\n" + NUDGE_TEXT)
    assert NUDGE_TEXT not in text_of(call_tool(bridge, "wake_up"))
    call_tool(bridge, "remember", {"text": "a fact"})
    texts = [text_of(call_tool(bridge, "wake_up")) for _ in range(NUDGE_AFTER - 1)]
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


@pytest.mark.parametrize("uri, path", [
    ("file:///home/me/My%20Proj", "/home/me/My Proj"),
    ("file://localhost/srv/x", "/srv/x"),
    ("FILE:///x", "/x"),
    ("https://example.com/x", None),
    ("file://server/share", None),
    ("file:relative/dir", None),
    ("file:", None),
    ("", None),
    ("file:///a%00b", None),
    ("file://[bad", None),
])
def test_root_uri_path(uri: str, path: str | None) -> None:
    assert root_uri_path(uri) == (None if path is None else Path(path))


def test_root_palace_and_project_dir_palace(tmp_path: Path) -> None:
    proj = tmp_path / "Root Proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "deep").mkdir()
    assert root_palace((proj / "deep").as_uri(), home=tmp_path) == "root-proj"
    assert root_palace("https://example.com/x") is None
    assert project_dir_palace({}) is None
    assert project_dir_palace({"CLAUDE_PROJECT_DIR": ""}) is None
    assert project_dir_palace({"CLAUDE_PROJECT_DIR": str(proj / "deep")}) == "root-proj"


# -- the palace from the client's roots ---------------------------------------------------------
ROOTS_CAPS = {"roots": {"listChanged": True}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ROOTS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}


def initialize_with(capabilities: dict[str, Any]) -> dict[str, Any]:
    message = initialize("2025-06-18")
    message["params"]["capabilities"] = capabilities
    return message


def git_project(parent: Path, name: str) -> Path:
    path = parent / name
    (path / ".git").mkdir(parents=True)
    return path


def roots_bridge(timeout: float = 5.0) -> tuple[Bridge, FakeClient]:
    """A bridge whose palace ('cwd-proj') may come from the client's roots."""
    fake = FakeClient()
    return Bridge(Toolbox(lambda: fake, "cwd-proj"), roots=True, roots_timeout=timeout), fake


def roots_answer(request: Mapping[str, Any], *uris: str) -> dict[str, Any]:
    assert request["method"] == "roots/list" and "params" not in request
    return {"jsonrpc": "2.0", "id": request["id"],
            "result": {"roots": [{"uri": uri, "name": f"r{i}"} for i, uri in enumerate(uris)]}}


def test_roots_name_the_palace(tmp_path: Path) -> None:
    proj = git_project(tmp_path, "My App")
    (proj / "src").mkdir()
    bridge, fake = roots_bridge()
    init = rpc(bridge, initialize_with(ROOTS_CAPS))["result"]
    assert "palace is" not in init["instructions"]  # not known before the roots
    assert rpc(bridge, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]
    assert bridge.outgoing == []  # asked only once the client said it is initialized
    assert rpc(bridge, INITIALIZED) is None
    [request] = bridge.outgoing
    assert request == {"jsonrpc": "2.0", "id": "palace-roots-1", "method": "roots/list"}
    # The first root that is a local directory counts; its git root names the palace.
    assert rpc(bridge, roots_answer(request, "https://example.com/repo",
                                    (proj / "src").as_uri(), tmp_path.as_uri())) is None
    stored = text_of(call_tool(bridge, "remember", {"text": "alpha"}))
    assert "in palace 'my-app'" in stored
    assert fake.calls[0][:2] == ("memory.remember", "my-app")


def test_roots_change_is_followed(tmp_path: Path) -> None:
    first, second = git_project(tmp_path, "first"), git_project(tmp_path, "second")
    bridge, fake = roots_bridge()
    rpc(bridge, initialize_with(ROOTS_CAPS))
    rpc(bridge, INITIALIZED)
    rpc(bridge, roots_answer(bridge.outgoing.pop(), first.as_uri()))
    assert "in palace 'first'" in text_of(call_tool(bridge, "remember", {"text": "a"}))
    rpc(bridge, ROOTS_CHANGED)
    request = bridge.outgoing.pop()
    assert request["id"] == "palace-roots-2"
    # A late answer to the first request is dropped; the answer to the second one counts.
    rpc(bridge, roots_answer({**request, "id": "palace-roots-1"}, first.as_uri()))
    rpc(bridge, roots_answer(request, second.as_uri()))
    assert "in palace 'second'" in text_of(call_tool(bridge, "remember", {"text": "b"}))
    assert [c[1] for c in fake.calls if c[0] == "memory.remember"] == ["first", "second"]


@pytest.mark.parametrize("answer", [
    {"error": {"code": -32601, "message": "Method not found"}},
    {"result": {"roots": []}},
    {"result": {"roots": [{"uri": "https://example.com/x"}, {"uri": "file://host/share"},
                          {"name": "no uri"}, "junk"]}},
    {"result": {"roots": "not a list"}},
    {"result": None},
])
def test_roots_without_a_local_directory_keep_the_cwd_palace(answer: dict[str, Any]) -> None:
    bridge, _ = roots_bridge()
    rpc(bridge, initialize_with(ROOTS_CAPS))
    rpc(bridge, INITIALIZED)
    assert rpc(bridge, {"jsonrpc": "2.0", "id": bridge.outgoing.pop()["id"], **answer}) is None
    assert "in palace 'cwd-proj'" in text_of(call_tool(bridge, "remember", {"text": "a"}))


def test_unanswered_roots_wait_once_then_a_late_answer_counts(tmp_path: Path) -> None:
    proj = git_project(tmp_path, "late")
    bridge, _ = roots_bridge(timeout=0.5)
    rpc(bridge, initialize_with(ROOTS_CAPS))
    rpc(bridge, INITIALIZED)
    request = bridge.outgoing.pop()
    started = time.monotonic()
    assert "in palace 'cwd-proj'" in text_of(call_tool(bridge, "remember", {"text": "a"}))
    assert time.monotonic() - started >= 0.5
    started = time.monotonic()
    call_tool(bridge, "wake_up")
    assert time.monotonic() - started < 0.5  # no second wait for the same request
    rpc(bridge, roots_answer(request, proj.as_uri()))
    assert "in palace 'late'" in text_of(call_tool(bridge, "remember", {"text": "b"}))


def test_roots_are_asked_before_a_tool_call_without_initialized() -> None:
    bridge, _ = roots_bridge(timeout=0.05)
    rpc(bridge, initialize_with(ROOTS_CAPS))
    assert "in palace 'cwd-proj'" in text_of(call_tool(bridge, "remember", {"text": "a"}))
    assert [m["method"] for m in bridge.outgoing] == ["roots/list"]
    call_tool(bridge, "wake_up")
    assert len(bridge.outgoing) == 1


@pytest.mark.parametrize("roots, capabilities", [
    (False, ROOTS_CAPS),  # --palace or CLAUDE_PROJECT_DIR decided
    (True, {}),  # the client has no roots
    (True, {"roots": True}),  # not a capability object
])
def test_roots_are_not_asked_for(roots: bool, capabilities: dict[str, Any]) -> None:
    fake = FakeClient()
    bridge = Bridge(Toolbox(lambda: fake, "fixed"), roots=roots, roots_timeout=5)
    init = rpc(bridge, initialize_with(capabilities))["result"]
    assert "This project's palace is 'fixed'." in init["instructions"]
    rpc(bridge, INITIALIZED)
    rpc(bridge, ROOTS_CHANGED)
    assert bridge.outgoing == []
    assert "in palace 'fixed'" in text_of(call_tool(bridge, "remember", {"text": "a"}))


@given(st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.booleans())
def test_input_lines_across_reads(lines: list[bytes], final_newline: bool) -> None:
    """Lines split across small reads come back whole; overlong ones (> MAX_LINE) as None."""
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mcp_stdio, "MAX_LINE", 8)
        mp.setattr(mcp_stdio, "READ_CHUNK", 3)
        got = list(mcp_stdio._lines(io.BytesIO(data)))
    want: list[bytes | None] = [line if len(line) <= 8 else None for line in lines]
    if lines and not final_newline and lines[-1] == b"":
        want.pop()  # nothing follows the last newline
    assert got == want


def test_serve_splits_lines_across_reads_and_skips_overlong_ones() -> None:
    bridge, fake = make_bridge()
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "remember", "arguments": {"text": "x" * 200_000}}}
    stdin = io.BytesIO(json.dumps(big).encode() + b"\n" + b"y" * (MAX_LINE + 10) + b"\n"
                       + b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}')  # no final newline
    stdout = io.BytesIO()
    serve(bridge, stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a.get("id") for a in answers] == [1, None, 2]
    assert answers[0]["result"]["isError"] is False
    assert answers[1]["error"] == {"code": -32600,
                                   "message": f"Invalid Request: longer than {MAX_LINE} bytes"}
    assert len(fake.palaces["proj"][1]["text"]) == 200_000


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


@pytest.mark.daemon
def test_a_byte_order_mark_before_the_first_message_is_ignored(proc: Proc) -> None:
    """Only the stream's first bytes may be a BOM: one before a later message is still an
    error, as JSON has none."""
    assert proc.request(b"\xef\xbb\xbf" + json.dumps(initialize("2025-06-18")).encode())[
        "result"]["protocolVersion"] == "2025-06-18"
    assert proc.request({"jsonrpc": "2.0", "id": 1, "method": "ping"})["result"] == {}
    assert proc.request(b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 2, "method": "ping"}')[
        "error"]["code"] == -32700
    assert proc.close()[0] == 0


@pytest.mark.daemon
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


@pytest.mark.daemon
def test_process_answers_unknown_version_with_newest(proc: Proc) -> None:
    answer = proc.request(initialize("2099-01-01"))
    assert answer["result"]["protocolVersion"] == LATEST_PROTOCOL_VERSION


@pytest.mark.daemon
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_process_exits_zero_on_signal(proc: Proc, sig: signal.Signals) -> None:
    proc.request(initialize("2025-11-25"))
    proc.p.send_signal(sig)
    rc, out, err = proc.close()
    assert rc == 0, err
    assert out == b""
    assert b"Traceback" not in err


@pytest.mark.daemon
def test_process_exits_zero_on_eof(bridge_env: dict[str, str]) -> None:
    result = subprocess.run([*BRIDGE, "--palace", "t"], input=b"", capture_output=True,
                            env=bridge_env, timeout=30)
    assert result.returncode == 0
    assert result.stdout == b""


@pytest.mark.daemon
def test_stray_output_never_reaches_the_protocol_stream(bridge_env: dict[str, str]) -> None:
    """A client that prints and writes to fd 1 directly must not corrupt stdout."""
    script = (
        "import os, sys\n"
        "from palace_client.mcp import stdio as mcp_stdio\n"
        "from tests.palace_client.mcp.test_mcp_bridge import FakeClient\n"
        "class Noisy(FakeClient):\n"
        "    def call(self, *a, **k):\n"
        "        print('stray print')\n"
        "        os.write(1, b'raw fd1 write\\n')\n"
        "        return super().call(*a, **k)\n"
        "sys.exit(mcp_stdio.run('t', client_factory=Noisy))\n"
    )
    messages = [initialize("2025-06-18"),
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "remember", "arguments": {"text": "hello"}}},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "wake_up", "arguments": {}}}]
    result = subprocess.run([sys.executable, "-c", script],
                            input=b"".join(json.dumps(m).encode() + b"\n" for m in messages),
                            capture_output=True, env=bridge_env, cwd=REPO, timeout=30)
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert b"stray print" in result.stderr and b"raw fd1 write" in result.stderr


@pytest.mark.daemon
def test_signal_during_a_tool_call_exits_zero(bridge_env: dict[str, str]) -> None:
    script = (
        "import sys, time\n"
        "from palace_client.mcp import stdio as mcp_stdio\n"
        "from tests.palace_client.mcp.test_mcp_bridge import FakeClient\n"
        "class Slow(FakeClient):\n"
        "    def call(self, *a, **k):\n"
        "        print('calling', flush=True)\n"
        "        time.sleep(60)\n"
        "sys.exit(mcp_stdio.run('t', client_factory=Slow))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=bridge_env, cwd=REPO)
    assert p.stdin is not None and p.stderr is not None
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "wake_up"}}).encode() + b"\n")
    p.stdin.flush()
    assert p.stderr.readline() == b"calling\n"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    assert out == b"" and b"Traceback" not in err


def test_process_palace_from_roots(shared_daemon: DaemonProc, tmp_path: Path) -> None:
    """VS Code starts servers in $HOME and names the project in its roots."""
    home_dir = tmp_path / "Editor Home"
    home_dir.mkdir()
    first = tmp_path / "Roots Proj"
    (first / ".git").mkdir(parents=True)
    second = tmp_path / "Next Proj"
    (second / ".git").mkdir(parents=True)
    env = {k: v for k, v in shared_daemon.env.items() if k != "CLAUDE_PROJECT_DIR"}
    p = Proc([], env, cwd=home_dir)
    try:
        init = p.request(initialize_with(ROOTS_CAPS))["result"]
        assert "palace is" not in init["instructions"]
        p.send(INITIALIZED)
        p.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        # The roots are asked for at once; tools/list does not wait for their answer.
        assert p.recv() == {"jsonrpc": "2.0", "id": "palace-roots-1", "method": "roots/list"}
        assert len(p.recv()["result"]["tools"]) == len(MCP_TOOLSETS["core"])  # the default
        p.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "remember", "arguments": {"text": "Roots decide."}}})
        # The tool call waits for the answer, which the bridge reads meanwhile.
        p.send(roots_answer({"id": "palace-roots-1", "method": "roots/list"},
                            first.as_uri()))
        stored = p.recv()
        assert stored["id"] == 2 and "in palace 'roots-proj'" in text_of(stored["result"])
        p.send(ROOTS_CHANGED)
        request = p.recv()
        assert request["id"] == "palace-roots-2" and request["method"] == "roots/list"
        p.send(roots_answer(request, second.as_uri()))
        listing = p.request({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                             "params": {"name": "list_drawers", "arguments": {}}})
        # A read of a project palace not written yet creates nothing and says so.
        assert "Palace 'next-proj' holds nothing yet" in text_of(listing["result"])
    finally:
        rc, out, err = p.close(timeout=30)
    assert rc == 0 and out == b""
    assert b"palace 'roots-proj' (from the client's root" in err


def test_process_claude_project_dir_beats_roots(shared_daemon: DaemonProc,
                                                tmp_path: Path) -> None:
    proj = tmp_path / "Claude Proj"
    (proj / ".git").mkdir(parents=True)
    p = Proc([], {**shared_daemon.env, "CLAUDE_PROJECT_DIR": str(proj)}, cwd=tmp_path)
    try:
        init = p.request(initialize_with(ROOTS_CAPS))["result"]
        assert "This project's palace is 'claude-proj'." in init["instructions"]
        p.send(INITIALIZED)
        # No roots/list request comes before the answer.
        stored = p.request({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "remember", "arguments": {"text": "c"}}})
        assert "in palace 'claude-proj'" in text_of(stored["result"])
    finally:
        rc, _, _ = p.close(timeout=30)
    assert rc == 0


@pytest.mark.daemon
def test_process_explicit_palace_never_asks_for_roots(bridge_env: dict[str, str]) -> None:
    p = Proc(["--palace", "pinned"], {**bridge_env, "CLAUDE_PROJECT_DIR": "/nonexistent"})
    try:
        init = p.request(initialize_with(ROOTS_CAPS))["result"]
        assert "This project's palace is 'pinned'." in init["instructions"]
        p.send(INITIALIZED)
        p.send(ROOTS_CHANGED)
        assert p.request({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == {
            "jsonrpc": "2.0", "id": 1, "result": {}}
    finally:
        rc, out, _ = p.close()
    assert rc == 0 and out == b""


# -- against the real daemon ----------------------------------------------------------------
def test_live_tools_against_the_daemon(shared_daemon: DaemonProc, tmp_path: Path) -> None:
    proj = tmp_path / "Live Project"
    (proj / ".git").mkdir(parents=True)
    env = {k: v for k, v in shared_daemon.env.items() if k != "CLAUDE_PROJECT_DIR"}
    p = Proc([], env, cwd=proj)
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
                                "params": {"name": "recall",
                                           "arguments": {"query": "Postgres", "scope": "all"}}})
        assert "live-project:general/infra" in text_of(everywhere["result"])
        bounds = p.request({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                            "params": {"name": "forget", "arguments": {"id": 0}}})
        assert text_of(bounds["result"]).startswith(
            "Error INVALID_ARGS: argument 'id' must be at least 1, got 0.")
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


def test_daemon_argument_errors_name_the_argument_not_the_op() -> None:
    text = render_error(InvalidArgs("memory.recall: argument 'top_k' must be between 1 and "
                                    "1000, got 0", details={"op": "memory.recall"}))
    assert text == ("Error INVALID_ARGS (105): argument 'top_k' must be between 1 and 1000, "
                    "got 0\nFix the arguments named above and call the tool again.")
    other = render_error(MemoryNotFound("no drawer 9", details={"id": 9}))
    assert 'details: {"id": 9}' in other and "list_drawers" in other


@pytest.mark.daemon
def test_palace_mcp_does_not_load_the_typer_cli() -> None:
    # `palace mcp` starts every agent session: it goes straight to the bridge (no typer/rich).
    code = ("import sys\n"
            "sys.argv = ['palace', 'mcp', '--palace', 'demo']\n"
            "from palace_client import entry\n"
            "try:\n"
            "    entry.main()\n"
            "except SystemExit as exc:\n"
            "    print('exit', exc.code)\n"
            "print(sorted({'typer', 'rich', 'click'} & set(sys.modules)))\n")
    res = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    # The bridge keeps stdout for the protocol: what the code prints lands on stderr.
    assert res.stderr.splitlines()[-2:] == ["exit 0", "[]"], (res.stdout, res.stderr)


def test_excerpt_notes_name_the_get_tool_or_the_cli_for_another_palace() -> None:
    """An agent reads an excerpted drawer whole with get (issue 29); get reads its own palace
    only, so a drawer of another palace (recall scope='all') names the CLI command."""
    from palace_client.render.results import render_drawer

    cut = {"id": 3, "text": "start of it", "excerpt": True, "chars": 900}
    assert render_drawer(cut).endswith("… (excerpt: 900 chars; get ids=[3] for all)")
    assert render_drawer({**cut, "palace": "other"}, show_palace=True).endswith(
        "… (excerpt: 900 chars; `palace get 3 --palace other` for all)")
