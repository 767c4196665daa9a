"""``palace uninstall``: service, daemon, agent configs, then the data (kept or purged).

A real daemon, real config files written by ``palace init`` and a fake ``systemctl`` (see
``service_support``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palace_client.agents.record import recorded_projects
from tests.conftest import DaemonProc
from tests.support.service_support import World, world_fixture  # noqa: F401 (fixture)

pytestmark = pytest.mark.daemon  # every test here runs palace's processes


def _cursor_servers(path: Path) -> dict[str, object]:
    if not path.exists():
        return {}
    servers = json.loads(path.read_text()).get("mcpServers", {})
    assert isinstance(servers, dict)
    return servers


def test_uninstall_undoes_service_daemon_and_agents_and_keeps_the_data(world: World) -> None:
    world.fake("systemctl")
    assert world.palace("service", "install").returncode == 0
    daemon = DaemonProc(world.palace_home, world.env())
    daemon.start(wait_model=False)
    for args in (("create", "keep"), ("remember", "a memory worth keeping", "--palace", "keep")):
        res = world.palace(*args)
        assert res.returncode == 0, res.stderr
    project = world.home / "proj"
    (project / ".git").mkdir(parents=True)
    for scope in ("project", "user"):
        res = world.palace("init", "--agent", "cursor", "--scope", scope,
                           "--project-dir", str(project))
        assert res.returncode == 0, res.stdout + res.stderr
    project_cfg = project / ".cursor" / "mcp.json"
    user_cfg = world.home / ".cursor" / "mcp.json"
    assert "palace" in _cursor_servers(project_cfg) and "palace" in _cursor_servers(user_cfg)
    assert recorded_projects(world.palace_home / "state") == [project]

    # A dry run changes nothing.
    dry = world.palace("uninstall", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert {a["target"] for a in plan["agents"]} == {str(project_cfg), str(user_cfg)}
    assert (world.unit_dir / "palaced.service").exists()
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert "palace" in _cursor_servers(user_cfg)

    res = world.palace("uninstall", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert "--user disable --now palaced.socket palaced.service" in world.calls()
    assert not (world.unit_dir / "palaced.service").exists()
    assert daemon.proc.wait(timeout=30) == 0
    assert report["daemon"]["stopped"] == daemon.proc.pid
    assert "palace" not in _cursor_servers(project_cfg)
    assert "palace" not in _cursor_servers(user_cfg)
    assert {a["action"] for a in report["agents"]} == {"deleted"}
    # The data stays, and is listed.
    assert [p["name"] for p in report["data"]["palaces"]] == ["keep"]
    assert (world.palace_home / "palaces" / "keep" / "palace.db").is_file()
    human = world.palace("uninstall")
    assert human.returncode == 0, human.stderr
    assert "service: none installed" in human.stdout
    assert "data: kept (palaces: keep)" in human.stdout
    assert "then: pip uninstall palace" in human.stdout


def test_purge_asks_first_then_deletes_what_palace_made(world: World) -> None:
    res = world.palace("create", "gone")  # auto-starts a daemon
    assert res.returncode == 0, res.stderr
    (world.palace_home / "notes.txt").write_text("the user's own file")
    refused = world.palace("uninstall", "--purge")  # no terminal, no --yes
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    assert (world.palace_home / "palaces" / "gone").is_dir()
    res = world.palace("uninstall", "--purge", "--yes", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["daemon"]["stopped"] is not None
    assert [p["name"] for p in report["data"]["palaces"]] == ["gone"]
    assert str(world.palace_home / "palaces") in report["data"]["removed"]
    assert not (world.palace_home / "palaces").exists()
    assert not (world.palace_home / "state").exists()
    assert not (world.palace_home / "run").exists()
    # Only palace's own entries went: a file of the user's in PALACE_HOME stays.
    assert (world.palace_home / "notes.txt").read_text() == "the user's own file"


def test_purge_refuses_a_palace_home_that_is_the_home_directory(world: World) -> None:
    res = world.palace("uninstall", "--purge", "--yes", env={"PALACE_HOME": str(world.home)})
    assert res.returncode == 2
    assert f"refusing to purge PALACE_HOME={world.home}: it is your home directory" in res.stderr
    assert world.bin.is_dir()
