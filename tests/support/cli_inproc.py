"""The ``palace`` CLI run in the test's own process, against a real daemon.

A CLI subprocess costs ~0.3 s of CPU (interpreter, typer, rich) for what is usually a check of
the text or JSON a command prints. ``run_cli`` runs the same code path as the console script
(``palace_client.cli.failures.run``: the app in non-standalone mode, every failure turned into
its exit code and error document) inside click's ``CliRunner`` isolation: its own stdin,
stdout, stderr and environment, and the real socket to the real daemon. Tests of the entry
point itself (``python -m palace_client``, exit codes as a shell sees them, ``mcp`` and
``hook capture`` dispatch) keep running it as a process (``DaemonProc.cli``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from click.testing import CliRunner

from palace_client.cli import app
from palace_client.cli.failures import run
from tests.conftest import DaemonProc


def run_cli(env: Mapping[str, str], *args: str, input: str | bytes | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Run ``palace ARGS`` in-process with ``env`` as its whole environment (set, and what it
    lacks unset, for the call only) and return what a subprocess run would: the exit code,
    stdout and stderr."""
    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    overrides.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    with CliRunner().isolation(input=input, env=overrides) as (out, err, _):
        code = run(app, "palace", list(args))
    return subprocess.CompletedProcess(["palace", *args], code,
                                       out.getvalue().decode("utf-8", "replace"),
                                       err.getvalue().decode("utf-8", "replace"))


@dataclass
class InProcCliDaemonProc(DaemonProc):
    """A real palaced whose ``cli`` runs the CLI in-process (``run_cli``) instead of as a
    subprocess; ``subprocess_cli`` is the real entry point."""

    @classmethod
    def of(cls, daemon: DaemonProc) -> InProcCliDaemonProc:
        """A view of ``daemon`` (same process, root and environment) with the in-process CLI."""
        return cls(daemon.home, daemon.env, daemon.proc)

    def cli(self, *args: str, input: str | None = None, check: bool = False
            ) -> subprocess.CompletedProcess[str]:
        """Run ``palace ARGS`` in-process against this daemon's root; AssertionError with
        ``check`` when it exits non-zero."""
        res = run_cli(self.env, *args, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"palace {args} failed ({res.returncode}): {res.stderr}")
        return res

    def subprocess_cli(self, *args: str, input: str | None = None, check: bool = False
                       ) -> subprocess.CompletedProcess[str]:
        """Run the real ``palace`` console entry point as a process (``DaemonProc.cli``)."""
        return DaemonProc.cli(self, *args, input=input, check=check)
