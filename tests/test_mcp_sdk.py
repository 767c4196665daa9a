"""The bridge through the official MCP Python SDK client, against a real daemon."""

from __future__ import annotations

import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError
from mcp.types import LATEST_PROTOCOL_VERSION, TextContent

from tests.conftest import DaemonProc

pytestmark = pytest.mark.anyio


def server(env: dict[str, str], palace: str = "sdk-test") -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "palace_client", "mcp", "--palace", palace],
        env=env)


def text(result: object) -> str:
    content = getattr(result, "content", [])
    assert len(content) == 1 and isinstance(content[0], TextContent)
    return content[0].text


async def test_sdk_client_remembers_and_recalls(shared_daemon: DaemonProc) -> None:
    async with stdio_client(server(shared_daemon.env)) as (read, write), \
            ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.protocolVersion == LATEST_PROTOCOL_VERSION
        assert init.serverInfo.name == "palace"
        assert init.capabilities.tools is not None
        await session.send_ping()

        listed = await session.list_tools()
        names = [tool.name for tool in listed.tools]
        assert names == ["remember", "recall", "recall_all", "wake_up", "forget",
                         "list_drawers", "list_palaces", "palace_info", "status",
                         "kg_assert", "kg_query", "kg_timeline", "kg_invalidate", "kg_link",
                         "kg_neighbors"]
        recall_tool = listed.tools[1]
        assert recall_tool.annotations is not None and recall_tool.annotations.readOnlyHint
        assert recall_tool.outputSchema is None

        stored = await session.call_tool("remember", {
            "text": "Release trains leave every second Tuesday; freeze is the Friday before.",
            "room": "release", "tags": ["process"], "importance": 0.8})
        assert not stored.isError, text(stored)
        drawer_id = int(text(stored).split("#")[1].split()[0])

        found = await session.call_tool("recall", {"query": "when is the release freeze?"})
        assert not found.isError
        assert f"#{drawer_id} [general/release]" in text(found)
        assert "second Tuesday" in text(found)

        missing = await session.call_tool("forget", {"id": drawer_id + 1000})
        assert missing.isError and "MEMORY_NOT_FOUND" in text(missing)
        bad = await session.call_tool("remember", {"text": "x", "colour": "red"})
        assert bad.isError and "unknown argument(s) 'colour'" in text(bad)
        with pytest.raises(McpError, match="Unknown tool"):
            await session.call_tool("no_such_tool", {})

        gone = await session.call_tool("forget", {"id": drawer_id})
        assert not gone.isError
        after = await session.call_tool("list_drawers", {})
        assert "second Tuesday" not in text(after)
