"""``palace init`` for a project (issue 29): a shared file that works when the agent starts
without the venv, backups outside the project tree, an uninstall that removes what it made,
``init`` in ``$HOME`` that explains itself, and the project's palace by its path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from palace_client.agents.setup import format_changes
from palace_client.api.projects import derived_name
from tests.support.init_support import World, world, write_exe

__all__ = ["world"]


def in_a_venv(world: World) -> Path:
    """Make the only ``palace`` on PATH a virtualenv's (as after `. .venv/bin/activate`)."""
    (world.bin / "palace").unlink()
    venv = world.root / "proj-venv"
    (venv / "pyvenv.cfg").parent.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    exe = write_exe(venv / "bin" / "palace")
    world.environ["PATH"] = f"{venv / 'bin'}:{world.bin}"
    return exe


def test_a_venv_palace_gets_an_absolute_local_entry_and_a_loud_warning(world: World) -> None:
    in_a_venv(world)
    changes = world.run(agents=("claude", "cursor"))
    # The shared .mcp.json still runs `palace` from PATH (a teammate's may live elsewhere)...
    mcp = json.loads((world.project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["palace"]["command"] == "palace"
    # ...and Claude Code's local scope for this project, which it prefers, runs the absolute
    # palace: an agent started without the venv on PATH still connects.
    state = json.loads((world.home / ".claude.json").read_text())
    local = state["projects"][str(world.project)]["mcpServers"]["palace"]
    assert local == {"command": world.exe, "args": ["mcp", "--palace", "my-project"]}
    # Cursor has no local scope: its shared file gets a warning with the fix.
    report = format_changes(changes)
    assert "warning: this shared file runs `palace` from PATH" in report
    assert "comes from the virtualenv" in report and "Failed to connect" in report
    assert "uv tool install" in report and "pipx install" in report
    assert f"Claude Code runs the local-scope entry instead, {world.exe}" in report

    world.run(agents=("claude", "cursor"), uninstall=True)
    assert not (world.project / ".mcp.json").exists()
    assert not (world.home / ".claude.json").exists()  # init made it: it goes too


def test_a_user_install_on_path_writes_no_local_entry_and_no_warning(world: World) -> None:
    changes = world.run(agents=("claude", "cursor"))
    assert not (world.home / ".claude.json").exists()
    assert "warning" not in format_changes(changes)


def test_backups_are_kept_outside_the_project_tree(world: World) -> None:
    mcp = world.project / ".mcp.json"
    mcp.write_text('{"mcpServers": {"other": {"command": "x"}}}\n')
    (world.project / ".vscode").mkdir()
    (world.project / ".vscode" / "mcp.json").write_text('{"servers": {}}\n')
    world.run(agents=("claude", "vscode"))
    assert not list(world.project.rglob("*.palace-bak"))  # nothing new for `git status`
    kept = world.home / ".local/state/palace/init-backups" / mcp.relative_to("/")
    assert kept.with_name(".mcp.json.palace-bak").read_text() == (
        '{"mcpServers": {"other": {"command": "x"}}}\n')
    world.run(agents=("claude", "vscode"), uninstall=True)
    assert mcp.read_text() == '{"mcpServers": {"other": {"command": "x"}}}\n'
    assert not kept.with_name(".mcp.json.palace-bak").exists()


def test_init_pins_the_palace_the_project_map_gives(world: World) -> None:
    """A second repository named like the first gets (and init pins) its own palace."""
    twin = world.root / "elsewhere" / "My Project"
    (twin / ".git").mkdir(parents=True)
    world.run(agents=("claude",))
    world.run(agents=("claude",), project_dir=twin)
    first = json.loads((world.project / ".mcp.json").read_text())["mcpServers"]["palace"]
    second = json.loads((twin / ".mcp.json").read_text())["mcpServers"]["palace"]
    assert first["args"] == ["mcp", "--palace", "my-project"]
    assert second["args"] == ["mcp", "--palace", derived_name(twin)]


def test_init_in_the_home_directory_explains_instead_of_pinning_default(world: World) -> None:
    with pytest.raises(ValueError) as err:
        world.run(agents=("claude",), project_dir=world.home)
    text = str(err.value)
    assert "not a project" in text and "palace 'default'" in text
    assert "--scope user" in text and "--palace default" in text
    assert not (world.home / ".mcp.json").exists()
    # Asked for explicitly, it is done.
    world.run(agents=("claude",), project_dir=world.home, palace="default")
    assert (world.home / ".mcp.json").exists()


@pytest.mark.daemon
def test_palace_init_in_home_through_the_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PALACE_HOME": str(tmp_path / "ph"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    res = subprocess.run([sys.executable, "-m", "palace_client", "init"], cwd=home, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "is your home directory, not a project" in res.stderr
    assert not (home / ".mcp.json").exists()
