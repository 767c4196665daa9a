"""A hermetic world for the ``palace init`` tests: a temp HOME, a git project, a PATH of stubs.

Nothing depends on what is installed on the machine: ``PATH`` holds only the stub
executables a test creates, the venv whose ``palace`` script ``init`` registers is a fake one
under the temp dir, and the process environment (read by the typer command) is patched to
match.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from palace_client.agents.setup import Change, InitOptions, init_agents

PALACE_VARS = ("PALACE", "PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "PALACE_EMBED_MODEL",
               "PALACE_EMBED_MODEL_PATH", "PALACE_TIKTOKEN_FILE")


def dump(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


# palace's own records under the fake HOME (the project map, init's record and backups):
# not files of the user's that init edits.
OWN_STATE = ("home/.local/state/palace/", "home/.local/share/palace/")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not str(p.relative_to(root)).startswith(OWN_STATE)}


def write_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


class FakeRunner:
    """Records the commands ``init`` runs (``claude mcp ...``) instead of running them."""

    def __init__(self, returncode: int = 0) -> None:
        self.calls: list[tuple[list[str], Path | None]] = []
        self.returncode = returncode

    @property
    def argvs(self) -> list[list[str]]:
        return [argv for argv, _ in self.calls]

    def __call__(self, argv: Sequence[str], cwd: Path | None) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), cwd))
        return subprocess.CompletedProcess(list(argv), self.returncode, "", "boom")


@dataclass
class World:
    root: Path
    home: Path
    project: Path
    bin: Path
    python: Path
    environ: dict[str, str] = field(default_factory=dict)

    @property
    def exe(self) -> str:
        """The absolute ``palace`` of the fake venv: what local and user scope register."""
        return str(self.python.parent / "palace")

    def stub(self, name: str) -> str:
        """Put an executable ``name`` on the fake PATH; returns its path."""
        return str(write_exe(self.bin / name))

    def run(self, **kw: Any) -> list[Change]:
        opts: dict[str, Any] = {"project_dir": self.project, "environ": self.environ,
                                "python": str(self.python)}
        opts.update(kw)
        return init_agents(InitOptions(**opts))

    def user_entry(self, palace: str | None = None) -> dict[str, Any]:
        args = ["mcp"] + (["--palace", palace] if palace else [])
        return {"command": self.exe, "args": args}


PROJECT_ENTRY = {"command": "palace", "args": ["mcp", "--palace", "my-project"]}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "My Project"
    (project / ".git").mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # palace installed for the user (outside a venv): what project files can run from PATH.
    write_exe(bindir / "palace")
    python = tmp_path / "venv" / "bin" / "python"
    write_exe(python.parent / "palace")
    environ = {"HOME": str(home), "PATH": str(bindir)}
    for key in (*PALACE_VARS, "XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_PROJECT_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(sys, "executable", str(python))
    return World(tmp_path, home, project, bindir, python, environ)
