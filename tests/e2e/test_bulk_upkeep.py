"""Bulk upkeep through a real daemon (issue 31): ``palace forget`` by selectors with a dry run,
restoring the batch, ``palace merge`` of duplicates, the MCP ``upkeep`` tool's forget, merge
and restore, and the concepts citing a forgotten drawer citing it again once it is restored.

The op-level test runs on both backends (``store`` of conftest: a local SQLite palace, then a
team palace in a real PostgreSQL); one keyword-only daemon serves the module.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from palace_client.cli.common import EXIT_INVALID, EXIT_USAGE
from palaced.wire import errors as E
from tests.conftest import DaemonProc
from tests.e2e.test_governance import db_rows
from tests.palace_client.mcp.test_mcp_knowledge import Bridge
from tests.support.cli_inproc import InProcCliDaemonProc

pytestmark = pytest.mark.daemon

# What a restore changes of a drawer: the rest must come back as it was.
_RESTORE_SETS = ("updated_ms", "updated_by", "embedded")
_ROW = "id, text, wing, room, tags, importance, source, created_ms, occurred_ms, content_hash, " \
       "kind, weight, access_count, created_by"


def _palace(d: DaemonProc, stem: str, store: str | None = None) -> str:
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    with d.client() as c:
        c.create_palace(name, store=store)
    return name


def _json(d: InProcCliDaemonProc, *args: str) -> Any:
    res = d.cli(*args, "--json")
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def _seed(d: DaemonProc, p: str) -> dict[str, list[int]]:
    """30 drawers in rooms ops (12, half tagged old) and notes (18), from two sources."""
    ids: dict[str, list[int]] = {"ops": [], "notes": []}
    with d.client() as c:
        for i in range(30):
            room = "ops" if i < 12 else "notes"
            r = c.remember(p, f"Runbook step {i}: restart the payment worker number {i}",
                           room=room, tags=["old"] if i % 2 == 0 and room == "ops" else [],
                           source="chatgpt:conv-7" if i % 3 == 0 else "cli")
            ids[room].append(int(r))
    return ids


def test_bulk_forget_dry_run_matches_real_run_and_the_batch_restores_whole(
        shared_keyword_daemon: DaemonProc, store: str | None) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _palace(d, "bulk", store)
    ids = _seed(d, p)
    memoirs = store is None  # a team palace has no memoirs
    if memoirs:
        with d.client() as c:
            c.memoir_create(p, "runbooks")
            c.memoir_add_concept(p, "runbooks", "payment worker", "How to restart it.",
                                 sources=[ids["ops"][0], ids["notes"][0]])
    before = db_rows(d, p, store, f"SELECT {_ROW} FROM drawers ORDER BY id")

    dry = _json(d, "forget", "--room", "ops", "--dry-run", "--show", "5", "--palace", p)
    assert dry["dry_run"] and dry["matched"] == 12 and dry["forgotten"] == 0
    assert dry["batch"] is None and [x["id"] for x in dry["drawers"]] == ids["ops"][:5]
    assert db_rows(d, p, store, f"SELECT {_ROW} FROM drawers ORDER BY id") == before
    text = d.cli("forget", "--room", "ops", "--dry-run", "--palace", p).stdout
    assert "would forget 12 drawers (dry run: nothing changed)" in text

    real = _json(d, "forget", "--room", "ops", "--palace", p)
    assert real["forgotten"] == real["matched"] == dry["matched"] == 12
    batch = real["batch"]
    assert batch and batch.startswith("forget-")
    assert _json(d, "drawers", "--palace", p, "--limit", "100")["total"] == 18
    with d.client() as c:
        if memoirs:
            concept = c.memoir_show(p, "runbooks")["concepts"][0]
            assert concept["sources"] == [ids["notes"][0]]  # the forgotten one left it
        trash = c.trash(p, limit=100)
        assert trash["total"] == 12 and {t["reason"] for t in trash["drawers"]} == {batch}

    back = _json(d, "restore-drawer", "--batch", batch, "--palace", p)
    assert sorted(back["restored"]) == ids["ops"] and back["conflicts"] == []
    assert db_rows(d, p, store, f"SELECT {_ROW} FROM drawers ORDER BY id") == before
    with d.client() as c:
        if memoirs:
            assert c.memoir_show(p, "runbooks")["concepts"][0]["sources"] == sorted(
                [ids["ops"][0], ids["notes"][0]])
        assert c.trash(p)["total"] == 0
        # Audited: the trashing and the restore name the batch, with every drawer.
        log = c.audit(p, limit=200)["entries"]
    trashed = [e for e in log if e["outcome"] == "trashed" and e["detail"].get("reason") == batch]
    restored = [e for e in log if e["outcome"] == "restored" and e["detail"].get("batch") == batch]
    assert sorted(i for e in trashed for i in e["drawer_ids"]) == ids["ops"]
    assert sorted(i for e in restored for i in e["drawer_ids"]) == ids["ops"]
    assert {e["op"] for e in trashed} == {"memory.forget_many"}
    # A resent restore finds nothing left.
    again = d.cli("restore-drawer", "--batch", batch, "--palace", p)
    assert again.returncode != 0 and "nothing of batch" in again.stderr


def test_selectors_combine_and_a_selectorless_or_huge_forget_is_refused(
        shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _palace(d, "sel")
    ids = _seed(d, p)
    old = [i for n, i in enumerate(ids["ops"]) if n % 2 == 0]

    def matched(*args: str) -> list[int]:
        got = _json(d, "forget", *args, "--dry-run", "--show", "100", "--palace", p)
        assert got["matched"] == len(got["drawers"])
        return [x["id"] for x in got["drawers"]]

    assert matched("--tag", "old") == old
    assert matched("--source", "chatgpt:*", "--room", "ops") == ids["ops"][::3]
    # every word of the query, not any: "worker 7" is one drawer, not all 30
    assert matched("--query", "payment worker number 7") == [ids["ops"][7]]
    assert matched("--older-than", "1d") == []
    assert len(matched("--older-than", "2999-01-01")) == 30

    res = d.cli("forget", "--older-than", "5 fortnights", "--palace", p)
    assert res.returncode == EXIT_INVALID and "--older-than" in res.stderr, res.stderr
    res = d.cli("forget", "--palace", p, "--json")
    assert res.returncode == EXIT_INVALID and "needs a selector" in res.stdout
    res = d.cli("forget", "--older-than", "2999-01-01", "--max", "10", "--palace", p)
    assert res.returncode == EXIT_INVALID and "30 drawers match" in res.stderr
    assert d.cli("forget", str(ids["ops"][0]), "--room", "ops", "--palace", p
                 ).returncode == EXIT_USAGE
    assert _json(d, "drawers", "--palace", p, "--limit", "100")["total"] == 30
    done = _json(d, "forget", "--older-than", "2999-01-01", "--max", "30", "--palace", p)
    assert done["forgotten"] == 30


def test_merge_keeps_the_longest_text_with_every_tag_and_the_batch_undoes_it(
        shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _palace(d, "merge")
    with d.client() as c:
        a = int(c.remember(p, "The deploy key rotates monthly", room="ops", tags=["security"]))
        b = int(c.remember(p, "The deploy key rotates monthly, on the first Monday", room="ops",
                           tags=["deploy"], importance="high"))
        cc = int(c.remember(p, "the deploy key rotates monthly", room="ops", tags=["ops"]))
        c.memoir_create(p, "m")
        c.memoir_add_concept(p, "m", "deploy key", "Rotated monthly.", sources=[a])

    dry = _json(d, "merge", str(a), str(b), str(cc), "--dry-run", "--palace", p)
    assert dry["kept"] == b and sorted(dry["merged"]) == [a, cc]
    assert _json(d, "drawers", "--palace", p)["total"] == 3

    done = _json(d, "merge", str(a), str(b), str(cc), "--palace", p)
    assert done["kept"] == b and done["batch"].startswith("merge-")
    with d.client() as c:
        kept = c.get(p, b, history=True)
        assert sorted(kept["tags"]) == ["deploy", "ops", "security"]
        assert kept["versions"] == 2  # the tags' edit kept the old version
        assert c.drawers(p)["total"] == 1
        assert c.memoir_show(p, "m")["concepts"][0]["sources"] == [b]
        back = c.restore_batch(p, done["batch"])
        assert sorted(back["restored"]) == [a, cc]
        assert c.drawers(p)["total"] == 3
        assert sorted(c.memoir_show(p, "m")["concepts"][0]["sources"]) == [a, b]
    res = d.cli("merge", str(a), "--palace", p)
    assert res.returncode == EXIT_INVALID and "at least two" in res.stderr


def test_restore_drawer_puts_it_back_in_its_concepts(shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _palace(d, "concept")
    with d.client() as c:
        did = int(c.remember(p, "Sessions expire after 30 minutes of inactivity"))
        c.memoir_create(p, "auth")
        c.memoir_add_concept(p, "auth", "session expiry", "30 minutes idle.", sources=[did])
        c.forget(p, did)
        assert c.memoir_show(p, "auth")["concepts"][0]["sources"] == []
    d.cli("restore-drawer", str(did), "--palace", p, check=True)
    with d.client() as c:
        assert c.memoir_show(p, "auth")["concepts"][0]["sources"] == [did]


def test_mcp_upkeep_forgets_and_merges_after_a_dry_run(
        shared_keyword_daemon: DaemonProc) -> None:
    p = _palace(shared_keyword_daemon, "mcp")
    ids = _seed(shared_keyword_daemon, p)
    b = Bridge(shared_keyword_daemon.env, p)
    try:
        text = b.ok("upkeep", action="forget", room="ops", tags=["old"])
        assert "Would forget 6 drawer(s)" in text and f"#{ids['ops'][0]}" in text
        with shared_keyword_daemon.client() as c:
            assert c.drawers(p)["total"] == 30
        text = b.ok("upkeep", action="forget", room="ops", tags=["old"], dry_run=False)
        assert "Moved 6 drawer(s)" in text
        batch = text.split("as batch ", 1)[1].split()[0]
        with shared_keyword_daemon.client() as c:
            assert c.drawers(p)["total"] == 24
        assert "Restored 6 drawer(s)" in b.ok("upkeep", action="restore", batch=batch)
        one, two = ids["notes"][:2]
        assert "Would keep" in b.ok("upkeep", action="merge", ids=[one, two])
        assert "moved" in b.ok("upkeep", action="merge", ids=[one, two], dry_run=False)
        with shared_keyword_daemon.client() as c:
            assert c.drawers(p)["total"] == 29
        is_error, text = b.call("upkeep", action="forget", batch=batch)
        assert is_error and "does not take batch" in text
    finally:
        b.close()


def test_a_forget_carrying_its_previews_selection_forgets_that_set_or_nothing(
        shared_keyword_daemon: DaemonProc) -> None:
    # The web app's bulk forget (issue 32) confirms a preview: what goes is what was shown.
    d = shared_keyword_daemon
    p = _palace(d, "expect")
    ids = _seed(d, p)
    sel = {"room": "ops", "tags": ["old"]}
    with d.client() as c:
        dry = c.forget_many(p, **sel, dry_run=True)
        assert dry["matched"] == 6 and dry["selection"].startswith("sel-")
        assert c.forget_many(p, **sel, dry_run=True)["selection"] == dry["selection"]
        # One drawer more matches now: refused, nothing forgotten, even with room to spare.
        extra = c.remember(p, "Runbook step 99: drain the queue first", room="ops",
                           tags=["old"])
        with pytest.raises(E.InvalidArgs) as refused:
            c.forget_many(p, **sel, expect=dry["selection"], max_drawers=100)
        assert refused.value.details == {"arg": "expect", "matched": 7}
        # As many as previewed, but another set (one gone, one new): refused as well.
        c.forget(p, ids["ops"][0])
        with pytest.raises(E.InvalidArgs):
            c.forget_many(p, **sel, expect=dry["selection"])
        assert c.forget_many(p, **sel, dry_run=True)["matched"] == 6
        assert len(c.drawers(p, room="ops", limit=100)["drawers"]) == 12
        # The set previewed again is forgotten, exactly it.
        again = c.forget_many(p, **sel, dry_run=True, show=100)
        real = c.forget_many(p, **sel, expect=again["selection"])
        assert real["forgotten"] == 6 and real["selection"] == again["selection"]
        left = {x["id"] for x in c.drawers(p, room="ops", limit=100)["drawers"]}
        gone = {x["id"] for x in again["drawers"]}
        assert extra in gone and not gone & left and len(left) == 6


def test_cli_and_mcp_forget_carry_the_dry_runs_selection(
        shared_keyword_daemon: DaemonProc) -> None:
    """`palace forget --dry-run` prints its selection and `--expect` carries it (the real
    `palace` process), as the MCP upkeep tool's `expect` does: a drawer matching after the
    preview makes the confirmation forget nothing."""
    d = shared_keyword_daemon
    p = _palace(d, "cliexp")
    ids = _seed(d, p)
    sel = ("--room", "ops", "--tag", "old", "--palace", p)
    text = d.cli("forget", *sel, "--dry-run").stdout
    token = text.split("selection ", 1)[1].split(":", 1)[0]
    assert token.startswith("sel-") and f"--expect {token}" in text, text
    assert json.loads(d.cli("forget", *sel, "--dry-run", "--json").stdout)["selection"] == token
    with d.client() as c:
        c.remember(p, "Runbook step 99: drain the queue first", room="ops", tags=["old"])
    res = d.cli("forget", *sel, "--expect", token, "--json")
    assert res.returncode == EXIT_INVALID, (res.stdout, res.stderr)
    assert json.loads(res.stdout)["error"]["details"] == {"arg": "expect", "matched": 7,
                                                          "flag": "--expect"}
    assert "selection changed" in res.stderr and "preview it again" in res.stderr
    with d.client() as c:
        assert c.drawers(p)["total"] == 31 and c.trash(p)["total"] == 0
    # An id and --expect do not mix; the set previewed again goes whole.
    assert d.cli("forget", str(ids["ops"][0]), "--expect", token, "-p", p).returncode == \
        EXIT_USAGE
    token = json.loads(d.cli("forget", *sel, "--dry-run", "--json").stdout)["selection"]
    real = json.loads(d.cli("forget", *sel, "--expect", token, "--json").stdout)
    assert real["forgotten"] == 7 and real["selection"] == token

    p = _palace(d, "mcpexp")
    _seed(d, p)
    b = Bridge(d.env, p)
    try:
        text = b.ok("upkeep", action="forget", room="ops", tags=["old"])
        token = text.split("expect='", 1)[1].split("'", 1)[0]
        assert token.startswith("sel-") and "Would forget 6 drawer(s)" in text, text
        with d.client() as c:
            c.remember(p, "Runbook step 99: drain the queue first", room="ops", tags=["old"])
        is_error, text = b.call("upkeep", action="forget", room="ops", tags=["old"],
                                dry_run=False, expect=token)
        assert is_error and "selection changed" in text, text
        with d.client() as c:
            assert c.drawers(p)["total"] == 31 and c.trash(p)["total"] == 0
    finally:
        b.close()
