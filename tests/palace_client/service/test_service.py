"""``palace service install|uninstall|status`` against a fake ``systemctl`` / ``launchctl``.

The service manager is an external command, so a script on ``PATH`` that records its
arguments stands in for it (present and working, present without a user manager, absent).
The files are real, the CLI runs in a subprocess with a scratch ``HOME``, and the units it
writes are checked by the real ``systemd-analyze verify``.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from palace_client.service import units
from palace_client.service.manager import Host, install, status, uninstall
from palaced.wire.paths import Paths
from tests.conftest import DaemonProc
from tests.support.service_support import NO_BUS, PALACED, World, world_fixture  # noqa: F401 (fixture)


def _steps(out: str) -> list[tuple[str, str, str]]:
    return [(s["action"], s["target"], s["outcome"]) for s in json.loads(out)["steps"]]


@pytest.mark.daemon
def test_install_without_systemctl_writes_the_units_and_exits_9(world: World) -> None:
    res = world.palace("service", "install", "--json")
    assert res.returncode == 9, res.stderr
    assert "systemctl is not on PATH" in res.stderr
    socket_unit = (world.unit_dir / "palaced.socket").read_text()
    service_unit = (world.unit_dir / "palaced.service").read_text()
    assert f"ListenStream={world.palace_home}/run/palaced.sock\n" in socket_unit
    assert f"ExecStart={PALACED} run\n" in service_unit
    assert f"Environment=PALACE_HOME={world.palace_home}\n" in service_unit
    assert f"ReadWritePaths={world.palace_home}\n" in service_unit
    data = json.loads(res.stdout)
    assert data["manager_unavailable"].startswith("systemctl is not on PATH")
    assert ("write", str(world.unit_dir / "palaced.service"), "done") in _steps(res.stdout)
    assert not any(action == "run" for action, _, _ in _steps(res.stdout))


@pytest.mark.daemon
def test_install_enables_socket_and_service_after_stopping_the_on_demand_daemon(
        world: World) -> None:
    world.fake("systemctl")
    daemon = DaemonProc(world.palace_home, world.env())
    daemon.start(wait_model=False)
    res = world.palace("service", "install")
    assert res.returncode == 0, res.stderr
    assert world.calls() == ["--user show-environment", "--user daemon-reload",
                             "--user enable --now palaced.socket palaced.service"]
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == 0
    assert "stopped palaced (pid" in res.stdout
    # Status: the files are what install writes, the units as systemctl reports them.
    st = world.palace("service", "status", "--json")
    assert st.returncode == 0, st.stderr
    data = json.loads(st.stdout)
    assert data["installed"] is True
    assert set(data["files"].values()) == {"current"}
    assert data["units"]["palaced.socket enabled"] == "enabled"
    assert data["units"]["palaced.service active"] == "active"
    # Installing again changes no file.
    again = world.palace("service", "install", "--json")
    assert again.returncode == 0, again.stderr
    assert {o for a, _, o in _steps(again.stdout) if a == "write"} == {"unchanged"}
    # Uninstall: disable and stop first, then the files go.
    before = len(world.calls())
    out = world.palace("service", "uninstall", "--json")
    assert out.returncode == 0, out.stderr
    assert world.calls()[before:] == [
        "--user show-environment", "--user disable --now palaced.socket palaced.service",
        "--user daemon-reload", "--user reset-failed palaced.socket palaced.service"]
    assert not (world.unit_dir / "palaced.socket").exists()
    assert not (world.unit_dir / "palaced.service").exists()
    # Nothing installed: nothing to do, the manager is not even asked.
    before = len(world.calls())
    assert world.palace("service", "uninstall").returncode == 0
    assert world.calls()[before:] == []


@pytest.mark.daemon
def test_install_without_a_user_manager_writes_the_units_and_exits_9(world: World) -> None:
    world.fake("systemctl", NO_BUS)
    res = world.palace("service", "install")
    assert res.returncode == 9
    assert "no systemd user manager is reachable" in res.stderr
    assert "Failed to connect to bus" in res.stderr
    assert world.calls() == ["--user show-environment"]
    assert (world.unit_dir / "palaced.socket").is_file()
    st = world.palace("service", "status")
    assert st.returncode == 9
    assert "current" in st.stdout


@pytest.mark.daemon
def test_dry_run_lists_the_steps_and_changes_nothing(world: World) -> None:
    world.fake("systemctl")
    res = world.palace("service", "install", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    steps = _steps(res.stdout)
    assert {o for _, _, o in steps} == {"would do"}
    assert [t for a, t, _ in steps if a == "run"] == [
        f"{world.bin}/systemctl --user daemon-reload",
        f"{world.bin}/systemctl --user enable --now palaced.socket palaced.service"]
    written = json.loads(res.stdout)["steps"]
    assert any("ListenStream=" in s["detail"] for s in written)
    assert not world.unit_dir.exists()
    assert world.calls() == ["--user show-environment"]  # the read-only probe only


@pytest.mark.daemon
def test_written_units_pass_systemd_analyze_verify(world: World, home: Path) -> None:
    analyze = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
    assert os.access(analyze, os.X_OK), (
        "systemd-analyze is missing: install Debian's systemd package; .ci/run does")
    assert world.palace("service", "install").returncode == 9  # no systemctl: files only
    runtime = home / "xdg-run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(world.home)}

    def verify(directory: Path) -> None:
        res = subprocess.run([analyze, "verify", "--user", "palaced.socket", "palaced.service"],
                             cwd=directory, env=env, capture_output=True, text=True, timeout=60)
        ours = [ln for ln in (res.stdout + res.stderr).splitlines() if "palaced" in ln]
        assert res.returncode == 0 and not ours, res.stdout + res.stderr

    verify(world.unit_dir)
    # The repository's copies, with %h/.local/bin/palaced present in that home.
    copies = home / "repo-units"
    copies.mkdir()
    for name in ("palaced.socket", "palaced.service"):
        shutil.copy(Path(__file__).parents[3] / "systemd" / name, copies / name)
    (world.home / ".local" / "bin").mkdir(parents=True)
    (world.home / ".local" / "bin" / "palaced").symlink_to(PALACED)
    verify(copies)
    # A broken unit is caught (the check can fail).
    broken = (copies / "palaced.service").read_text().replace("Type=notify", "Type=notifyy")
    (copies / "palaced.service").write_text(broken)
    with pytest.raises(AssertionError, match="notifyy"):
        verify(copies)


def test_units_use_specifiers_for_the_home_and_runtime_dirs(tmp_path: Path) -> None:
    home, run = Path("/home/ann"), Path("/run/user/1000")
    paths = Paths(data_dir=home / ".local/share/palace", state_dir=home / ".local/state/palace",
                  config_file=home / ".config/palace/config.toml",
                  runtime_dir=run / "palace", socket=run / "palace/palaced.sock")
    spec = units.systemd_spec(paths, ["/home/ann/.venv/bin/palaced"], home, {}, uid=1000)
    assert spec == units.Spec(
        palaced=("%h/.venv/bin/palaced",), socket="%t/palace/palaced.sock",
        writable=("%h/.local/share/palace", "%h/.local/state/palace", "%t/palace"),
        optional_writable=("%h/.config/palace",))
    service = units.render_service_unit(spec)
    assert "PrivateTmp=yes\n" in service
    assert ("ReadWritePaths=%h/.local/share/palace %h/.local/state/palace %t/palace "
            "-%h/.config/palace\n") in service
    odd = units.systemd_spec(paths, ["/opt/my tools/100%/palaced"], home, {}, uid=1000)
    assert 'ExecStart="/opt/my tools/100%%/palaced" run' in units.render_service_unit(odd)


def _darwin_host(tmp_path: Path, bin_dir: Path, stopped: list[int]) -> Host:
    run = tmp_path / "tmp" / "palace-501"
    paths = Paths(data_dir=tmp_path / "data", state_dir=tmp_path / "state",
                  config_file=tmp_path / "config" / "config.toml", runtime_dir=run,
                  socket=run / "palaced.sock")
    return Host(platform="darwin", home=tmp_path / "Users" / "ann",
                environ={"PATH": str(bin_dir)}, paths=paths, palaced=("/opt/bin/palaced",),
                uid=501, stop_daemon=lambda: stopped.append(1) or None)


@pytest.mark.daemon
def test_launchd_install_writes_a_socket_agent_and_bootstraps_it(world: World,
                                                                 tmp_path: Path) -> None:
    world.fake("launchctl")
    stopped: list[int] = []
    host = _darwin_host(tmp_path, world.bin, stopped)
    result = install(host)
    assert not result.failed and result.manager_unavailable is None, result.to_json()
    plist = host.home / "Library" / "LaunchAgents" / "dev.palace.palaced.plist"
    agent = plistlib.loads(plist.read_bytes())
    assert agent["Label"] == "dev.palace.palaced"
    assert agent["ProgramArguments"] == ["/opt/bin/palaced", "run"]
    assert agent["Sockets"] == {"palaced": {
        "SockPathName": str(host.paths.socket), "SockPathMode": 0o600, "SockType": "stream",
        "SockFamily": "Unix"}}
    assert agent["KeepAlive"] == {"SuccessfulExit": False} and agent["RunAtLoad"] is True
    assert agent["StandardErrorPath"] == f"{host.home}/Library/Logs/palaced.err.log"
    assert host.paths.runtime_dir.is_dir()  # launchd binds in it
    assert stopped == [1]
    assert world.calls() == ["print gui/501", "bootout gui/501/dev.palace.palaced",
                             f"bootstrap gui/501 {plist}"]
    assert status(host).state["units"] == {"dev.palace.palaced": "loaded"}
    out = uninstall(host)
    assert not out.failed
    assert world.calls()[-2:] == ["print gui/501", "bootout gui/501/dev.palace.palaced"]
    assert not plist.exists()


def test_launchd_without_launchctl_is_reported(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    host = _darwin_host(tmp_path, empty, [])
    result = install(host)
    assert result.manager_unavailable == (
        "launchctl is not on PATH: this system has no launchd to run services")
    assert (host.home / "Library" / "LaunchAgents" / "dev.palace.palaced.plist").is_file()
