"""The bridge through the official MCP Python SDK clients, 1.x and 2.x, against a real daemon.

Both majors cannot be installed in one environment. The ``[test]`` extra installs the current
one (2.x); the other is installed once by ``sdk_path`` with ``pip install --target`` into
``.venv/mcp-sdk-<major>-py<version>`` of the repository and reused by later runs. Each client
runs in a subprocess (``tests/support/mcp_sdk_driver.py``) whose ``PYTHONPATH`` selects its
major, and spawns the bridge as agents do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

from palace_client.api.slug import palace_name_for
from tests.conftest import REPO, DaemonProc

# The first run installs the other SDK major (a download), within the test's time.
pytestmark = pytest.mark.timeout(600)

DRIVER = REPO / "tests" / "support" / "mcp_sdk_driver.py"
SDK_SPECS = {1: "mcp>=1.20,<2", 2: "mcp>=2.3,<3"}
DISCOVER_TIMEOUT_S = 10.0  # mcp 2.x: how long its auto mode waits for server/discover
# The default toolset (the knowledge graph, memoir and upkeep tools are opt-in).
TOOLS = ["remember", "recall", "wake_up", "forget", "get", "list_drawers", "rooms"]


def installed_major() -> int | None:
    """The major of the ``mcp`` installed in this environment, if any."""
    try:
        return int(version("mcp").split(".")[0])
    except PackageNotFoundError:
        return None


def sdk_path(major: int) -> str | None:
    """A ``sys.path`` entry holding SDK ``major``; ``None`` when this environment has it.

    Installs it the first time (``pip install --target``, which needs the package index),
    into a directory that later runs reuse; an interrupted install is never used.
    """
    if installed_major() == major:
        return None
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = REPO / ".venv" / f"mcp-sdk-{major}-py{py}"
    marker = target / ".palace-complete"
    if marker.is_file() and marker.read_text() == SDK_SPECS[major]:
        return str(target)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-input", "--target", str(partial), SDK_SPECS[major]],
        capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"cannot install the MCP SDK {major}.x ({SDK_SPECS[major]}) for the "
                    f"tests:\n{proc.stderr[-3000:]}")
    (partial / ".palace-complete").write_text(SDK_SPECS[major])
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return str(target)


@pytest.fixture(scope="session", params=[2, 1], ids=["sdk2", "sdk1"])
def sdk(request: pytest.FixtureRequest) -> tuple[int, str | None]:
    """(major, the ``PYTHONPATH`` entry that selects it, or None for this environment's)."""
    major: int = request.param
    return major, sdk_path(major)


def drive(sdk: tuple[int, str | None], env: dict[str, str], command: list[str],
          roots: list[str], later_roots: list[str]) -> dict[str, Any]:
    """Run the driver with SDK ``sdk`` against the bridge ``command``; returns its report."""
    major, path = sdk
    driver_env = dict(env)
    if path is not None:
        driver_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (path, env.get("PYTHONPATH")) if p)
    spec = {"command": command, "env": env, "roots": roots, "later_roots": later_roots}
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps(spec)], env=driver_env,
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-5000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["major"] == major, report["sdk"]
    return report


def text(result: dict[str, Any]) -> str:
    assert "exception" not in result, result
    content = result["content"]
    assert len(content) == 1 and content[0]["type"] == "text"
    return str(content[0]["text"])


def importance_of(env: dict[str, str], palace: str, drawer_id: int) -> float:
    """The stored importance of a drawer, through `palace get --json`."""
    proc = subprocess.run([sys.executable, "-m", "palace_client", "get", str(drawer_id),
                           "--palace", palace, "--json"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return float(json.loads(proc.stdout)["importance"])


def project(root: Path, name: str) -> Path:
    """A git project directory ``root/name``."""
    path = root / name
    (path / ".git").mkdir(parents=True)
    return path


def test_sdk_client_remembers_recalls_and_follows_roots(
        sdk: tuple[int, str | None], shared_daemon: DaemonProc, tmp_path: Path) -> None:
    first = project(tmp_path, f"Sdk{sdk[0]} Project")
    second = project(tmp_path, f"Sdk{sdk[0]} Other")
    env = {k: v for k, v in shared_daemon.env.items() if k != "CLAUDE_PROJECT_DIR"}
    # No --palace: the palace comes from the client's roots, not from the cwd (the repo).
    command = [sys.executable, "-m", "palace_client", "mcp"]
    report = drive(sdk, env, command, [first.as_uri()], [second.as_uri()])
    palace, other = palace_name_for(first), palace_name_for(second)

    print(f"\nmcp {report['sdk']}: connected in {report['connect_s'] * 1000:.0f} ms")
    assert report["protocol_version"] == "2025-11-25"
    assert report["server_info"]["name"] == "palace"
    # 2.x probes server/discover first; the bridge's immediate "method not found" makes it
    # fall back to initialize at once, not after its probe timeout.
    assert report["connect_s"] < DISCOVER_TIMEOUT_S / 2, report["connect_s"]
    assert "recall" in report["instructions"]

    tools = report["tools"]
    assert [t["name"] for t in tools] == TOOLS
    recall = tools[1]
    assert recall["annotations"]["readOnlyHint"] is True
    assert "outputSchema" not in recall
    assert recall["inputSchema"]["properties"]["scope"]["enum"] == ["palace", "all"]

    calls = report["calls"]
    stored = text(calls["remember"])
    assert not calls["remember"]["isError"], stored
    assert f"in palace '{palace}'" in stored
    drawer_id = int(stored.split("#")[1].split()[0])
    # importance by name, as the CLI takes it; get reads the drawer whole; rooms.
    got = text(calls["get"])
    assert not calls["get"]["isError"], got
    assert f"#{drawer_id} [general/release]" in got and "tags process" in got
    assert "freeze is the Friday before." in got
    rooms = text(calls["rooms"])
    assert "- general: release (1)" in rooms and "Recall is semantic" in rooms
    assert calls["not_served"]["isError"]
    assert "in the toolset 'kg'" in text(calls["not_served"])
    assert importance_of(env, palace, drawer_id) == 0.8
    found = text(calls["recall"])
    assert f"#{drawer_id} [general/release]" in found and "second Tuesday" in found
    assert f"in palace '{palace}'" in found
    everywhere = text(calls["recall_all"])
    assert "palace(s)" in everywhere and f"{palace}:general/release" in everywhere

    assert calls["forget_missing"]["isError"] and "MEMORY_NOT_FOUND" in text(
        calls["forget_missing"])
    assert calls["unknown_argument"]["isError"]
    assert "unknown argument(s) 'colour'; allowed: text, room" in text(
        calls["unknown_argument"])
    assert calls["out_of_bounds"]["isError"]
    assert "argument 'top_k' must be between 1 and 1000, got 0" in text(calls["out_of_bounds"])
    assert "Unknown tool \"no_such_tool\"" in calls["unknown_tool"]["message"]
    assert "remember, recall" in calls["unknown_tool"]["message"]
    assert calls["retired_tool"]["isError"]
    assert "recall with scope='all'" in text(calls["retired_tool"])

    assert report["roots_asked_before_change"] == 1
    assert report["roots_asked"] == 2
    moved = text(calls["after_change"])
    assert f"in palace '{other}'" in moved, moved
    listing = text(calls["list_drawers"])
    assert f"in palace '{other}'" in listing and "The workspace moved." in listing
    assert "second Tuesday" not in listing
