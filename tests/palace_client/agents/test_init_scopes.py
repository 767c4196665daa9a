"""``palace init`` scopes: which command, palace and ``env`` each client gets, the Claude Code
hook and CLI, the git root, and the typer command (issue 10)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from palace_client.agents.command import init_command
from palace_client.agents.entries import is_our_hook
from palace_client.agents.setup import hook_command
from palace_client.mcp.command import mcp_command
from tests.support.init_support import PROJECT_ENTRY, FakeRunner, World, dump, world

__all__ = ["world"]


def hooks_of(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    return [h["command"] for g in data["hooks"]["SessionStart"] for h in g["hooks"]]


def test_mcp_json_runs_palace_from_path_and_pins_the_project(world: World) -> None:
    world.run(agents=("claude", "cursor", "vscode", "gemini"))
    for rel, key in ((".mcp.json", "mcpServers"), (".cursor/mcp.json", "mcpServers"),
                     (".gemini/settings.json", "mcpServers"), (".vscode/mcp.json", "servers")):
        entry = json.loads((world.project / rel).read_text())[key]["palace"]
        assert {k: v for k, v in entry.items() if k != "type"} == PROJECT_ENTRY, rel


def test_user_scope_holds_the_absolute_path_and_pins_no_palace(world: World) -> None:
    world.run(agents=("cursor", "gemini", "claude"), scope="user", hooks=True)
    for rel in (".cursor/mcp.json", ".gemini/settings.json", ".claude.json"):
        entry = json.loads((world.home / rel).read_text())["mcpServers"]["palace"]
        assert entry == world.user_entry(), rel
    assert hooks_of(world.home / ".claude" / "settings.json") == [f"{world.exe} wake-up"]


def test_project_hook_does_not_pin_the_palace(world: World) -> None:
    settings = world.project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    mine = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo mine"}]}],
                      "Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}
    settings.write_text(dump(mine))
    world.run(agents=("claude",), hooks=True)
    data = json.loads(settings.read_text())
    assert hooks_of(settings) == ["echo mine", f"{world.exe} wake-up"]
    assert data["enabledMcpjsonServers"] == ["palace"]
    world.run(agents=("claude",), hooks=True, palace="pinned")  # an explicit pin replaces it
    assert hooks_of(settings) == ["echo mine", f"{world.exe} wake-up --palace pinned"]
    world.run(agents=("claude",), uninstall=True)
    assert json.loads(settings.read_text()) == mine


def test_hook_command_of_an_environment(world: World) -> None:
    environ = {**world.environ, "PALACE_HOME": "/x"}
    assert hook_command(None, environ, str(world.python)) == f"PALACE_HOME=/x {world.exe} wake-up"
    assert hook_command("p", world.environ, str(world.python)) == f"{world.exe} wake-up --palace p"


def test_palace_variables_go_into_every_client_env(world: World) -> None:
    world.environ.update({"PALACE_HOME": "~/ph", "PALACE_SOCKET": "rel/s.sock",
                          "PALACE_EMBED_MODEL": "none", "PALACE_CONFIG": ""})
    env = {"PALACE_HOME": str(world.home / "ph"), "PALACE_EMBED_MODEL": "none",
           "PALACE_SOCKET": str(Path.cwd() / "rel" / "s.sock")}
    world.run(agents=("cursor", "codex", "claude"), hooks=True)
    entry = json.loads((world.project / ".cursor" / "mcp.json").read_text())
    assert entry["mcpServers"]["palace"]["env"] == env
    codex = tomllib.loads((world.project / ".codex" / "config.toml").read_text())
    assert codex["mcp_servers"]["palace"]["env"] == env
    hook = hooks_of(world.project / ".claude" / "settings.local.json")[0]
    assert hook.startswith(f"PALACE_HOME={env['PALACE_HOME']} PALACE_SOCKET=")
    assert hook.endswith(f"PALACE_EMBED_MODEL=none {world.exe} wake-up")
    runner = FakeRunner()
    world.stub("claude")
    world.run(agents=("claude",), scope="user", run=runner)
    assert runner.argvs[0][5:] == ["palace", "-e", f"PALACE_HOME={env['PALACE_HOME']}",
                                   "-e", f"PALACE_SOCKET={env['PALACE_SOCKET']}", "-e",
                                   "PALACE_EMBED_MODEL=none", "--", world.exe, "mcp"]
    world.environ.pop("PALACE_SOCKET")  # a variable no longer set leaves the env
    world.run(agents=("cursor",))
    entry = json.loads((world.project / ".cursor" / "mcp.json").read_text())
    assert entry["mcpServers"]["palace"]["env"] == {
        "PALACE_HOME": env["PALACE_HOME"], "PALACE_EMBED_MODEL": "none"}


def test_no_env_key_without_palace_variables(world: World) -> None:
    world.run(agents=("cursor",))
    entry = json.loads((world.project / ".cursor" / "mcp.json").read_text())
    assert "env" not in entry["mcpServers"]["palace"]


def test_codex_project_scope_writes_the_project_file(world: World) -> None:
    (change,) = world.run(agents=("codex",))
    assert change.target == str(world.project / ".codex" / "config.toml")
    assert not (world.home / ".codex").exists()
    data = tomllib.loads((world.project / ".codex" / "config.toml").read_text())
    assert data == {"mcp_servers": {"palace": PROJECT_ENTRY}}


def test_the_project_is_the_git_root_wherever_init_runs(world: World) -> None:
    sub = world.project / "src" / "deep"
    sub.mkdir(parents=True)
    changes = world.run(project_dir=sub, agents=("claude", "cursor"))
    assert [c.target for c in changes] == [
        str(world.project / ".mcp.json"), str(world.project / ".claude" / "settings.local.json"),
        str(world.project / ".cursor" / "mcp.json")]
    assert not (sub / ".mcp.json").exists() and not (sub / ".cursor").exists()
    entry = json.loads((world.project / ".mcp.json").read_text())["mcpServers"]["palace"]
    assert entry == PROJECT_ENTRY


def test_local_scope_is_claude_only_absolute_and_pinned(world: World) -> None:
    changes = world.run(agents=("claude", "cursor"), scope="local", hooks=True)
    assert [c.action for c in changes] == ["created", "created", "skipped"]
    assert "no local scope" in changes[2].detail
    state = json.loads((world.home / ".claude.json").read_text())
    entry = state["projects"][str(world.project)]["mcpServers"]["palace"]
    assert entry == world.user_entry("my-project")
    settings = json.loads((world.project / ".claude" / "settings.local.json").read_text())
    assert "enabledMcpjsonServers" not in settings
    assert not (world.project / ".mcp.json").exists()
    removed = world.run(agents=("claude",), scope="local", uninstall=True)
    assert [c.action for c in removed] == ["deleted", "deleted"]


def test_local_scope_with_the_claude_cli_runs_in_the_project(world: World) -> None:
    claude = world.stub("claude")
    runner = FakeRunner()
    sub = world.project / "sub"
    sub.mkdir()
    world.run(project_dir=sub, agents=("claude",), scope="local", run=runner)
    assert runner.calls == [([claude, "mcp", "add", "--scope", "local", "palace", "--",
                              world.exe, "mcp", "--palace", "my-project"], world.project)]


def test_claude_user_scope_uses_the_cli(world: World) -> None:
    claude = world.stub("claude")
    runner = FakeRunner()
    entry = world.user_entry()
    (change,) = world.run(agents=("claude",), scope="user", run=runner)
    assert change.action == "created"
    assert runner.argvs == [[claude, "mcp", "add", "--scope", "user", "palace", "--",
                             world.exe, "mcp"]]
    state = world.home / ".claude.json"
    state.write_text(dump({"mcpServers": {"palace": {"type": "stdio", **entry, "env": {}}}}))
    (same,) = world.run(agents=("claude",), scope="user", run=runner)
    assert same.action == "unchanged" and len(runner.argvs) == 1
    state.write_text(dump({"mcpServers": {"palace": {"command": "old"}}}))
    (upd,) = world.run(agents=("claude",), scope="user", run=runner)
    assert upd.action == "updated"
    assert [a[2] for a in runner.argvs[1:]] == ["remove", "add"]
    rm, hooks = world.run(agents=("claude",), scope="user", run=runner, uninstall=True)
    assert rm.action == "deleted" and runner.argvs[-1][2] == "remove"
    assert hooks.target == str(world.home / ".claude" / "settings.json")
    assert hooks.action == "unchanged"


# -- the typer command --------------------------------------------------------------------------
def make_app() -> typer.Typer:
    app = typer.Typer()
    app.command("mcp")(mcp_command)
    app.command("init")(init_command)
    return app


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(make_app(), args, catch_exceptions=False)


def test_init_command_json_and_exit_codes(world: World) -> None:
    project = world.project
    result = invoke(["init", "--agent", "cursor", "--agent", "gemini", "--project-dir",
                     str(project), "--json", "--dry-run"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [r["agent"] for r in report] == ["cursor", "gemini"]
    assert {r["action"] for r in report} == {"created"}
    assert not (project / ".cursor").exists()
    result = invoke(["init", "--agent", "cursor", "--project-dir", str(project),
                     "--palace", "pinned"])
    assert result.exit_code == 0 and "created" in result.output
    entry = json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["palace"]
    assert entry == {"command": "palace", "args": ["mcp", "--palace", "pinned"]}
    assert invoke(["init", "--agent", "nope"]).exit_code == 2
    refused = invoke(["init", "--agent", "nope", "--json"])
    assert refused.exit_code == 2
    assert json.loads(refused.stdout)["error"]["name"] == "USAGE_ERROR"
    empty = world.root / "empty"
    empty.mkdir()
    nothing = invoke(["init", "--project-dir", str(empty)])
    assert nothing.exit_code == 1 and "No supported agent detected" in nothing.output
    result = invoke(["init", "--agent", "windsurf", "--scope", "user", "--uninstall",
                     "--project-dir", str(project)])
    assert result.exit_code == 0 and "unchanged" in result.output
    skipped = invoke(["init", "--agent", "cursor", "--scope", "local", "--project-dir",
                      str(project)])
    assert skipped.exit_code == 1 and "no local scope" in skipped.output


def test_init_command_sees_only_the_path_it_is_given(world: World) -> None:
    world.stub("claude")
    result = invoke(["init", "--project-dir", str(world.project), "--json", "--dry-run"])
    assert [r["agent"] for r in json.loads(result.output)] == ["claude", "claude"]


def test_init_command_reports_errors(world: World) -> None:
    bad = world.project / ".cursor" / "mcp.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{oops")
    result = invoke(["init", "--agent", "cursor", "--project-dir", str(world.project)])
    assert result.exit_code == 1
    assert "line 1, column 2: expected a quoted key" in result.output


def test_hooks_install_all_five_events_idempotently_and_uninstall_them(world: World) -> None:
    """`--hooks`: SessionStart runs wake-up; UserPromptSubmit the prompt hook; PreCompact,
    Stop and SessionEnd the capture hook. A second run changes nothing, the user's hooks
    stay, uninstall takes ours out and leaves the file byte for byte as it was."""
    settings = world.project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    mine = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
                      "PreCompact": [{"matcher": "manual",
                                      "hooks": [{"type": "command", "command": "backup.sh"}]}],
                      "UserPromptSubmit": [{"hooks": [{"type": "command",
                                                       "command": "prompt-guard.sh"}]}]}}
    settings.write_text(dump(mine))
    original = settings.read_bytes()
    world.run(agents=("claude",), hooks=True)
    data = json.loads(settings.read_text())
    commands = {event: [h["command"] for g in groups for h in g["hooks"]]
                for event, groups in data["hooks"].items()}
    capture = f"{world.exe} hook capture"
    assert commands == {"Stop": ["say done", capture], "PreCompact": ["backup.sh", capture],
                        "UserPromptSubmit": ["prompt-guard.sh", f"{world.exe} hook prompt"],
                        "SessionStart": [f"{world.exe} wake-up"], "SessionEnd": [capture]}
    assert data["hooks"]["PreCompact"][0]["matcher"] == "manual"
    before = settings.read_text()
    again = world.run(agents=("claude",), hooks=True)
    assert {c.action for c in again} == {"unchanged"} and settings.read_text() == before
    world.run(agents=("claude",), hooks=True, palace="pinned")
    data = json.loads(settings.read_text())
    assert [h["command"] for g in data["hooks"]["SessionEnd"] for h in g["hooks"]] == [
        f"{world.exe} hook capture --palace pinned"]
    world.run(agents=("claude",), uninstall=True)
    assert settings.read_bytes() == original


def test_capture_hook_lines_carry_the_environment(world: World) -> None:
    environ = {**world.environ, "PALACE_HOME": "/x"}
    for event in ("PreCompact", "Stop", "SessionEnd"):
        assert hook_command(None, environ, str(world.python), event) == (
            f"PALACE_HOME=/x {world.exe} hook capture")
    assert hook_command(None, environ, str(world.python), "UserPromptSubmit") == (
        f"PALACE_HOME=/x {world.exe} hook prompt")
    assert is_our_hook(f"PALACE_HOME=/x {world.exe} hook capture --palace p")
    assert is_our_hook(f"{world.exe} hook prompt --palace p")
    assert not is_our_hook("my-script prompt") and not is_our_hook("palace-like hook prompt")
    assert not is_our_hook("my-script capture") and not is_our_hook("palace-like hook capture")
