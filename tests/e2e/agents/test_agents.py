"""Real agent binaries from npm (Claude Code, Codex CLI, Gemini CLI, Copilot CLI:
tests/agents/package.json) run real sessions offline against a local model stand-in
(tests/support/model_standin.py) and a real keyword-only palaced, in a scratch HOME and git
project configured by ``palace init --hooks --scope project``. What they prove, through
each binary:

(a) remember: a prompt "remember: X" makes the stand-in call palace's MCP ``remember`` tool;
    the drawer is stored with the agent's MCP client name as its author;
(b) wake-up and prompt-time recall: in the next session the text the hooks injected reached
    the model (the stand-in's recorded request bodies);
(c) capture: after a session the transcript's exchange is in the palace, its planted
    ``sk-...`` key redacted, authored by the hook's agent (``hook:<agent>``).

How each binary is pointed at the stand-in: tests/support/agents.py; what ran, with versions:
docs/agents.md#proved-with-the-real-agents.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProc
from tests.support.agents import AGENTS, Agent, World, make_world, run_agent
from tests.support.model_standin import ModelStandin

pytestmark = pytest.mark.daemon

FACT = "the deploy key rotates every 90 days"
SECRET = "sk-proj-a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
# The trigger of the stand-in's script stops at the line end: the key is not in the tool call,
# only in the prompt, which the capture stores (redacted).
PROMPT_REMEMBER = f"remember: {FACT}\nThe CI token is {SECRET}"
PROMPT_ASK = "How often does the deploy key rotate?"
# 15 important drawers fill the wake-up's L1 (the 15 most important), so that the remembered
# fact (medium) reaches the model through the prompt hook, not the wake-up: each hook shows.
SEEDS = [f"Essential note {n}: the nightly build of service s{n} runs on runner r{n}"
         for n in range(15)]


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pal-agent-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def init_project(agent: Agent, world: World) -> None:
    """``palace init --hooks --agent A --scope project`` in the world's project."""
    res = subprocess.run([sys.executable, "-m", "palace_client", "init", "--hooks", "--agent",
                          agent.name, "--scope", "project"], cwd=world.project, env=world.env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def strings(value: Any) -> Iterator[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def texts_with(standin: ModelStandin, marker: str) -> list[str]:
    """The strings of the recorded request bodies that contain ``marker``."""
    return [s for r in standin.requests for s in strings(r.body) if marker in s]


# The lines of palace's wake-up and recall texts after their heading: blank lines, section
# titles, drawer heads ("- #12 [...]", "#12 [...]"), their indented texts and notices.
_PALACE_LINE = re.compile(r"$|## |Best matches|(- )?#\d+ |  \S|\(")


def injected(standin: ModelStandin, heading: str) -> str:
    """The palace text opening with ``heading`` that reached the model, cut out of whatever
    the agent wrapped around it (Claude Code joins every hook's output into one system
    message): "" when none did."""
    for text in texts_with(standin, heading):
        lines = text[text.index(heading):].split("\n")
        end = next((i for i, ln in enumerate(lines[1:], 1) if not _PALACE_LINE.match(ln)),
                   len(lines))
        return "\n".join(lines[:end]).strip()
    return ""


def remembered(daemon: DaemonProc, palace: str) -> dict[str, Any]:
    """The one drawer holding exactly FACT."""
    with daemon.client() as c:
        drawers = c.drawers(palace, limit=100)["drawers"]
    hits: list[dict[str, Any]] = [d for d in drawers if d["text"] == FACT]
    assert len(hits) == 1, [d["text"] for d in drawers]
    return hits[0]


def wait_captured(daemon: DaemonProc, palace: str, prompt: str = PROMPT_REMEMBER,
                  timeout: float = 20) -> list[dict[str, Any]]:
    """The captured exchange drawers (wing ``sessions``) once the one of ``prompt`` (its first
    line) is in."""
    deadline = time.monotonic() + timeout
    first_line = prompt.splitlines()[0]
    while True:
        with daemon.client() as c:
            drawers = c.drawers(palace, wing="sessions", limit=100)["drawers"]
        if any(f"User: {first_line}" in d["text"] for d in drawers):
            return list(drawers)
        if time.monotonic() > deadline:
            with daemon.client() as c:
                every = c.drawers(palace, limit=100)["drawers"]
            raise AssertionError(f"no captured exchange of {first_line!r} after {timeout} s: "
                                 f"{[(x['id'], x['wing'], x['text'][:70]) for x in every]}")
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "copilot"])
def test_agent_remembers_wakes_up_recalls_and_captures(
        shared_keyword_daemon: DaemonProc, agent_bin_dir: Path, scratch: Path,
        name: str) -> None:
    d = shared_keyword_daemon
    agent = AGENTS[name]
    palace = f"{name}-{uuid.uuid4().hex[:8]}"
    with ModelStandin() as standin:
        world = make_world(scratch, d.env, standin.url, palace, agent_bin_dir)
        init_project(agent, world)

        # (a) Session 1: the model calls palace's remember tool through the real binary.
        out = run_agent(agent, world, PROMPT_REMEMBER)
        assert standin.script.final_text in out.stdout
        fact = remembered(d, palace)
        assert fact["created_by"].startswith(f"mcp:{agent.client_name}/"), fact
        assert texts_with(standin, f"Stored drawer #{fact['id']}")  # the tool result came back

        # (c) The capture hooks stored the exchange, the key redacted, as the agent's hook
        # (Copilot's: its sessionEnd, since its agentStop may come before the turn is
        # written).
        captured = wait_captured(d, palace)
        exchange = next(x for x in captured if "remember: " + FACT in x["text"])
        assert "[REDACTED:openai_key]" in exchange["text"], exchange["text"]
        assert {x["created_by"] for x in captured} == {f"hook:{name}"}, captured
        with d.client() as c:
            every = c.drawers(palace, limit=100)["drawers"]
        assert not [x["id"] for x in every if SECRET in x["text"]]

        # (b) Session 2: the session-start hook's wake-up and the prompt hook's recall reach
        # the model.
        for seed in SEEDS:
            d.cli("remember", seed, "--palace", palace, "--importance", "high", check=True)
        standin.clear()
        run_agent(agent, world, PROMPT_ASK)
        wake = injected(standin, f"Wake-up context of palace '{palace}'")
        assert SEEDS[0] in wake and SEEDS[-1] in wake, wake
        assert FACT not in wake  # L1 is full of the seeds: the fact comes from the prompt
        recall = injected(standin, f"Recall in palace '{palace}'")
        assert f"#{fact['id']} [general/general] " in recall and FACT in recall, recall
        # The second session's first prompt is captured too.
        captured = wait_captured(d, palace, PROMPT_ASK)
        assert {x["created_by"] for x in captured} == {f"hook:{name}"}, captured
