"""The MCP toolsets and what an agent lacked (issue 29): the lean default ``tools/list`` and
every toolset's, in cl100k tokens; ``get`` (drawers whole, within a token bound), ``rooms``
(wings, rooms, counts and the recall mode), importance by name, ``list_drawers``' default page;
``palace mcp --tools``, ``palace init --tools`` and ``[mcp] tools``, and their errors.

Through real ``palace mcp`` processes against real daemons (the SDK clients of both majors
drive the default set in ``test_mcp_sdk.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palace_client.mcp.tools import GET_TOKENS, LIST_PAGE
from palaced.config.settings import check
from palaced.engine.tokens import Tokenizer
from palaced.wire.errors import InvalidArgs
from palaced.wire.specs import MCP_TOOLSETS, parse_toolsets
from tests.conftest import TIKTOKEN_FILE, DaemonProc, base_env
from tests.palace_client.mcp.test_mcp_knowledge import Bridge

pytestmark = pytest.mark.daemon

BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]
MAX_DEFAULT_TOKENS = 1200  # the default tools/list, compact JSON (issue 29)
MAX_ALL_TOKENS = 2200  # every toolset together
MAX_LIST_PAGE_TOKENS = 1000  # list_drawers with default arguments
OPT_IN = ["upkeep", "kg_assert", "kg_query", "kg_invalidate", "memoir"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tok = Tokenizer.load(TIKTOKEN_FILE)
    assert tok.exact, tok.reason
    return tok


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tools_list(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    """``tools/list`` of a ``palace mcp`` process started with ``args`` (no daemon needed)."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]
    proc = subprocess.run([*BRIDGE, "--palace", "p", *args], env=env, timeout=60,
                          input="".join(json.dumps(m) + "\n" for m in lines),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    tools: list[dict[str, Any]] = answers[-1]["result"]["tools"]
    return tools


@pytest.fixture
def bridge(shared_daemon: DaemonProc) -> Iterator[Bridge]:
    """A bridge serving the default toolset on a fresh palace."""
    b = Bridge(shared_daemon.env, f"ts-{uuid.uuid4().hex[:8]}", "--tools", "core")
    try:
        yield b
    finally:
        if b.p.poll() is None:
            b.close()


def stored_id(text: str) -> int:
    found = re.search(r"drawer #(\d+)", text)
    assert found, text
    return int(found.group(1))


# -- tools/list -------------------------------------------------------------------------------
def test_default_tools_list_is_lean_and_all_toolsets_within_bound(
        tokenizer: Tokenizer, tmp_path: Path) -> None:
    env = base_env(tmp_path)
    default = tools_list(env)
    everything = tools_list(env, "--tools", "all")
    default_tokens = tokenizer.count(compact({"tools": default}))
    all_tokens = tokenizer.count(compact({"tools": everything}))
    print(f"\ntools/list: default {len(default)} tools {default_tokens} cl100k tokens; "
          f"all {len(everything)} tools {all_tokens}")
    assert [t["name"] for t in default] == [
        "remember", "recall", "wake_up", "forget", "get", "list_drawers", "rooms"]
    assert default_tokens <= MAX_DEFAULT_TOKENS
    assert [t["name"] for t in everything] == [t["name"] for t in default[:7]] + OPT_IN
    assert all_tokens <= MAX_ALL_TOKENS
    kg = tools_list(env, "--tools", "kg, upkeep")
    assert [t["name"] for t in kg][7:] == ["upkeep", "kg_assert", "kg_query", "kg_invalidate"]


def test_config_key_chooses_the_toolsets_and_the_flag_wins(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    (tmp_path / "config.toml").write_text('[mcp]\ntools = "memoir"\n')
    assert [t["name"] for t in tools_list(env)][7:] == ["memoir"]
    assert [t["name"] for t in tools_list(env, "--tools", "core")][7:] == []


@pytest.mark.parametrize("where", ["flag", "config"])
def test_unknown_toolset_is_a_typed_error(tmp_path: Path, where: str) -> None:
    env = base_env(tmp_path)
    args = ["--tools", "kg,graphs"] if where == "flag" else []
    if where == "config":
        (tmp_path / "config.toml").write_text('[mcp]\ntools = "kg,graphs"\n')
    proc = subprocess.run([*BRIDGE, "--palace", "p", *args], env=env, input="", timeout=60,
                          capture_output=True, text=True)
    assert proc.returncode == (2 if where == "flag" else 5), proc.stderr
    assert "unknown toolset 'graphs'; the toolsets are core, kg, memoir, upkeep and all" in (
        proc.stderr)
    assert ("[USAGE_ERROR]" if where == "flag" else "[INVALID_ARGS]") in proc.stderr
    assert proc.stdout == ""


def test_daemon_config_check_knows_the_toolsets(tmp_path: Path) -> None:
    source = tmp_path / "config.toml"
    check({"mcp": {"tools": "kg,memoir"}}, '[mcp]\ntools = "kg,memoir"\n', source)
    with pytest.raises(InvalidArgs, match=r"config.toml:2: \[mcp\] tools unknown toolset 'x'"):
        check({"mcp": {"tools": "x"}}, '[mcp]\ntools = "x"\n', source)
    with pytest.raises(InvalidArgs, match=r"\[mcp\] tools must be a string"):
        check({"mcp": {"tools": ["kg"]}}, '[mcp]\ntools = ["kg"]\n', source)
    assert parse_toolsets(None) == ("core",)
    assert parse_toolsets(" Memoir ,kg") == ("core", "kg", "memoir")
    assert parse_toolsets("all") == tuple(MCP_TOOLSETS)


def test_a_tool_not_served_says_how_to_add_it(bridge: Bridge) -> None:
    is_error, text = bridge.call("kg_query", subject="Alice")
    assert is_error
    assert "the tool 'kg_query' is in the toolset 'kg'" in text
    assert "`palace mcp --tools kg`" in text and "[mcp]" in text


# -- what an agent lacked -----------------------------------------------------------------------
def test_get_reads_drawers_whole_within_the_token_bound(bridge: Bridge,
                                                        tokenizer: Tokenizer) -> None:
    short = stored_id(bridge.ok("remember", text="The staging database is pg-stage-2.",
                                room="infra"))
    lines = [f"Step {i}: run migration {i} against the replica, check lag, then promote it."
             for i in range(400)]
    runbook = "\n".join(lines)
    long_id = stored_id(bridge.ok("remember", text=runbook, room="runbook"))
    # recall and list_drawers show the long drawer cut short, and point at get.
    listing = bridge.ok("list_drawers")
    assert f"get ids=[{long_id}] for all" in listing and "palace get" not in listing

    whole = bridge.ok("get", ids=[short], max_tokens=200)
    assert "The staging database is pg-stage-2." in whole and "cut at" not in whole

    both = bridge.ok("get", ids=[short, long_id])
    assert "The staging database is pg-stage-2." in both
    assert lines[0] in both and lines[-1] not in both
    total = tokenizer.count(runbook)
    assert re.search(rf"… \(cut at [\d,]+ of its {total:,} tokens; get ids=\[{long_id}\] "
                     rf"max_tokens={total + 100} reads it all\)", both), both[-300:]
    # What the agent receives, every line of it, stays within max_tokens.
    delivered = tokenizer.count(both)
    print(f"\nget default: {delivered} tokens delivered (bound {GET_TOKENS}) of a "
          f"{total}-token drawer")
    assert GET_TOKENS - 150 < delivered <= GET_TOKENS
    for bound in (200, 333, 1000, 5000):
        answer = bridge.ok("get", ids=[long_id, short], max_tokens=bound)
        assert tokenizer.count(answer) <= bound, (bound, answer)

    everything = bridge.ok("get", ids=[long_id], max_tokens=total + 100)
    assert lines[-1] in everything and "cut at" not in everything

    spent = bridge.ok("get", ids=[long_id, short, 10**9], max_tokens=200)
    assert "Not read, the token bound being spent: " in spent
    assert f"#{short}" in spent.split("Not read")[1]
    missing = bridge.ok("get", ids=[10**9])
    assert f"#{10**9}: no drawer" in missing

    is_error, text = bridge.call("get", ids=[])
    assert is_error and "'ids' needs at least 1 item(s)" in text
    is_error, text = bridge.call("get", ids=[1, 2, 3, 4, 5, 6])
    assert is_error and "more than 5 items" in text


def test_rooms_lists_wings_rooms_counts_and_recall_mode(bridge: Bridge) -> None:
    # A read never creates the palace (one creation rule for every client): before the first
    # remember there is no palace to list.
    missing = bridge.ok("rooms")
    assert "holds nothing yet" in missing and "first remember creates it" in missing
    for wing, room, n in (("backend", "auth", 2), ("backend", "db", 1), ("frontend", "ui", 1)):
        for i in range(n):
            bridge.ok("remember", text=f"{wing} {room} fact number {i}", wing=wing, room=room)
    text = bridge.ok("rooms")
    assert "4 drawers in 3 rooms" in text
    assert "Recall is semantic" in text
    assert "- backend: auth (2), db (1)" in text and "- frontend: ui (1)" in text


def test_rooms_says_keyword_only_and_why(keyword_daemon: DaemonProc) -> None:
    b = Bridge(keyword_daemon.env, "kw")
    try:
        b.ok("remember", text="keyword only palace")
        text = b.ok("rooms")
        assert "Recall is keyword-only: it finds words, not meaning (no embedding model" in text
    finally:
        b.close()


def test_importance_takes_the_cli_names(bridge: Bridge, shared_daemon: DaemonProc) -> None:
    palace = re.findall(r"in palace '([^']+)'", bridge.ok("remember", text="warm-up"))[0]
    high = stored_id(bridge.ok("remember", text="Never deploy on Fridays.", importance="high"))
    low = stored_id(bridge.ok("remember", text="Lunch is at noon.", importance=0.2))
    with shared_daemon.client() as c:
        assert c.get(palace, high)["importance"] == 0.8
        assert c.get(palace, low)["importance"] == 0.2
    is_error, text = bridge.call("remember", text="x", importance="urgent")
    assert is_error
    assert "must be one of critical, high, medium, low or a number between 0.0 and 1.0" in text


def test_list_drawers_default_page_is_under_1000_tokens(shared_daemon: DaemonProc,
                                                        tokenizer: Tokenizer) -> None:
    palace = "ts-page"
    words = ("deploy", "schema", "token", "cache", "review", "release", "incident", "metric")
    items = [{"text": " ".join(f"{words[(i + k) % 8]} note {i} line {k} explains why the "
                               f"{words[k % 8]} step matters for the team."
                               for k in range(1 + i % 12)),
              "wing": f"w{i % 5}", "room": f"room-{i % 17}", "tags": ["bulk"]}
             for i in range(300)]
    with shared_daemon.client() as c:
        c.create_palace(palace, exist_ok=True)
        c.call("memory.remember_many", palace, {"items": items})
    b = Bridge(shared_daemon.env, palace, "--tools", "core")
    try:
        page = b.ok("list_drawers")
    finally:
        b.close()
    tokens = tokenizer.count(page)
    print(f"\nlist_drawers default page: {tokens} cl100k tokens ({len(page)} chars)")
    assert f"Drawers 1-{LIST_PAGE} of 300" in page
    assert tokens < MAX_LIST_PAGE_TOKENS


# -- palace init --tools --------------------------------------------------------------------------
def test_init_writes_the_toolsets_into_the_entry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    env = {**base_env(tmp_path / "data"), "HOME": str(home)}
    init = [sys.executable, "-m", "palace_client", "init", "--agent", "cursor",
            "--project-dir", str(project)]
    bad = subprocess.run([*init, "--tools", "graph"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2, bad.stderr
    assert "--tools: unknown toolset 'graph'" in bad.stderr
    assert not (project / ".cursor").exists()

    done = subprocess.run([*init, "--tools", "kg,memoir"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    entry = json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["palace"]
    assert entry["args"] == ["mcp", "--palace", "proj", "--tools", "core,kg,memoir"]
    # The entry's arguments start a bridge that serves those toolsets.
    served = [t["name"] for t in tools_list(env, *entry["args"][3:])]
    assert served[7:] == ["kg_assert", "kg_query", "kg_invalidate", "memoir"]
