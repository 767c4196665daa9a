"""What ``palace init`` registers: the bridge command per scope, its ``env``, the hook command.

* Project scope (files committed with the project: ``.mcp.json``, ``.vscode/mcp.json``,
  ``.cursor/mcp.json``, ``.gemini/settings.json``, ``.codex/config.toml``) runs ``palace``
  from ``PATH`` and pins ``--palace <project>``: an absolute path would be one machine's venv
  in a file everybody shares.
* Local and user scope (files of this machine only) run the absolute path of the ``palace``
  that runs ``init`` (or ``python -m palace_client``): palace is often installed in a venv that
  is not on the ``PATH`` of a GUI-launched editor. User scope never pins a palace (the bridge
  derives it per session); local scope belongs to one project and pins it.
* ``env`` carries the ``PALACE_*`` variables set now, path ones made absolute: clients strip
  the environment of the servers they spawn, and a bridge without them would talk to (or
  start) a daemon on another data dir.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaced.wire.errors import InvalidArgs
from palaced.wire.specs import ALL_TOOLSETS, parse_toolsets

# The variables palace reads (palaced.wire.paths, palaced.config.settings, palaced.config.model);
# the path ones are made absolute, since clients start the bridge from any directory.
PATH_VARS = ("PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "PALACE_EMBED_MODEL_PATH",
             "PALACE_TIKTOKEN_FILE")
VALUE_VARS = ("PALACE_EMBED_MODEL",)
ENV_VARS = PATH_VARS + VALUE_VARS

Which = Callable[[str], str | None]


@dataclass(frozen=True)
class ServerCommand:
    """How an agent starts the bridge: an executable, its arguments, its environment."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def as_entry(self) -> dict[str, Any]:
        """The JSON/TOML server entry: ``command``, ``args`` and (when set) ``env``."""
        entry: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env:
            entry["env"] = dict(self.env)
        return entry


def palace_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``PALACE_*`` settings of ``environ`` that differ from the defaults (are set).

    Path variables are made absolute (``~`` expanded) as the daemon itself does.
    """
    env: dict[str, str] = {}
    for key in ENV_VARS:
        value = environ.get(key)
        if value:
            if key in PATH_VARS:
                value = os.path.abspath(os.path.expanduser(value))
            env[key] = value
    return env


def palace_executable(which: Which, python: str) -> list[str]:
    """The argv prefix that runs this ``palace``: the script beside ``python`` (the venv's),
    else the one on ``PATH``, else ``python -m palace_client``; always absolute."""
    sibling = Path(python).parent / "palace"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [os.path.abspath(sibling)]
    found = which("palace")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(python), "-m", "palace_client"]


def path_palace_problem(which: Which) -> str | None:
    """Why a bare ``palace`` (what project files run) may not start for an agent; ``None``
    when ``palace`` on ``PATH`` is one every agent finds.

    A virtualenv's ``bin`` is on ``PATH`` only in the shell that activated it; an agent
    started from a desktop or another terminal does not have it. A user install (``uv tool``,
    ``pipx``, ``~/.local/bin``) links the script from a directory outside any venv.
    """
    found = which("palace")
    if not found:
        return "`palace` is not on PATH now"
    bindir = Path(found).parent
    if (bindir.parent / "pyvenv.cfg").is_file():
        return f"the `palace` on PATH now comes from the virtualenv {bindir.parent}"
    return None


def bridge_command(exe: Sequence[str], palace: str | None, env: Mapping[str, str],
                   tools: str | None = None) -> ServerCommand:
    """The command ``exe mcp [--palace NAME] [--tools SETS]`` with ``env``."""
    args = [*exe[1:], "mcp"]
    if palace:
        args += ["--palace", palace]
    if tools:
        args += ["--tools", tools]
    return ServerCommand(exe[0], tuple(args), dict(env))


def tools_arg(value: str | None) -> str | None:
    """The ``--tools`` value ``palace init --tools`` writes: the toolsets ``value`` names,
    normalised (``all`` kept as such); None when no ``--tools`` was given.

    Raises:
        ValueError: an unknown toolset (the message lists them).
    """
    if value is None:
        return None
    try:
        toolsets = parse_toolsets(value)
    except InvalidArgs as exc:
        raise ValueError(f"--tools: {exc.message}") from None
    named = {n.strip().lower() for n in value.split(",")}
    return ALL_TOOLSETS if ALL_TOOLSETS in named else ",".join(toolsets)


# The Claude Code hooks palace installs: event -> the palace subcommand it runs. SessionStart
# opens the session with the palace's identity and essentials; the others have the daemon
# capture the session's transcript: before a compaction drops detail, after every turn, and
# when the session ends. UserPromptSubmit adds the memories relevant to each prompt.
WAKE_UP = ("wake-up",)
CAPTURE = ("hook", "capture")
PROMPT = ("hook", "prompt")
HOOK_EVENTS: dict[str, tuple[str, ...]] = {
    "SessionStart": WAKE_UP, "UserPromptSubmit": PROMPT, "PreCompact": CAPTURE,
    "Stop": CAPTURE, "SessionEnd": CAPTURE,
}




def _verbs(agent: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The session-start, prompt and capture commands of ``agent``'s hooks."""
    flag = ("--agent", agent)
    return ("hook", "wake-up", *flag), (*PROMPT, *flag), (*CAPTURE, *flag)


def _agent_events() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every agent's hooks: event -> palace subcommand (``palace_client.hooks.agents`` has the
    input and output shapes; docs/agents.md why each event). Codex CLI (0.171): Claude
    Code's events, which it has; Gemini CLI (0.61): BeforeAgent is its prompt event, AfterAgent its
    end of turn, PreCompress its compaction; Cursor: only sessionStart takes context (its
    beforeSubmitPrompt cannot, and palace cannot read its transcripts); Copilot CLI (1.0.102):
    camelCase events, agentStop its end of turn; sessionEnd too, since 1.0.102 may run agentStop
    before the turn is in its transcript (the sessionEnd input names only the session)."""
    events: dict[str, dict[str, tuple[str, ...]]] = {"claude": HOOK_EVENTS}
    wake, prompt, capture = _verbs("codex")
    events["codex"] = {"SessionStart": wake, "UserPromptSubmit": prompt,
                       "PreCompact": capture, "Stop": capture, "SessionEnd": capture}
    wake, prompt, capture = _verbs("gemini")
    events["gemini"] = {"SessionStart": wake, "BeforeAgent": prompt, "PreCompress": capture,
                        "AfterAgent": capture, "SessionEnd": capture}
    events["cursor"] = {"sessionStart": _verbs("cursor")[0]}
    wake, prompt, capture = _verbs("copilot")
    events["copilot"] = {"sessionStart": wake, "userPromptSubmitted": prompt,
                         "preCompact": capture, "agentStop": capture, "sessionEnd": capture}
    return events


AGENT_HOOK_EVENTS = _agent_events()


def hook_line(exe: Sequence[str], palace: str | None, env: Mapping[str, str],
              verb: Sequence[str] = WAKE_UP) -> str:
    """A hook's shell command: ``[VAR=value ...] exe <verb> [--palace NAME]`` (``verb``:
    ``wake-up``, ``hook capture`` or ``hook prompt``).

    Without ``palace`` the hook does not pin one: the command derives it per session.
    Claude Code runs hook commands through the shell, so the assignments set the environment.
    """
    words = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    argv = [*exe, *verb] + (["--palace", palace] if palace else [])
    return " ".join([*words, shlex.join(argv)])


def hook_lines(exe: Sequence[str], palace: str | None, env: Mapping[str, str],
               agent: str = "claude") -> dict[str, str]:
    """The command of every hook palace installs for ``agent``, by event
    (``AGENT_HOOK_EVENTS``; Claude Code's: ``HOOK_EVENTS``)."""
    return {event: hook_line(exe, palace, env, verb)
            for event, verb in AGENT_HOOK_EVENTS[agent].items()}


def is_our_hook(command: object) -> bool:
    """True if ``command`` is a hook ``palace init`` wrote (``... palace wake-up ...``,
    ``... palace hook wake-up ...``, ``... palace hook capture ...`` or ``... palace hook
    prompt ...``)."""
    if not isinstance(command, str) or not any(
            verb in command for verb in ("wake-up", "capture", "prompt")):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        words = words[1:]
    if not words:
        return False
    ours = "palace_client" in words or Path(words[0]).name == "palace"
    verb = "wake-up" in words or any(
        words[i:i + 2] in (list(CAPTURE), list(PROMPT)) for i in range(len(words) - 1))
    return ours and verb


def merge_entry(current: object, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` over the ``current`` server entry: the user's extra keys (``timeout``, their
    own ``env`` variables) are kept, palace's keys and ``PALACE_*`` variables replaced."""
    merged = dict(current) if isinstance(current, dict) else {}
    old_env = merged.pop("env", None)
    merged.update({k: v for k, v in entry.items() if k != "env"})
    new_env: dict[str, Any] = dict(entry.get("env") or {})
    if isinstance(old_env, dict):
        env = {k: v for k, v in old_env.items() if not k.startswith("PALACE_")} | new_env
        if env or not old_env:  # an env of PALACE_* variables only was palace's
            merged["env"] = env
    elif new_env or old_env is not None:
        merged["env"] = new_env or old_env
    return merged
