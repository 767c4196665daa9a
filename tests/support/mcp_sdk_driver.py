"""Drive ``palace mcp`` with the official MCP Python SDK client, 1.x or 2.x, as agents do.

Run by ``tests/palace_client/mcp/test_mcp_sdk.py`` in a subprocess whose ``sys.path`` holds one
SDK major (the
installed one, or a cached ``pip install --target`` of the other): both cannot live in one
environment. The 2.x client connects in its default ``auto`` mode (it probes
``server/discover`` first); the 1.x client does the ``initialize`` handshake. Both answer
``roots/list`` with the roots the test gives and announce a change of roots.

Usage: ``python tests/support/mcp_sdk_driver.py SCENARIO_JSON``, where the JSON holds ``command``
(the bridge's argv), ``env`` (its environment), ``roots`` and ``later_roots`` (file URIs).
Prints one JSON report on stdout: what the SDK saw, as wire-format dicts.
"""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from importlib.metadata import version
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.types import ListRootsResult, Root

MAJOR = int(version("mcp").split(".")[0])


def wire(model: Any) -> Any:
    """A pydantic model of either major as its JSON wire form (camelCase keys)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def recorded(call_tool: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The result of ``call_tool(name, arguments)`` in wire form, or the protocol error it
    raised (recorded, not raised)."""
    try:
        result: dict[str, Any] = wire(await call_tool(name, arguments))
        return result
    except Exception as exc:
        return {"exception": type(exc).__name__, "message": str(exc)}


class Scenario:
    """The steps of one session; ``report`` collects what the client saw."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.params = StdioServerParameters(command=spec["command"][0],
                                            args=spec["command"][1:], env=spec["env"])
        self.roots = [str(uri) for uri in spec["roots"]]
        self.later_roots = [str(uri) for uri in spec["later_roots"]]
        self.roots_asked = 0
        self.report: dict[str, Any] = {"major": MAJOR, "sdk": version("mcp")}

    async def list_roots(self, context: Any) -> ListRootsResult:
        self.roots_asked += 1
        return ListRootsResult(roots=[Root(uri=uri, name=f"root {i}")  # type: ignore[arg-type]
                                      for i, uri in enumerate(self.roots)])

    async def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        if MAJOR >= 2:
            from mcp import Client

            async with Client(self.params, list_roots_callback=self.list_roots) as client:
                self.report["connect_s"] = time.perf_counter() - started
                self.report["protocol_version"] = client.protocol_version
                self.report["server_info"] = wire(client.server_info)
                self.report["instructions"] = client.instructions
                await self.session_steps(client.session, client.call_tool, client.list_tools)
        else:
            from mcp import ClientSession
            from mcp.client.stdio import stdio_client

            async with stdio_client(self.params) as (read, write), \
                    ClientSession(read, write, list_roots_callback=self.list_roots) as session:
                init = await session.initialize()
                self.report["connect_s"] = time.perf_counter() - started
                self.report["protocol_version"] = init.protocolVersion
                self.report["server_info"] = wire(init.serverInfo)
                self.report["instructions"] = init.instructions
                await session.send_ping()
                await self.session_steps(session, session.call_tool, session.list_tools)
        return self.report

    async def session_steps(self, session: Any, call_tool: Any, list_tools: Any) -> None:
        listed = await list_tools()
        self.report["tools"] = [wire(tool) for tool in listed.tools]

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return await recorded(call_tool, name, arguments)

        calls: dict[str, Any] = {}
        calls["remember"] = await call("remember", {
            "text": "Release trains leave every second Tuesday; freeze is the Friday before.",
            "room": "release", "tags": ["process"], "importance": "high"})
        stored = re.search(r"drawer #(\d+)", json.dumps(calls["remember"]))
        calls["get"] = await call("get", {"ids": [int(stored.group(1)) if stored else 1]})
        calls["rooms"] = await call("rooms", {})
        calls["not_served"] = await call("kg_query", {"subject": "Alice"})
        calls["recall"] = await call("recall", {"query": "when is the release freeze?"})
        calls["recall_all"] = await call("recall", {"query": "release freeze", "scope": "all"})
        calls["forget_missing"] = await call("forget", {"id": 10**9})
        calls["unknown_argument"] = await call("remember", {"text": "x", "colour": "red"})
        calls["out_of_bounds"] = await call("recall", {"query": "x", "top_k": 0})
        calls["unknown_tool"] = await call("no_such_tool", {})
        calls["retired_tool"] = await call("recall_all", {"query": "x"})
        self.report["roots_asked_before_change"] = self.roots_asked
        # The workspace changes: the bridge asks again and follows the new first root.
        self.roots = self.later_roots
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 2.x deprecates roots for its 2026 protocol
            await session.send_roots_list_changed()
        calls["after_change"] = await call("remember", {"text": "The workspace moved."})
        calls["list_drawers"] = await call("list_drawers", {})
        self.report["roots_asked"] = self.roots_asked
        self.report["calls"] = calls


def main() -> int:
    spec = json.loads(sys.argv[1])
    report = anyio.run(Scenario(spec).run)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
