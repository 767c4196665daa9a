"""``/mcp`` (MCP over Streamable HTTP) in process: Starlette's TestClient and a fake daemon pool
that records the ops the stdio bridge's tools send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from palace_client.http.app import ClientPool, build_app
from palace_client.http.mcp_http import Session, Sessions
from palace_client.http.security import Keys
from palace_client.mcp.bridge import Bridge
from palace_client.mcp.toolbox import Toolbox

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "editor", "version": "2.0"}}}


class _Pool(ClientPool):
    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.calls: list[tuple[str, str, str | None, dict[str, Any]]] = []

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        self.calls.append((agent, op, palace, dict(args)))
        return {"id": 11, "created": True}


class _App:
    def __init__(self) -> None:
        self.keys, self.pool = Keys(), _Pool()
        self.client = TestClient(build_app(self.keys, 8765, self.pool),
                                 base_url="http://127.0.0.1:8765")
        self.bearer = {"Authorization": f"Bearer {self.keys.secret}"}

    def start(self, url: str = "/mcp?palace=notes", **headers: str) -> dict[str, str]:
        """Initialize a session; the headers of its later requests."""
        answer = self.client.post(url, json=INIT, headers={**self.bearer, **headers})
        assert answer.status_code == 200, answer.text
        return {**self.bearer, "Mcp-Session-Id": answer.headers["mcp-session-id"],
                "MCP-Protocol-Version": "2025-11-25"}

    def call_tool(self, headers: dict[str, str], name: str, arguments: dict[str, Any]
                  ) -> dict[str, Any]:
        answer = self.client.post("/mcp", headers=headers, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()["result"]
        return result


@pytest.fixture
def app() -> Iterator[_App]:
    made = _App()
    with made.client:
        yield made


def test_a_session_runs_the_stdio_bridges_tools_as_the_client(app: _App) -> None:
    headers = app.start()
    listed = app.client.post("/mcp", headers=headers,
                             json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    stdio = Toolbox(lambda: None, "notes").list_tools()  # type: ignore[arg-type,return-value]
    assert listed.json()["result"]["tools"] == stdio
    result = app.call_tool(headers, "remember", {"text": "Tabs, not spaces."})
    assert result["content"][0]["text"] == "Stored drawer #11 in palace 'notes'."
    assert app.pool.calls == [("mcp:editor/2.0", "memory.remember", "notes",
                               {"text": "Tabs, not spaces.", "source": "mcp:editor"})]


def test_x_palace_agent_outranks_the_clients_name(app: _App) -> None:
    headers = app.start(**{"X-Palace-Agent": "ide-plugin"})
    app.call_tool(headers, "remember", {"text": "x"})
    assert app.pool.calls[-1][0] == "ide-plugin"


def test_tools_query_selects_the_toolsets(app: _App) -> None:
    headers = app.start("/mcp?palace=notes&tools=kg")
    listed = app.client.post("/mcp", headers=headers,
                             json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert "kg_query" in [t["name"] for t in listed.json()["result"]["tools"]]
    bad = app.client.post("/mcp?tools=nope", json=INIT, headers=app.bearer)
    assert bad.status_code == 400 and bad.json()["error"]["name"] == "INVALID_ARGS"


def test_malformed_messages_are_json_rpc_errors(app: _App) -> None:
    headers = app.start()
    parse = app.client.post("/mcp", headers={**headers, "Content-Type": "application/json"},
                            content=b"{not json")
    assert parse.status_code == 400 and parse.json()["error"]["code"] == -32700
    batch = app.client.post("/mcp", headers=headers, json=[INIT])
    assert batch.status_code == 400 and "batch" in batch.json()["error"]["message"]
    # A batch of requests (2025-03-26) is answered as a batch; notifications alone with 202.
    both = app.client.post("/mcp", headers=headers, json=[
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}])
    assert both.json() == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    too_big = app.client.post("/mcp", headers={**headers, "Content-Type": "application/json"},
                              content=b" " * (9 * 1024 * 1024))
    assert too_big.status_code == 413


def test_sessions_are_bounded_least_recently_used_first() -> None:
    sessions = Sessions(limit=2)
    make = lambda: Session(Bridge(Toolbox(lambda: None, "p")))  # type: ignore[arg-type,return-value]  # noqa: E731
    first, second = sessions.add(make()), sessions.add(make())
    assert sessions.get(first) is not None  # first is now the most recently used
    sessions.add(make())
    assert sessions.get(second) is None and sessions.get(first) is not None
    assert sessions.end(first) and not sessions.end(first)


def test_the_server_announces_the_mcp_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from palace_client.http.command import _announce

    _announce("127.0.0.1", 8765, "s3cret", Path("/run/x.secret"), as_json=True)
    assert json.loads(capsys.readouterr().out)["mcp"] == "http://127.0.0.1:8765/mcp"
    _announce("127.0.0.1", 8765, "s3cret", Path("/run/x.secret"), as_json=False)
    assert "MCP (Streamable HTTP, the same secret): http://127.0.0.1:8765/mcp?palace=NAME" in (
        capsys.readouterr().out)
