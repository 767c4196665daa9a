"""The agents ``palace init`` knows: how each is detected and which files each scope edits.

| agent    | project scope                      | local scope             | user scope          |
|----------|------------------------------------|-------------------------|---------------------|
| claude   | .mcp.json + .claude/settings.local | ~/.claude.json projects | ~/.claude.json      |
| cursor   | .cursor/mcp.json                   | -                       | ~/.cursor/mcp.json  |
| vscode   | .vscode/mcp.json (JSONC)           | -                       | User/mcp.json       |
| codex    | .codex/config.toml                 | -                       | $CODEX_HOME/config  |
| gemini   | .gemini/settings.json (comments)   | -                       | ~/.gemini/settings  |
| windsurf | (user file, unpinned)              | -                       | mcp_config.json     |
| copilot  | .github/mcp.json                   | -                       | ~/.copilot/mcp-...  |

With ``--hooks`` (``Ctx.agent_hooks``) the agents with hooks also get them: Claude Code in its
settings, Codex CLI in ``hooks.json`` beside its ``config.toml``, Gemini CLI in the same
``settings.json``, Cursor in ``hooks.json`` beside its ``mcp.json``, Copilot CLI in a file of
its own, ``.github/hooks/palace.json`` or ``~/.copilot/hooks/palace.json``.

Project files live at the git root. VS Code reads JSONC (comments and trailing commas), Gemini
CLI strips comments before a strict parse (so no trailing commas), the others read strict JSON:
what a client reads is accepted and kept, nothing more.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palace_client.agents.entries import AGENT_HOOK_EVENTS, Which
from palace_client.agents.jsonc import COMMENTS, JSONC, STRICT, Dialect
from palace_client.agents.plans import (
    SERVER_KEY,
    CommandPlan,
    FilePlan,
    JsonEdit,
    Plan,
    PlanError,
    claude_settings,
    codex_plan,
    flat_hooks,
    json_plan,
    load_json,
    nested_hooks,
    read_text,
    set_entry,
)

AGENTS: tuple[str, ...] = ("claude", "cursor", "vscode", "codex", "gemini", "windsurf",
                           "copilot")
LABELS = {
    "claude": "Claude Code", "cursor": "Cursor", "vscode": "VS Code", "codex": "Codex CLI",
    "gemini": "Gemini CLI", "windsurf": "Windsurf", "copilot": "Copilot CLI",
}
_BINARIES = {
    "claude": ("claude",), "cursor": ("cursor",), "vscode": ("code",), "codex": ("codex",),
    "gemini": ("gemini",), "windsurf": ("windsurf",), "copilot": ("copilot",),
}


@dataclass(frozen=True)
class Skip:
    """An agent that has no config for the chosen scope."""

    target: str
    reason: str


@dataclass(frozen=True)
class Ctx:
    """What the planners need: where things are and what to write.

    ``project_entry`` is the project-scope server entry (``palace`` from PATH, pinned),
    ``local_entry`` the machine's (absolute path; pinned in local scope, not in user scope).
    ``shadow_entry``, in project scope when ``palace`` on PATH is one an agent started
    elsewhere would not find: the absolute, pinned entry Claude Code's local scope gets, which
    it prefers to the shared ``.mcp.json``'s. ``agent_hooks`` (``--hooks``): per agent, event
    -> command of the hooks this scope's files get (``entries.AGENT_HOOK_EVENTS``).
    """

    home: Path
    project: Path
    scope: str
    environ: Mapping[str, str]
    project_entry: dict[str, Any]
    local_entry: dict[str, Any]
    hook_commands: Mapping[str, str] | None  # Claude Code event -> command (``--hooks``)
    uninstall: bool
    which: Which
    shadow_entry: dict[str, Any] | None = None
    agent_hooks: Mapping[str, Mapping[str, str]] | None = None


def vscode_user_dir(home: Path, environ: Mapping[str, str]) -> Path:
    """VS Code's user settings directory (macOS or XDG)."""
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Code" / "User"
    config = environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else home / ".config") / "Code" / "User"


def codex_home(home: Path, environ: Mapping[str, str]) -> Path:
    """Codex CLI's home: ``$CODEX_HOME`` or ``~/.codex``."""
    env = environ.get("CODEX_HOME")
    return Path(env).expanduser() if env else home / ".codex"


def copilot_home(home: Path, environ: Mapping[str, str]) -> Path:
    """Copilot CLI's home: ``$COPILOT_HOME`` or ``~/.copilot``."""
    env = environ.get("COPILOT_HOME")
    return Path(env).expanduser() if env else home / ".copilot"


def _markers(agent: str, home: Path, project: Path, environ: Mapping[str, str]) -> list[Path]:
    return {
        "claude": [home / ".claude", home / ".claude.json", project / ".claude"],
        "cursor": [home / ".cursor", project / ".cursor"],
        "vscode": [home / ".vscode", vscode_user_dir(home, environ).parent, project / ".vscode"],
        "codex": [codex_home(home, environ), project / ".codex"],
        "gemini": [home / ".gemini", project / ".gemini"],
        "windsurf": [home / ".codeium" / "windsurf"],
        # palace's own hooks file marks a project set up for Copilot CLI (so that `palace
        # uninstall` finds it on a machine without Copilot).
        "copilot": [copilot_home(home, environ), project / ".github" / "hooks" / "palace.json"],
    }[agent]


def detect_agents(home: Path, project: Path, which: Which,
                  environ: Mapping[str, str]) -> list[str]:
    """The agents that look installed: a config directory exists or a binary is on PATH."""
    return [agent for agent in AGENTS
            if any(p.exists() for p in _markers(agent, home, project, environ))
            or any(which(b) for b in _BINARIES[agent])]


# -- planners -----------------------------------------------------------------------------------
def _plan_claude(ctx: Ctx) -> list[Plan | Skip]:
    plans: list[Plan | Skip] = []
    state = ctx.home / ".claude.json"
    local_keys = ("projects", str(ctx.project), "mcpServers")
    claude = ctx.which("claude")
    if ctx.scope == "project":
        plans.append(json_plan(ctx.project / ".mcp.json",
                               set_entry(("mcpServers",), ctx.project_entry), ctx.uninstall))
        if ctx.shadow_entry is not None or (ctx.uninstall and _holds_ours(state, local_keys)):
            # This machine's own copy, absolute, in the local scope Claude Code prefers: the
            # shared file's bare `palace` is not on the PATH an agent starts with here.
            entry = ctx.shadow_entry or ctx.local_entry
            plans.append(_claude_cli_plan(claude, state, local_keys, ctx, "local", entry)
                         if claude else
                         json_plan(state, set_entry(local_keys, entry), ctx.uninstall))
    else:
        keys = ("mcpServers",) if ctx.scope == "user" else local_keys
        if claude:
            plans.append(_claude_cli_plan(claude, state, keys, ctx, ctx.scope, ctx.local_entry))
        else:
            plans.append(json_plan(state, set_entry(keys, ctx.local_entry), ctx.uninstall))
    if ctx.scope == "user":
        settings = ctx.home / ".claude" / "settings.json"
        if ctx.hook_commands is not None or ctx.uninstall:
            plans.append(json_plan(settings, claude_settings(False, ctx.hook_commands),
                                   ctx.uninstall))
    else:
        settings = ctx.project / ".claude" / "settings.local.json"
        if ctx.scope == "project" or ctx.hook_commands is not None or ctx.uninstall:
            edit = claude_settings(ctx.scope == "project", ctx.hook_commands)
            plans.append(json_plan(settings, edit, ctx.uninstall))
    return plans


def _current(state_file: Path, keys: tuple[str, ...]) -> Any:
    """Palace's server entry under ``keys`` of Claude Code's state file, if any."""
    try:
        current: Any = load_json(read_text(state_file))
    except (OSError, ValueError, PlanError):
        current = {}
    for key in (*keys, SERVER_KEY):
        current = current.get(key) if isinstance(current, dict) else None
    return current


def _holds_ours(state_file: Path, keys: tuple[str, ...]) -> bool:
    return _current(state_file, keys) is not None


def _claude_cli_plan(claude: str, state_file: Path, keys: tuple[str, ...], ctx: Ctx,
                     scope_name: str, entry: dict[str, Any]) -> Plan:
    """``claude mcp add/remove`` of ``entry`` for the user or local scope (Claude rewrites its
    own state)."""
    current = _current(state_file, keys)
    scope = ["--scope", scope_name]
    cwd = ctx.project if scope_name == "local" else None
    remove = [claude, "mcp", "remove", *scope, SERVER_KEY]
    if ctx.uninstall:
        if current is None:
            return FilePlan(state_file, None, None)
        return CommandPlan([remove], "deleted", cwd)
    want = {**entry, "env": entry.get("env", {})}
    have = current if isinstance(current, dict) else {}
    if all(have.get(k, {} if k == "env" else None) == v for k, v in want.items()):
        return FilePlan(state_file, None, None)
    env = [arg for k, v in want["env"].items() for arg in ("-e", f"{k}={v}")]
    add = [claude, "mcp", "add", *scope, SERVER_KEY, *env, "--", entry["command"],
           *entry["args"]]
    if current is None:
        return CommandPlan([add], "created", cwd)
    return CommandPlan([remove, add], "updated", cwd)


def _plan_json(container: str, project_file: Callable[[Ctx], Path],
               user_file: Callable[[Ctx], Path], stdio_type: bool = False,
               dialect: Dialect = STRICT) -> Callable[[Ctx], list[Plan | Skip]]:
    def plan(ctx: Ctx) -> list[Plan | Skip]:
        if ctx.scope == "local":
            return [Skip(str(project_file(ctx)), "no local scope; use --scope project or user")]
        project = ctx.scope == "project"
        entry = ctx.project_entry if project else ctx.local_entry
        if stdio_type:
            entry = {"type": "stdio", **entry}
        path = project_file(ctx) if project else user_file(ctx)
        return [json_plan(path, set_entry((container,), entry), ctx.uninstall, dialect)]

    return plan


def _hooks_edit(ctx: Ctx, agent: str, make: Callable[[Mapping[str, str] | None, list[str]],
                                                   JsonEdit]) -> JsonEdit | None:
    """``agent``'s hooks edit for this run: installing (``--hooks``) or uninstalling; None
    when neither (the file is not touched for hooks)."""
    hooks = (ctx.agent_hooks or {}).get(agent)
    if hooks is None and not ctx.uninstall:
        return None
    return make(hooks, list(AGENT_HOOK_EVENTS[agent]))


def _hooks_plan(ctx: Ctx, agent: str, path: Path,
                make: Callable[[Mapping[str, str] | None, list[str]], JsonEdit]
                ) -> list[FilePlan]:
    """The plan of a hooks file of its own (nothing when not asked for, or when uninstalling
    and there is no such file)."""
    edit = _hooks_edit(ctx, agent, make)
    if edit is None or (ctx.uninstall and not os.path.lexists(path)):
        return []
    return [json_plan(path, edit, ctx.uninstall)]


def _both(first: JsonEdit, second: JsonEdit | None) -> JsonEdit:
    """Two edits of one file, one after the other."""
    if second is None:
        return first

    def edit(data: dict[str, Any], original: dict[str, Any], remove: bool) -> None:
        first(data, original, remove)
        second(data, original, remove)

    return edit


def _plan_codex(ctx: Ctx) -> list[Plan | Skip]:
    project_file = ctx.project / ".codex" / "config.toml"
    if ctx.scope == "local":
        return [Skip(str(project_file), "no local scope; use --scope project or user")]
    if ctx.scope == "project":
        plans: list[Plan | Skip] = [codex_plan(project_file, ctx.project_entry, ctx.uninstall)]
        folder = ctx.project / ".codex"
    else:
        folder = codex_home(ctx.home, ctx.environ)
        plans = [codex_plan(folder / "config.toml", ctx.local_entry, ctx.uninstall)]
    # Codex 0.171 reads hooks from hooks.json beside each config.toml (or [hooks] in it):
    # the JSON file keeps the user's TOML untouched.
    hooks = _hooks_plan(ctx, "codex", folder / "hooks.json", nested_hooks)
    for plan in hooks:
        if not ctx.uninstall:
            plan.note = CODEX_TRUST_NOTE
    return plans + hooks


# Codex runs a hook only once the user has trusted its exact definition (docs/agents.md).
CODEX_TRUST_NOTE = ("note: Codex CLI runs new or changed hooks only once you trust them: "
                    "open /hooks in Codex and trust palace's (a project's hooks also need a "
                    "trusted project)")


def _plan_gemini(ctx: Ctx) -> list[Plan | Skip]:
    project_file = ctx.project / ".gemini" / "settings.json"
    if ctx.scope == "local":
        return [Skip(str(project_file), "no local scope; use --scope project or user")]
    project = ctx.scope == "project"
    path = project_file if project else ctx.home / ".gemini" / "settings.json"
    entry = ctx.project_entry if project else ctx.local_entry
    # Gemini CLI keeps its hooks in the settings.json that holds its MCP servers.
    edit = _both(set_entry(("mcpServers",), entry), _hooks_edit(ctx, "gemini", nested_hooks))
    return [json_plan(path, edit, ctx.uninstall, COMMENTS)]


def _plan_cursor(ctx: Ctx) -> list[Plan | Skip]:
    project = ctx.scope == "project"
    folder = ctx.project / ".cursor" if project else ctx.home / ".cursor"
    plans = _plan_json("mcpServers", lambda c: c.project / ".cursor" / "mcp.json",
                       lambda c: c.home / ".cursor" / "mcp.json")(ctx)
    if ctx.scope == "local":
        return plans
    return plans + _hooks_plan(ctx, "cursor", folder / "hooks.json",
                               lambda hooks, events: flat_hooks(hooks, events, "command", {}))


def _plan_copilot(ctx: Ctx) -> list[Plan | Skip]:
    project = ctx.scope == "project"
    user = copilot_home(ctx.home, ctx.environ)
    if ctx.scope == "local":
        return [Skip(str(ctx.project / ".github" / "mcp.json"),
                     "no local scope; use --scope project or user")]
    entry = {"type": "local", **(ctx.project_entry if project else ctx.local_entry),
             "tools": ["*"]}
    path = ctx.project / ".github" / "mcp.json" if project else user / "mcp-config.json"
    plans: list[Plan | Skip] = [json_plan(path, set_entry(("mcpServers",), entry),
                                          ctx.uninstall)]
    # Copilot CLI loads every .github/hooks/*.json of the repository and ~/.copilot/hooks/:
    # palace's hooks get a file of their own there.
    hooks_file = (ctx.project / ".github" if project else user) / "hooks" / "palace.json"
    return plans + _hooks_plan(
        ctx, "copilot", hooks_file,
        lambda hooks, events: flat_hooks(hooks, events, "bash", {"type": "command"}))


def _plan_windsurf(ctx: Ctx) -> list[Plan | Skip]:
    path = ctx.home / ".codeium" / "windsurf" / "mcp_config.json"
    if ctx.scope == "local":
        return [Skip(str(path), "no local scope; use --scope user")]
    # Windsurf has no project config: its one file is the user's, so the entry is unpinned.
    return [json_plan(path, set_entry(("mcpServers",), ctx.local_entry), ctx.uninstall)]


PLANNERS: dict[str, Callable[[Ctx], list[Plan | Skip]]] = {
    "claude": _plan_claude,
    "cursor": _plan_cursor,
    "vscode": _plan_json("servers", lambda c: c.project / ".vscode" / "mcp.json",
                         lambda c: vscode_user_dir(c.home, c.environ) / "mcp.json",
                         stdio_type=True, dialect=JSONC),
    "codex": _plan_codex,
    "gemini": _plan_gemini,
    "windsurf": _plan_windsurf,
    "copilot": _plan_copilot,
}
