"""The real agent binaries (tests/agents/package.json) reach palace's MCP over Streamable HTTP:
each is configured as docs/http.md#configuring-an-agent says, the bearer secret taken from
the environment (``PALACE_SECRET``), pointed at a real ``palace serve``'s ``/mcp?palace=``
on a real keyword-only palaced, and run offline against the model stand-in, whose scripted
model calls palace's ``remember`` tool. The drawer must be stored with the agent's MCP client
name as its author, and the tool's answer must reach the model."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.e2e import test_http_api
from tests.e2e.agents.test_agents import FACT, remembered, texts_with
from tests.e2e.test_http_api import Served
from tests.support.agents import AGENTS, Agent, World, make_world, run_agent
from tests.support.model_standin import ModelStandin

pytestmark = pytest.mark.daemon
served = test_http_api.served  # the fixture: a real `palace serve` on the shared daemon


def configured(agent: Agent, world: World, url: str) -> Agent:
    """``agent`` with its HTTP MCP server entry, as docs/http.md shows it (Codex and Gemini
    CLI write their user config when they are prepared for a run: the entry is added after)."""
    if agent.name == "claude":
        (world.project / ".mcp.json").write_text(json.dumps({"mcpServers": {"palace": {
            "type": "http", "url": url,
            "headers": {"Authorization": "Bearer ${PALACE_SECRET}"}}}}))
        (world.project / ".claude").mkdir()
        (world.project / ".claude" / "settings.local.json").write_text(
            json.dumps({"enabledMcpjsonServers": ["palace"]}))
        return agent

    def prepare(world: World) -> dict[str, str]:
        env = agent.prepare(world)
        if agent.name == "codex":
            config = world.home / ".codex" / "config.toml"
            config.write_text(config.read_text() + f'[mcp_servers.palace]\nurl = "{url}"\n'
                              'bearer_token_env_var = "PALACE_SECRET"\n')
        else:
            settings = world.home / ".gemini" / "settings.json"
            values = json.loads(settings.read_text())
            values["mcpServers"] = {"palace": {
                "httpUrl": url, "headers": {"Authorization": "Bearer $PALACE_SECRET"}}}
            settings.write_text(json.dumps(values))
        return env

    return replace(agent, prepare=prepare)


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pal-agent-http-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", ["claude", "codex", "gemini"])
def test_agent_remembers_through_mcp_over_http(
        shared_keyword_daemon: DaemonProc, served: Served, agent_bin_dir: Path,
        scratch: Path, name: str) -> None:
    agent = AGENTS[name]
    palace = f"{name}-http-{uuid.uuid4().hex[:8]}"
    with ModelStandin() as standin:
        world = make_world(scratch, shared_keyword_daemon.env, standin.url, palace,
                           agent_bin_dir)
        world.env["PALACE_SECRET"] = served.secret
        agent = configured(agent, world, f"{served.base}/mcp?palace={palace}")
        run_agent(agent, world, f"remember: {FACT}")
        fact = remembered(shared_keyword_daemon, palace)
        assert fact["created_by"].startswith(f"mcp:{agent.client_name}/"), fact
        assert texts_with(standin, f"Stored drawer #{fact['id']} in palace '{palace}'")
