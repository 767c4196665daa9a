"""A scratch world for the ``palace service`` and ``palace uninstall`` tests: a palace home, a
user home, and a ``PATH`` holding only fake service managers (``systemctl``, ``launchctl``)
that record their arguments."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import base_env

PALACED = Path(sys.executable).parent / "palaced"
WORKING = "exit 0"
NO_BUS = 'echo "Failed to connect to bus: No medium found" >&2; exit 1'


@dataclass
class World:
    """A palace home, a user home, and a PATH holding only fake service managers."""

    palace_home: Path
    home: Path
    bin: Path
    record: Path

    @property
    def unit_dir(self) -> Path:
        return self.home / ".config" / "systemd" / "user"

    def env(self) -> dict[str, str]:
        env = base_env(self.palace_home, model=False)
        for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
            env.pop(key, None)
        env.update(HOME=str(self.home), PATH=str(self.bin))
        return env

    def fake(self, name: str, probe: str = WORKING) -> None:
        """Put a ``name`` on PATH that records its arguments; ``probe`` is what it does for
        the availability probe (show-environment / print gui/UID)."""
        script = self.bin / name
        script.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' \"$*\" >> '{self.record}'\n"
            'case "$*" in\n'
            f"  *show-environment*|'print gui/'[0-9]*) {probe} ;;\n"
            "  *is-enabled*) echo enabled ;;\n"
            "  *is-active*) echo active ;;\n"
            "esac\n"
            "exit 0\n")
        script.chmod(0o755)

    def calls(self) -> list[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []

    def palace(self, *args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
        """Run the ``palace`` CLI in this world (``env`` overrides variables)."""
        return subprocess.run([sys.executable, "-m", "palace_client", *args],
                              env={**self.env(), **(env or {})},
                              capture_output=True, text=True, timeout=120, cwd=self.home)


@pytest.fixture(name="world")
def world_fixture(home: Path) -> Iterator[World]:
    user = home / "user"
    (user / "bin").mkdir(parents=True)
    palace_home = home / "ph"
    palace_home.mkdir()
    yield World(palace_home=palace_home, home=user, bin=user / "bin", record=home / "calls.txt")
