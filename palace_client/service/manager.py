"""``palace service install|uninstall|status``: palaced as a systemd user service (Linux) or a
launchd LaunchAgent (macOS).

Each command is a list of :class:`Step` s (write a file, make a directory, stop the on-demand
daemon, run ``systemctl``/``launchctl``), carried out in order or, with ``dry_run``, only
listed. The files are written even when the service manager cannot be reached (containers,
CI, a shell without a login session): the result then says so with
``manager_unavailable`` set, and the CLI exits ``EXIT_NO_SERVICE_MANAGER``.

The service manager owns the socket path once the service is installed, so install first
stops a daemon that a client started on demand (it holds the socket and the lock), and
uninstall stops the service before its files go.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palace_client.agents.safe_write import atomic_write
from palace_client.service import units
from palaced.wire.paths import Paths, resolve
from palaced.wire.private import make_private_dirs

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
RUN_TIMEOUT_S = 60.0


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False, stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class Host:
    """Where and how the service is installed; every part replaceable by tests."""

    platform: str  # sys.platform
    home: Path
    environ: Mapping[str, str]
    paths: Paths
    palaced: tuple[str, ...]  # the command that runs palaced (absolute), before "run"
    uid: int
    stop_daemon: Callable[[], int | None]  # stops a running daemon; its pid or None
    run: Runner = _run

    @classmethod
    def current(cls, stop_daemon: Callable[[], int | None]) -> Host:
        """This machine, this user, this client's environment and paths."""
        env = dict(os.environ)
        return cls(platform=sys.platform, home=Path(env.get("HOME") or Path.home()),
                   environ=env, paths=resolve(), palaced=palaced_command(), uid=os.getuid(),
                   stop_daemon=stop_daemon)

    @property
    def kind(self) -> str:
        """``launchd`` on macOS, ``systemd`` elsewhere."""
        return "launchd" if self.platform == "darwin" else "systemd"

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.environ.get("PATH", os.defpath))

    @property
    def unit_dir(self) -> Path:
        config = self.environ.get("XDG_CONFIG_HOME")
        return (Path(config) if config else self.home / ".config") / "systemd" / "user"

    @property
    def plist(self) -> Path:
        return self.home / "Library" / "LaunchAgents" / f"{units.LAUNCHD_LABEL}.plist"

    def files(self) -> dict[Path, str]:
        """The service files and their text, as install writes them."""
        if self.kind == "launchd":
            spec = units.launchd_spec(self.paths, self.palaced, self.home, self.environ)
            return {self.plist: units.render_plist(spec)}
        spec = units.systemd_spec(self.paths, self.palaced, self.home, self.environ, self.uid)
        return {self.unit_dir / units.SOCKET_UNIT: units.render_socket_unit(spec),
                self.unit_dir / units.SERVICE_UNIT: units.render_service_unit(spec)}


def palaced_command() -> tuple[str, ...]:
    """The absolute command that runs this installation's palaced: the ``palaced`` script
    beside this interpreter, else the one on PATH, else ``python -m palaced``."""
    beside = Path(sys.executable).parent / "palaced"
    if os.access(beside, os.X_OK):
        return (str(beside),)
    found = shutil.which("palaced")
    if found:
        return (os.path.abspath(found),)
    return (os.path.abspath(sys.executable), "-m", "palaced")


@dataclass
class Step:
    """One thing a service command does; ``outcome`` says how it went (``done``,
    ``would do``, ``unchanged``, ``failed``, ``skipped``)."""

    action: str  # write, remove, mkdir, stop-daemon, run
    target: str
    outcome: str = "planned"
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"action": self.action, "target": self.target, "outcome": self.outcome,
                "detail": self.detail}


@dataclass
class Result:
    """What a service command did (or would do), for the CLI's output and exit code."""

    command: str
    manager: str  # systemd or launchd
    dry_run: bool
    steps: list[Step] = field(default_factory=list)
    manager_unavailable: str | None = None  # why systemctl --user / launchctl cannot be used
    state: dict[str, Any] = field(default_factory=dict)  # status: files and unit states

    @property
    def failed(self) -> bool:
        return any(s.outcome == "failed" for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "manager": self.manager, "dry_run": self.dry_run,
                "manager_unavailable": self.manager_unavailable,
                "steps": [s.to_json() for s in self.steps], **self.state}


# -- the service manager ----------------------------------------------------------------------
def _manager_cmd(host: Host) -> list[str] | None:
    tool = host.which("launchctl" if host.kind == "launchd" else "systemctl")
    if tool is None:
        return None
    return [tool] if host.kind == "launchd" else [tool, "--user"]


def _planned_cmd(host: Host) -> list[str]:
    """The manager command, or its bare name (for a dry run's listing) when not on PATH."""
    return _manager_cmd(host) or (["launchctl"] if host.kind == "launchd" else [
        "systemctl", "--user"])


def manager_problem(host: Host) -> str | None:
    """Why the user's service manager cannot be used from here; None when it can.

    systemd: ``systemctl --user show-environment`` must answer (a user manager runs and is
    reachable); launchd: ``launchctl print gui/<uid>`` (a GUI login session exists).
    """
    if host.kind == "systemd" and not host.platform.startswith("linux"):
        return f"no supported service manager on {host.platform} (systemd or launchd)"
    cmd = _manager_cmd(host)
    name = "launchctl" if host.kind == "launchd" else "systemctl"
    if cmd is None:
        return f"{name} is not on PATH: this system has no {host.kind} to run services"
    probe = [*cmd, "print", f"gui/{host.uid}"] if host.kind == "launchd" else [
        *cmd, "show-environment"]
    try:
        proc = host.run(probe)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{shlex.join(probe)} failed: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout or "").strip().splitlines()[:1]
        return (f"{shlex.join(probe)} exited {proc.returncode}"
                + (f" ({why[0]})" if why else "")
                + (": no systemd user manager is reachable from here (a container, CI, or a "
                   "shell outside a login session)" if host.kind == "systemd" else
                   ": no launchd GUI session for this user"))
    return None


def _run_step(host: Host, argv: list[str], result: Result, *, optional: bool = False) -> bool:
    step = Step("run", shlex.join(argv))
    result.steps.append(step)
    if result.dry_run:
        step.outcome = "would do"
        return True
    try:
        proc = host.run(argv)
    except (OSError, subprocess.SubprocessError) as exc:
        step.outcome, step.detail = ("skipped" if optional else "failed"), str(exc)
        return optional
    if proc.returncode != 0:
        output = (proc.stderr or proc.stdout or "").strip()
        step.outcome = "skipped" if optional else "failed"
        step.detail = f"exited {proc.returncode}: {output}".strip()
        return optional
    step.outcome = "done"
    return True


def _write(path: Path, text: str, result: Result) -> None:
    try:
        old: str | None = path.read_text("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        old = None
    step = Step("write", str(path))
    result.steps.append(step)
    if old == text:
        step.outcome = "unchanged"
        return
    if result.dry_run:
        step.outcome, step.detail = "would do", text
        return
    try:
        atomic_write(path, text)
    except OSError as exc:
        step.outcome, step.detail = "failed", str(exc)
        return
    step.outcome = "done"


def _remove(path: Path, result: Result) -> None:
    step = Step("remove", str(path))
    result.steps.append(step)
    if not path.exists() and not path.is_symlink():
        step.outcome = "unchanged"
        return
    if result.dry_run:
        step.outcome = "would do"
        return
    try:
        path.unlink()
    except OSError as exc:
        step.outcome, step.detail = "failed", str(exc)
        return
    step.outcome = "done"


def _mkdirs(dirs: Sequence[Path], result: Result) -> None:
    for directory in dirs:
        if directory.is_dir():
            continue
        step = Step("mkdir", str(directory), "would do" if result.dry_run else "done")
        result.steps.append(step)
        if not result.dry_run:
            try:
                make_private_dirs(directory)
            except OSError as exc:
                step.outcome, step.detail = "failed", str(exc)


def _stop_on_demand(host: Host, result: Result) -> None:
    step = Step("stop-daemon", str(host.paths.socket))
    result.steps.append(step)
    if result.dry_run:
        step.outcome = "would do"
        return
    pid = host.stop_daemon()
    step.outcome = "done" if pid is not None else "unchanged"
    step.detail = f"stopped palaced (pid {pid})" if pid is not None else "no daemon was running"


# -- the commands -----------------------------------------------------------------------------
def install(host: Host, *, dry_run: bool = False) -> Result:
    """Write the service files and enable them (systemd: socket and service; launchd: the
    agent), stopping an on-demand daemon first so that the service manager owns the socket."""
    result = Result("install", host.kind, dry_run)
    p = host.paths
    # The sandbox (ProtectSystem=strict) lets the daemon write only directories that exist.
    dirs = [p.data_dir, p.state_dir] if host.kind == "systemd" else [
        p.runtime_dir, Path(units.launchd_spec(p, host.palaced, host.home, host.environ).logs)]
    _mkdirs(dirs, result)
    for path, text in host.files().items():
        _write(path, text, result)
    result.manager_unavailable = manager_problem(host)
    if (result.manager_unavailable is not None and not dry_run) or result.failed:
        return result
    cmd = _planned_cmd(host)
    if host.kind == "launchd":
        target = f"gui/{host.uid}"
        _stop_on_demand(host, result)
        # A loaded agent must be booted out before it is bootstrapped again.
        _run_step(host, [*cmd, "bootout", f"{target}/{units.LAUNCHD_LABEL}"], result,
                  optional=True)
        _run_step(host, [*cmd, "bootstrap", target, str(host.plist)], result)
        return result
    if _run_step(host, [*cmd, "daemon-reload"], result):
        _stop_on_demand(host, result)
        _run_step(host, [*cmd, "enable", "--now", units.SOCKET_UNIT, units.SERVICE_UNIT],
                  result)
    return result


def uninstall(host: Host, *, dry_run: bool = False) -> Result:
    """Stop and disable the service, then remove its files; nothing to do when none is
    installed (the service manager is then not even asked)."""
    result = Result("uninstall", host.kind, dry_run)
    files = [f for f in host.files() if f.exists() or f.is_symlink()]
    if not files:
        return result
    result.manager_unavailable = manager_problem(host)
    cmd = _manager_cmd(host)
    if result.manager_unavailable is None and cmd is not None:
        if host.kind == "launchd":
            _run_step(host, [*cmd, "bootout", f"gui/{host.uid}/{units.LAUNCHD_LABEL}"], result,
                      optional=True)
        else:
            _run_step(host, [*cmd, "disable", "--now", units.SOCKET_UNIT, units.SERVICE_UNIT],
                      result)
    for path in files:
        _remove(path, result)
    if result.manager_unavailable is None and cmd is not None and host.kind == "systemd":
        _run_step(host, [*cmd, "daemon-reload"], result)
        _run_step(host, [*cmd, "reset-failed", units.SOCKET_UNIT, units.SERVICE_UNIT], result,
                  optional=True)
    return result


def status(host: Host) -> Result:
    """Which service files exist and whether they match what install would write now, and
    what the service manager says about them (never starts anything)."""
    result = Result("status", host.kind, dry_run=False)
    files = {}
    for path, text in host.files().items():
        try:
            current = path.read_text("utf-8") == text
            files[str(path)] = "current" if current else "outdated (run palace service install)"
        except (FileNotFoundError, UnicodeDecodeError):
            files[str(path)] = "missing"
    result.state["files"] = files
    result.state["installed"] = any(v != "missing" for v in files.values())
    result.manager_unavailable = manager_problem(host)
    cmd = _manager_cmd(host)
    units_state: dict[str, str] = {}
    if result.manager_unavailable is None and cmd is not None:
        if host.kind == "launchd":
            proc = host.run([*cmd, "print", f"gui/{host.uid}/{units.LAUNCHD_LABEL}"])
            units_state[units.LAUNCHD_LABEL] = "loaded" if proc.returncode == 0 else "not loaded"
        else:
            for unit in (units.SOCKET_UNIT, units.SERVICE_UNIT):
                for query in ("is-enabled", "is-active"):
                    proc = host.run([*cmd, query, unit])
                    answer = (proc.stdout or "").strip().splitlines()
                    units_state[f"{unit} {query.removeprefix('is-')}"] = (
                        answer[0] if answer else f"unknown (exit {proc.returncode})")
    result.state["units"] = units_state
    result.state["socket"] = str(host.paths.socket)
    return result
