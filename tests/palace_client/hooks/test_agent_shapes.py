"""Each agent's hook shapes (``palace_client.hooks.agents``): the input fields the hooks read,
the stdout they print to add context, the capture request they build, and the fail-open rule
for every agent (the e2e tests run the processes against a daemon)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palace_client.hooks import capture, prompt, wake
from palace_client.hooks.agents import AGENTS, agent_hooks, field
from palace_client.hooks.capture import HookInputError, hook_options

# Hook inputs as each agent sends them (field names from their documentation and source).
PROMPTS: dict[str, dict[str, Any]] = {
    "claude": {"session_id": "s1", "transcript_path": "/t/c.jsonl", "cwd": "/w/c",
               "hook_event_name": "UserPromptSubmit", "prompt": "which port?"},
    "codex": {"session_id": "s1", "turn_id": "t", "transcript_path": "/t/c.jsonl",
              "cwd": "/w/c", "hook_event_name": "UserPromptSubmit", "model": "gpt-5",
              "permission_mode": "default", "prompt": "which port?"},
    "gemini": {"session_id": "s1", "transcript_path": "/t/c.json", "cwd": "/w/c",
               "hook_event_name": "BeforeAgent", "timestamp": "2026-12-05T06:00:00Z",
               "prompt": "which port?"},
    "copilot": {"sessionId": "s1", "timestamp": 1764900000000, "cwd": "/w/c",
                "prompt": "which port?"},
}
STARTS: dict[str, dict[str, Any]] = {
    "codex": {"session_id": "s1", "cwd": "/w/c", "hook_event_name": "SessionStart",
              "source": "startup", "model": "gpt-5", "transcript_path": None},
    "gemini": {"session_id": "s1", "cwd": "/w/c", "hook_event_name": "SessionStart",
               "source": "startup", "transcript_path": "/t/c.json"},
    "cursor": {"session_id": "s1", "conversation_id": "s1", "is_background_agent": False,
               "composer_mode": "agent", "workspace_roots": ["/w/c", "/w/other"],
               "hook_event_name": "sessionStart"},
    "copilot": {"sessionId": "s1", "timestamp": 1764900000000, "cwd": "/w/c",
                "source": "new"},
}


@pytest.mark.parametrize("agent", sorted(PROMPTS))
def test_prompt_input_fields_per_agent(agent: str) -> None:
    hook = prompt.parse_prompt(json.dumps(PROMPTS[agent]).encode(), agent)
    assert hook == {"prompt": "which port?", "session_id": "s1", "cwd": "/w/c"}


@pytest.mark.parametrize("agent", sorted(STARTS))
def test_session_start_input_fields_per_agent(agent: str) -> None:
    assert wake.parse_start(json.dumps(STARTS[agent]).encode(), agent) == {
        "cwd": "/w/c", "session_id": "s1"}


def test_a_session_start_with_no_input_is_the_working_directorys() -> None:
    assert wake.parse_start(b"", "cursor") == {"cwd": None, "session_id": None}
    with pytest.raises(HookInputError):
        wake.parse_start(b"[1]", "codex")


# What each agent reads back, as its documentation says: Claude Code and Codex need the
# event named in hookSpecificOutput (Codex validates it), Gemini reads additionalContext
# there, Cursor a top-level additional_context, Copilot a top-level additionalContext.
PROMPT_OUT = {
    "claude": {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                      "additionalContext": "T"}},
    "codex": {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                     "additionalContext": "T"}},
    "gemini": {"hookSpecificOutput": {"hookEventName": "BeforeAgent",
                                      "additionalContext": "T"}},
    "copilot": {"additionalContext": "T"},
}
START_OUT = {
    "claude": {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                      "additionalContext": "T"}},
    "codex": {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                     "additionalContext": "T"}},
    "gemini": {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                      "additionalContext": "T"}},
    "cursor": {"additional_context": "T"},
    "copilot": {"additionalContext": "T"},
}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_output_shapes_per_agent(agent: str) -> None:
    assert json.loads(wake.output("T", agent)) == START_OUT[agent]
    if agent in PROMPT_OUT:
        assert json.loads(prompt.output("T", agent)) == PROMPT_OUT[agent]
    else:  # Cursor's beforeSubmitPrompt can only allow or block a prompt
        assert agent_hooks(agent).prompt is None
        with pytest.raises(HookInputError):
            prompt.output("T", agent)


def test_the_default_agent_is_claude_code() -> None:
    assert hook_options([]) == (None, "claude")
    assert hook_options(["--palace", "p", "--agent", "gemini"]) == ("p", "gemini")
    assert hook_options(["--agent=codex", "-p", "q"]) == ("q", "codex")
    assert json.loads(prompt.output("T")) == PROMPT_OUT["claude"]
    with pytest.raises(HookInputError, match="unknown agent"):
        hook_options(["--agent", "vscode"])
    with pytest.raises(HookInputError, match="unknown argument"):
        hook_options(["--agnet", "codex"])


def test_field_takes_the_first_non_empty_string() -> None:
    data = {"a": "", "b": ["", 3, "/root"], "c": "x"}
    assert field(data, ("a", "b", "c")) == "/root"
    assert field(data, ("a", "missing")) is None


# -- capture ------------------------------------------------------------------------------------
def test_capture_request_args_per_agent() -> None:
    claude = capture.parse_input(json.dumps(PROMPTS["claude"]).encode())
    assert capture.request_args(claude) == {"path": "/t/c.jsonl", "create": True,
                                            "session_id": "s1"}  # the daemon's default format
    for agent in ("codex", "gemini"):
        hook = capture.parse_input(json.dumps(PROMPTS[agent]).encode(), agent)
        assert capture.request_args(hook, agent) == {
            "path": hook["transcript_path"], "create": True, "session_id": "s1",
            "format": agent}
    copilot = capture.parse_input(json.dumps(
        {"sessionId": "s1", "cwd": "/w", "transcriptPath": "rel/events.jsonl",
         "stopReason": "end_turn"}).encode(), "copilot")
    assert capture.request_args(copilot, "copilot") == {
        "path": "/w/rel/events.jsonl", "create": True, "session_id": "s1", "format": "copilot"}
    cursor = capture.parse_input(json.dumps(
        {"conversation_id": "c", "transcript_path": "/t/x.txt"}).encode(), "cursor")
    assert cursor["transcript_path"] == ""  # Cursor's transcript is not one palace reads
    with pytest.raises(HookInputError, match="cannot read"):
        capture.request_args(copilot, "cursor")


# -- fail-open, every agent ---------------------------------------------------------------------
@pytest.fixture
def no_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A scratch PALACE_HOME where no daemon runs (the prompt hook never starts one)."""
    home = Path(f"/tmp/pal-agent-shapes-{os.getpid()}")
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("PALACE_HOME", str(home))
    for var in ("PALACE_SOCKET", "PALACE", "CLAUDE_PROJECT_DIR", "PALACE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    yield home
    import shutil

    shutil.rmtree(home, ignore_errors=True)


def _stdin(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def _log(home: Path) -> str:
    path = home / "state" / "palace.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("agent", sorted(PROMPTS))
def test_prompt_hook_fails_open_for_every_agent(
        agent: str, no_daemon: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for raw in (json.dumps(PROMPTS[agent]).encode(), b"not json", b'{"prompt": 3}'):
        assert prompt.prompt(["--agent", agent, "--palace", "p"], _stdin(raw)) == 0
    assert capsys.readouterr() == ("", "")
    assert "hook input" in _log(no_daemon)  # the bad inputs, logged; no daemon: silent


def test_cursor_prompt_hook_prints_nothing(no_daemon: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.dumps({"conversation_id": "c", "prompt": "which port?"}).encode()
    assert prompt.prompt(["--agent", "cursor"], _stdin(raw)) == 0
    assert capsys.readouterr() == ("", "")
    assert "cursor's prompt hook cannot add context" in _log(no_daemon)


@pytest.mark.parametrize("agent", sorted(START_OUT))
def test_wake_up_hook_prints_the_agents_shape_or_nothing(
        agent: str, no_daemon: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []

    def text(palace: str) -> str:
        asked.append(palace)
        return "Palace 'p' wake-up" if palace == "p" else ""

    monkeypatch.setattr(wake, "wake_text", text)
    raw = json.dumps(STARTS.get(agent, {"cwd": "/"})).encode()
    assert wake.wake_up(["--agent", agent, "--palace", "p"], _stdin(raw)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(START_OUT[agent]).replace('"T"',
                                                                  '"Palace \'p\' wake-up"'))
    assert wake.wake_up(["--agent", agent, "--palace", "empty"], _stdin(raw)) == 0
    assert capsys.readouterr() == ("", "")  # nothing to add: nothing printed

    def down(palace: str) -> str:
        from palaced.wire.errors import DaemonUnreachable

        raise DaemonUnreachable("no daemon")

    monkeypatch.setattr(wake, "wake_text", down)
    assert wake.wake_up(["--agent", agent, "--palace", "p"], _stdin(raw)) == 0
    assert wake.wake_up(["--agent", agent, "--bogus"], _stdin(raw)) == 0
    assert capsys.readouterr() == ("", "")
    log = _log(no_daemon)
    assert "hook wake-up: no daemon" in log and "unknown argument" in log
    assert asked == ["p", "empty"]


def test_copilot_transcript_of_a_session_stays_under_session_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from palace_client.hooks.agents import copilot_transcript

    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "ch"))
    root = tmp_path / "ch" / "session-state"
    sid = "5ef6eb39-6ac6-47b7-bca9-54661771532f"
    assert copilot_transcript(sid) == str(root / sid / "events.jsonl")
    for bad in ("", ".", "..", "...", "../x", "a/b", "/etc", "a\x00b", "-rf", "x" * 200):
        assert copilot_transcript(bad) is None, bad
    root.mkdir(parents=True)
    (root / "away").symlink_to(tmp_path)  # a session directory that leads elsewhere
    assert copilot_transcript("away") is None
    monkeypatch.delenv("COPILOT_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert copilot_transcript(sid) == str(tmp_path / "h" / ".copilot" / "session-state" / sid
                                          / "events.jsonl")
    # The sessionEnd input (no transcriptPath) names the derived file.
    end = capture.parse_input(json.dumps({"sessionId": sid, "cwd": "/w",
                                          "reason": "complete"}).encode(), "copilot")
    assert end["transcript_path"] == copilot_transcript(sid)
    claude = capture.parse_input(json.dumps({"session_id": sid}).encode())
    assert claude["transcript_path"] == ""  # only Copilot's sessions have a known place
