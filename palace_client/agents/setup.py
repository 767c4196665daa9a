"""``palace init``: register the palace MCP bridge with the coding agents on this machine.

Each agent keeps its MCP servers in its own config file (JSON or JSONC for most, TOML for
Codex). Edits are minimal and reversible: only palace's own entry is added, changed or removed,
every other byte is kept, the user's original file is kept once as ``<file>.palace-bak``,
writes are atomic (temp file in the same directory + ``os.replace``), and a run that would
change nothing writes nothing. Claude Code's user and local scopes go through ``claude mcp``
when the CLI is installed, because Claude Code rewrites ``~/.claude.json`` itself.

The project is the git root of ``project_dir`` wherever ``init`` is run. What is written
where, and why project files run ``palace`` from ``PATH`` while the others hold an absolute
path, is in ``entries`` and ``targets``.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from palace_client.agents.entries import (
    AGENT_HOOK_EVENTS,
    HOOK_EVENTS,
    bridge_command,
    hook_line,
    hook_lines,
    palace_env,
    palace_executable,
    path_palace_problem,
    tools_arg,
)
from palace_client.agents.plans import CommandPlan, FilePlan
from palace_client.agents.record import record_dirs, remove_created_dirs
from palace_client.agents.safe_write import BACKUP_SUFFIX as BACKUP_SUFFIX
from palace_client.agents.safe_write import atomic_write as atomic_write
from palace_client.agents.safe_write import backup_once, drop_backup
from palace_client.agents.safe_write import backup_path as backup_path
from palace_client.agents.targets import AGENTS, LABELS, PLANNERS, Ctx, Skip, detect_agents
from palace_client.api.projects import project_palace, project_root
from palace_client.api.slug import DEFAULT_PALACE, find_project_root

SCOPES: tuple[str, ...] = ("project", "local", "user")
_ALIASES = {
    "claude-code": "claude", "claude_code": "claude", "code": "vscode", "vs-code": "vscode",
    "codex-cli": "codex", "gemini-cli": "gemini", "copilot-cli": "copilot",
    "github-copilot": "copilot",
}

Runner = Callable[[Sequence[str], "Path | None"], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], cwd: Path | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False,
                          cwd=cwd)


@dataclass(frozen=True)
class InitOptions:
    """What ``palace init`` should do.

    Args:
        project_dir: a directory of the project (its git root is the project).
        scope: "project" (committed files), "local" (this project, this machine: Claude
            Code only) or "user" (every project).
        agents: agents to configure; empty means every detected agent.
        palace: pin this palace everywhere (default: the project's name in project and
            local scope, none in user scope and in hooks).
        hooks: also add each agent's hooks (``entries.AGENT_HOOK_EVENTS``): Claude Code's
            SessionStart runs ``palace wake-up``, UserPromptSubmit ``palace hook prompt``,
            PreCompact, Stop and SessionEnd ``palace hook capture``; the other agents' run
            the same with ``--agent NAME`` (session start: ``palace hook wake-up``).
        uninstall: remove palace's entries instead of adding them.
        dry_run: plan and diff only.
        tools: the MCP toolsets the bridge serves (``palace mcp --tools``), written into
            its entries; None writes no ``--tools`` (the bridge's default applies).
        home: the user's home (default ``$HOME`` of ``environ``, else ``Path.home()``).
        environ: the environment (default ``os.environ``): ``PATH``, ``PALACE_*``,
            ``XDG_CONFIG_HOME``, ``CODEX_HOME``.
        which: PATH lookup (default ``shutil.which`` on ``environ``'s ``PATH``).
        python: the interpreter whose venv's ``palace`` script is preferred (default
            ``sys.executable``).
        run: runs external commands such as ``claude mcp add`` (argv, cwd).
    """

    project_dir: Path
    scope: str = "project"
    agents: tuple[str, ...] = ()
    palace: str | None = None
    hooks: bool = False
    uninstall: bool = False
    dry_run: bool = False
    tools: str | None = None
    home: Path | None = None
    environ: Mapping[str, str] | None = None
    which: Callable[[str], str | None] | None = None
    python: str | None = None
    run: Runner = _run


@dataclass
class Change:
    """One file edit or command of ``palace init`` and its outcome.

    ``action`` is one of created, updated, deleted, unchanged, skipped, error; with
    ``--dry-run`` it says what would happen.
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
                remove_created_dirs(_state_dir(), plan.path.parent)
            else:
                if plan.backup:
                    backup_once(plan.path)
                missing = _missing_dirs(plan.path.parent)
                atomic_write(plan.path, plan.new)
                record_dirs(_state_dir(), missing)
            if plan.drop_backup:
                drop_backup(plan.path)
        except OSError as exc:
            return Change(agent, target, "error", diff, f"cannot write {target}: {exc}")
    return Change(agent, target, action, diff, plan.note)


def _state_dir() -> Path:
    from palaced.wire.paths import resolve

    return resolve().state_dir


def _missing_dirs(directory: Path) -> list[Path]:
    """The directories at and above ``directory`` that do not exist yet (writing a file there
    creates them), nearest first."""
    missing: list[Path] = []
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    return missing


def _apply_command(agent: str, plan: CommandPlan, options: InitOptions) -> Change:
    shown = "\n".join(shlex.join(argv) for argv in plan.argvs)
    where = f" (in {plan.cwd})" if plan.cwd else ""
    if options.dry_run:
        return Change(agent, shown, plan.action, detail=f"would run{where}: {shown}")
    for argv in plan.argvs:
        try:
            proc = options.run(argv, plan.cwd)
        except (OSError, subprocess.SubprocessError) as exc:
            return Change(agent, shown, "error", detail=f"{shlex.join(argv)}: {exc}")
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout or "").strip()
            return Change(agent, shown, "error",
                          detail=f"{shlex.join(argv)} exited {proc.returncode}: {output}")
    return Change(agent, shown, plan.action, detail=f"ran{where}: {shown}")


# -- planning -----------------------------------------------------------------------------------
def normalize_agent(name: str) -> str:
    """Canonical agent key of ``name`` (accepts a few aliases such as ``claude-code``).

    Raises:
        ValueError: an unknown agent.
    """
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose from {', '.join(AGENTS)}")
    return key


def _context(options: InitOptions) -> Ctx:
    environ = os.environ if options.environ is None else options.environ
    home_env = environ.get("HOME")
    home = options.home or (Path(home_env) if home_env else Path.home())
    start = options.project_dir.expanduser().absolute()
    project = find_project_root(start) or start
    if options.scope != "user" and not options.uninstall and options.palace is None and \
            project_root(start, home) is None:
        raise ValueError(_no_project(start, home, options.scope))
    path = environ.get("PATH", os.defpath)
    which = options.which or (lambda name: shutil.which(name, path=path))
    env = palace_env(environ)
    exe = palace_executable(which, options.python or sys.executable)
    # The palace the project uses (by its path, projects.json), as the bridge would choose.
    # Entered in projects.json once a file names it (init_agents), not on a dry run or error.
    named = options.palace or (project_palace(project, home=home, record=False).name
                               if options.scope != "user" else DEFAULT_PALACE)
    tools = tools_arg(options.tools)
    project_cmd = bridge_command(["palace"], named, env, tools)
    local_cmd = bridge_command(exe, named if options.scope == "local" else options.palace, env,
                               tools)
    shadow = None
    if options.scope == "project" and path_palace_problem(which) is not None:
        shadow = bridge_command(exe, named, env, tools).as_entry()
    hooks = agent_hooks = None
    if options.hooks and not options.uninstall:
        hooks = hook_lines(exe, options.palace, env)
        # Files shared with the project (every agent's project scope but Claude Code's,
        # whose hooks go to its local settings) run `palace` from PATH, as their MCP entries.
        shared = ["palace"] if options.scope == "project" else exe
        agent_hooks = {agent: hook_lines(exe if agent == "claude" else shared, options.palace,
                                         env, agent) for agent in AGENT_HOOK_EVENTS}
    return Ctx(home=home, project=project, scope=options.scope, environ=environ,
               project_entry=project_cmd.as_entry(), local_entry=local_cmd.as_entry(),
               hook_commands=hooks, uninstall=options.uninstall, which=which,
               shadow_entry=shadow, agent_hooks=agent_hooks)


def _no_project(start: Path, home: Path, scope: str) -> str:
    """Why ``init`` refuses to write project files where there is no project, and the fix."""
    where = "your home directory" if start == home.absolute() else "the filesystem root"
    written = ".mcp.json" if scope == "project" else "Claude Code's local entry"
    return (f"{start} is {where}, not a project (no git repository): {written} here would "
            f"serve palace '{DEFAULT_PALACE}' to every session started in {start}. Run `palace "
            "init` inside a project (its git root gets the files, and the project its own "
            "palace), or `palace init --scope user` to register palace for every project at "
            f"once (each still gets its own palace), or pass --palace {DEFAULT_PALACE} to "
            "write it here anyway")


def hook_command(palace: str | None = None, environ: Mapping[str, str] | None = None,
                 python: str | None = None, event: str = "SessionStart") -> str:
    """The hook line ``palace init --hooks`` installs for ``event`` from this environment.

    ``palace`` pins one (as ``--palace`` does); without it the hook derives it per session.

    Raises:
        KeyError: ``event`` is not one palace installs a hook for (``HOOK_EVENTS``).
    """
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    exe = palace_executable(lambda name: shutil.which(name, path=path),
                            python or sys.executable)
    return hook_line(exe, palace, palace_env(env), HOOK_EVENTS[event])


def init_agents(options: InitOptions) -> list[Change]:
    """Register (or with ``uninstall`` remove) the bridge for the chosen agents.

    Returns one ``Change`` per file or command, in agent order; nothing is written when
    ``dry_run`` is set or a file would not change. Unsafe edits (unparsable files, odd shapes)
    are reported as ``error`` changes and leave the file alone; an agent without a config for
    the scope is ``skipped``.

    Raises:
        ValueError: an unknown scope or agent name.
    """
    if options.scope not in SCOPES:
        raise ValueError(f"unknown scope {options.scope!r}; choose {', '.join(SCOPES)}")
    agents = [normalize_agent(a) for a in options.agents]
    ctx = _context(options)
    if not agents:
        agents = detect_agents(ctx.home, ctx.project, ctx.which, ctx.environ)
    note = ""
    problem = path_palace_problem(ctx.which)
    if ctx.scope == "project" and not ctx.uninstall and problem is not None:
        exe = ctx.shadow_entry["command"] if ctx.shadow_entry else "palace"
        note = (f"warning: this shared file runs `palace` from PATH, but {problem}: an agent "
                "started from a desktop or another shell will not find it and shows "
                "\"Failed to connect\". Fix: install palace for your user so that it is on "
                "every PATH (`uv tool install PATH-TO-PALACE` or `pipx install "
                f"PATH-TO-PALACE`), or run `palace init --scope user`, which writes {exe}")
    changes: list[Change] = []
    for agent in dict.fromkeys(agents):
        for plan in PLANNERS[agent](ctx):
            if isinstance(plan, Skip):
                changes.append(Change(agent, plan.target, "skipped", detail=plan.reason))
            elif isinstance(plan, CommandPlan):
                changes.append(_apply_command(agent, plan, options))
            else:
                change = _apply_file(agent, plan, options.dry_run)
                if note and change.action in ("created", "updated", "unchanged") and \
                        plan.path.is_relative_to(ctx.project) and \
                        plan.path.name != "settings.local.json":
                    change.detail = "\n".join(filter(None, (note, change.detail)))
                    if agent == "claude" and ctx.shadow_entry is not None:
                        change.detail = (
                            "note: this shared file runs `palace` from PATH; on this machine "
                            "Claude Code runs the local-scope entry instead, "
                            f"{ctx.shadow_entry['command']} (it takes precedence)")
                changes.append(change)
    if options.palace is None and ctx.scope != "user" and not options.dry_run and any(
            c.action in ("created", "updated") for c in changes):
        project_palace(ctx.project, home=ctx.home)
    return changes


def format_changes(changes: Sequence[Change], *, dry_run: bool = False) -> str:
    """Human-readable report of ``init_agents``: one line per change, diffs when dry-running."""
    if not changes:
        return ("No supported agent detected (Claude Code, Cursor, VS Code, Codex CLI, Gemini "
                "CLI, Windsurf, Copilot CLI); pass --agent NAME to configure one anyway.")
    lines: list[str] = []
    for change in changes:
        action = change.action
        if dry_run and action not in ("unchanged", "error", "skipped"):
            action = "would be " + action
        lines.append(f"{LABELS[change.agent]:<12} {action:<18} {change.target}")
        if change.detail and (change.action in ("error", "skipped")
                              or change.detail.startswith(("note:", "warning:"))):
            lines.append("  " + change.detail.replace("\n", "\n  "))
        if dry_run and change.diff:
            lines.append(change.diff.rstrip("\n"))
    if not dry_run and any(c.action in ("created", "updated", "deleted") for c in changes):
        lines.append("Restart the agents (or reload their MCP servers) to apply the change.")
    return "\n".join(lines)
