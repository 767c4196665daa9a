"""Planning the edit of one agent config file: JSON(C) objects, Claude Code settings, Codex TOML.

A plan holds a file's text before and after the edit; nothing is written here (``setup``
applies plans). Edits touch only palace's own entries: JSON files are edited as text
(``jsonc``), so comments, CRLF and indentation survive, and Codex's TOML line by line
(``codex_toml``).

What palace created is told apart from what the user had by the backup: a file is backed up
(once) only while it holds nothing of palace's, so the backup is always the user's original.
A file with palace's entries and no backup was created by palace. Uninstalling removes
palace's entries and every container (key, file) that the original did not have and that is
now empty.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palace_client.agents.codex_toml import TomlEditError, has_server, set_server_table
from palace_client.agents.entries import HOOK_EVENTS, is_our_hook, merge_entry
from palace_client.agents.jsonc import STRICT, Dialect, JsonEditError, dumps, parse, rewrite
from palace_client.agents.safe_write import backup_path

SERVER_KEY = "palace"


@dataclass
class FilePlan:
    """The edit of one file: ``new`` None deletes it; ``old == new`` changes nothing.

    ``backup``: ``old`` is the user's pre-palace file, to be backed up (once) before writing.
    ``drop_backup``: the file is back to its backup byte for byte, which can go.
    ``note``: what the user must do for the change to take effect, shown when it is made.
    """

    path: Path
    old: str | None
    new: str | None
    error: str = ""
    backup: bool = False
    drop_backup: bool = False
    note: str = ""


@dataclass
class CommandPlan:
    """External commands to run (``claude mcp ...``) from ``cwd``, and the resulting action."""

    argvs: list[list[str]]
    action: str
    cwd: Path | None = None


Plan = FilePlan | CommandPlan


class PlanError(Exception):
    """A config file cannot be edited safely."""


def read_text(path: Path) -> str | None:
    """``path``'s text with its line ends as they are, or None when it does not exist.

    Raises:
        OSError: it exists but cannot be read; UnicodeDecodeError (a ValueError): not UTF-8.
    """
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def load_json(text: str | None, dialect: Dialect = STRICT) -> dict[str, Any]:
    """The object in ``text`` (``{}`` for no or blank text).

    Raises:
        PlanError: a syntax error (with line and column) or a value that is not an object.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = parse(text, dialect).value
    except JsonEditError as exc:
        raise PlanError(f"not valid {dialect.name}: {exc}; nothing was changed") from None
    if not isinstance(value, dict):
        raise PlanError("does not hold a JSON object")
    return value


# An edit of a JSON document: (data, original, remove) -> None, mutating ``data``.
JsonEdit = Callable[[dict[str, Any], dict[str, Any], bool], None]


def json_plan(path: Path, edit: JsonEdit, uninstall: bool, dialect: Dialect = STRICT
              ) -> FilePlan:
    """Plan ``edit`` (removing palace's entries when ``uninstall``) of the JSON file ``path``.

    ``dialect``: what the client reads (comments, trailing commas), accepted and kept. A
    file that cannot be read, parsed or safely changed yields a plan with ``error``.
    """
    try:
        old = read_text(path)
        bak = read_text(backup_path(path))
    except (OSError, ValueError) as exc:
        return FilePlan(path, None, None, error=f"cannot read {path}: {exc}")
    try:
        data = load_json(old, dialect)
        ours = _holds_ours(data, edit)
        original = {} if ours else data
        stale = False
        if bak is not None:
            try:
                saved = load_json(bak, dialect)
            except PlanError:
                saved = {}
            # A backup holding palace's entries is palace's own (an older palace took it).
            stale = _holds_ours(saved, edit)
            if not stale:
                original = saved
        user_backup = bak is not None and not stale
        new_data = copy.deepcopy(data)
        edit(new_data, original, uninstall)
        if new_data == data:
            return FilePlan(path, old, old)
        new: str | None
        if uninstall and not new_data and not user_backup:
            new = None  # palace created the file
        elif old is None or not old.strip():
            new = dumps(new_data)
        else:
            new = rewrite(old, new_data, dialect)
    except (PlanError, JsonEditError) as exc:
        return FilePlan(path, old, old, error=f"{path}: {exc}")
    return FilePlan(path, old, new, backup=old is not None and not ours,
                    drop_backup=bak is not None and (new == bak or (stale and new is None)))


def _holds_ours(data: dict[str, Any], edit: JsonEdit) -> bool:
    stripped = copy.deepcopy(data)
    edit(stripped, {}, True)
    return stripped != data


def _has(data: dict[str, Any], keys: tuple[str, ...]) -> bool:
    node: Any = data
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def set_entry(keys: tuple[str, ...], entry: dict[str, Any]) -> JsonEdit:
    """An edit that puts ``entry`` under the object at ``keys`` (or removes palace's).

    On removal, containers on the way that are now empty and absent from the original go too.
    """
    where = ".".join(keys)

    def edit(data: dict[str, Any], original: dict[str, Any], remove: bool) -> None:
        chain: list[dict[str, Any]] = [data]
        for key in keys:
            child = chain[-1].get(key)
            if child is None and not remove:
                child = chain[-1][key] = {}
            if not isinstance(child, dict):
                if remove:
                    return
                raise PlanError(f"'{where}' is not an object")
            chain.append(child)
        if remove:
            if SERVER_KEY not in chain[-1]:
                return
            del chain[-1][SERVER_KEY]
            for depth in range(len(keys), 0, -1):
                if chain[depth] or _has(original, keys[:depth]):
                    break
                del chain[depth - 1][keys[depth - 1]]
            return
        chain[-1][SERVER_KEY] = merge_entry(chain[-1].get(SERVER_KEY), entry)

    return edit


# -- Claude Code settings (enabledMcpjsonServers, hooks) ---------------------------------------
def claude_settings(enable_server: bool, hooks: Mapping[str, str] | None,
                    events: Iterable[str] = HOOK_EVENTS) -> JsonEdit:
    """An edit of Claude Code's settings: list palace in ``enabledMcpjsonServers`` (project
    scope) and put each of ``hooks`` (event -> command) in a hook of that event (or, removing,
    take palace's hooks out of every event of ``events``, Claude Code's ``HOOK_EVENTS`` by
    default). Codex's ``hooks.json`` and Gemini's ``settings.json`` nest hooks the same way
    (``nested_hooks``)."""

    def edit(data: dict[str, Any], original: dict[str, Any], remove: bool) -> None:
        key = "enabledMcpjsonServers"
        enabled = data.get(key)
        if remove:
            if isinstance(enabled, list) and SERVER_KEY in enabled:
                enabled[:] = [s for s in enabled if s != SERVER_KEY]
                if not enabled and key not in original:
                    del data[key]
        elif enable_server:
            if enabled is None:
                enabled = data[key] = []
            if not isinstance(enabled, list):
                raise PlanError(f"'{key}' is not a list")
            if SERVER_KEY not in enabled:
                enabled.append(SERVER_KEY)
        if remove:
            for event in events:
                _mutate_hook(data, event, None, original)
        elif hooks is not None:
            for event, command in hooks.items():
                _mutate_hook(data, event, command, original)

    return edit


def nested_hooks(hooks: Mapping[str, str] | None, events: Iterable[str]) -> JsonEdit:
    """An edit of a file whose ``hooks`` map events to groups of ``{"type": "command",
    "command": ...}`` hooks, as Claude Code's settings (Codex CLI's ``hooks.json``, Gemini
    CLI's ``settings.json``): ``hooks`` (event -> command) in, or palace's out of ``events``."""
    return claude_settings(False, hooks, events)


def flat_hooks(hooks: Mapping[str, str] | None, events: Iterable[str], key: str,
               extra: Mapping[str, Any]) -> JsonEdit:
    """An edit of a ``{"version": 1, "hooks": {event: [entry, ...]}}`` file whose entries
    hold their command under ``key`` (Cursor's ``hooks.json``: ``command``; Copilot CLI's
    ``.github/hooks/*.json``: ``bash``, with ``extra`` ``{"type": "command"}``): each of
    ``hooks`` (event -> command) palace's one entry of that event, or, removing, palace's
    entries out of every event of ``events``. The user's entries stay; ``version`` is added
    with the first hook and leaves with the last when the original had none.

    Raises (from the edit):
        PlanError: ``hooks`` or one of its events is not what the file format says.
    """

    def edit(data: dict[str, Any], original: dict[str, Any], remove: bool) -> None:
        table = data.get("hooks")
        if (remove and not isinstance(table, dict)) or (not remove and hooks is None):
            return
        if not remove:
            data.setdefault("version", 1)  # what both formats require, first in a new file
        if table is None:
            table = data["hooks"] = {}
        if not isinstance(table, dict):
            raise PlanError("'hooks' is not an object")
        had = original.get("hooks") if isinstance(original.get("hooks"), dict) else {}
        wanted = {} if remove or hooks is None else dict(hooks)
        removed = False
        for event in dict.fromkeys([*events, *wanted]):
            entries = table.get(event)
            if entries is None and event not in wanted:
                continue
            if entries is None:
                entries = []
            if not isinstance(entries, list):
                raise PlanError(f"'hooks.{event}' is not a list")
            command = wanted.get(event)
            if not remove and command is None:
                continue
            ours = [e for e in entries if isinstance(e, dict) and is_our_hook(e.get(key))]
            if command is None and not ours:
                continue  # nothing of palace's to remove: the user's (empty) lists stay
            if command is not None and len(ours) == 1 and ours[0].get(key) == command:
                continue  # installed as it should be: the entry and the user's keys in it stay
            kept = [e for e in entries if not (isinstance(e, dict) and is_our_hook(e.get(key)))]
            removed = removed or bool(ours)
            if command is not None:
                kept.append({**extra, key: command})
            if kept or (isinstance(had, dict) and event in had):
                table[event] = kept
            else:
                table.pop(event, None)
        if remove and removed:  # back to the original: its version, or none
            if not table and "hooks" not in original:
                del data["hooks"]
            if "version" not in original:
                data.pop("version", None)

    return edit


def _mutate_hook(data: dict[str, Any], event: str, command: str | None,
                 original: dict[str, Any]) -> None:
    """Make ``command`` palace's one hook of ``event`` (None: remove palace's hooks there)."""
    hooks = data.get("hooks")
    if hooks is None and command is None:
        return
    if hooks is None:
        hooks = data["hooks"] = {}
    if not isinstance(hooks, dict):
        raise PlanError("'hooks' is not an object")
    groups = hooks.get(event)
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        raise PlanError(f"'hooks.{event}' is not a list")
    if command is None and not any(
            isinstance(g, dict) and isinstance(g.get("hooks"), list)
            and any(isinstance(h, dict) and is_our_hook(h.get("command")) for h in g["hooks"])
            for g in groups):
        return  # nothing of palace's to remove: the user's (empty) containers stay
    present = False
    kept_groups: list[Any] = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            kept_groups.append(group)
            continue
        kept: list[Any] = []
        for hook in inner:
            ours = isinstance(hook, dict) and is_our_hook(hook.get("command"))
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
    if kept_groups or event in had:
        hooks[event] = kept_groups
    elif event in hooks:
        del hooks[event]
    if not hooks and "hooks" not in original:
        del data["hooks"]


# -- Codex TOML ---------------------------------------------------------------------------------
def codex_plan(path: Path, entry: dict[str, Any], uninstall: bool) -> FilePlan:
    """Plan setting (or removing) ``[mcp_servers.palace]`` in Codex's TOML file ``path``.

    ``codex_toml.set_server_table`` edits the text so comments and layout survive; an edit it
    refuses is an error plan and nothing changes.
    """
    try:
        old = read_text(path)
        bak = read_text(backup_path(path))
    except (OSError, ValueError) as exc:
        return FilePlan(path, None, None, error=f"cannot read {path}: {exc}")
    text = old or ""
    try:
        ours = has_server(text, SERVER_KEY, where=str(path))
        new = set_server_table(text, SERVER_KEY, None if uninstall else entry, where=str(path))
    except TomlEditError as exc:
        return FilePlan(path, old, old, error=str(exc))
    if new == text:
        return FilePlan(path, old, old)
    if new is None and bak is not None:
        new = ""  # the user's file was blank: keep it
    return FilePlan(path, old, new, backup=old is not None and not ours,
                    drop_backup=bak is not None and new == bak)
