"""The ``memoir`` MCP tool through a real ``palace mcp`` bridge process and a real daemon: each
action, the per-action argument checks, and the daemon's typed errors as tool errors."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import DaemonProc
from tests.palace_client.mcp.test_mcp_knowledge import Bridge


def call(b: Bridge, **arguments: Any) -> tuple[bool, str]:
    """Run the memoir tool (its ``name`` argument would clash with ``Bridge.call``'s)."""
    result = b.request("tools/call", {"name": "memoir", "arguments": arguments})
    return bool(result["isError"]), str(result["content"][0]["text"])


def ok(b: Bridge, **arguments: Any) -> str:
    is_error, text = call(b, **arguments)
    assert not is_error, text
    return text


@pytest.fixture
def bridge(shared_daemon: DaemonProc) -> Iterator[Bridge]:
    b = Bridge(shared_daemon.env, f"memoir-{uuid.uuid4().hex[:8]}")
    try:
        yield b
    finally:
        if b.p.poll() is None:
            b.close()


def test_memoir_tool_actions(bridge: Bridge) -> None:
    tools = {t["name"]: t for t in bridge.request("tools/list")["tools"]}
    memoir = tools["memoir"]
    assert memoir["inputSchema"]["required"] == ["action"]
    assert memoir["inputSchema"]["properties"]["action"]["enum"] == [
        "create", "list", "show", "add_concept", "refine", "link", "search", "inspect",
        "update", "rename_concept", "delete_concept"]
    assert memoir["annotations"] == {"idempotentHint": True}  # destructive: delete_concept

    # Before the palace's first write there is no palace yet: nothing, and nothing created.
    assert "holds nothing yet" in ok(bridge, action="list")
    made = ok(bridge, action="create", memoir="architecture",
                     description="System design")
    assert made.startswith("Created memoir architecture: 0 concepts, 0 links - System design")
    stored = bridge.ok("remember", text="The auth service signs JWTs with RS256")
    drawer = int(re.findall(r"#(\d+)", stored)[0])
    added = ok(bridge, action="add_concept", memoir="architecture",
                      name="auth-service", definition="Issues JWT tokens",
                      labels=["domain:auth"], sources=[drawer])
    assert "Added concept" in added and "auth-service [r1 c0.50] (domain:auth)" in added
    assert f"sources #{drawer}" in added
    again = ok(bridge, action="add_concept", memoir="architecture",
                      name="Auth-Service", definition="Issues JWT tokens")
    assert "unchanged" in again
    ok(bridge, action="add_concept", memoir="architecture", name="api-gateway",
              definition="Routes requests")
    linked = ok(bridge, action="link", memoir="architecture", name="api-gateway",
                       relation="depends_on", to="auth-service")
    assert "Linked" in linked and "api-gateway --depends_on--> auth-service" in linked
    refined = ok(bridge, action="refine", memoir="architecture", name="auth-service",
                        definition="Issues RS256 JWT tokens")
    assert "Refined (revision 2, confidence 0.60)" in refined
    found = ok(bridge, action="search", query="jwt")
    assert "architecture/auth-service [r2 c0.60]" in found
    by_label = ok(bridge, action="search", label="domain:auth", memoir="architecture")
    assert "auth-service" in by_label and "api-gateway" not in by_label
    inspected = ok(bridge, action="inspect", memoir="architecture", name="auth-service",
                          depth=2)
    assert "1 link away: api-gateway" in inspected
    assert "- api-gateway --depends_on--> auth-service" in inspected
    shown = ok(bridge, action="show", memoir="architecture")
    assert "architecture: 2 concepts, 1 link" in shown and "domain:auth (1)" in shown
    listed = ok(bridge, action="list")
    assert "- architecture: 2 concepts, 1 link - System design" in listed
    # recall's L2 carries the concept the query names.
    recalled = bridge.ok("recall", query="what does the auth-service do?")
    assert "concept r2" in recalled and "auth-service (architecture): Issues RS256" in recalled


def test_memoir_tool_errors_change_nothing(bridge: Bridge) -> None:
    ok(bridge, action="create", memoir="m")
    ok(bridge, action="add_concept", memoir="m", name="a", definition="first")
    cases = [
        ({"action": "delete", "memoir": "m"}, "must be one of"),
        ({"action": "add_concept", "memoir": "m", "name": "b"}, "needs definition"),
        ({"action": "list", "memoir": "m"}, "does not take memoir"),
        ({"action": "link", "memoir": "m", "name": "a", "relation": "knows", "to": "a"},
         "must be one of"),
        ({"action": "link", "memoir": "m", "name": "a", "relation": "related_to", "to": "A"},
         "INVALID_CONTENT"),
        ({"action": "add_concept", "memoir": "m", "name": "A", "definition": "second"},
         "CONCEPT_EXISTS"),
        ({"action": "show", "memoir": "nope"}, "MEMOIR_NOT_FOUND"),
        ({"action": "inspect", "memoir": "m", "name": "zzz"}, "CONCEPT_NOT_FOUND"),
        ({"action": "add_concept", "memoir": "m", "name": "c", "definition": "d",
          "labels": ["bad ns:x"]}, "invalid label"),
    ]
    for arguments, expected in cases:
        is_error, text = call(bridge, **arguments)
        assert is_error and expected in text, (arguments, text)
    shown = ok(bridge, action="show", memoir="m")
    assert "m: 1 concept, 0 links" in shown and "a [r1 c0.50]" in shown
