"""``palace hook capture --agent A`` through the real CLI and daemon, fed each agent's
transcript fixture (tests/fixtures/): what it stores is authored ``hook:<agent>`` (policy
globs match it), and Copilot CLI's ``sessionEnd``, whose input names only the session,
captures the session's ``events.jsonl`` under ``$COPILOT_HOME/session-state/``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import PalaceError
from tests.conftest import DaemonProc, base_env, fresh_name

pytestmark = pytest.mark.daemon

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TRANSCRIPTS = {"claude": FIXTURES / "claude-code-session.jsonl",
               "codex": FIXTURES / "transcripts" / "codex-rollout.jsonl",
               "gemini": FIXTURES / "transcripts" / "gemini-session.jsonl",
               "copilot": FIXTURES / "transcripts" / "copilot-events.jsonl"}


def hook(env: dict[str, str], data: dict[str, Any], *args: str) -> None:
    """Run ``palace hook capture ARGS`` as an agent does: the input on stdin, exit 0, silent."""
    env = {k: v for k, v in env.items() if k != "CLAUDE_PROJECT_DIR"}
    res = subprocess.run([sys.executable, "-m", "palace_client", "hook", "capture", *args],
                         input=json.dumps(data), env=env, capture_output=True, text=True,
                         timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


def hook_input(agent: str, path: Path) -> dict[str, Any]:
    """The capture hook's input of ``agent`` naming the transcript ``path``."""
    if agent == "copilot":
        return {"sessionId": "s1", "cwd": str(path.parent), "transcriptPath": str(path),
                "stopReason": "end_turn"}
    return {"session_id": "s1", "cwd": str(path.parent), "transcript_path": str(path),
            "hook_event_name": "Stop"}


def captured(d: DaemonProc, palace: str, timeout: float = 20) -> list[dict[str, Any]]:
    """The palace's captured drawers (wing ``sessions``), once there are any."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with d.client() as c:
                drawers: list[dict[str, Any]] = c.drawers(palace, wing="sessions",
                                                           limit=100)["drawers"]
        except PalaceError:  # the capture has not created the palace yet
            drawers = []
        if drawers:
            return drawers
        assert time.monotonic() < deadline, f"nothing captured in {palace} after {timeout} s"
        time.sleep(0.1)


def denied(d: DaemonProc, palace: str, agent: str, timeout: float = 20) -> None:
    """Wait for the palace's audit log to record a capture by ``agent`` refused."""
    deadline = time.monotonic() + timeout
    while True:
        with d.client() as c:
            log = c.audit(palace, limit=20)["entries"]
        if any((e["agent"], e["op"], e["outcome"]) == (agent, "capture.transcript", "denied")
               for e in log):
            return
        assert time.monotonic() < deadline, log
        time.sleep(0.1)


@pytest.mark.parametrize("agent", sorted(TRANSCRIPTS))
def test_a_hooks_capture_is_authored_by_its_agent(
        shared_keyword_daemon: DaemonProc, tmp_path: Path, agent: str) -> None:
    d, palace = shared_keyword_daemon, fresh_name(agent)
    path = tmp_path / TRANSCRIPTS[agent].name
    shutil.copy(TRANSCRIPTS[agent], path)
    # Claude Code's installed line has no --agent: its hooks are Claude Code's.
    flag = [] if agent == "claude" else ["--agent", agent]
    hook(d.env, hook_input(agent, path), "--palace", palace, *flag)
    drawers = captured(d, palace)
    assert {x["created_by"] for x in drawers} == {f"hook:{agent}"}
    with d.client() as c:
        log = c.audit(palace, op="capture.transcript", limit=5)["entries"]
    assert {e["agent"] for e in log} == {f"hook:{agent}"}


def test_palace_agent_still_names_the_author(shared_keyword_daemon: DaemonProc,
                                             tmp_path: Path) -> None:
    d, palace = shared_keyword_daemon, fresh_name("named")
    hook(d.env | {"PALACE_AGENT": "ci-bot"}, hook_input("codex", TRANSCRIPTS["codex"]),
         "--palace", palace, "--agent", "codex")
    assert {x["created_by"] for x in captured(d, palace)} == {"ci-bot"}


def test_a_policy_allows_or_denies_capture_by_agent(shared_keyword_daemon: DaemonProc) -> None:
    d, palace = shared_keyword_daemon, fresh_name("policy")
    with d.client() as c:
        c.create_palace(palace)
        c.set_policy(palace, "write", [c.agent, "hook:codex"])
    hook(d.env, hook_input("gemini", TRANSCRIPTS["gemini"]), "--palace", palace,
         "--agent", "gemini")
    denied(d, palace, "hook:gemini")
    log = (d.home / "state" / "palace.log").read_text()
    assert "FORBIDDEN" in log.splitlines()[-1]  # the hook's one line: the refusal
    hook(d.env, hook_input("codex", TRANSCRIPTS["codex"]), "--palace", palace,
         "--agent", "codex")
    assert {x["created_by"] for x in captured(d, palace)} == {"hook:codex"}
    with d.client() as c:  # every hook, denied by one glob
        c.set_policy(palace, "write", [c.agent])
    hook(d.env, hook_input("copilot", TRANSCRIPTS["copilot"]), "--palace", palace,
         "--agent", "copilot")
    denied(d, palace, "hook:copilot")


def test_copilot_session_end_captures_the_sessions_events(
        shared_keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    """Copilot CLI 1.0.102's sessionEnd input (logged from the real binary): sessionId,
    timestamp, cwd, reason; no transcriptPath."""
    d, palace = shared_keyword_daemon, fresh_name("copilot-end")
    copilot_home = tmp_path / "copilot-home"
    session = str(uuid.uuid4())
    events = copilot_home / "session-state" / session / "events.jsonl"
    events.parent.mkdir(parents=True)
    env = d.env | {"COPILOT_HOME": str(copilot_home)}
    end = {"sessionId": session, "timestamp": 1796452660088, "cwd": str(tmp_path),
           "reason": "complete"}
    # A session id that is not one plain name is never made a path: nothing captured.
    outside = tmp_path / "events.jsonl"
    shutil.copy(TRANSCRIPTS["copilot"], outside)
    for bad in ("..", "../..", f"../../{tmp_path.name}", "/tmp", "a/b"):
        hook(env, end | {"sessionId": bad}, "--palace", palace, "--agent", "copilot")
    started = time.monotonic()
    hook(env, end, "--palace", palace, "--agent", "copilot")
    # Copilot may write the session's file only after its sessionEnd hook, session.shutdown
    # last (seen under load: no file at the hook): the capture waits for that.
    time.sleep(1.0)
    with d.client() as c:
        assert palace not in {p["name"] for p in c.list_palaces()}
    shutil.copy(TRANSCRIPTS["copilot"], events)
    time.sleep(0.3)
    with d.client() as c:
        assert palace not in {p["name"] for p in c.list_palaces()}
    with events.open("a") as fh:
        fh.write(json.dumps({"type": "session.shutdown", "data": {}, "id": "x",
                             "timestamp": "2025-09-14T08:01:45.000Z", "parentId": None}) + "\n")
    drawers = captured(d, palace)
    assert time.monotonic() - started < 8  # sent on the marker, not after the 15 s bound
    texts = "\n".join(x["text"] for x in drawers)
    assert "client_max_body_size" in texts and "Which CDN serves the images?" in texts
    assert "sk-proj-Xq7vR2mN9pL4kT8wZ3cF6hJ1bD5sG0aE" not in texts
    assert {x["created_by"] for x in drawers} == {"hook:copilot"}
    with d.client() as c:  # one capture: the bad ids sent nothing
        log = c.audit(palace, op="capture.transcript", limit=10)["entries"]
    assert len(log) == 1 and log[0]["outcome"] == "stored"


def test_the_deferred_delivery_keeps_the_author(home: Path) -> None:
    """The daemon is down: the detached delivery starts it and stores as the hook's agent."""
    env = base_env(home, model=False)
    hook(env, hook_input("codex", TRANSCRIPTS["codex"]), "--palace", "later", "--agent",
         "codex")
    d = DaemonProc(home, env)
    try:
        deadline = time.monotonic() + 60
        while not (home / "run" / "palaced.sock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        d.wait_ready(wait_model=False, timeout=60)
        assert {x["created_by"] for x in captured(d, "later", 60)} == {"hook:codex"}
    finally:
        d.stop()
