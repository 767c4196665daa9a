"""``palace init``: registering the MCP bridge in each agent's config, reversibly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from palace_client.agents.command import init_command
from palace_client.agents.setup import (
    InitOptions,
    ServerCommand,
    atomic_write,
    backup_path,
    bridge_command,
    detect_agents,
    format_changes,
    hook_command,
    init_agents,
)
from palace_client.mcp.command import mcp_command

CMD = ServerCommand("/opt/palace/bin/palace", ("mcp",))
ENTRY = {"command": "/opt/palace/bin/palace", "args": ["mcp"]}
CODEX_TOML = """\
# my codex config
model = "o3"  # keep this comment

[mcp_servers.other]
command = "other-server"
args = ["--flag"]

# profiles below
[profiles.fast]
model = "o4-mini"
"""


def no_binaries(name: str) -> str | None:
    return None


def dump(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "My Project"
    (project / ".git").mkdir(parents=True)
    return project


def seed(home: Path, project: Path) -> dict[Path, Any]:
    """Existing configs with unknown keys for every agent; returns path -> original data."""
    files: dict[Path, Any] = {
        project / ".mcp.json": {"mcpServers": {"other": {"command": "x"}}, "zzz": [1, 2]},
        project / ".claude" / "settings.local.json": {
            "permissions": {"allow": ["Bash(ls)"]}, "enabledMcpjsonServers": ["other"],
            "hooks": {"SessionStart": [{"matcher": "startup",
                                        "hooks": [{"type": "command", "command": "echo hi"}]}]}},
        home / ".cursor" / "mcp.json": {"mcpServers": {"github": {"url": "https://x"}},
                                        "cursorOnly": True},
        project / ".cursor" / "mcp.json": {"mcpServers": {}, "note": "project"},
        project / ".vscode" / "mcp.json": {"inputs": [{"id": "tok"}],
                                           "servers": {"other": {"type": "stdio"}}},
        home / ".gemini" / "settings.json": {"theme": "Dracula", "mcpServers": {}},
        home / ".codeium" / "windsurf" / "mcp_config.json": {"mcpServers": {"a": {"command": "a"}},
                                                            "extra": {"deep": {"x": 1}}},
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(data))
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    codex.write_text(CODEX_TOML)
    files[codex] = CODEX_TOML
    return files


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def run(home: Path, project: Path, **kw: Any) -> list[Any]:
    opts: dict[str, Any] = {"project_dir": project, "command": CMD, "which": no_binaries}
    opts.update(kw)
    return init_agents(InitOptions(**opts))


def test_detection_by_config_dir_or_binary(home: Path, project: Path) -> None:
    assert detect_agents(home, project, no_binaries) == []
    (home / ".codex").mkdir()
    (home / ".codeium" / "windsurf").mkdir(parents=True)
    assert detect_agents(home, project, no_binaries) == ["codex", "windsurf"]
    found = detect_agents(home, project, lambda n: "/bin/" + n if n == "claude" else None)
    assert found == ["claude", "codex", "windsurf"]


def test_no_agent_detected_reports_it(home: Path, project: Path) -> None:
    assert run(home, project) == []
    assert "No supported agent detected" in format_changes([])


def test_project_scope_edits_every_agent(home: Path, project: Path, tmp_path: Path) -> None:
    originals = seed(home, project)
    changes = run(home, project)
    assert {c.agent for c in changes} == {"claude", "cursor", "vscode", "codex", "gemini",
                                           "windsurf"}
    actions = {Path(c.target): c.action for c in changes}
    assert actions.pop(project / ".gemini" / "settings.json") == "created"
    assert set(actions.values()) == {"updated"}, changes

    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp == {"mcpServers": {"other": {"command": "x"}, "palace": ENTRY}, "zzz": [1, 2]}
    settings = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert settings["enabledMcpjsonServers"] == ["other", "palace"]
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert "hooks" in settings and len(settings["hooks"]["SessionStart"]) == 1
    cursor = json.loads((project / ".cursor" / "mcp.json").read_text())
    assert cursor == {"mcpServers": {"palace": ENTRY}, "note": "project"}
    assert json.loads((home / ".cursor" / "mcp.json").read_text()) == originals[
        home / ".cursor" / "mcp.json"]
    vscode = json.loads((project / ".vscode" / "mcp.json").read_text())
    assert vscode["servers"]["palace"] == {"type": "stdio", **ENTRY}
    assert vscode["inputs"] == [{"id": "tok"}]
    gemini = json.loads((project / ".gemini" / "settings.json").read_text())
    assert gemini == {"mcpServers": {"palace": ENTRY}}
    windsurf = json.loads((home / ".codeium" / "windsurf" / "mcp_config.json").read_text())
    assert windsurf["extra"] == {"deep": {"x": 1}} and windsurf["mcpServers"]["palace"] == ENTRY
    codex_text = (home / ".codex" / "config.toml").read_text()
    assert codex_text.startswith(CODEX_TOML)
    codex = tomllib.loads(codex_text)
    assert codex["mcp_servers"]["palace"] == ENTRY
    assert codex["mcp_servers"]["other"] == {"command": "other-server", "args": ["--flag"]}
    assert codex["profiles"] == {"fast": {"model": "o4-mini"}} and codex["model"] == "o3"

    untouched = {home / ".cursor" / "mcp.json", home / ".gemini" / "settings.json"}
    for path, original in originals.items():
        bak = backup_path(path)
        assert bak.exists() == (path not in untouched), bak
        if path in untouched:
            continue
        expected = original if isinstance(original, str) else dump(original)
        assert bak.read_text() == expected
    assert not list(tmp_path.rglob("*.palace-tmp"))


def test_dry_run_writes_nothing_and_shows_diffs(home: Path, project: Path,
                                                tmp_path: Path) -> None:
    seed(home, project)
    before = snapshot(tmp_path)
    changes = run(home, project, dry_run=True)
    assert snapshot(tmp_path) == before
    assert changes and all(c.diff.startswith("--- ") for c in changes)
    mcp_change = next(c for c in changes if c.target.endswith(".mcp.json"))
    assert '+    "palace": {' in mcp_change.diff
    codex_change = next(c for c in changes if c.agent == "codex")
    assert "+[mcp_servers.palace]" in codex_change.diff
    report = format_changes(changes, dry_run=True)
    assert "would be updated" in report and "+[mcp_servers.palace]" in report


def test_dry_run_of_a_new_file_diffs_from_dev_null(home: Path, project: Path) -> None:
    (changes,) = run(home, project, agents=("windsurf",), dry_run=True)
    assert changes.action == "created"
    assert changes.diff.startswith("--- /dev/null\n+++ ")
    assert not (home / ".codeium").exists()


def test_second_run_changes_nothing(home: Path, project: Path, tmp_path: Path) -> None:
    seed(home, project)
    run(home, project, hooks=True)
    after_first = snapshot(tmp_path)
    changes = run(home, project, hooks=True)
    assert [c.action for c in changes] == ["unchanged"] * len(changes)
    assert snapshot(tmp_path) == after_first
    assert "unchanged" in format_changes(changes)


def test_uninstall_removes_only_our_entries(home: Path, project: Path, tmp_path: Path) -> None:
    originals = seed(home, project)
    run(home, project, hooks=True)
    changes = run(home, project, uninstall=True)
    actions = {Path(c.target): c.action for c in changes}
    assert actions.pop(project / ".gemini" / "settings.json") == "deleted"
    assert set(actions.values()) == {"updated"}, changes
    assert not (project / ".gemini" / "settings.json").exists()
    for path, original in originals.items():
        if isinstance(original, str):
            assert path.read_text() == original
        else:
            assert json.loads(path.read_text()) == original, path
    again = run(home, project, uninstall=True)
    assert [c.action for c in again] == ["unchanged"] * len(again)
    assert not list(tmp_path.rglob("*.palace-tmp"))


def test_files_created_by_init_are_deleted_on_uninstall(home: Path, project: Path) -> None:
    created = run(home, project, agents=("cursor", "gemini", "claude", "codex"))
    assert {c.action for c in created} == {"created"}
    paths = [Path(c.target) for c in created]
    assert all(p.exists() for p in paths)
    assert not any(backup_path(p).exists() for p in paths)
    removed = run(home, project, agents=("cursor", "gemini", "claude", "codex"), uninstall=True)
    assert {c.action for c in removed} == {"deleted"}
    assert not any(p.exists() for p in paths)


def test_existing_entry_is_updated_keeping_its_extra_keys(home: Path, project: Path) -> None:
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(dump({"mcpServers": {"palace": {"command": "old", "args": [],
                                                    "timeout": 5000}}}))
    (change,) = run(home, project, agents=("gemini",), scope="user")
    assert change.action == "updated"
    entry = json.loads(path.read_text())["mcpServers"]["palace"]
    assert entry == {"command": ENTRY["command"], "args": ["mcp"], "timeout": 5000}


def test_indentation_and_mode_are_kept(home: Path, project: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"mcpServers": {}}, indent=4) + "\n")
    path.chmod(0o600)
    run(home, project, agents=("cursor",), scope="user")
    assert path.read_text().startswith('{\n    "mcpServers": {\n        "palace"')
    assert path.stat().st_mode & 0o777 == 0o600


def test_symlinked_config_is_written_through(home: Path, project: Path,
                                             tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text(dump({"mcpServers": {}}))
    link = home / ".cursor" / "mcp.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    run(home, project, agents=("cursor",), scope="user")
    assert link.is_symlink()
    assert json.loads(real.read_text())["mcpServers"]["palace"] == ENTRY
    assert backup_path(link) == real.with_name("mcp.json.palace-bak")


def test_unparsable_files_are_left_alone(home: Path, project: Path) -> None:
    vscode = project / ".vscode" / "mcp.json"
    vscode.parent.mkdir(parents=True)
    jsonc = '{\n  // comment\n  "servers": {}\n}\n'
    vscode.write_text(jsonc)
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    codex.write_text("not = [valid\n")
    changes = run(home, project, agents=("vscode", "codex"))
    assert [c.action for c in changes] == ["error", "error"]
    assert "not plain JSON" in changes[0].detail and "not valid TOML" in changes[1].detail
    assert vscode.read_text() == jsonc
    assert not backup_path(vscode).exists()


def test_wrong_shapes_are_errors(home: Path, project: Path) -> None:
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(dump({"mcpServers": ["not", "an", "object"]}))
    (change,) = run(home, project, agents=("gemini",), scope="user")
    assert change.action == "error" and "'mcpServers' is not an object" in change.detail
    top = home / ".cursor" / "mcp.json"
    top.parent.mkdir(parents=True)
    top.write_text("[]\n")
    (change,) = run(home, project, agents=("cursor",), scope="user")
    assert change.action == "error" and top.read_text() == "[]\n"


def test_codex_inline_palace_table_is_refused(home: Path, project: Path) -> None:
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    text = '[mcp_servers]\npalace = { command = "old" }\n'
    codex.write_text(text)
    (change,) = run(home, project, agents=("codex",))
    assert change.action == "error" and "edit it by hand" in change.detail
    assert codex.read_text() == text


def test_codex_table_in_the_middle_is_replaced_in_place(home: Path, project: Path) -> None:
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    text = ('model = "o3"\n\n[mcp_servers.palace]\ncommand = "old"\nargs = []\n'
            'startup_timeout_sec = 20\n\n[mcp_servers.palace.env]\nA = "1"\n\n'
            '# the other one\n[mcp_servers.zed]\ncommand = "z"\n')
    codex.write_text(text)
    (change,) = run(home, project, agents=("codex",))
    assert change.action == "updated"
    new_text = codex.read_text()
    data = tomllib.loads(new_text)
    assert data["mcp_servers"]["palace"] == {**ENTRY, "startup_timeout_sec": 20,
                                             "env": {"A": "1"}}
    assert data["mcp_servers"]["zed"] == {"command": "z"}
    assert new_text.index("[mcp_servers.palace]") < new_text.index("# the other one")
    (removed,) = run(home, project, agents=("codex",), uninstall=True)
    assert removed.action == "updated"
    final = codex.read_text()
    assert "palace" not in final and "# the other one\n[mcp_servers.zed]" in final
    assert tomllib.loads(final) == {"model": "o3", "mcp_servers": {"zed": {"command": "z"}}}


def test_codex_strings_are_escaped(home: Path, project: Path) -> None:
    odd = ServerCommand('/path with "quotes"\\and\ttab/palace', ("mcp", "--palace", "é-x"))
    run(home, project, agents=("codex",), command=odd)
    entry = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]["palace"]
    assert entry == {"command": odd.command, "args": list(odd.args)}


def test_codex_home_env_is_respected(home: Path, project: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codexhome"))
    (change,) = run(home, project, agents=("codex",))
    assert change.target == str(tmp_path / "codexhome" / "config.toml")


def test_vscode_user_scope(home: Path, project: Path) -> None:
    (change,) = run(home, project, agents=("vscode",), scope="user")
    path = home / ".config" / "Code" / "User" / "mcp.json"
    assert change.target == str(path)
    assert json.loads(path.read_text()) == {"servers": {"palace": {"type": "stdio", **ENTRY}}}


def test_claude_project_hooks(home: Path, project: Path) -> None:
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(dump({"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": "echo mine"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}))
    run(home, project, agents=("claude",), hooks=True)
    data = json.loads(settings.read_text())
    groups = data["hooks"]["SessionStart"]
    commands = [h["command"] for g in groups for h in g["hooks"]]
    assert commands[0] == "echo mine"
    assert commands[1].endswith("wake-up --palace my-project")
    assert data["enabledMcpjsonServers"] == ["palace"]
    run(home, project, agents=("claude",), hooks=True, palace="pinned")
    data = json.loads(settings.read_text())
    commands = [h["command"] for g in data["hooks"]["SessionStart"] for h in g["hooks"]]
    assert commands == ["echo mine", hook_command("pinned", no_binaries)]
    run(home, project, agents=("claude",), uninstall=True)
    data = json.loads(settings.read_text())
    assert data == {"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": "echo mine"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}


def test_claude_user_scope_without_cli_edits_claude_json(home: Path, project: Path) -> None:
    state = home / ".claude.json"
    state.write_text(dump({"numStartups": 3, "projects": {"/x": {}}}))
    changes = run(home, project, agents=("claude",), scope="user", hooks=True, palace="p")
    assert [c.target for c in changes] == [str(state), str(home / ".claude" / "settings.json")]
    data = json.loads(state.read_text())
    assert data["numStartups"] == 3
    assert data["mcpServers"]["palace"] == ENTRY
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    assert hooks["SessionStart"][0]["hooks"][0]["command"].endswith("wake-up --palace p")


class FakeRunner:
    def __init__(self, returncode: int = 0) -> None:
        self.argvs: list[list[str]] = []
        self.returncode = returncode

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.argvs.append(list(argv))
        return subprocess.CompletedProcess(list(argv), self.returncode, "", "boom")


def claude_on_path(name: str) -> str | None:
    return "/usr/local/bin/claude" if name == "claude" else None


def test_claude_user_scope_uses_the_cli(home: Path, project: Path) -> None:
    runner = FakeRunner()
    (change,) = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                    run=runner)
    assert change.action == "created"
    assert runner.argvs == [["/usr/local/bin/claude", "mcp", "add", "--scope", "user", "palace",
                             "--", CMD.command, *CMD.args]]
    (home / ".claude.json").write_text(dump({"mcpServers": {"palace": {
        "type": "stdio", **ENTRY, "env": {}}}}))
    (same,) = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                  run=runner)
    assert same.action == "unchanged" and len(runner.argvs) == 1
    (home / ".claude.json").write_text(dump({"mcpServers": {"palace": {"command": "old"}}}))
    (upd,) = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                 run=runner)
    assert upd.action == "updated"
    assert [a[2] for a in runner.argvs[1:]] == ["remove", "add"]
    rm, hooks = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                    run=runner, uninstall=True)
    assert rm.action == "deleted" and runner.argvs[-1][2] == "remove"
    assert hooks.target == str(home / ".claude" / "settings.json")
    assert hooks.action == "unchanged"


def test_claude_cli_failure_and_dry_run(home: Path, project: Path) -> None:
    failing = FakeRunner(returncode=1)
    (change,) = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                    run=failing)
    assert change.action == "error" and "exited 1: boom" in change.detail
    quiet = FakeRunner()
    (dry,) = run(home, project, agents=("claude",), scope="user", which=claude_on_path,
                 run=quiet, dry_run=True)
    assert quiet.argvs == [] and dry.detail.startswith("would run: /usr/local/bin/claude mcp add")


def test_bad_scope_and_agent(home: Path, project: Path) -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        run(home, project, scope="global")
    with pytest.raises(ValueError, match="unknown agent"):
        run(home, project, agents=("emacs",))
    (change,) = run(home, project, agents=("Claude-Code",), dry_run=True)[:1]
    assert change.agent == "claude"


def test_bridge_command_defaults() -> None:
    pinned = bridge_command("work", no_binaries)
    assert pinned.args[-3:] == ("mcp", "--palace", "work")
    assert os.path.isabs(pinned.command)
    assert bridge_command(None, no_binaries).args[-1] == "mcp"


def test_atomic_write_cleans_up_on_failure(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "conf.json"
    target.write_text("old")

    def explode(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", explode)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf.json"]


# -- the typer commands -------------------------------------------------------------------------
@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    app.command("mcp")(mcp_command)
    app.command("init")(init_command)
    return app


def invoke(app: typer.Typer, args: list[str]) -> Any:
    return CliRunner().invoke(app, args, catch_exceptions=False)


def test_init_command_json_and_exit_codes(app: typer.Typer, home: Path, project: Path) -> None:
    result = invoke(app, ["init", "--agent", "cursor", "--agent", "gemini", "--project-dir",
                          str(project), "--json", "--dry-run"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [r["agent"] for r in report] == ["cursor", "gemini"]
    assert {r["action"] for r in report} == {"created"}
    assert not (project / ".cursor").exists()
    result = invoke(app, ["init", "--agent", "cursor", "--project-dir", str(project),
                          "--palace", "pinned"])
    assert result.exit_code == 0 and "created" in result.output
    entry = json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["palace"]
    assert entry["args"][-3:] == ["mcp", "--palace", "pinned"]
    assert invoke(app, ["init", "--agent", "nope"]).exit_code == 2
    empty = project.parent / "empty"
    empty.mkdir()
    nothing = invoke(app, ["init", "--project-dir", str(empty)])
    assert nothing.exit_code == 1 and "No supported agent detected" in nothing.output
    result = invoke(app, ["init", "--agent", "windsurf", "--scope", "user", "--uninstall",
                          "--project-dir", str(project)])
    assert result.exit_code == 0 and "unchanged" in result.output


def test_init_command_reports_errors(app: typer.Typer, home: Path, project: Path) -> None:
    bad = project / ".cursor" / "mcp.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{oops")
    result = invoke(app, ["init", "--agent", "cursor", "--project-dir", str(project)])
    assert result.exit_code == 1
    assert "not plain JSON" in result.output


