"""MCP over Streamable HTTP (``palace serve``'s ``/mcp``) end to end: a real keyword-only
palaced, a real ``palace serve``, and clients we did not write: the official MCP SDK, both
majors (``tests/support/mcp_http_driver.py``, one subprocess per major), against the stdio
bridge ``palace mcp`` for the same tools and the same output (docs/http.md#mcp-over-http)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from palace_client.api.slug import palace_name_for
from tests.conftest import REPO, DaemonProc, fresh_name
from tests.e2e import test_http_api
from tests.e2e.test_http_api import Served
from tests.palace_client.mcp.test_mcp_sdk import sdk_path

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(600)]  # the first run may install 1.x
served = test_http_api.served  # the fixture: a real `palace serve` on the shared daemon

DRIVER = REPO / "tests" / "support" / "mcp_http_driver.py"
TOOLS = ["remember", "recall", "wake_up", "forget", "get", "list_drawers", "rooms"]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "palace-tests", "version": "1"}}}


def stdio_session(env: dict[str, str], palace: str, *messages: dict[str, Any]
                  ) -> list[dict[str, Any]]:
    """The stdio bridge's answers to ``initialize`` and then ``messages``."""
    lines = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *messages]
    proc = subprocess.run([sys.executable, "-m", "palace_client", "mcp", "--palace", palace],
                          input="".join(json.dumps(m) + "\n" for m in lines), env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


class HttpSession:
    """A hand-made Streamable HTTP client (httpx), for the wire details the SDK hides."""

    def __init__(self, served: Served, palace: str) -> None:
        self.http = httpx.Client(base_url=served.base, timeout=30, headers={
            **served.bearer(), "Accept": "application/json, text/event-stream"})
        self.url = f"/mcp?palace={palace}"
        first = self.http.post(self.url, json=INIT)
        assert first.status_code == 200, first.text
        self.sid = first.headers["mcp-session-id"]
        self.http.headers.update({"Mcp-Session-Id": self.sid,
                                  "MCP-Protocol-Version": "2025-06-18"})
        self.init = first.json()
        done = self.http.post(self.url, json={"jsonrpc": "2.0",
                                              "method": "notifications/initialized"})
        assert done.status_code == 202 and done.content == b""

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        answer = self.http.post(self.url, json=message)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        result: dict[str, Any] = answer.json()
        return result


@pytest.fixture(scope="module", params=[2, 1], ids=["sdk2", "sdk1"])
def sdk(request: pytest.FixtureRequest) -> tuple[int, str | None]:
    major: int = request.param
    return major, sdk_path(major)


def test_sdk_client_over_http_lists_remembers_and_recalls(
        sdk: tuple[int, str | None], served: Served, shared_keyword_daemon: DaemonProc,
        tmp_path: Path) -> None:
    major, path = sdk
    palace = fresh_name(f"mcphttp{major}")
    env = dict(shared_keyword_daemon.env)
    # The driver imports tests.support (run as a script, its own folder is sys.path[0], not
    # the repository's); the SDK major's folder, when not this environment's, comes first.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (path, str(REPO), env.get("PYTHONPATH")) if p)
    project = tmp_path / f"Roots Project {major}"
    (project / ".git").mkdir(parents=True)
    spec = {"url": f"{served.base}/mcp?palace={palace}", "secret": served.secret,
            "host": f"evil.example:{served.port}", "roots": [project.as_uri()]}
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps(spec)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-5000:]
    report = json.loads(proc.stdout)
    assert report["major"] == major, report["sdk"]
    print(f"\nmcp {report['sdk']} over HTTP: connected in {report['connect_s'] * 1000:.0f} ms")

    assert report["protocol_version"] == "2025-11-25"
    assert report["server_info"]["name"] == "palace"
    assert f"palace is '{palace}'" in report["instructions"]
    # The SDK's tool list is the stdio bridge's, entry for entry.
    stdio = stdio_session(shared_keyword_daemon.env, palace,
                          {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert [t["name"] for t in report["tools"]] == TOOLS
    assert report["tools"] == stdio[1]["result"]["tools"]

    calls = report["calls"]
    stored = calls["remember"]["content"][0]["text"]
    assert not calls["remember"]["isError"] and f"in palace '{palace}'" in stored, stored
    drawer = int(stored.split("#")[1].split()[0])
    assert f"#{drawer} [general/builds]" in calls["get"]["content"][0]["text"]
    found = calls["recall"]["content"][0]["text"]
    assert f"#{drawer} [general/builds]" in found and "02:00 UTC" in found, found
    assert "- general: builds (1)" in calls["rooms"]["content"][0]["text"]
    assert calls["unknown_argument"]["isError"]
    assert "unknown argument(s) 'colour'" in calls["unknown_argument"]["content"][0]["text"]
    assert 'Unknown tool "no_such_tool"' in calls["unknown_tool"]["message"]

    # The same calls through the stdio bridge read the same text (get and rooms: a recall's
    # scores move with use and time between two calls).
    again = stdio_session(shared_keyword_daemon.env, palace, *(
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": name, "arguments": arguments}}
        for n, (name, arguments) in enumerate((("get", {"ids": [drawer]}), ("rooms", {})), 2)))
    assert [a["result"]["content"] for a in again[1:]] == [
        calls["get"]["content"], calls["rooms"]["content"]]

    # No ?palace=: the client's first root decided, as on stdio (asked on the GET stream).
    roots = report["roots"]
    assert roots["roots_asked"] >= 1, roots
    assert f"in palace '{palace_name_for(project)}'" in roots["remember"]["content"][0]["text"]

    # Refused: no secret, a wrong one, a foreign Host (DNS rebinding). None connects.
    for case in ("no_secret", "wrong_secret", "foreign_host"):
        assert "connected" not in report[case] and report[case].get("exception"), (case, report)
    with httpx.Client(base_url=served.base, timeout=30) as http:
        assert http.post("/mcp", json=INIT).status_code == 401
        assert http.post("/mcp", json=INIT, headers={**served.bearer(),
                         "Host": f"evil.example:{served.port}"}).status_code == 403


def test_wire_details_of_the_transport(served: Served, shared_keyword_daemon: DaemonProc
                                       ) -> None:
    palace = fresh_name("mcphttp")
    session = HttpSession(served, palace)
    assert session.init["result"]["protocolVersion"] == "2025-06-18"
    remembered = session.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "remember", "arguments": {"text": "Backups rotate weekly."}}})
    text = remembered["result"]["content"][0]["text"]
    assert "Stored drawer #" in text, text
    drawer = int(text.split("#")[1].split()[0])
    # The agent is the client's name, as on stdio (the REST API reads it back).
    got = served.op("memory.get", {"palace": palace, "args": {"id": drawer}})
    assert got.json()["drawer"]["created_by"] == "mcp:palace-tests/1", got.text

    # A client that accepts only SSE gets the answer as one event.
    sse = session.http.post(session.url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"},
                            headers={"Accept": "text/event-stream"})
    assert sse.headers["content-type"].startswith("text/event-stream")
    assert sse.text == 'event: message\ndata: {"jsonrpc":"2.0","id":3,"result":{}}\n\n'
    # Protocol errors of the transport (MCP spec, Streamable HTTP).
    http = session.http
    bad_version = http.post(session.url, json={"jsonrpc": "2.0", "id": 4, "method": "ping"},
                            headers={"MCP-Protocol-Version": "1999-01-01"})
    assert bad_version.status_code == 400 and "1999-01-01" in bad_version.text
    no_session = httpx.post(f"{served.base}/mcp", json={"jsonrpc": "2.0", "id": 5,
                            "method": "tools/list"}, headers=served.bearer())
    assert no_session.status_code == 400 and "Mcp-Session-Id" in no_session.text
    assert http.get("/mcp", headers={"Mcp-Session-Id": ""}).status_code in (400, 404)
    foreign = http.post(session.url, json={"jsonrpc": "2.0", "id": 6, "method": "ping"},
                        headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert http.delete(session.url).status_code == 204
    gone = http.post(session.url, json={"jsonrpc": "2.0", "id": 7, "method": "ping"})
    assert gone.status_code == 404
    # The GET stream: what the server sends unasked (a roots/list to a client with roots and
    # no ?palace=), then its own end after 2 s without anything to send (the client polls).
    init = {**INIT, "params": {**INIT["params"], "capabilities": {"roots": {}}}}
    first = httpx.post(f"{served.base}/mcp", json=init, headers=served.bearer())
    sid = first.headers["mcp-session-id"]
    both = {**served.bearer(), "Mcp-Session-Id": sid}
    assert httpx.post(f"{served.base}/mcp", headers=both, json={
        "jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    started = time.monotonic()
    with httpx.stream("GET", f"{served.base}/mcp", headers=both, timeout=30) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in stream.iter_lines() if line]
    assert time.monotonic() - started < 10
    assert lines[0] == "retry: 1000" and lines[1] == "event: message", lines
    asked = json.loads(lines[2].removeprefix("data: "))
    assert asked["method"] == "roots/list", lines
    answer = httpx.post(f"{served.base}/mcp", headers=both, json={
        "jsonrpc": "2.0", "id": asked["id"], "result": {"roots": []}})
    assert answer.status_code == 202
    # The web app's cookie is not a credential here.
    with httpx.Client(base_url=served.base, timeout=30) as browser:
        assert browser.get(served.url.removeprefix(served.base)).status_code in (303, 200)
        csrf = browser.get("/api/v1/session").json()["csrf"]
        assert browser.post("/mcp", json=INIT, headers={"X-Palace-CSRF": csrf}
                            ).status_code == 401
