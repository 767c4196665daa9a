"""Real coding-agent binaries for the end-to-end tests (``tests/e2e/agents/``): installing them
from npm once, and running one headless session of each against the model stand-in
(``tests/support/model_standin.py``) in a scratch HOME.

The packages are pinned in ``tests/agents/package.json`` and ``package-lock.json``;
``install_agents`` runs ``npm ci`` into ``~/.cache/palace-tests/agents/<hash of the two
files>`` (``$XDG_CACHE_HOME`` moves it) once, under a lock, so parallel workers share one
install and later runs reuse it. Without ``node`` and ``npm`` it raises ``AgentsUnavailable``
with what to install (the fixture turns it into a failure, never a skip).

How each binary is pointed at the stand-in and run headless (checked against the versions
pinned in ``tests/agents/package.json``):

* Claude Code: ``ANTHROPIC_BASE_URL`` + ``ANTHROPIC_API_KEY``, ``claude -p PROMPT
  --allowedTools mcp__palace__remember``; ``ENABLE_TOOL_SEARCH=false`` so that the MCP tools
  are declared to the model at once rather than behind its ToolSearch tool.
* Codex CLI: ``$CODEX_HOME/config.toml`` names a ``model_providers`` entry with the stand-in's
  ``base_url`` and ``wire_api = "responses"``, trusts the project (so that its
  ``.codex/config.toml``, which ``palace init`` writes, is read) and ``codex exec`` approves
  palace's MCP tools (``mcp_servers.palace.default_tools_approval_mode``).
* Gemini CLI: ``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY`` with ``security.auth.
  selectedType = "gemini-api-key"`` in the user settings, ``gemini -m MODEL -p PROMPT
  --allowed-tools mcp_palace_remember`` (a fixed model: the default ``auto`` first asks a
  classifier model for JSON).
* GitHub Copilot CLI: bring-your-own-key mode (``COPILOT_OFFLINE=true``,
  ``COPILOT_PROVIDER_BASE_URL``, ``COPILOT_PROVIDER_TYPE=anthropic``, ``COPILOT_MODEL``): no
  GitHub sign-in; ``copilot -p PROMPT --trust-folder --allow-tool palace``; palace's entries
  are the ones ``palace init --hooks`` writes (``.github/mcp.json``, ``.github/hooks/``), read
  only in a trusted folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "tests" / "agents"
PACKAGE_FILES = ("package.json", "package-lock.json")
NODE_MAJOR = 20  # the highest "engines" minimum of the pinned packages run through node


class AgentsUnavailable(RuntimeError):
    """The agent binaries cannot be installed here (no node/npm, or ``npm ci`` failed)."""


def cache_root() -> Path:
    """Where installs are kept: ``$XDG_CACHE_HOME`` (else ``~/.cache``)/palace-tests/agents."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "palace-tests" / "agents"


def lock_digest() -> str:
    """The hash of the pinned package files: a new pin installs into a new directory."""
    h = hashlib.sha256()
    for name in PACKAGE_FILES:
        h.update((PACKAGE_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def install_agents(root: Path | None = None) -> tuple[Path, float]:
    """The ``node_modules/.bin`` of the pinned agents, installed with ``npm ci`` unless the
    cache already holds them, and the seconds this call spent installing (0.0 when cached).

    Raises AgentsUnavailable without node or npm, with a node older than ``NODE_MAJOR``, or
    when ``npm ci`` fails.
    """
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        raise AgentsUnavailable(
            f"{' and '.join(missing)} not found on PATH: the agent tests run the real Claude "
            "Code, Codex CLI, Gemini CLI and Copilot CLI from npm (tests/agents/package.json); "
            f"install Node.js {NODE_MAJOR}+ with npm")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < NODE_MAJOR:
        raise AgentsUnavailable(
            f"node {version or '(no version)'} is too old: the agent tests need Node.js "
            f"{NODE_MAJOR}+ (Gemini CLI 0.61 requires it; Debian 12's own nodejs is 18: use "
            "Debian 13's or NodeSource's)")
    root = root or cache_root()
    digest = lock_digest()
    target = root / digest
    done = target / ".installed"
    if done.exists():
        return target / "node_modules" / ".bin", 0.0
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(root / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing the same pin
        if done.exists():
            return target / "node_modules" / ".bin", 0.0
        work = root / f"{digest}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name in PACKAGE_FILES:
            shutil.copy2(PACKAGE_DIR / name, work / name)
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
               "npm_config_audit": "false"}
        res = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise AgentsUnavailable(f"npm ci of tests/agents failed ({res.returncode}):\n"
                                    f"{res.stderr[-3000:]}")
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
        elapsed = time.monotonic() - started
        done.write_text(f"{elapsed:.1f}\n")
    return target / "node_modules" / ".bin", elapsed


@dataclass
class World:
    """One scratch machine for an agent: its HOME, a git project, the daemon's environment,
    the stand-in's URL and the installed binaries."""

    home: Path
    project: Path
    env: dict[str, str]
    standin_url: str
    bin_dir: Path

    @property
    def shared_cache(self) -> Path:
        """A cache directory beside the install, shared by every world (Copilot CLI unpacks
        its 235 MB package into ``$XDG_CACHE_HOME`` on first run: once, not per HOME)."""
        return self.bin_dir.parents[1] / "xdg-cache"


@dataclass(frozen=True)
class Agent:
    """How to run one agent binary headless against the stand-in."""

    name: str  # palace init --agent
    binary: str
    # World -> extra environment (after writing the agent's own user config into home).
    prepare: Callable[[World], dict[str, str]]
    argv: Callable[[Path, str], list[str]]  # (binary path, prompt)
    # The MCP clientInfo name the agent sends: palace records it as mcp:<name>/<version>.
    client_name: str


def _claude_prepare(world: World) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": world.standin_url,
            "ANTHROPIC_API_KEY": "standin-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "ENABLE_TOOL_SEARCH": "false"}


def _codex_prepare(world: World) -> dict[str, str]:
    codex_home = world.home / ".codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "standin-model"\n'
        'model_provider = "standin"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "read-only"\n'
        "[model_providers.standin]\n"
        'name = "standin"\n'
        f'base_url = "{world.standin_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "STANDIN_API_KEY"\n'
        f"[projects.{json.dumps(str(world.project))}]\n"
        'trust_level = "trusted"\n')
    return {"CODEX_HOME": str(codex_home), "STANDIN_API_KEY": "standin-key"}


def _copilot_prepare(world: World) -> dict[str, str]:
    # Bring-your-own-key mode against the stand-in, offline: no GitHub sign-in.
    return {"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": world.standin_url,
            "COPILOT_PROVIDER_TYPE": "anthropic", "COPILOT_PROVIDER_API_KEY": "standin-key",
            "COPILOT_MODEL": "claude-sonnet-4", "COPILOT_AUTO_UPDATE": "false",
            "XDG_CACHE_HOME": str(world.shared_cache)}


def _gemini_prepare(world: World) -> dict[str, str]:
    gemini_dir = world.home / ".gemini"
    gemini_dir.mkdir(exist_ok=True)
    (gemini_dir / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"},
                     "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}}, indent=2))
    return {"GEMINI_API_KEY": "standin-key", "GOOGLE_GEMINI_BASE_URL": world.standin_url,
            "GEMINI_CLI_NO_RELAUNCH": "true"}


AGENTS = {
    "claude": Agent("claude", "claude", _claude_prepare,
                    lambda b, p: [str(b), "-p", p, "--allowedTools", "mcp__palace__remember",
                                  "--output-format", "json"],
                    "claude-code"),
    "codex": Agent("codex", "codex", _codex_prepare,
                   lambda b, p: [str(b), "exec", "--dangerously-bypass-hook-trust", "-c",
                                 'mcp_servers.palace.default_tools_approval_mode="approve"', p],
                   "codex-mcp-client"),
    "gemini": Agent("gemini", "gemini", _gemini_prepare,
                    lambda b, p: [str(b), "-m", "gemini-2.5-flash", "--allowed-tools",
                                  "mcp_palace_remember", "-p", p],
                    "gemini-cli-mcp-client"),
    "copilot": Agent("copilot", "copilot", _copilot_prepare,
                     lambda b, p: [str(b), "-p", p, "--trust-folder", "--allow-tool", "palace",
                                   "--no-auto-update"],
                     "copilot-cli"),
}


def make_world(root: Path, daemon_env: dict[str, str], standin_url: str, project: str,
               bin_dir: Path) -> World:
    """A scratch HOME and git project under ``root`` for the daemon of ``daemon_env``; the
    Python running the tests (whose scripts dir holds ``palace``) comes first on PATH, as an
    installed palace would be."""
    home = root / "home"
    home.mkdir()
    proj = root / project
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), daemon_env.get("PATH", "")])
    env = {**daemon_env, "HOME": str(home), "PATH": path}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
                "CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME", "CLAUDE_PROJECT_DIR"):
        env.pop(var, None)
    return World(home, proj, env, standin_url, bin_dir)


def run_agent(agent: Agent, world: World, prompt: str,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One headless session of ``agent`` in ``world``'s project; AssertionError on failure."""
    env = {**world.env, **agent.prepare(world)}
    res = subprocess.run(agent.argv(world.bin_dir / agent.binary, prompt), cwd=world.project,
                         env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode != 0:
        raise AssertionError(f"{agent.name} exited {res.returncode}:\n{res.stdout[-2000:]}\n"
                             f"{res.stderr[-4000:]}")
    return res
