"""``run_cli`` (``tests/support/cli_inproc.py``) is the console script without the process:
the same exit code, stdout and stderr as ``python -m palace_client``, for output, errors,
usage errors and stdin, against one real daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import DaemonProc, fresh_name
from tests.support.cli_inproc import run_cli

pytestmark = pytest.mark.daemon


@pytest.fixture(scope="module")
def palace(shared_keyword_daemon: DaemonProc) -> str:
    name = fresh_name()
    shared_keyword_daemon.cli("create", name, check=True)
    lines = "".join(json.dumps({"text": f"note {i} about the orchard", "room": "r"}) + "\n"
                    for i in range(3))
    shared_keyword_daemon.cli("remember-many", "-p", name, input=lines, check=True)
    return name


CASES = [
    (["list"], None),
    (["drawers", "-p", "{p}"], None),
    (["drawers", "-p", "{p}", "--json"], None),
    (["recall", "orchard", "-p", "{p}", "-k", "2"], None),
    (["get", "999", "-p", "{p}"], None),
    (["get", "999", "-p", "{p}", "--json"], None),
    (["recall", "x", "-p", "{p}", "--levels", "a,b"], None),
    (["recall", "x", "-p", "{p}", "--bogus", "--json"], None),
    (["remember", "-", "-p", "{p}", "--json"], ""),
    (["--version"], None),
]


@pytest.mark.parametrize(("args", "stdin"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_in_process_cli_prints_what_the_console_script_prints(
        shared_keyword_daemon: DaemonProc, palace: str, args: list[str], stdin: str | None
        ) -> None:
    argv = [a.replace("{p}", palace) for a in args]
    real = subprocess.run([sys.executable, "-m", "palace_client", *argv],
                          env={**shared_keyword_daemon.env, "COLUMNS": "61"}, input=stdin,
                          capture_output=True, text=True, timeout=60)
    env_before = dict(os.environ)
    mine = run_cli({**shared_keyword_daemon.env, "COLUMNS": "61"}, *argv, input=stdin)
    assert (mine.returncode, mine.stdout, mine.stderr) == (
        real.returncode, real.stdout, real.stderr)
    assert dict(os.environ) == env_before  # the test process's environment is left as it was
