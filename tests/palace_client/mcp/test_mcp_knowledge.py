"""The knowledge-graph MCP tools (kg_*) and remember's supersede/ttl/dedup, through a real
bridge process against a real daemon."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from palace_client.mcp.toolbox import Toolbox
from palace_client.mcp.tools import TOOLS
from palaced.wire.specs import MCP_TOOLSETS
from tests.conftest import DaemonProc

BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]
KG_TOOLS = ["kg_assert", "kg_query", "kg_invalidate"]


class Bridge:
    """One ``palace mcp`` subprocess, initialised, with a tools/call helper."""

    def __init__(self, env: dict[str, str], palace: str, *extra: str) -> None:
        # Every toolset: the knowledge graph, memoir and upkeep tools are opt-in.
        extra = extra if "--tools" in extra else (*extra, "--tools", "all")
        self.p = subprocess.Popen([*BRIDGE, "--palace", palace, *extra], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self._id = 0
        init = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "kg-test", "version": "1"}})
        assert init["protocolVersion"] == "2025-06-18"

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        assert self.p.stdin is not None and self.p.stdout is not None
        self._id += 1
        message = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params or {}}
        self.p.stdin.write(json.dumps(message).encode() + b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line.endswith(b"\n"), (line, self.p.stderr.read() if self.p.stderr else b"")
        answer = json.loads(line)
        assert answer["id"] == self._id and "result" in answer, answer
        return answer["result"]

    def call(self, name: str, **arguments: Any) -> tuple[bool, str]:
        """Run a tool; returns (isError, text)."""
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        assert [block["type"] for block in result["content"]] == ["text"]
        return bool(result["isError"]), str(result["content"][0]["text"])

    def ok(self, name: str, **arguments: Any) -> str:
        is_error, text = self.call(name, **arguments)
        assert not is_error, text
        return text

    def close(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()
            self.p.stdin = None
        _, err = self.p.communicate(timeout=30)
        assert self.p.returncode == 0, err


@pytest.fixture
def bridge(shared_daemon: DaemonProc) -> Iterator[Bridge]:
    b = Bridge(shared_daemon.env, f"kg-{uuid.uuid4().hex[:8]}")
    try:
        yield b
    finally:
        if b.p.poll() is None:
            b.close()


def fact_lines(text: str) -> list[str]:
    """The fact lines of a rendered result (list items or compact lines starting with #)."""
    return [ln.removeprefix("- ") for ln in text.splitlines()
            if re.match(r"(- )?#\d+ ", ln)]


def mentions(text: str, drawer_id: int) -> bool:
    return re.search(rf"#{drawer_id}\b", text) is not None


# -- tools/list ---------------------------------------------------------------------------------
def test_tools_list_has_the_knowledge_tools_with_valid_schemas(bridge: Bridge) -> None:
    tools = bridge.request("tools/list")["tools"]
    names = [t["name"] for t in tools]
    assert names[:8] == ["remember", "recall", "wake_up", "forget", "get", "list_drawers",
                         "rooms", "upkeep"]
    assert names[8:11] == KG_TOOLS
    by_name = {t["name"]: t for t in tools}
    for tool in tools:
        schema = tool["inputSchema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema.get("required", [])) <= set(schema["properties"])
    required = {"kg_assert": ["subject", "predicate", "object"], "kg_query": ["subject"],
                "kg_invalidate": ["id"]}
    for name, keys in required.items():
        assert by_name[name]["inputSchema"]["required"] == keys
    assert set(by_name["kg_assert"]["inputSchema"]["properties"]) == {
        "subject", "predicate", "object", "valid_from", "literal", "multi", "source_url",
        "type", "definition", "labels"}  # the last three describe the subject
    assert set(by_name["kg_query"]["inputSchema"]["properties"]) == {
        "subject", "as_of", "history", "depth", "relation"}
    assert set(by_name["kg_invalidate"]["inputSchema"]["properties"]) == {"id", "at"}
    assert by_name["kg_query"]["annotations"]["readOnlyHint"] is True
    for name in ("kg_assert", "kg_invalidate"):
        hints = by_name[name]["annotations"]
        assert "readOnlyHint" not in hints and hints["destructiveHint"] is False
    assert "history" in by_name["kg_invalidate"]["description"]
    assert "relation" in by_name["kg_assert"]["description"]
    remember = by_name["remember"]["inputSchema"]["properties"]
    assert remember["supersedes"]["type"] == "integer"
    assert remember["ttl"]["type"] == "string" and remember["dedup"]["type"] == "boolean"
    assert by_name["recall"]["inputSchema"]["properties"]["include_superseded"]["type"] == (
        "boolean")
    # The bridge answers tools/list from the same specs it validates against.
    assert tools == Toolbox(lambda: RecordingClient({}), "p",
                            toolsets=tuple(MCP_TOOLSETS)).list_tools()
    assert len(TOOLS) == len(tools)


# -- facts over time ----------------------------------------------------------------------------
def test_single_valued_predicate_history(bridge: Bridge) -> None:
    first = bridge.ok("kg_assert", subject="Alice", predicate="worksAt", object="Acme",
                      valid_from="2020-01-01", source_url="https://hr.example/alice")
    assert "Alice works_at Acme [2020-01-01 → now]" in first
    assert "source: https://hr.example/alice" in first
    assert "one value at a time" in first
    first_id = int(re.findall(r"#(\d+) Alice", first)[0])
    second = bridge.ok("kg_assert", subject="alice", predicate="works_at", object="Globex",
                       valid_from="2023-06-01")
    second_id = int(re.findall(r"#(\d+) Alice", second)[0])
    assert f"#{second_id} Alice works_at Globex [2023-06-01 → now]" in second

    now = bridge.ok("kg_query", subject="ALICE")
    assert fact_lines(now) == [f"#{second_id} Alice works_at Globex [2023-06-01 → now]"]
    assert "true now" in now

    history = bridge.ok("kg_query", subject="Alice", history=True)
    assert fact_lines(history) == [
        f"#{first_id} Alice works_at Acme [2020-01-01 → 2023-06-01] "
        "(source: https://hr.example/alice, by mcp:kg-test)",
        f"#{second_id} Alice works_at Globex [2023-06-01 → now]"]
    assert "History of 'Alice'" in history and "oldest first" in history
    assert fact_lines(bridge.ok("kg_query", subject="Alice", history=False)) == fact_lines(now)
    is_error, both = bridge.call("kg_query", subject="Alice", history=True, as_of="2022-01-01")
    assert is_error and "either as_of or history=true" in both

    before = bridge.ok("kg_query", subject="Alice", as_of="2022-03-01")
    assert "valid at 2022-03-01" in before
    assert [ln.split(" [")[0] for ln in fact_lines(before)] == [
        f"#{first_id} Alice works_at Acme"]

    # A literal value is quoted; invalidating keeps the fact as history.
    version = bridge.ok("kg_assert", subject="Alice", predicate="laptop", object="ThinkPad X1",
                        literal=True, valid_from="2024-01-01")
    version_id = int(re.findall(r"#(\d+) Alice laptop", version)[0])
    assert 'Alice laptop "ThinkPad X1" [2024-01-01 → now]' in version
    closed = bridge.ok("kg_invalidate", id=version_id, at="2024-05-01")
    assert "kept as history" in closed
    assert f'#{version_id} Alice laptop "ThinkPad X1" [2024-01-01 → 2024-05-01]' in closed
    assert "laptop" not in bridge.ok("kg_query", subject="Alice")
    assert "laptop" in bridge.ok("kg_query", subject="Alice", as_of="2024-02-01")
    assert "laptop" in bridge.ok("kg_query", subject="Alice", history=True)

    is_error, missing = bridge.call("kg_invalidate", id=999_999)
    assert is_error and "FACT_NOT_FOUND" in missing and "kg_query" in missing
    unknown = bridge.ok("kg_query", subject="Nobody Known")
    assert "not in the knowledge graph" in unknown
    is_error, bad_date = bridge.call("kg_query", subject="Alice", as_of="not a date")
    assert is_error and "INVALID_CONTENT" in bad_date


# -- links --------------------------------------------------------------------------------------
def test_links_neighbors_and_self_link(bridge: Bridge, shared_daemon: DaemonProc) -> None:
    linked = bridge.ok("kg_assert", subject="checkout", predicate="dependsOn",
                       object="payments-api")
    assert "checkout depends_on payments-api [" in linked and "→ now]" in linked
    assert "one value at a time" not in linked  # a typed relation accumulates
    bridge.ok("kg_assert", subject="payments-api", predicate="depends_on", object="Postgres")
    bridge.ok("kg_assert", subject="checkout", predicate="depends_on", object="cart")
    bridge.ok("kg_assert", subject="checkout", predicate="part_of", object="storefront")

    one = bridge.ok("kg_query", subject="Checkout", depth=1)
    assert "- 1 hop: cart, payments-api, storefront" in one
    assert "Postgres" not in one
    two = bridge.ok("kg_query", subject="checkout", depth=2, relation="depends_on")
    assert "- 1 hop: cart, payments-api" in two and "- 2 hops: Postgres" in two
    assert "storefront" not in two
    assert len(fact_lines(two)) == 3
    assert "payments-api depends_on Postgres" in two

    is_error, text = bridge.call("kg_assert", subject="Payments API", predicate="related_to",
                                 object="payments  api")
    assert is_error
    assert "INVALID_CONTENT" in text and "itself" in text
    is_error, text = bridge.call("kg_link", a="checkout", relation="uses", b="stripe")
    assert is_error and "retired" in text and "kg_assert" in text
    is_error, text = bridge.call("kg_neighbors", entity="checkout")
    assert is_error and "retired" in text and "kg_query with subject=entity and depth" in text
    for wrong in ({"history": True, "depth": 1}, {"relation": "depends_on"}):
        is_error, text = bridge.call("kg_query", subject="checkout", **wrong)
        assert is_error and ("depth" in text), text

    # --compact: one line per fact, no list markers.
    palace = bridge.p.args[bridge.p.args.index("--palace") + 1]
    compact = Bridge(shared_daemon.env, palace, "--compact")
    try:
        text = compact.ok("kg_query", subject="checkout", depth=2)
        lines = text.splitlines()
        assert not any(ln.startswith("- ") or ln == "" for ln in lines)
        assert "2 hops: Postgres" in lines
        assert len(fact_lines(text)) == 4
        timeline = compact.ok("kg_query", subject="checkout", history=True).splitlines()
        assert len(timeline) == 1 + 3
    finally:
        compact.close()


# -- remember: supersede, dedup, ttl ------------------------------------------------------------
def _drawer_id(text: str) -> int:
    return int(re.findall(r"drawer #(\d+)", text)[0])


def test_remember_supersedes_hides_the_old_drawer(bridge: Bridge) -> None:
    old = _drawer_id(bridge.ok("remember", text="The API rate limit is 100 requests per minute",
                               room="api"))
    stored = bridge.ok("remember", text="The API rate limit is 300 requests per minute",
                       room="api", supersedes=old)
    new = _drawer_id(stored)
    assert new != old and f"supersedes drawer #{old}" in stored
    recall = bridge.ok("recall", query="API rate limit requests per minute")
    assert mentions(recall, new) and not mentions(recall, old)
    assert "100 requests" not in recall
    history = bridge.ok("recall", query="API rate limit requests per minute",
                        include_superseded=True)
    assert mentions(history, old) and mentions(history, new)
    assert "100 requests" in history and f"(superseded by #{new})" in history

    is_error, text = bridge.call("remember", text="replaces nothing", supersedes=999_999)
    assert is_error and "MEMORY_NOT_FOUND" in text


def test_near_duplicate_remember_reports_the_refresh(bridge: Bridge) -> None:
    first = _drawer_id(bridge.ok("remember", room="infra",
                                 text="The staging database runs Postgres 15 on a single node"))
    again = bridge.ok("remember", room="infra",
                      text="The staging database runs on Postgres 15, on a single node")
    assert f"Refreshed existing drawer #{first} [infra] instead of storing a near-duplicate" in (
        again)
    assert "dedup=false" in again
    forced = bridge.ok("remember", room="infra", dedup=False,
                       text="The staging database runs on Postgres 15, on a single node")
    assert forced.startswith("Stored drawer #") and _drawer_id(forced) != first
    short = bridge.ok("remember", text="Deploy freeze until the incident review", ttl="7d")
    assert short.startswith("Stored drawer #")
    is_error, text = bridge.call("remember", text="Deploy freeze forever", ttl="soon")
    assert is_error and "INVALID_ARGS" in text and "ttl" in text


# -- bridge-side behaviour, no daemon -----------------------------------------------------------
class RecordingClient:
    """Answers memory.remember like a daemon that merged the write into drawer #7."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str | None, dict[str, Any]]] = []

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        self.calls.append((op, palace, dict(args or {})))
        return self.answer

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]:
        return {"name": name}

    def list_palaces(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def test_supersedes_turns_dedup_off_unless_asked() -> None:
    fake = RecordingClient({"id": 7, "created": False, "deduplicated": True,
                            "similarity": 0.9312})
    box = Toolbox(lambda: fake, "p")
    text = box.call("remember", {"text": "a correction", "supersedes": 3})["content"][0]["text"]
    assert fake.calls[-1][2]["dedup"] is False
    assert "Refreshed existing drawer #7 instead of storing a near-duplicate (similarity 0.93)" in (
        text)
    assert "Drawer #3 was not superseded." in text
    box.call("remember", {"text": "a correction", "supersedes": 3, "dedup": True})
    assert fake.calls[-1][2]["dedup"] is True
    box.call("remember", {"text": "plain"})
    assert "dedup" not in fake.calls[-1][2]  # the daemon's default applies
