"""``palace uninstall``: take palace off this machine for this user, in a safe order.

1. the service (``manager.uninstall``): stopped first, or it would start the daemon again;
2. the daemon (``palace daemon stop``), when one still runs;
3. the agent configs ``palace init`` wrote: its own undo (``init --uninstall``) in user scope
   and, in project and local scope, in every project ``palace init`` recorded (``agents.record``);
4. the data: listed and kept, or with ``purge`` deleted. Only what palace itself creates goes:
   its data, state and config directories (each named ``palace``), or under ``PALACE_HOME``
   the entries palace makes there (``palaces/``, ``state/``, ``config.toml``, ``run/``); a
   config file named by ``PALACE_CONFIG`` and a ``PALACE_SOCKET`` directory are the user's and
   stay. A ``PALACE_HOME`` that is the home directory (or above it) is refused for purging.

The package itself is left to ``pip uninstall palace``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from palace_client.agents.record import recorded_projects
from palace_client.agents.setup import Change, InitOptions, format_changes, init_agents
from palace_client.service.manager import Host, uninstall

AGENT_ACTIONS = ("created", "updated", "deleted", "error")


def _size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed)."""
    if path.is_file() and not path.is_symlink():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                total += st.st_size if not os.path.islink(os.path.join(root, name)) else 0
    return total


def _palaces(host: Host) -> list[dict[str, Any]]:
    root = host.paths.palaces_dir
    if not root.is_dir():
        return []
    return [{"name": d.name, "path": str(d), "bytes": _size(d)}
            for d in sorted(root.iterdir()) if (d / "palace.db").is_file()]


def purge_allowed(host: Host) -> str | None:
    """Why ``--purge`` must not run here (PALACE_HOME is the home directory or above it);
    None when it may."""
    home_env = host.environ.get("PALACE_HOME")
    if not home_env:
        return None
    root = Path(home_env).expanduser().resolve()
    home = host.home.resolve()
    if root == home or home.is_relative_to(root):
        return (f"refusing to purge PALACE_HOME={root}: it is your home directory or above it; "
                "delete palace's entries in it by hand")
    return None


def purge_targets(host: Host) -> list[Path]:
    """What ``--purge`` deletes, outermost first (see the module docstring)."""
    p, env = host.paths, host.environ
    if env.get("PALACE_HOME"):
        targets = [p.palaces_dir, p.state_dir]
        if not env.get("PALACE_CONFIG"):
            targets.append(p.config_file)
    else:
        targets = [p.data_dir, p.state_dir]
        if not env.get("PALACE_CONFIG"):
            targets.append(p.config_file.parent)
    if not env.get("PALACE_SOCKET"):
        targets.append(p.runtime_dir)
    return targets


def _data(host: Host) -> list[dict[str, Any]]:
    p = host.paths
    items = [("palaces", p.palaces_dir), ("state (logs, model cache)", p.state_dir),
             ("config file", p.config_file)]
    if not host.environ.get("PALACE_SOCKET"):
        items.append(("runtime (socket, lock)", p.runtime_dir))
    return [{"what": what, "path": str(path), "exists": path.exists(),
             "bytes": _size(path) if path.exists() else 0} for what, path in items]


def _remove_tree(path: Path) -> str | None:
    """Delete ``path`` (a file, or a directory and all in it); the error text on failure."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return str(exc)
    return None


def _agents(host: Host, cwd: Path, dry_run: bool) -> list[Change]:
    runs = [("user", cwd)] + [(scope, project) for project in
                              recorded_projects(host.paths.state_dir) if project.is_dir()
                              for scope in ("project", "local")]
    changes: list[Change] = []
    for scope, project in runs:
        try:
            found = init_agents(InitOptions(project_dir=project, scope=scope, uninstall=True,
                                            dry_run=dry_run, home=host.home,
                                            environ=host.environ))
        except ValueError as exc:
            changes.append(Change("claude", str(project), "error", detail=str(exc)))
            continue
        changes.extend(c for c in found if c.action in AGENT_ACTIONS)
    return changes


def run_uninstall(host: Host, cwd: Path, *, purge: bool, dry_run: bool) -> dict[str, Any]:
    """Run the uninstall steps (or list them with ``dry_run``); the report as a dict."""
    service = uninstall(host, dry_run=dry_run)
    if dry_run:
        daemon: dict[str, Any] = {"stopped": None, "would_stop": True}
    else:
        daemon = {"stopped": host.stop_daemon()}
    changes = _agents(host, cwd, dry_run)
    palaces, items = _palaces(host), _data(host)  # before a purge deletes them
    removed: list[str] = []
    errors: list[str] = []
    if purge:
        for target in purge_targets(host):
            if not (target.exists() or target.is_symlink()):
                continue
            removed.append(str(target))
            error = None if dry_run else _remove_tree(target)
            if error:
                errors.append(f"{target}: {error}")
        if host.environ.get("PALACE_HOME") and not dry_run:
            with contextlib.suppress(OSError):
                host.paths.data_dir.rmdir()  # only when nothing else is left in it
    data = {"palaces": palaces, "items": items, "removed": removed, "errors": errors}
    failed = service.failed or bool(errors) or any(
        c.action == "error" for c in changes)
    return {"dry_run": dry_run, "purge": purge, "service": service.to_json(), "daemon": daemon,
            "agents": [c.to_json() for c in changes], "data": data, "failed": failed,
            "next": "pip uninstall palace"}


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def format_report(report: dict[str, Any]) -> str:
    """The human-readable report of :func:`run_uninstall`."""
    dry = report["dry_run"]
    lines = ["palace uninstall" + (" - dry run, nothing changed" if dry else "")]
    service = report["service"]
    if service["steps"]:
        lines.append(f"service ({service['manager']}):")
        lines += [f"  {s['outcome']:<10} {s['action']:<8} {s['target']}"
                  + (f"\n      {s['detail']}" if s["detail"] and s["outcome"] in (
                      "failed", "skipped") else "") for s in service["steps"]]
        if service["manager_unavailable"]:
            lines.append(f"  {service['manager_unavailable']}")
    else:
        lines.append("service: none installed")
    pid = report["daemon"].get("stopped")
    lines.append("daemon: " + ("would be stopped if running" if dry else
                               f"stopped (pid {pid})" if pid else "not running"))
    changes = [Change(**c) for c in report["agents"]]
    lines.append("agents: " + ("no palace entries found" if not changes else ""))
    if changes:
        lines += ["  " + line for line in format_changes(changes, dry_run=dry).splitlines()]
    data = report["data"]
    if report["purge"]:
        verb = "would delete" if dry else "deleted"
        lines += [f"data: {verb}:"] + [f"  {path}" for path in data["removed"]]
        lines += [f"  error: {e}" for e in data["errors"]]
    else:
        names = ", ".join(p["name"] for p in data["palaces"]) or "none"
        lines.append(f"data: kept (palaces: {names}); delete with --purge, or by hand:")
        lines += [f"  {item['what']:<27} {item['path']}  ({_human_size(item['bytes'])})"
                  for item in data["items"] if item["exists"]]
    lines.append(f"then: {report['next']}")
    return "\n".join(lines)
