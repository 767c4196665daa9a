"""Planning the edit of one agent config file: JSON objects, Claude Code settings, Codex TOML.

A plan holds a file's text before and after the edit; nothing is written here (``setup``
applies plans). Edits touch only palace's own entries and keep every other key.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .codex_toml import TomlEditError, set_server_table
from .safe_write import backup_path

SERVER_KEY = "palace"


# -- plans ----------------------------------------------------------------------------------------
@dataclass
class FilePlan:
    path: Path
    old: str | None
    new: str | None  # None: delete the file
    error: str = ""


@dataclass
class CommandPlan:
    argvs: list[list[str]]
    action: str


Plan = FilePlan | CommandPlan


class PlanError(Exception):
    """A config file cannot be edited safely."""


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _indent_of(text: str | None) -> int | str:
    if text:
        for line in text.splitlines()[1:]:
            stripped = line.lstrip(" \t")
            if stripped and stripped != line:
                lead = line[: len(line) - len(stripped)]
                return "\t" if lead.startswith("\t") else len(lead)
    return 2


def load_json(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"not plain JSON ({exc}); comments are not supported, so edit it "
                         "by hand") from None
    if not isinstance(data, dict):
        raise PlanError("does not hold a JSON object")
    return data


Mutation = Callable[[dict[str, Any], dict[str, Any]], None]


def json_plan(path: Path, mutate: Mutation) -> FilePlan:
    """Plan applying ``mutate(data, original)`` to the JSON object in ``path``.

    ``original`` is the pre-palace document (the backup, or ``{}``): uninstalling drops a
    container that became empty only if the user did not have it before palace. A file that
    cannot be read, parsed or safely changed yields a plan with ``error`` set.
    """
    try:
        old = read_text(path)
    except OSError as exc:
        return FilePlan(path, None, None, error=f"cannot read {path}: {exc}")
    try:
        data = load_json(old)
        try:
            original = load_json(read_text(backup_path(path)))
        except (OSError, PlanError):
            original = {}
        new_data = copy.deepcopy(data)
        mutate(new_data, original)
    except PlanError as exc:
        return FilePlan(path, old, old, error=f"{path}: {exc}")
    if new_data == data:
        return FilePlan(path, old, old)
    if not new_data:
        return FilePlan(path, old, None)
    return FilePlan(path, old, json.dumps(new_data, indent=_indent_of(old),
                                           ensure_ascii=False) + "\n")


def set_entry(container_key: str, entry: dict[str, Any] | None) -> Mutation:
    """A mutation that puts ``entry`` (or, for None, removes ours) under ``container_key``."""

    def mutate(data: dict[str, Any], original: dict[str, Any]) -> None:
        servers = data.get(container_key)
        if entry is None:
            if isinstance(servers, dict) and SERVER_KEY in servers:
                del servers[SERVER_KEY]
                if not servers and container_key not in original:
                    del data[container_key]
            return
        if not isinstance(servers, dict):
            if servers is not None:
                raise PlanError(f"'{container_key}' is not an object")
            servers = data[container_key] = {}
        current = servers.get(SERVER_KEY)
        merged = dict(current) if isinstance(current, dict) else {}
        merged.update(entry)
        servers[SERVER_KEY] = merged

    return mutate


# -- Claude Code settings (enabledMcpjsonServers, SessionStart hook) ----------------------------
def _is_our_hook(command: object) -> bool:
    if not isinstance(command, str) or "wake-up" not in command:
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return "wake-up" in words and ("palace_client" in words or Path(words[0]).name == "palace")


def claude_settings(enable_server: bool, hook_command: str | None, remove: bool
                     ) -> Mutation:
    def mutate(data: dict[str, Any], original: dict[str, Any]) -> None:
        enabled = data.get("enabledMcpjsonServers")
        if remove:
            if isinstance(enabled, list) and SERVER_KEY in enabled:
                enabled[:] = [s for s in enabled if s != SERVER_KEY]
                if not enabled and "enabledMcpjsonServers" not in original:
                    del data["enabledMcpjsonServers"]
        elif enable_server:
            if enabled is None:
                enabled = data["enabledMcpjsonServers"] = []
            if not isinstance(enabled, list):
                raise PlanError("'enabledMcpjsonServers' is not a list")
            if SERVER_KEY not in enabled:
                enabled.append(SERVER_KEY)
        if remove or hook_command is not None:
            _mutate_hook(data, None if remove else hook_command, original)

    return mutate


def _mutate_hook(data: dict[str, Any], command: str | None, original: dict[str, Any]
                 ) -> None:
    hooks = data.get("hooks")
    if hooks is None and command is None:
        return
    if hooks is None:
        hooks = data["hooks"] = {}
    if not isinstance(hooks, dict):
        raise PlanError("'hooks' is not an object")
    groups = hooks.get("SessionStart")
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        raise PlanError("'hooks.SessionStart' is not a list")
    present = False
    kept_groups: list[Any] = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            kept_groups.append(group)
            continue
        kept: list[Any] = []
        for hook in inner:
            ours = isinstance(hook, dict) and _is_our_hook(hook.get("command"))
            if ours and command is not None and hook.get("command") == command and not present:
                present = True
                kept.append(hook)
            elif not ours:
                kept.append(hook)
        if kept:
            kept_groups.append({**group, "hooks": kept} if kept != inner else group)
    if command is not None and not present:
        kept_groups.append({"hooks": [{"type": "command", "command": command}]})
    old_hooks = original.get("hooks")
    had = old_hooks if isinstance(old_hooks, dict) else {}
    if kept_groups or "SessionStart" in had:
        hooks["SessionStart"] = kept_groups
    elif "SessionStart" in hooks:
        del hooks["SessionStart"]
    if not hooks and "hooks" not in original:
        del data["hooks"]


# -- Codex TOML ---------------------------------------------------------------------------------
def codex_plan(path: Path, entry: dict[str, Any] | None) -> FilePlan:
    """Plan setting (or, for None, removing) ``[mcp_servers.palace]`` in Codex's TOML.

    ``codex_toml.set_server_table`` edits the text so comments and layout survive; an edit it
    refuses is an error plan and nothing changes.
    """
    try:
        old = read_text(path)
    except OSError as exc:
        return FilePlan(path, None, None, error=f"cannot read {path}: {exc}")
    text = old or ""
    try:
        new = set_server_table(text, SERVER_KEY, entry, where=str(path))
    except TomlEditError as exc:
        return FilePlan(path, old, old, error=str(exc))
    return FilePlan(path, old, old if new == text else new)


