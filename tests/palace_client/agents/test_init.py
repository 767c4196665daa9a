"""``palace init``: registering the MCP bridge in each agent's config, reversibly.

Hermetic: see ``init_support`` (temp HOME, PATH of stubs, fake venv).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from palace_client.agents.setup import atomic_write, backup_path, format_changes
from palace_client.agents.targets import detect_agents
from tests.support.init_support import PROJECT_ENTRY, FakeRunner, World, dump, snapshot, world

__all__ = ["world"]

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


def seed(w: World) -> dict[Path, Any]:
    """Existing configs with unknown keys for every agent; returns path -> original data."""
    home, project = w.home, w.project
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
    for codex in (home / ".codex" / "config.toml", project / ".codex" / "config.toml"):
        codex.parent.mkdir(parents=True)
        codex.write_text(CODEX_TOML)
        files[codex] = CODEX_TOML
    return files


def test_detection_by_config_dir_or_binary_on_the_given_path(world: World) -> None:
    home, project = world.home, world.project
    assert world.run() == []
    assert detect_agents(home, project, lambda n: None, world.environ) == []
    (home / ".codex").mkdir()
    (home / ".codeium" / "windsurf").mkdir(parents=True)
    world.stub("claude")
    assert [c.agent for c in world.run(dry_run=True)] == [
        "claude", "claude", "codex", "windsurf"]
    assert "No supported agent detected" in format_changes([])


def test_project_scope_edits_every_agent(world: World) -> None:
    originals = seed(world)
    home, project = world.home, world.project
    changes = world.run()
    assert {c.agent for c in changes} == {"claude", "cursor", "vscode", "codex", "gemini",
                                           "windsurf"}
    actions = {Path(c.target): c.action for c in changes}
    assert actions.pop(project / ".gemini" / "settings.json") == "created"
    assert set(actions.values()) == {"updated"}, changes

    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp == {"mcpServers": {"other": {"command": "x"}, "palace": PROJECT_ENTRY},
                   "zzz": [1, 2]}
    settings = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert settings["enabledMcpjsonServers"] == ["other", "palace"]
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert len(settings["hooks"]["SessionStart"]) == 1
    cursor = json.loads((project / ".cursor" / "mcp.json").read_text())
    assert cursor == {"mcpServers": {"palace": PROJECT_ENTRY}, "note": "project"}
    vscode = json.loads((project / ".vscode" / "mcp.json").read_text())
    assert vscode["servers"]["palace"] == {"type": "stdio", **PROJECT_ENTRY}
    assert vscode["inputs"] == [{"id": "tok"}]
    gemini = json.loads((project / ".gemini" / "settings.json").read_text())
    assert gemini == {"mcpServers": {"palace": PROJECT_ENTRY}}
    # Windsurf has only a user file: the entry is the user one (absolute, unpinned).
    windsurf = json.loads((home / ".codeium" / "windsurf" / "mcp_config.json").read_text())
    assert windsurf["extra"] == {"deep": {"x": 1}}
    assert windsurf["mcpServers"]["palace"] == world.user_entry()
    codex_text = (project / ".codex" / "config.toml").read_text()
    assert codex_text.startswith(CODEX_TOML)
    codex = tomllib.loads(codex_text)
    assert codex["mcp_servers"]["palace"] == PROJECT_ENTRY
    assert codex["mcp_servers"]["other"] == {"command": "other-server", "args": ["--flag"]}
    assert codex["profiles"] == {"fast": {"model": "o4-mini"}} and codex["model"] == "o3"

    untouched = {home / ".cursor" / "mcp.json", home / ".gemini" / "settings.json",
                 home / ".codex" / "config.toml"}
    for path, original in originals.items():
        bak = backup_path(path)
        assert bak.exists() == (path not in untouched), bak
        if path not in untouched:
            expected = original if isinstance(original, str) else dump(original)
            assert bak.read_text() == expected
    assert not list(world.root.rglob("*.palace-tmp"))


def test_dry_run_writes_nothing_and_shows_diffs(world: World) -> None:
    seed(world)
    (world.bin / "palace").unlink()
    before = snapshot(world.root)
    changes = world.run(dry_run=True)
    assert snapshot(world.root) == before
    assert changes and all(c.diff.startswith("--- ") for c in changes)
    mcp_change = next(c for c in changes if c.target.endswith(".mcp.json"))
    assert '+    "palace": {' in mcp_change.diff
    codex_change = next(c for c in changes if c.agent == "codex")
    assert "+[mcp_servers.palace]" in codex_change.diff
    report = format_changes(changes, dry_run=True)
    assert "would be updated" in report and "+[mcp_servers.palace]" in report
    assert "`palace` is not on PATH" in report


def test_dry_run_of_a_new_file_diffs_from_dev_null(world: World) -> None:
    (change,) = world.run(agents=("windsurf",), dry_run=True)
    assert change.action == "created"
    assert change.diff.startswith("--- /dev/null\n+++ ")
    assert not (world.home / ".codeium").exists()


def test_second_run_changes_nothing(world: World) -> None:
    seed(world)
    world.run(hooks=True)
    after_first = snapshot(world.root)
    changes = world.run(hooks=True)
    assert [c.action for c in changes] == ["unchanged"] * len(changes)
    assert snapshot(world.root) == after_first
    assert "unchanged" in format_changes(changes)


def test_uninstall_restores_every_file_byte_for_byte(world: World) -> None:
    seed(world)
    before = snapshot(world.root)
    world.run(hooks=True)
    changes = world.run(uninstall=True)
    actions = {Path(c.target): c.action for c in changes}
    assert actions.pop(world.project / ".gemini" / "settings.json") == "deleted"
    # The hook files palace created (Codex's and Cursor's hooks.json) go too.
    assert actions.pop(world.project / ".codex" / "hooks.json") == "deleted"
    assert actions.pop(world.project / ".cursor" / "hooks.json") == "deleted"
    assert set(actions.values()) == {"updated"}, changes
    assert snapshot(world.root) == before  # and the backups are gone with palace's entries
    again = world.run(uninstall=True)
    assert [c.action for c in again] == ["unchanged"] * len(again)


def test_files_created_by_init_are_deleted_on_uninstall(world: World) -> None:
    agents = ("cursor", "gemini", "claude", "codex", "vscode")
    created = world.run(agents=agents)
    assert {c.action for c in created} == {"created"}
    paths = [Path(c.target) for c in created]
    assert all(p.exists() for p in paths)
    removed = world.run(agents=agents, uninstall=True)
    assert {c.action for c in removed} == {"deleted"}
    assert not any(p.exists() or backup_path(p).exists() for p in paths)
    # The folders init made for them go too (they were left behind, empty).
    assert sorted(p.name for p in world.project.iterdir()) == [".git"]


def test_uninstall_keeps_folders_it_did_not_create_or_that_hold_more(world: World) -> None:
    (world.project / ".cursor").mkdir()
    world.run(agents=("cursor", "gemini", "vscode"))
    (world.project / ".vscode" / "settings.json").write_text("{}\n")
    world.run(agents=("cursor", "gemini", "vscode"), uninstall=True)
    assert sorted(p.name for p in world.project.iterdir()) == [".cursor", ".git", ".vscode"]
    assert [p.name for p in (world.project / ".vscode").iterdir()] == ["settings.json"]


def test_existing_entry_is_updated_keeping_its_extra_keys(world: World) -> None:
    path = world.home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(dump({"mcpServers": {"palace": {
        "command": "old", "args": [], "timeout": 5000,
        "env": {"MINE": "1", "PALACE_HOME": "/stale"}}}}))
    (change,) = world.run(agents=("gemini",), scope="user")
    assert change.action == "updated"
    entry = json.loads(path.read_text())["mcpServers"]["palace"]
    assert entry == {**world.user_entry(), "timeout": 5000, "env": {"MINE": "1"}}


def test_mode_is_kept(world: World) -> None:
    path = world.home / ".cursor" / "mcp.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"mcpServers": {}}, indent=4) + "\n")
    path.chmod(0o600)
    world.run(agents=("cursor",), scope="user")
    assert path.read_text().startswith('{\n    "mcpServers": {\n        "palace"')
    assert path.stat().st_mode & 0o777 == 0o600


def test_symlinked_config_is_written_through(world: World) -> None:
    real = world.root / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text(dump({"mcpServers": {}}))
    link = world.home / ".cursor" / "mcp.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    world.run(agents=("cursor",), scope="user")
    assert link.is_symlink()
    assert json.loads(real.read_text())["mcpServers"]["palace"] == world.user_entry()
    # The backup is kept in palace's state dir, at the real file's path.
    assert backup_path(link) == (world.home / ".local/state/palace/init-backups" /
                                 real.relative_to("/").with_name("mcp.json.palace-bak"))


def test_wrong_shapes_are_errors(world: World) -> None:
    path = world.home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(dump({"mcpServers": ["not", "an", "object"]}))
    (change,) = world.run(agents=("gemini",), scope="user")
    assert change.action == "error" and "'mcpServers' is not an object" in change.detail
    top = world.home / ".cursor" / "mcp.json"
    top.parent.mkdir(parents=True)
    top.write_text("[]\n")
    (change,) = world.run(agents=("cursor",), scope="user")
    assert change.action == "error" and top.read_text() == "[]\n"


def test_codex_inline_palace_table_is_refused(world: World) -> None:
    codex = world.home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    text = '[mcp_servers]\npalace = { command = "old" }\n'
    codex.write_text(text)
    (change,) = world.run(agents=("codex",), scope="user")
    assert change.action == "error" and "edit it by hand" in change.detail
    assert codex.read_text() == text


def test_codex_table_in_the_middle_is_replaced_in_place(world: World) -> None:
    codex = world.home / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    text = ('model = "o3"\n\n[mcp_servers.palace]\ncommand = "old"\nargs = []\n'
            'startup_timeout_sec = 20\n\n[mcp_servers.palace.env]\nA = "1"\n\n'
            '# the other one\n[mcp_servers.zed]\ncommand = "z"\n')
    codex.write_text(text)
    (change,) = world.run(agents=("codex",), scope="user")
    assert change.action == "updated"
    new_text = codex.read_text()
    data = tomllib.loads(new_text)
    assert data["mcp_servers"]["palace"] == {**world.user_entry(), "startup_timeout_sec": 20,
                                             "env": {"A": "1"}}
    assert data["mcp_servers"]["zed"] == {"command": "z"}
    assert new_text.index("[mcp_servers.palace]") < new_text.index("# the other one")
    (removed,) = world.run(agents=("codex",), scope="user", uninstall=True)
    assert removed.action == "updated"
    final = codex.read_text()
    assert "palace" not in final and "# the other one\n[mcp_servers.zed]" in final
    assert tomllib.loads(final) == {"model": "o3", "mcp_servers": {"zed": {"command": "z"}}}


def test_codex_strings_are_escaped(world: World) -> None:
    odd = world.root / 'venv with "quotes"\\and\ttab' / "bin" / "python"
    (odd.parent).mkdir(parents=True)
    (odd.parent / "palace").write_text("")
    (odd.parent / "palace").chmod(0o755)
    world.run(agents=("codex",), scope="user", python=str(odd), palace="é-x")
    entry = tomllib.loads((world.home / ".codex" / "config.toml").read_text())
    assert entry["mcp_servers"]["palace"] == {"command": str(odd.parent / "palace"),
                                              "args": ["mcp", "--palace", "é-x"]}


def test_codex_home_env_is_respected(world: World) -> None:
    world.environ["CODEX_HOME"] = str(world.root / "codexhome")
    (change,) = world.run(agents=("codex",), scope="user")
    assert change.target == str(world.root / "codexhome" / "config.toml")


def test_vscode_user_scope(world: World) -> None:
    (change,) = world.run(agents=("vscode",), scope="user")
    path = world.home / ".config" / "Code" / "User" / "mcp.json"
    assert change.target == str(path)
    assert json.loads(path.read_text()) == {"servers": {"palace": {"type": "stdio",
                                                                   **world.user_entry()}}}


def test_bad_scope_and_agent(world: World) -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        world.run(scope="global")
    with pytest.raises(ValueError, match="unknown agent"):
        world.run(agents=("emacs",))
    (change,) = world.run(agents=("Claude-Code",), dry_run=True)[:1]
    assert change.agent == "claude"


def test_claude_cli_failure_and_dry_run(world: World) -> None:
    claude = world.stub("claude")
    failing = FakeRunner(returncode=1)
    (change,) = world.run(agents=("claude",), scope="user", run=failing)
    assert change.action == "error" and "exited 1: boom" in change.detail
    quiet = FakeRunner()
    (dry,) = world.run(agents=("claude",), scope="user", run=quiet, dry_run=True)
    assert quiet.argvs == [] and dry.detail.startswith(f"would run: {claude} mcp add")


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
