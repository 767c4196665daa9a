"""One palace per project, everywhere (issue 29): chosen by the git root's path, persisted, the
same through the CLI, the MCP bridge and the capture hook; created by the first write only.

Real git repositories in temporary directories, a keyword-only daemon, the real ``palace`` CLI,
``palace mcp`` and ``palace hook capture`` processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from palace_client.api.projects import (
    MAP_NAME,
    derived_name,
    project_palace,
    read_map,
    set_project_palace,
)
from tests.conftest import DaemonProc
from tests.e2e.test_capture_daemon import run_hook, texts, wait_for
from tests.support.transcripts import Session, hook_input

BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)
    return path


def cli(d: DaemonProc, cwd: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palace_client", *args],
                          env=env or d.env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def mcp_session(env: dict[str, str], cwd: Path, calls: list[tuple[str, dict[str, Any]]]
                ) -> tuple[list[str], str]:
    """Run ``palace mcp`` in ``cwd``: initialize, then ``calls``; the tool texts and stderr."""
    messages = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    messages += [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                  "params": {"name": name, "arguments": args}}
                 for i, (name, args) in enumerate(calls, 1)]
    res = subprocess.run(BRIDGE, input="".join(json.dumps(m) + "\n" for m in messages),
                         env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    answers = {a["id"]: a for a in map(json.loads, res.stdout.splitlines()) if "id" in a}
    return [answers[i]["result"]["content"][0]["text"] for i in range(1, len(calls) + 1)], \
        res.stderr


def palaces(d: DaemonProc) -> set[str]:
    with d.client() as c:
        return {p["name"] for p in c.list_palaces()}


@pytest.mark.daemon
def test_two_repositories_with_one_folder_name_get_two_palaces_in_every_client(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    work = git_repo(tmp_path / "work" / "api")
    personal = git_repo(tmp_path / "personal" / "api")
    (work / "src").mkdir()

    # The CLI inside a project uses the project's palace (it said "no palace given" before)
    # and its first write creates it.
    first = cli(d, work / "src", "remember", "work: the billing service deploys on Tuesdays")
    assert first.returncode == 0, first.stderr
    assert first.stderr == "(created palace 'api': its first write)\n"  # no warning
    second = cli(d, personal, "remember", "personal: the cat is called Tom")
    assert second.returncode == 0, second.stderr
    other = derived_name(personal)
    assert other.startswith("api-") and other != "api"
    # The warning names both projects and both palaces.
    assert f"{work} uses palace 'api'" in second.stderr
    assert f"{personal} uses palace '{other}'" in second.stderr
    assert texts(d, "api") == ["work: the billing service deploys on Tuesdays"]
    assert texts(d, other) == ["personal: the cat is called Tom"]

    # The mapping persists: a later process in the personal project gets the same palace,
    # without a warning; reads see only that project's memories.
    listed = cli(d, personal, "drawers")
    assert listed.returncode == 0 and listed.stderr == ""
    assert "cat is called Tom" in listed.stdout and "billing" not in listed.stdout
    shown = cli(d, personal, "project", "--json")
    assert json.loads(shown.stdout) == {"project": str(personal), "palace": other,
                                        "how": "mapped"}
    assert read_map(d.home / MAP_NAME) == {str(work): "api", str(personal): other}

    # The MCP bridge started by Claude Code in the personal project (CLAUDE_PROJECT_DIR) and
    # one started with only a working directory agree with the CLI.
    env = {**d.env, "CLAUDE_PROJECT_DIR": str(personal)}
    (listing,), _ = mcp_session(env, tmp_path, [("list_drawers", {})])
    assert f"palace '{other}'" in listing and "Tom" in listing and "billing" not in listing
    (listing,), _ = mcp_session(d.env, work, [("list_drawers", {})])
    assert "palace 'api'" in listing and "billing" in listing and "Tom" not in listing

    # The capture hook files a personal session under the personal palace.
    s = Session(tmp_path / "t" / "s.jsonl", cwd=str(personal))
    s.exchange("What is the cat called?", "The cat is called Tom, since 2019.")
    res, _ = run_hook(d.env, hook_input(s))
    assert res.returncode == 0
    wait_for(lambda: len(texts(d, other)) == 2)
    assert len(texts(d, "api")) == 1

    # A hook is the first client to see a third `api`: the notice goes to the clients' log,
    # never to the hook's output.
    third = git_repo(tmp_path / "forks" / "api")
    s3 = Session(tmp_path / "t" / "s3.jsonl", cwd=str(third))
    s3.exchange("Which fork is this?", "The fork that pins Postgres 15.")
    res, _ = run_hook(d.env, hook_input(s3))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    wait_for(lambda: derived_name(third) in palaces(d))
    assert f"{third} uses palace '{derived_name(third)}'" in (
        d.home / "state" / "palace.log").read_text()


@pytest.mark.daemon
def test_a_moved_repository_keeps_its_palace_and_a_renamed_one_is_pointed_back(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    repo = git_repo(tmp_path / "old" / "shop")
    assert cli(d, repo, "remember", "the shop uses Stripe").returncode == 0
    moved = tmp_path / "new" / "shop"
    moved.parent.mkdir()
    shutil.move(repo, moved)
    out = cli(d, moved, "recall", "Stripe")
    assert out.returncode == 0, out.stderr
    assert "Stripe" in out.stdout
    assert f"belonged to the project at {repo}, which is gone" in out.stderr

    renamed = tmp_path / "new" / "storefront"
    shutil.move(moved, renamed)
    fresh = cli(d, renamed, "recall", "Stripe")
    # A rename starts over: the new name's palace does not exist yet, and a read neither
    # creates it nor hides why.
    assert fresh.returncode != 0
    assert f"'storefront' is the palace of the project at {renamed}" in fresh.stderr
    assert "storefront" not in palaces(d)
    pointed = cli(d, renamed, "project", "--set", "shop")
    assert pointed.returncode == 0, pointed.stderr
    assert "palace  shop" in pointed.stdout
    assert "Stripe" in cli(d, renamed, "recall", "Stripe").stdout


@pytest.mark.daemon
def test_the_first_write_creates_a_palace_in_every_client_and_reads_never_do(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    # `palace remember -p p1` refused until `palace create p1`; now the write creates it.
    made = cli(d, tmp_path, "remember", "named palace fact", "-p", "p1")
    assert made.returncode == 0, made.stderr
    assert texts(d, "p1") == ["named palace fact"]
    # ... and says so on stderr (a mistyped name is seen), once: the next write is silent.
    assert "(created palace 'p1': its first write)" in made.stderr
    again = cli(d, tmp_path, "remember", "second fact", "-p", "p1")
    assert again.returncode == 0 and "created palace" not in again.stderr, again.stderr
    # A read of a palace that does not exist says so and creates nothing.
    missing = cli(d, tmp_path, "recall", "anything", "-p", "nope")
    assert missing.returncode != 0 and "PALACE_NOT_FOUND" in missing.stderr
    woke = cli(d, tmp_path, "wake-up", "-p", "nope2")
    assert woke.returncode == 0 and woke.stdout == ""
    assert {"nope", "nope2"}.isdisjoint(palaces(d))

    # The MCP bridge: recall and wake_up before the first remember create nothing.
    repo = git_repo(tmp_path / "fresh-app")
    (recalled, woken), _ = mcp_session(d.env, repo, [("recall", {"query": "x"}),
                                                     ("wake_up", {})])
    assert "holds nothing yet" in recalled and "holds nothing yet" in woken
    assert "fresh-app" not in palaces(d)
    (stored,), _ = mcp_session(d.env, repo, [("remember", {"text": "mcp fact"})])
    assert "in palace 'fresh-app'" in stored
    assert "fresh-app" in palaces(d) and texts(d, "fresh-app") == ["mcp fact"]


def test_concurrent_first_use_agrees_on_one_name(tmp_path: Path) -> None:
    """Two clients resolving new projects at once (the same one, and two of one folder name)
    never hand out one palace twice, and both entries persist."""
    data = tmp_path / "data"
    a, b = tmp_path / "x" / "api", tmp_path / "y" / "api"
    for repo in (a, b):
        (repo / ".git").mkdir(parents=True)
    got: list[tuple[Path, str]] = []
    barrier = threading.Barrier(8)

    def resolve(root: Path) -> None:
        barrier.wait()
        got.append((root, project_palace(root, data_dir=data, warn=lambda _: None).name))

    threads = [threading.Thread(target=resolve, args=(r,)) for r in (a, b) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = {root: {n for r, n in got if r == root} for root in (a, b)}
    assert len(names[a]) == 1 and len(names[b]) == 1
    assert names[a] != names[b]
    assert read_map(data / MAP_NAME) == {str(a): next(iter(names[a])),
                                         str(b): next(iter(names[b]))}


def test_a_bad_or_planted_map_is_never_trusted_nor_overwritten(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    repo = tmp_path / "svc"
    (repo / ".git").mkdir(parents=True)
    warned: list[str] = []
    (data / MAP_NAME).write_text("{not json")
    chosen = project_palace(repo, data_dir=data, warn=warned.append)
    assert (chosen.name, chosen.how) == ("svc", "unmapped")
    assert "unreadable" in warned[0] and (data / MAP_NAME).read_text() == "{not json"

    # Entries that are not an absolute path and a palace name are ignored.
    (data / MAP_NAME).write_text(json.dumps({"projects": {
        str(repo): "../../etc", "relative/x": "x", str(tmp_path / "ok"): "ok"}}))
    assert read_map(data / MAP_NAME) == {str(tmp_path / "ok"): "ok"}
    assert project_palace(repo, data_dir=data, warn=warned.append).name == "svc"

    # A symlink at the map's name is refused, not followed (nor written through).
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"projects": {str(repo): "stolen"}}))
    (data / MAP_NAME).unlink()
    os.symlink(target, data / MAP_NAME)
    assert project_palace(repo, data_dir=data, warn=warned.append).name == "svc"
    assert "symlink" in warned[-1]
    assert json.loads(target.read_text()) == {"projects": {str(repo): "stolen"}}


def test_projects_may_share_a_palace_and_a_new_twin_still_gets_its_own(tmp_path: Path) -> None:
    """``--set`` lets two worktrees of one repository share a palace; neither loses it, and a
    third project of that folder name still gets a name of its own."""
    data = tmp_path / "data"
    main, worktree, twin = (tmp_path / "a" / "app", tmp_path / "b" / "app-wt",
                            tmp_path / "c" / "app")
    for repo in (main, worktree, twin):
        (repo / ".git").mkdir(parents=True)
    assert project_palace(main, data_dir=data).name == "app"
    assert set_project_palace(worktree, "app", data_dir=data) == [str(main)]
    assert project_palace(main, data_dir=data).name == "app"
    assert project_palace(worktree, data_dir=data).name == "app"
    warned: list[str] = []
    assert project_palace(twin, data_dir=data, warn=warned.append).name == derived_name(twin)
    assert f"{main} uses palace 'app'" in warned[0]
