"""Drive ``palace serve``'s ``/mcp`` with the official MCP Python SDK client, 1.x or 2.x, over
Streamable HTTP, as an agent that cannot spawn ``palace mcp`` does.

Run by ``tests/e2e/test_mcp_http.py`` in a subprocess whose ``sys.path`` holds one SDK major
(see ``tests/palace_client/mcp/test_mcp_sdk.py``). Both use the SDK's
``streamable_http_client`` with an httpx client carrying the bearer header (2.x: its
``mcp.Client`` in the default ``auto`` mode, which probes ``server/discover`` first; 1.x:
``ClientSession`` and the ``initialize`` handshake). Then the same client without the secret
and with a foreign ``Host`` header, each of which must fail to connect.

A second session names no palace in the URL and answers ``roots/list`` with ``roots``: the
server asks on the session's GET stream and files the drawer in that project's palace.

Usage: ``python tests/support/mcp_http_driver.py SCENARIO_JSON`` with ``url`` (the endpoint,
with ``?palace=``), ``secret``, ``host`` (a foreign Host header to try) and ``roots``. Prints
one JSON report on stdout: what the SDK saw, as wire-format dicts.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import anyio

from tests.support.mcp_sdk_driver import recorded, wire

MAJOR = int(version("mcp").split(".")[0])
CONNECT_TIMEOUT_S = 30


Steps = Callable[[Any, Any, dict[str, Any]], Awaitable[None]]


async def session(url: str, headers: dict[str, str], steps: Steps, report: dict[str, Any],
                  roots: list[str] | None = None) -> None:
    """Connect to ``url`` sending ``headers`` on every request, then run ``steps``. With
    ``roots`` (file URIs) the client advertises roots and answers ``roots/list`` with them."""
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if roots is not None:
        from mcp.types import ListRootsResult, Root

        async def list_roots(context: Any) -> ListRootsResult:
            report["roots_asked"] = report.get("roots_asked", 0) + 1
            return ListRootsResult(roots=[Root(uri=uri) for uri in roots])  # type: ignore[arg-type]

        extra["list_roots_callback"] = list_roots
    if MAJOR >= 2:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                Client(streamable_http_client(url, http_client=http), **extra) as client:
            report["connect_s"] = time.perf_counter() - started
            report["protocol_version"] = client.protocol_version
            report["server_info"] = wire(client.server_info)
            report["instructions"] = client.instructions
            await steps(client.call_tool, client.list_tools, report)
    else:
        import httpx
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with httpx.AsyncClient(headers=headers, timeout=30) as http, \
                streamable_http_client(url, http_client=http) as (read, write, _), \
                ClientSession(read, write, **extra) as client:
            init = await client.initialize()
            report["connect_s"] = time.perf_counter() - started
            report["protocol_version"] = init.protocolVersion
            report["server_info"] = wire(init.serverInfo)
            report["instructions"] = init.instructions
            await client.send_ping()
            await steps(client.call_tool, client.list_tools, report)


async def use_tools(call_tool: Any, list_tools: Any, report: dict[str, Any]) -> None:
    """List the tools, remember, recall, and make the errors an agent can make."""
    listed = await list_tools()
    report["tools"] = [wire(tool) for tool in listed.tools]

    async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await recorded(call_tool, name, arguments)

    calls: dict[str, Any] = {}
    calls["remember"] = await call("remember", {
        "text": "The nightly build publishes to the staging registry at 02:00 UTC.",
        "room": "builds", "tags": ["ci"]})
    stored = re.search(r"drawer #(\d+)", json.dumps(calls["remember"]))
    calls["get"] = await call("get", {"ids": [int(stored.group(1)) if stored else 1]})
    calls["recall"] = await call("recall", {"query": "when does the nightly build publish?"})
    calls["rooms"] = await call("rooms", {})
    calls["unknown_argument"] = await call("remember", {"text": "x", "colour": "red"})
    calls["unknown_tool"] = await call("no_such_tool", {})
    report["calls"] = calls


async def refused(url: str, headers: dict[str, str]) -> dict[str, Any]:
    """Try to connect with ``headers``; what the SDK raised (the session must not start)."""
    report: dict[str, Any] = {}

    async def nothing(call_tool: Any, list_tools: Any, report: dict[str, Any]) -> None:
        report["connected"] = True

    try:
        with anyio.fail_after(CONNECT_TIMEOUT_S):
            await session(url, headers, nothing, report)
    except BaseException as exc:  # an ExceptionGroup of the SDK's task group included
        report["exception"] = type(exc).__name__
        report["message"] = repr(exc)[:2000]
    return report


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    url, bearer = spec["url"], {"Authorization": f"Bearer {spec['secret']}"}
    report: dict[str, Any] = {"major": MAJOR, "sdk": version("mcp")}
    with anyio.fail_after(120):
        await session(url, bearer, use_tools, report)
    # No ?palace=: the bridge asks the client's roots (on the GET stream) and follows them.
    followed: dict[str, Any] = {}

    async def remember(call_tool: Any, list_tools: Any, report: dict[str, Any]) -> None:
        report["remember"] = await recorded(call_tool, "remember", {"text": "Roots decide."})

    with anyio.fail_after(120):
        await session(url.split("?")[0], bearer, remember, followed, roots=spec["roots"])
    report["roots"] = followed
    report["no_secret"] = await refused(url, {})
    report["wrong_secret"] = await refused(url, {"Authorization": "Bearer not-the-secret"})
    report["foreign_host"] = await refused(url, {**bearer, "Host": spec["host"]})
    return report


def main() -> int:
    report = anyio.run(run, json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
