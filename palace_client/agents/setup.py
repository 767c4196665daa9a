"""``palace init``: register the palace MCP bridge with the coding agents on this machine.

Each agent keeps its MCP servers in its own config file (JSON for most, TOML for Codex). Edits
are minimal and reversible: only palace's own entry is added, changed or removed, every other
key is kept, the first modification of a file leaves ``<file>.palace-bak``, writes are atomic
(temp file in the same directory + ``os.replace``), and a run that would change nothing writes
nothing. Claude Code's user scope goes through ``claude mcp add`` when the CLI is installed,
because Claude Code rewrites ``~/.claude.json`` itself.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palace_client.slug import palace_name_for

from .plans import (
    SERVER_KEY,
    CommandPlan,
    FilePlan,
    Plan,
    PlanError,
    claude_settings,
    codex_plan,
    json_plan,
    load_json,
    read_text,
    set_entry,
)
from .safe_write import BACKUP_SUFFIX as BACKUP_SUFFIX
from .safe_write import atomic_write as atomic_write
from .safe_write import backup_once
from .safe_write import backup_path as backup_path

AGENTS: tuple[str, ...] = ("claude", "cursor", "vscode", "codex", "gemini", "windsurf")
SCOPES: tuple[str, ...] = ("project", "user")
_ALIASES = {
    "claude-code": "claude", "claude_code": "claude", "code": "vscode", "vs-code": "vscode",
    "codex-cli": "codex", "gemini-cli": "gemini",
}
_LABELS = {
    "claude": "Claude Code", "cursor": "Cursor", "vscode": "VS Code", "codex": "Codex CLI",
    "gemini": "Gemini CLI", "windsurf": "Windsurf",
}
_BINARIES = {
    "claude": ("claude",), "cursor": ("cursor",), "vscode": ("code",), "codex": ("codex",),
    "gemini": ("gemini",), "windsurf": ("windsurf",),
}

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)


@dataclass(frozen=True)
class ServerCommand:
    """How an agent starts the bridge: an executable and its arguments."""

    command: str
    args: tuple[str, ...]

    def as_entry(self) -> dict[str, Any]:
        return {"command": self.command, "args": list(self.args)}


def palace_executable(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The argv prefix that runs the ``palace`` CLI: its absolute path, else ``python -m``."""
    sibling = Path(sys.executable).parent / "palace"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [os.path.abspath(sibling)]
    found = which("palace")
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-m", "palace_client"]


def bridge_command(palace: str | None = None,
                   which: Callable[[str], str | None] = shutil.which) -> ServerCommand:
    """The command that starts ``palace mcp`` (pinned to ``palace`` when given)."""
    exe, *prefix = palace_executable(which)
    args = [*prefix, "mcp"]
    if palace:
        args += ["--palace", palace]
    return ServerCommand(exe, tuple(args))


@dataclass(frozen=True)
class InitOptions:
    """What ``palace init`` should do.

    Args:
        project_dir: the project whose files the project scope edits.
        scope: "project" or "user".
        agents: agents to configure; empty means every detected agent.
        palace: pin this palace in the registration; the hook uses it or the project's name.
        hooks: also add the Claude Code SessionStart hook.
        uninstall: remove palace's entries instead of adding them.
        dry_run: plan and diff only.
        home: the user's home (default ``Path.home()``).
        which: PATH lookup (tests inject a fake).
        run: runs external commands such as ``claude mcp add``.
        command: the bridge command (default ``bridge_command(palace)``).
    """

    project_dir: Path
    scope: str = "project"
    agents: tuple[str, ...] = ()
    palace: str | None = None
    hooks: bool = False
    uninstall: bool = False
    dry_run: bool = False
    home: Path | None = None
    which: Callable[[str], str | None] = shutil.which
    run: Runner = _run
    command: ServerCommand | None = None


@dataclass
class Change:
    """One file edit or command of ``palace init`` and its outcome.

    ``action`` is one of created, updated, deleted, unchanged, error; with ``--dry-run`` it
    says what would happen.
    """

    agent: str
    target: str
    action: str
    diff: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"agent": self.agent, "target": self.target, "action": self.action,
                "diff": self.diff, "detail": self.detail}


# -- applying -----------------------------------------------------------------------------------
def _diff(path: Path, old: str | None, new: str | None) -> str:
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    for lines in (a, b):
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    return "".join(difflib.unified_diff(
        a, b, fromfile=str(path) if old is not None else "/dev/null",
        tofile=str(path) if new is not None else "/dev/null"))


def _apply_file(agent: str, plan: FilePlan, dry_run: bool) -> Change:
    target = str(plan.path)
    if plan.error:
        return Change(agent, target, "error", detail=plan.error)
    if plan.new == plan.old:
        return Change(agent, target, "unchanged")
    action = "created" if plan.old is None else "deleted" if plan.new is None else "updated"
    diff = _diff(plan.path, plan.old, plan.new)
    if not dry_run:
        try:
            if plan.new is None:
                plan.path.unlink()
            else:
                backup_once(plan.path)
                atomic_write(plan.path, plan.new)
        except OSError as exc:
            return Change(agent, target, "error", diff, f"cannot write {target}: {exc}")
    return Change(agent, target, action, diff)


def _apply_command(agent: str, plan: CommandPlan, options: InitOptions) -> Change:
    shown = "\n".join(shlex.join(argv) for argv in plan.argvs)
    if options.dry_run:
        return Change(agent, shown, plan.action, detail="would run: " + shown)
    for argv in plan.argvs:
        try:
            proc = options.run(argv)
        except (OSError, subprocess.SubprocessError) as exc:
            return Change(agent, shown, "error", detail=f"{shlex.join(argv)}: {exc}")
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout or "").strip()
            return Change(agent, shown, "error",
                          detail=f"{shlex.join(argv)} exited {proc.returncode}: {output}")
    return Change(agent, shown, plan.action, detail="ran: " + shown)


# -- per-agent planning -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Ctx:
    home: Path
    project: Path
    scope: str
    entry: dict[str, Any] | None  # None when uninstalling
    hook_command: str | None
    uninstall: bool
    which: Callable[[str], str | None]


def _vscode_user_dir(home: Path) -> Path:
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Code" / "User"
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else home / ".config") / "Code" / "User"


def _codex_home(home: Path) -> Path:
    env = os.environ.get("CODEX_HOME")
    return Path(env).expanduser() if env else home / ".codex"


def _markers(agent: str, home: Path, project: Path) -> list[Path]:
    return {
        "claude": [home / ".claude", home / ".claude.json", project / ".claude"],
        "cursor": [home / ".cursor", project / ".cursor"],
        "vscode": [home / ".vscode", _vscode_user_dir(home).parent, project / ".vscode"],
        "codex": [_codex_home(home)],
        "gemini": [home / ".gemini", project / ".gemini"],
        "windsurf": [home / ".codeium" / "windsurf"],
    }[agent]


def detect_agents(home: Path, project_dir: Path,
                  which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The agents that look installed: their config directory exists or a binary is on PATH."""
    return [agent for agent in AGENTS
            if any(p.exists() for p in _markers(agent, home, project_dir))
            or any(which(b) for b in _BINARIES[agent])]


def _plan_claude(ctx: _Ctx) -> list[Plan]:
    plans: list[Plan] = []
    if ctx.scope == "project":
        plans.append(json_plan(ctx.project / ".mcp.json", set_entry("mcpServers", ctx.entry)))
        settings = ctx.project / ".claude" / "settings.local.json"
        plans.append(json_plan(settings, claude_settings(True, ctx.hook_command, ctx.uninstall)))
        return plans
    claude = ctx.which("claude")
    state_file = ctx.home / ".claude.json"
    if claude:
        plans.extend(_claude_cli_plan(claude, state_file, ctx.entry))
    else:
        plans.append(json_plan(state_file, set_entry("mcpServers", ctx.entry)))
    if ctx.hook_command is not None or ctx.uninstall:
        settings = ctx.home / ".claude" / "settings.json"
        plans.append(json_plan(settings, claude_settings(False, ctx.hook_command, ctx.uninstall)))
    return plans


def _claude_cli_plan(claude: str, state_file: Path, entry: dict[str, Any] | None
                     ) -> list[Plan]:
    try:
        state = load_json(read_text(state_file))
    except (OSError, PlanError):
        state = {}
    servers = state.get("mcpServers")
    current = servers.get(SERVER_KEY) if isinstance(servers, dict) else None
    remove = [claude, "mcp", "remove", "--scope", "user", SERVER_KEY]
    if entry is None:
        if current is None:
            return [FilePlan(state_file, None, None)]
        return [CommandPlan([remove], "deleted")]
    if isinstance(current, dict) and all(current.get(k) == v for k, v in entry.items()):
        return [FilePlan(state_file, None, None)]
    add = [claude, "mcp", "add", "--scope", "user", SERVER_KEY, "--",
           entry["command"], *entry["args"]]
    if current is None:
        return [CommandPlan([add], "created")]
    return [CommandPlan([remove, add], "updated")]


def _plan_json_agent(container: str, project_file: Path | None, user_file: Path,
                     stdio_type: bool = False) -> Callable[[_Ctx], list[Plan]]:
    def plan(ctx: _Ctx) -> list[Plan]:
        entry = ctx.entry
        if entry is not None and stdio_type:
            entry = {"type": "stdio", **entry}
        path = project_file if ctx.scope == "project" and project_file is not None else user_file
        return [json_plan(path, set_entry(container, entry))]

    return plan


def _planners(ctx: _Ctx) -> dict[str, Callable[[_Ctx], list[Plan]]]:
    home, project = ctx.home, ctx.project
    return {
        "claude": _plan_claude,
        "cursor": _plan_json_agent("mcpServers", project / ".cursor" / "mcp.json",
                                   home / ".cursor" / "mcp.json"),
        "vscode": _plan_json_agent("servers", project / ".vscode" / "mcp.json",
                                   _vscode_user_dir(home) / "mcp.json", stdio_type=True),
        "codex": lambda c: [codex_plan(_codex_home(home) / "config.toml", c.entry)],
        "gemini": _plan_json_agent("mcpServers", project / ".gemini" / "settings.json",
                                   home / ".gemini" / "settings.json"),
        "windsurf": _plan_json_agent("mcpServers", None,
                                     home / ".codeium" / "windsurf" / "mcp_config.json"),
    }


def normalize_agent(name: str) -> str:
    """Canonical agent key of ``name`` (accepts a few aliases such as ``claude-code``).

    Raises:
        ValueError: an unknown agent.
    """
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose from {', '.join(AGENTS)}")
    return key


def hook_command(palace: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """The SessionStart hook command: ``palace wake-up --palace <name>``."""
    return shlex.join([*palace_executable(which), "wake-up", "--palace", palace])


def init_agents(options: InitOptions) -> list[Change]:
    """Register (or with ``uninstall`` remove) the bridge for the chosen agents.

    Returns one ``Change`` per file or command, in agent order; nothing is written when
    ``dry_run`` is set or a file would not change. Unsafe edits (unparsable files, odd shapes)
    are reported as ``error`` changes and leave the file alone.

    Raises:
        ValueError: an unknown scope or agent name.
    """
    if options.scope not in SCOPES:
        raise ValueError(f"unknown scope {options.scope!r}; choose project or user")
    home = options.home or Path.home()
    project = options.project_dir.absolute()
    agents = ([normalize_agent(a) for a in options.agents] if options.agents
              else detect_agents(home, project, options.which))
    command = options.command or bridge_command(options.palace, options.which)
    hook = None
    if options.hooks and not options.uninstall:
        hook = hook_command(options.palace or palace_name_for(project, home), options.which)
    ctx = _Ctx(home=home, project=project, scope=options.scope,
               entry=None if options.uninstall else command.as_entry(),
               hook_command=hook, uninstall=options.uninstall, which=options.which)
    planners = _planners(ctx)
    changes: list[Change] = []
    for agent in dict.fromkeys(agents):
        for plan in planners[agent](ctx):
            if isinstance(plan, CommandPlan):
                changes.append(_apply_command(agent, plan, options))
            else:
                changes.append(_apply_file(agent, plan, options.dry_run))
    return changes


def format_changes(changes: Sequence[Change], *, dry_run: bool = False) -> str:
    """Human-readable report of ``init_agents``: one line per change, diffs when dry-running."""
    if not changes:
        return ("No supported agent detected (Claude Code, Cursor, VS Code, Codex CLI, Gemini "
                "CLI, Windsurf); pass --agent NAME to configure one anyway.")
    lines: list[str] = []
    for change in changes:
        action = change.action
        if dry_run and action not in ("unchanged", "error"):
            action = "would be " + action
        lines.append(f"{_LABELS[change.agent]:<12} {action:<18} {change.target}")
        if change.action == "error" and change.detail:
            lines.append("  " + change.detail.replace("\n", "\n  "))
        if dry_run and change.diff:
            lines.append(change.diff.rstrip("\n"))
    if not dry_run and any(c.action in ("created", "updated", "deleted") for c in changes):
        lines.append("Restart the agents (or reload their MCP servers) to apply the change.")
    return "\n".join(lines)
