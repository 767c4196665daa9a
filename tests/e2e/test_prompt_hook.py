"""``palace hook prompt`` as Claude Code runs it (a process fed the UserPromptSubmit input on
stdin) against a real keyword daemon, and as Codex CLI, Gemini CLI and Copilot CLI run it
(``--agent``: their input fields, their output shapes); ``palace hook wake-up`` as each agent's
session start runs it; and the capture hook's hygiene: a session with no transcript is a
silent no-op, a capture that stores nothing leaves no audit entry."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProc, base_env, fresh_name, short_home
from tests.support.transcripts import Session

pytestmark = pytest.mark.daemon


def run(env: dict[str, str], verb: str, stdin: str, *args: str
        ) -> tuple[subprocess.CompletedProcess[str], float]:
    """``palace hook VERB`` through the console script's entry, timed from start to exit."""
    env = {k: v for k, v in env.items() if k != "CLAUDE_PROJECT_DIR"}
    started = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", "from palace_client.entry import main; main()", "hook", verb,
         *args], input=stdin, env=env, capture_output=True, text=True, timeout=60)
    return res, time.perf_counter() - started


def prompt_input(prompt: str, session: str, cwd: str = "/", agent: str = "claude") -> str:
    """A prompt hook's input as ``agent`` sends it (its documented fields)."""
    if agent == "copilot":  # camelCase events: camelCase fields
        return json.dumps({"sessionId": session, "timestamp": 1764900000000, "cwd": cwd,
                           "prompt": prompt})
    event = {"gemini": "BeforeAgent"}.get(agent, "UserPromptSubmit")
    return json.dumps({"session_id": session, "transcript_path": "/nonexistent.jsonl",
                       "cwd": cwd, "hook_event_name": event, "prompt": prompt})


def injected(res: subprocess.CompletedProcess[str], agent: str = "claude",
             event: str = "UserPromptSubmit") -> str:
    """The context the hook printed in ``agent``'s shape ("" when it printed nothing)."""
    assert res.returncode == 0 and res.stderr == ""
    if not res.stdout:
        return ""
    out = json.loads(res.stdout)
    if agent in ("copilot", "cursor"):  # a top-level key of their own
        (key,) = out
        assert key == {"copilot": "additionalContext", "cursor": "additional_context"}[agent]
        return str(out[key])
    assert out["hookSpecificOutput"]["hookEventName"] == event
    return str(out["hookSpecificOutput"]["additionalContext"])


PROMPT_EVENTS = {"claude": "UserPromptSubmit", "codex": "UserPromptSubmit",
                 "gemini": "BeforeAgent", "copilot": "userPromptSubmitted"}


def client_log(d: DaemonProc) -> str:
    path = d.home / "state" / "palace.log"
    return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def filled(shared_keyword_daemon: DaemonProc) -> tuple[DaemonProc, str, dict[str, int]]:
    d = shared_keyword_daemon
    name = fresh_name("hook")
    ids: dict[str, int] = {}
    with d.client() as c:
        c.create_palace(name)
        # More important drawers than the wake-up shows (L1: 15), so that the ones asked for
        # below are not in it.
        c.remember_many(name, [{"text": f"Standup note {i}: sprint item {i} is on track.",
                                "importance": "high"} for i in range(20)])
        ids["queue"] = c.remember(name, "The email queue runs on RabbitMQ 3.13, port 5673.",
                                  wing="infra", room="queues", importance="low")
        ids["db"] = c.remember(name, "Orders are stored in PostgreSQL 16 on the db-2 host.",
                               wing="infra", room="storage", importance="low")
        ids["essential"] = c.remember(name, "Deploys go through the Kubernetes cluster zeta.",
                                      wing="infra", room="deploy", importance="critical")
    return d, name, ids


@pytest.mark.parametrize("agent", sorted(PROMPT_EVENTS))
def test_a_hit_injects_its_drawer_once_per_session(
        filled: tuple[DaemonProc, str, dict[str, int]], agent: str) -> None:
    d, name, ids = filled
    session = uuid.uuid4().hex
    flags = ("--palace", name) if agent == "claude" else ("--palace", name, "--agent", agent)
    event = "UserPromptSubmit" if agent == "codex" else PROMPT_EVENTS[agent]
    res, _ = run(d.env, "prompt", prompt_input("which RabbitMQ port does the queue use?",
                                               session, agent=agent), *flags)
    text = injected(res, agent, event)
    assert f"#{ids['queue']} " in text and "5673" in text
    assert f"#{ids['db']} " not in text  # under the floor or not found: never injected
    # The same question again in the same session: already seen, nothing injected ...
    res, _ = run(d.env, "prompt", prompt_input("RabbitMQ port of the queue, again?", session,
                                               agent=agent), *flags)
    assert injected(res, agent, event) == ""
    # ... while another session is shown it.
    res, _ = run(d.env, "prompt", prompt_input("which RabbitMQ port does the queue use?",
                                               uuid.uuid4().hex, agent=agent), *flags)
    assert "5673" in injected(res, agent, event)
    # The session's file is private.
    files = list((d.home / "state" / "prompt-sessions").glob("*.json"))
    assert files and all(f.stat().st_mode & 0o077 == 0 for f in files)
    assert "hook prompt" not in client_log(d)  # no failure made it quiet


def test_cursor_has_no_prompt_hook(filled: tuple[DaemonProc, str, dict[str, int]]) -> None:
    """Cursor's beforeSubmitPrompt can only allow or block: the hook adds nothing, says why
    in the log, and exits 0."""
    d, name, _ = filled
    stdin = json.dumps({"conversation_id": "c1", "workspace_roots": ["/"],
                        "hook_event_name": "beforeSubmitPrompt",
                        "prompt": "which RabbitMQ port does the queue use?"})
    res, _ = run(d.env, "prompt", stdin, "--palace", name, "--agent", "cursor")
    assert injected(res, "cursor") == ""
    assert "cursor's prompt hook cannot add context" in client_log(d)


START_INPUTS = {
    "claude": {"session_id": "s", "cwd": "/", "hook_event_name": "SessionStart",
               "source": "startup"},
    "codex": {"session_id": "s", "cwd": "/", "hook_event_name": "SessionStart",
              "source": "startup", "model": "gpt-5", "transcript_path": None},
    "gemini": {"session_id": "s", "cwd": "/", "hook_event_name": "SessionStart",
               "source": "startup", "transcript_path": "/t.json", "timestamp": "x"},
    "cursor": {"session_id": "s", "conversation_id": "s", "workspace_roots": ["/"],
               "is_background_agent": False, "composer_mode": "agent"},
    "copilot": {"sessionId": "s", "timestamp": 1764900000000, "cwd": "/", "source": "new"},
}


@pytest.mark.parametrize("agent", sorted(START_INPUTS))
def test_wake_up_hook_opens_the_session_in_the_agents_shape(
        filled: tuple[DaemonProc, str, dict[str, int]], agent: str) -> None:
    d, name, _ = filled
    with d.client() as c:
        shown = c.wake_up(name)["text"]
    stdin = json.dumps(START_INPUTS[agent])
    res, _ = run(d.env, "wake-up", stdin, "--palace", name, "--agent", agent)
    assert injected(res, agent, "SessionStart") == shown  # what `palace wake-up` prints
    assert "Kubernetes cluster zeta" in shown
    # A palace not created yet: nothing printed (reads create nothing), exit 0.
    res, _ = run(d.env, "wake-up", stdin, "--palace", fresh_name("none"), "--agent", agent)
    assert injected(res, agent, "SessionStart") == ""
    assert "hook wake-up" not in client_log(d)


def test_what_the_wake_up_showed_is_not_injected(
        filled: tuple[DaemonProc, str, dict[str, int]]) -> None:
    d, name, _ = filled
    with d.client() as c:
        shown = c.wake_up(name)["text"]
    assert "Kubernetes cluster zeta" in shown  # the critical drawer is an essential one
    res, _ = run(d.env, "prompt", prompt_input("which Kubernetes cluster do deploys use?",
                                               uuid.uuid4().hex), "--palace", name)
    assert injected(res) == ""
    # Without a session there is no wake-up to account for: it is injected.
    no_session = json.dumps({"prompt": "which Kubernetes cluster do deploys use?"})
    res, _ = run(d.env, "prompt", no_session, "--palace", name)
    assert "cluster zeta" in injected(res)


def test_a_miss_and_a_missing_palace_inject_nothing(
        filled: tuple[DaemonProc, str, dict[str, int]]) -> None:
    d, name, _ = filled
    res, _ = run(d.env, "prompt", prompt_input("what is the capital of Mongolia?",
                                               uuid.uuid4().hex), "--palace", name)
    assert injected(res) == ""
    res, _ = run(d.env, "prompt", prompt_input("which RabbitMQ port?", uuid.uuid4().hex),
                 "--palace", fresh_name("none"))
    assert injected(res) == ""
    with d.client() as c:
        assert name in {p["name"] for p in c.list_palaces()}
        assert len({p["name"] for p in c.list_palaces()}) == 1  # reads create nothing


def test_bad_input_injects_nothing_and_exits_0(
        filled: tuple[DaemonProc, str, dict[str, int]]) -> None:
    d, name, _ = filled
    for stdin in ("not json", "[]", json.dumps({"prompt": 3}),
                  '{"prompt": "RabbitMQ \\ud83d port", "session_id": "../../etc"}'):
        res, _ = run(d.env, "prompt", stdin, "--palace", name)
        assert res.returncode == 0 and res.stderr == ""
        if "RabbitMQ" in stdin:  # a lone surrogate is cleaned, not fatal
            assert "5673" in injected(res)
        else:
            assert res.stdout == ""


def test_daemon_down_injects_nothing_within_the_time_box() -> None:
    home = short_home()
    env = base_env(home, model=False)
    (home / "config").mkdir(parents=True, exist_ok=True)
    res, took = run(env, "prompt", prompt_input("which RabbitMQ port?", "s1"), "--palace", "x")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert took < 1.5  # the 1 s time box, interpreter start-up included
    assert not (home / "run").exists() or not list((home / "run").glob("*.sock"))  # no autostart
    log = home / "state" / "palace.log"
    assert not log.exists() or "hook prompt" not in log.read_text()  # usual: not logged


def test_a_daemon_that_does_not_answer_costs_the_time_box_only(tmp_path: Path) -> None:
    home = short_home()
    env = base_env(home, model=False)
    (home / "config.toml").write_text("[hooks]\nprompt_timeout_s = 0.4\n")
    sock_path = home / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(sock_path))
    mute.listen(8)  # accepts (the kernel does), never answers the handshake
    try:
        res, took = run({**env, "PALACE_SOCKET": str(sock_path)}, "prompt",
                        prompt_input("which RabbitMQ port?", "s1"), "--palace", "x")
    finally:
        mute.close()
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert 0.3 < took < 0.9  # the configured 0.4 s, interpreter start-up included
    assert "[DAEMON_UNREACHABLE]" in (home / "state" / "palace.log").read_text()


def test_session_end_with_no_transcript_is_silent(shared_keyword_daemon: DaemonProc) -> None:
    d = shared_keyword_daemon
    before = client_log(d)
    # What `claude mcp list` sends: a SessionEnd naming a transcript never written.
    for path in ("/tmp/never-written-" + uuid.uuid4().hex + ".jsonl", ""):
        stdin = json.dumps({"session_id": uuid.uuid4().hex, "transcript_path": path,
                            "cwd": "/", "hook_event_name": "SessionEnd", "reason": "other"})
        res, _ = run(d.env, "capture", stdin, "--palace", fresh_name("end"))
        assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    time.sleep(0.2)
    assert client_log(d) == before


def test_a_capture_that_stores_nothing_leaves_no_audit_entry(
        shared_keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = shared_keyword_daemon
    name = fresh_name("audit")
    s = Session(tmp_path / "s.jsonl", cwd=str(tmp_path))
    s.exchange("Which queue do we use?", "RabbitMQ 3.13 on port 5673.")
    with d.client() as c:
        assert c.capture_transcript(name, s.path, create=True, wait=True)["drawers"] == 1

        def entries() -> list[dict[str, Any]]:
            return list(c.audit(name)["entries"])

        count = len(entries())
        s.prompt("And the password?")  # read, but nothing to store until it is answered
        report = c.capture_transcript(name, s.path, wait=True)
        assert report["drawers"] == 0
        assert len(entries()) == count
