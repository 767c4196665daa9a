"""A palaced started before an upgrade keeps running older code: clients tell it apart.

The daemon here runs this tree with its op specs cut back to an older shape before anything
imports them (``memory.recall`` without ``exclude``, ``graph.search`` without ``type``): what
a daemon started from an earlier palace accepts. Its hello's ``spec`` digest then differs from the
client's, and

* the CLI's refusal (an argument or op the daemon does not know) says the daemon runs another
  version and how to restart it, instead of a bare INVALID_ARGS / UNKNOWN_OP;
* the prompt hook recalls without ``exclude`` rather than inject nothing until a restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from palaced.wire.specs import SPEC_DIGEST
from tests.conftest import DaemonProc, base_env, short_home

pytestmark = pytest.mark.daemon

# Run as the daemon: cut the specs back, recompute the digest, then start palaced as usual.
OLDER = """
import dataclasses, sys
import palaced.wire.specs as specs
recall = specs.SPECS["memory.recall"]
specs.SPECS["memory.recall"] = dataclasses.replace(
    recall, args={k: v for k, v in recall.args.items() if k != "exclude"})
search = specs.SPECS["graph.search"]
specs.SPECS["graph.search"] = dataclasses.replace(
    search, args={k: v for k, v in search.args.items() if k != "type"})
specs.SPEC_DIGEST = specs._spec_digest()
import palaced.wire.args as args
decode = args.decode_args
def older_decode(op, raw):  # the older handlers read no exclude: ours gets the default
    out = decode(op, raw)
    if op.name == "memory.recall":
        out["exclude"] = []
    return out
args.decode_args = older_decode
sys.argv = ["palaced", "run", "--quiet"]
from palaced.cli import main
main()
"""


@pytest.fixture
def older() -> DaemonProc:
    home = short_home()
    d = DaemonProc(home, base_env(home, model=False))
    d.proc = subprocess.Popen([sys.executable, "-c", OLDER], env=d.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    d.wait_ready(wait_model=False)
    yield d
    d.cli("daemon", "stop")
    d.proc.wait(timeout=30)


def test_the_hello_names_what_the_daemon_accepts(older: DaemonProc) -> None:
    with older.client() as c:
        spec = c.server_info["spec"]
    assert isinstance(spec, str) and spec != SPEC_DIGEST
    res = older.cli("daemon", "status", check=True)
    assert "STALE" in res.stdout and "palace daemon restart" in res.stdout
    assert json.loads(older.cli("daemon", "status", "--json", check=True).stdout)[
        "current"] is False


def test_a_current_daemon_is_not_stale(shared_keyword_daemon: DaemonProc) -> None:
    res = shared_keyword_daemon.cli("daemon", "status", check=True)
    assert "STALE" not in res.stdout
    assert json.loads(shared_keyword_daemon.cli("daemon", "status", "--json",
                                                check=True).stdout)["current"] is True


def test_a_refusal_by_an_older_daemon_says_to_restart_it(older: DaemonProc) -> None:
    older.cli("create", "p", check=True)
    res = older.cli("kg", "search", "gateway", "--type", "service", "--palace", "p")
    assert res.returncode != 0
    assert "INVALID_ARGS" in res.stderr and "palace daemon restart" in res.stderr, res.stderr



def test_the_prompt_hook_recalls_without_exclude_from_an_older_daemon(
        older: DaemonProc, tmp_path: Path) -> None:
    older.cli("create", "p", check=True)
    with older.client() as c:  # more important drawers than the wake-up shows (L1: 15)
        c.remember_many("p", [{"text": f"Standup note {i}: sprint item {i} is on track.",
                               "importance": "high"} for i in range(20)])
    older.cli("remember", "The email queue runs on RabbitMQ 3.13, port 5673.", "--palace", "p",
              "--importance", "low", check=True)
    # The session's wake-up showed the standup notes: the hook sends them as exclude,
    # which this daemon refuses.
    session = uuid.uuid4().hex
    config = tmp_path / "hooks.toml"
    config.write_text("[hooks]\nprompt_timeout_s = 20\n")
    env = {**older.env, "PALACE_CONFIG": str(config)}
    hook_input = json.dumps({"session_id": session, "transcript_path": "/nonexistent.jsonl",
                             "cwd": "/", "hook_event_name": "UserPromptSubmit",
                             "prompt": "which RabbitMQ port does the queue use?"})
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "palace_client", "hook", "prompt", "--palace",
                          "p"], input=hook_input, env=env, capture_output=True, text=True,
                         timeout=60)
    log = older.home / "state" / "palace.log"
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout, log.read_text() if log.exists() else "no log"
    context = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "5673" in context
    assert time.monotonic() - started < 20
    assert not log.exists() or "hook prompt" not in log.read_text()
