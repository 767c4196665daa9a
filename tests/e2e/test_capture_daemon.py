"""Capture against real daemons: the Claude Code hook as Claude Code runs it (a process fed
the hook input on stdin), with the daemon up, down, or killed mid-capture."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import PalaceError
from tests.conftest import DaemonProc, base_env
from tests.support.transcripts import Session, hook_input


def run_hook(env: dict[str, str], stdin: str, *args: str
             ) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in env.items() if k != "CLAUDE_PROJECT_DIR"}
    started = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "palace_client", "hook", "capture", *args],
                         input=stdin, env=env, capture_output=True, text=True, timeout=60)
    return res, time.perf_counter() - started


def texts(d: DaemonProc, palace: str) -> list[str]:
    """Every drawer's text, oldest first."""
    out: list[str] = []
    with d.client() as c:
        offset: int | None = 0
        while offset is not None:
            page = c.drawers(palace, limit=1000, offset=offset)
            out += [x["text"] for x in page["drawers"]]
            offset = page.get("next_offset")
    return out[::-1]


def wait_for(predicate: Any, timeout: float = 60.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(interval)


def captures_done(d: DaemonProc) -> int:
    with d.client() as c:
        status = c.status()["captures"]
    return int(status["done"]) if not status["waiting"] else -1


def test_hook_queues_a_capture_of_only_what_is_new(shared_daemon: DaemonProc) -> None:
    project = shared_daemon.home / "work" / "shop-api"
    project.mkdir(parents=True)
    s = Session(shared_daemon.home / "claude" / "s1.jsonl", cwd=str(project))
    s.exchange("Which queue do we use for emails?",
               "We decided to use RabbitMQ 3.13 for the email queue, on port 5673.")
    s.tool("Bash", {"command": "rabbitmqctl list_queues"}, "RAW-QUEUE-LISTING emails 12")
    s.say("The emails queue holds 12 messages.")
    res, _ = run_hook(shared_daemon.env, hook_input(s, "Stop"))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    # Polled while the capture creates the palace (a get racing the create once made the
    # create's own open fail with PALACE_LOCKED).
    wait_for(lambda: _has_drawers(shared_daemon, "shop-api"))  # the palace of the input's cwd
    (first,) = texts(shared_daemon, "shop-api")
    assert "RabbitMQ 3.13" in first and "→ Bash: rabbitmqctl list_queues" in first
    assert "RAW-QUEUE-LISTING" not in first
    with shared_daemon.client() as c:
        found = c.recall("shop-api", "which message broker sends the emails?", top_k=1)
        assert found[0]["text"] == first  # embedded with the real model, found by meaning

    done = captures_done(shared_daemon)
    run_hook(shared_daemon.env, hook_input(s, "PreCompact"))  # nothing new
    wait_for(lambda: captures_done(shared_daemon) > done)
    assert texts(shared_daemon, "shop-api") == [first]

    s.exchange("And the password for it?", "It is AMQP_PASSWORD=q9-Zr7-Lk2 in the vault.")
    res, _ = run_hook(shared_daemon.env, hook_input(s, "SessionEnd"))
    assert res.returncode == 0
    wait_for(lambda: len(texts(shared_daemon, "shop-api")) == 2)
    assert texts(shared_daemon, "shop-api") == [
        first, "User: And the password for it?\n\nAssistant: It is "
               "AMQP_PASSWORD=[REDACTED:password] in the vault."]


def test_malformed_hook_input_exits_zero_and_logs_one_line(shared_daemon: DaemonProc) -> None:
    log = shared_daemon.home / "state" / "palace.log"
    before = log.read_text().splitlines() if log.exists() else []
    for stdin, why in (("{not json", "not JSON"), ("[1, 2]", "not a JSON object")):
        res, _ = run_hook(shared_daemon.env, stdin)
        assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
        lines = log.read_text().splitlines()
        assert len(lines) == len(before) + 1 and why in lines[-1]
        before = lines
    # No transcript_path (test_prompt_hook: a SessionEnd of `claude mcp list`): silent.
    res, _ = run_hook(shared_daemon.env, '{"session_id": "x"}')
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert log.read_text().splitlines() == before
    res, _ = run_hook(shared_daemon.env, "{}", "--bogus")
    assert res.returncode == 0 and "unknown argument" in log.read_text().splitlines()[-1]


@pytest.mark.daemon
def test_hook_with_the_daemon_down_exits_fast_and_delivers_later(home: Path) -> None:
    env = base_env(home, model=False)
    s = Session(home / "claude" / "s2.jsonl", cwd=str(home / "notes-app"))
    s.exchange("Where are the backups?", "Backups go to the S3 bucket notes-backup nightly.")
    res, elapsed = run_hook(env, hook_input(s), "--palace", "notes")
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert elapsed < 2.0  # bench/hook_latency.py measures it properly (p50/p95)
    log = (home / "state" / "palace.log").read_text().splitlines()
    assert len(log) == 1 and "daemon not reached" in log[0]
    d = DaemonProc(home, env)
    try:
        # The detached delivery started the daemon and sent the request.
        wait_for(lambda: (home / "run" / "palaced.sock").exists(), 60)
        d.wait_ready(wait_model=False, timeout=60)
        wait_for(lambda: _has_drawers(d, "notes"), 60)
        assert texts(d, "notes") == ["User: Where are the backups?\n\nAssistant: Backups go to "
                                     "the S3 bucket notes-backup nightly."]
    finally:
        d.stop()


def _has_drawers(d: DaemonProc, palace: str) -> bool:
    try:
        return bool(texts(d, palace))
    except PalaceError as exc:
        return False


def test_kill_9_mid_capture_then_recapture_loses_and_repeats_nothing(
        keyword_daemon: DaemonProc) -> None:
    # Keyword-only, so the batches commit fast; what is at stake is the transactions.
    daemon = keyword_daemon
    n = 2500
    s = Session(daemon.home / "claude" / "big.jsonl")
    for i in range(n):
        s.exchange(f"Question {i}: how does component {i} start up?",
                   f"Component {i} starts after the config loader; it reads settings "
                   f"section {i} and opens {i % 7} connections before serving.")
    errors: list[BaseException] = []

    def long_capture() -> None:
        try:
            with daemon.client() as c:
                c.capture_transcript("crash", s.path, session_id=s.session_id, wait=True,
                                     create=True)
        except BaseException as exc:  # the daemon dies under it
            errors.append(exc)

    worker = threading.Thread(target=long_capture)
    worker.start()
    wait_for(lambda: 0 < _count(daemon, "crash") < n, 120, interval=0.01)
    daemon.kill9()
    worker.join(60)
    assert errors, "the capture should have been cut by the kill"
    daemon.start(wait_model=False)
    partial = _count(daemon, "crash")
    assert 0 < partial < n and partial % 256 == 0  # whole batches only
    with daemon.client() as c:
        res = c.capture_transcript("crash", s.path, session_id=s.session_id, wait=True)
    assert res["exchanges"] == n - partial
    got = texts(daemon, "crash")
    assert len(got) == n == len(set(got))
    assert [t.split("\n")[0] for t in got] == [
        f"User: Question {i}: how does component {i} start up?" for i in range(n)]


def _count(d: DaemonProc, palace: str) -> int:
    try:
        with d.client() as c:
            return int(c.palace_info(palace)["drawers"])
    except PalaceError:
        return 0


def test_import_claude_code_cli_is_idempotent_and_reports_skips(keyword_daemon: DaemonProc
                                                                ) -> None:
    """`palace import claude-code DIR`: a projects directory with two projects; the fixture
    has a malformed line (exit 10, listed); a second run stores nothing; dry runs store
    nothing and create no palace."""
    import json
    import shutil

    d = keyword_daemon
    root = d.home / "claude" / "projects"
    shop = root / "-home-me-src-shop-api"
    shop.mkdir(parents=True)
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "claude-code-session.jsonl",
                shop / "3f2a9c1e-7b4d-4e8a-9c2f-1a6b5d4e3c21.jsonl")
    s = Session(root / "-home-me-src-blog" / "b7e1.jsonl", session_id="b7e1",
                cwd="/home/me/src/blog")
    s.exchange("Which static site generator?", "We decided to use Hugo 0.125 for the blog.")
    dry = d.cli("import", "claude-code", str(root), "--palace", "imported", "--dry-run",
                "--json")
    assert dry.returncode == 10, dry.stderr
    assert json.loads(dry.stdout)["records"] == 3
    assert "imported" not in d.cli("list").stdout
    res = d.cli("import", "claude-code", str(root), "--palace", "imported", "--json")
    assert res.returncode == 10, res.stderr
    report = json.loads(res.stdout)
    assert (report["read"], report["records"], report["stored"], report["redacted"]) == (
        2, 3, 3, 1)
    assert report["problems"] == [{"file": str(shop / "3f2a9c1e-7b4d-4e8a-9c2f-1a6b5d4e3c21.jsonl"),
                                   "line": 16, "message": "malformed transcript line: skipped"}]
    with d.client() as c:
        wings = {x["wing"] for x in c.drawers("imported")["drawers"]}
    assert wings == {"shop-api", "blog"}
    again = d.cli("import", "claude-code", str(root), "--palace", "imported")
    assert again.returncode == 0, again.stderr  # the skipped line was reported once
    assert "0 stored" in again.stdout
    missing = d.cli("import", "claude-code", str(d.home / "nowhere"), "--palace", "imported")
    assert missing.returncode == 5 and "SOURCE_UNREADABLE" in missing.stderr
