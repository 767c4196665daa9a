"""Current truth first (issue 31): conflicts found at remember time, the newer ranked first and
the older marked, resolved through the CLI and the MCP ``upkeep`` tool; a near-duplicate that
adds detail is stored, never folded in; consolidation retires its sources from recall and L1.

One real palaced with the real model serves the module (each test a palace of its own); the
conflict and consolidation tests run on a local and a team (PostgreSQL) palace. Conflicts
without the model: a keyword-only daemon (words find the candidates), and a daemon whose model
comes later (the drawers stored meanwhile are checked once embedded).
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MODEL_DIR, DaemonProc, base_env
from tests.palace_client.mcp.test_mcp_knowledge import Bridge
from tests.support.cli_inproc import InProcCliDaemonProc

pytestmark = pytest.mark.daemon

ALICE = "Alice owns the payment gateway integration."
ALICE_GONE = "Alice no longer owns the payment gateway integration."
BOB = "Bob owns the payment gateway integration."
QUESTION = "who owns the payment gateway?"


def _palace(d: DaemonProc, store: str | None = None) -> str:
    name = f"truth-{uuid.uuid4().hex[:8]}"
    with d.client() as c:
        c.create_palace(name, store=store)
    return name


def test_conflict_is_told_ranked_marked_and_resolved(shared_daemon: DaemonProc,
                                                      store: str | None) -> None:
    p = _palace(shared_daemon, store)
    cli = InProcCliDaemonProc.of(shared_daemon)
    with shared_daemon.client() as c:
        alice = c.remember(p, ALICE, room="payments")
        gone = c.remember_ex(p, ALICE_GONE, room="payments")
        assert gone["created"] and [x["id"] for x in gone["conflicts"]] == [alice]
        assert gone["conflicts"][0]["reason"] == "negated"
    # remember's answer names the conflict, with the id and the question.
    out = cli.cli("remember", BOB, "--palace", p, "--room", "payments", check=True).stdout
    bob = int(re.search(r"stored drawer (\d+)", out).group(1))  # type: ignore[union-attr]
    assert f"It conflicts with #{alice} (\u201c{ALICE}\u201d: bob vs alice): supersede it?" in out
    # Recall: the newer first, the older marked with a pointer to it.
    with shared_daemon.client() as c:
        hits = c.recall(p, QUESTION, top_k=3)
        order = [h["id"] for h in hits]
        assert order.index(bob) < order.index(alice)
        assert next(h for h in hits if h["id"] == alice)["conflicts_with"] == bob
        assert "conflicts_with" not in next(h for h in hits if h["id"] == bob)
    text = cli.cli("recall", QUESTION, "--palace", p, "--budget", "400", check=True).stdout
    assert f"#{alice} " in text and f"(conflicts with #{bob}, newer)" in text
    assert text.index(f"#{bob} ") < text.index(f"#{alice} ")
    # The CLI's ranked list (no --budget) marks it too.
    text = cli.cli("recall", QUESTION, "--palace", p, check=True).stdout
    [line] = [x for x in text.splitlines() if x.startswith(f"[{alice}] ")]
    assert f"(conflicts with #{bob}, newer)" in line
    # palace conflicts list / resolve --supersede: the older is retired.
    listed = json.loads(cli.cli("conflicts", "list", "--palace", p, "--json",
                                check=True).stdout)
    mine = next(x for x in listed["conflicts"] if x["newer_id"] == bob)
    assert (mine["older_id"], mine["older_text"], mine["resolved_ms"]) == (alice, ALICE, None)
    out = cli.cli("conflicts", "resolve", str(mine["id"]), "--supersede", "--palace", p,
                  check=True).stdout
    assert f"resolved conflict {mine['id']}: supersede; retired #{alice}" in out
    with shared_daemon.client() as c:
        assert alice not in [h["id"] for h in c.recall(p, QUESTION, top_k=5)]
        assert c.get(p, alice)["superseded_by"] == bob
        again = c.resolve_conflict(p, mine["id"], "supersede")
        assert again["already"] and again["retired"] == []
        left = c.conflicts(p)["conflicts"]
        # Alice's other conflict (with the negation) went with her retirement? No: it is
        # between two drawers still there, and stays open until resolved.
        assert [x["older_id"] for x in left] == [alice]


def test_non_conflicts_are_not_flagged(shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    with shared_daemon.client() as c:
        c.remember(p, ALICE, room="payments")
        for text in ("Alice owns the refunds service.",
                     "The billing service is owned by Dana.",
                     "The payment gateway integration talks to Stripe over HTTPS."):
            assert "conflicts" not in c.remember_ex(p, text, room="payments"), text
        assert c.conflicts(p)["total"] == 0


def test_mcp_remember_names_the_conflict_and_upkeep_resolves(shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    with shared_daemon.client() as c:
        alice = c.remember(p, ALICE, room="payments")
    bridge = Bridge(shared_daemon.env, p)
    try:
        err, text = bridge.call("remember", text=BOB, room="payments")
        assert not err
        bob = int(re.search(r"Stored drawer #(\d+)", text).group(1))  # type: ignore[union-attr]
        assert (f"It conflicts with #{alice} (\u201c{ALICE}\u201d: bob vs alice): supersede it? "
                f"(upkeep action='resolve' id=") in text
        err, listed = bridge.call("upkeep", action="conflicts")
        assert not err and f"#{bob} \u201c{BOB}\u201d is newer than #{alice}" in listed
        cid = int(re.search(r"conflict (\d+) ", listed).group(1))  # type: ignore[union-attr]
        err, done = bridge.call("upkeep", action="resolve", id=cid, resolution="keep_both")
        assert not err and done == f"Resolved conflict {cid}: keep_both."
        err, recalled = bridge.call("recall", query=QUESTION)
        assert not err and "conflicts with" not in recalled
    finally:
        bridge.close()


def test_near_duplicate_adding_detail_is_stored(shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    cli = InProcCliDaemonProc.of(shared_daemon)
    more = "Alice owns the payment gateway integration and also the refunds service."
    with shared_daemon.client() as c:
        alice = c.remember(p, ALICE, room="payments")
        # A plain repeat still refreshes the drawer.
        assert c.remember_ex(p, "Alice owns the payment-gateway integration",
                             room="payments")["deduplicated"]
    out = cli.cli("remember", more, "--palace", p, "--room", "payments", check=True).stdout
    new = int(re.search(r"stored drawer (\d+)", out).group(1))  # type: ignore[union-attr]
    assert new != alice
    assert (f"It adds detail to the similar drawer #{alice}, which it now supersedes "
            "(kept as history).") in out
    with shared_daemon.client() as c:
        hit = c.recall(p, "who owns the refunds service?", top_k=1)[0]
        assert (hit["id"], hit["text"]) == (new, more)
        assert c.get(p, alice)["superseded_by"] == new


def test_consolidation_retires_its_sources(shared_daemon: DaemonProc, store: str | None) -> None:
    p = _palace(shared_daemon, store)
    facts = ["Auth tokens rotate every 24 hours on the gateway.",
             "Refresh tokens for auth rotate weekly.",
             "The auth service signs tokens with RS256 keys that rotate monthly.",
             "Auth token rotation is driven by a cron job in the auth service.",
             "Rotated auth tokens stay valid for a 5 minute grace period.",
             "Service-to-service auth tokens rotate every hour.",
             "Auth tokens are rotated early when a key leaks."]
    summary = ("Auth tokens rotate: access tokens every 24 hours, refresh tokens weekly, "
               "service tokens hourly, signing keys monthly, with a 5 minute grace period.")
    cli = InProcCliDaemonProc.of(shared_daemon)
    with shared_daemon.client() as c:
        ids = [c.remember(p, f, room="auth", importance=0.8) for f in facts]
        res = c.consolidate(p, "auth", summary)
        assert sorted(res["source_ids"]) == sorted(ids)
        hits = [h["id"] for h in c.recall(p, "auth tokens rotate", top_k=10)]
        assert hits[0] == res["summary_id"] and not set(hits) & set(ids)
        every = [h["id"] for h in c.recall(p, "auth tokens rotate", top_k=10,
                                           include_superseded=True)]
        assert set(ids) <= set(every)
        assert c.get(p, ids[0])["text"] == facts[0]
    woke = cli.cli("wake-up", "--palace", p, check=True).stdout
    assert summary[:40] in woke and not any(f[:30] in woke for f in facts)


def test_single_valued_fact_replaced_from_another_drawer_is_a_conflict(
        shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    with shared_daemon.client() as c:
        # Worded apart enough that the text rule alone would not pair them.
        old = c.remember(p, "Checkout on-call rotation notes: Dana carries the pager.")
        new = c.remember(p, "From the March planning meeting: Eli is on call for checkout.")
        assert c.conflicts(p)["total"] == 0
        c.kg_assert(p, "checkout", "on_call", "Dana", source_drawer=old)
        c.kg_assert(p, "checkout", "on_call", "Eli", source_drawer=new)
        [x] = c.conflicts(p)["conflicts"]
        assert (x["newer_id"], x["older_id"], x["kind"], x["reason"]) == (
            new, old, "fact", "on_call: Eli vs Dana")
        hits = {h["id"]: h for h in c.recall(p, "who is on call for checkout?", top_k=5)}
        assert hits[old]["conflicts_with"] == new


def test_merge_retires_both_behind_the_merged_drawer(shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    cli = InProcCliDaemonProc.of(shared_daemon)
    merged = "Alice and Bob share the payment gateway integration: Bob leads it."
    with shared_daemon.client() as c:
        alice = c.remember(p, ALICE, room="payments")
        bob = c.remember_ex(p, BOB, room="payments")
        cid = bob["conflicts"][0]["conflict"]
    out = cli.cli("conflicts", "resolve", str(cid), "--merge", merged, "--palace", p,
                  check=True).stdout
    with shared_daemon.client() as c:
        [hit] = c.recall(p, QUESTION, top_k=1)
        assert hit["text"] == merged
        assert out.strip() == (f"resolved conflict {cid}: merge; merged into drawer {hit['id']}"
                               f"; retired #{bob['id']}, #{alice}")
        assert {c.get(p, i)["superseded_by"] for i in (alice, bob["id"])} == {hit["id"]}
        assert c.conflicts(p, include_resolved=True)["conflicts"][0]["resolution"] == "merge"
        assert any(e["outcome"] == "conflict merge" for e in c.audit(p)["entries"])
    bad = cli.cli("conflicts", "resolve", str(cid), "--palace", p)
    assert bad.returncode != 0 and "exactly one of" in bad.stderr


def _wait(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_keyword_only_palace_finds_conflicts_by_words(shared_keyword_daemon: DaemonProc,
                                                      store: str | None) -> None:
    d = shared_keyword_daemon
    p = _palace(d, store)
    cli = InProcCliDaemonProc.of(d)
    with d.client() as c:
        alice = c.remember(p, ALICE, room="payments")
        # Another fact of the same subject (on call, not owner) is no conflict.
        assert "conflicts" not in c.remember_ex(
            p, "Dana is on the on-call rotation for the payment gateway integration.",
            room="payments")
    out = cli.cli("remember", BOB, "--palace", p, "--room", "payments", check=True).stdout
    bob = int(re.search(r"stored drawer (\d+)", out).group(1))  # type: ignore[union-attr]
    assert f"It conflicts with #{alice} (\u201c{ALICE}\u201d: bob vs alice): supersede it?" in out
    with d.client() as c:
        [x] = c.conflicts(p)["conflicts"]
        assert (x["newer_id"], x["older_id"], x["similarity"]) == (bob, alice, None)
        hits = {h["id"]: h for h in c.recall(p, QUESTION, top_k=5)}
        assert hits[alice]["conflicts_with"] == bob


def test_drawers_stored_before_the_model_are_checked_once_embedded(home: Path) -> None:
    model = home / "model"
    (home / "config.toml").write_text("[limits]\ncheckpoint_idle_s = 0.3\n")  # prompt backfill
    env = base_env(home)
    env["PALACE_EMBED_MODEL_PATH"] = str(model)  # not there yet: the model comes later
    d = DaemonProc(home, env)
    d.start()
    port_old = "The checkout API listens on port 8080."
    # One-sided extra words: too loose a match for the words alone, a conflict by vectors.
    port_new = "The checkout API listens on port 9090 behind the load balancer."
    try:
        with d.client() as c:
            assert c.status()["model"]["state"] == "unavailable"
            p = _palace(d)
            alice = c.remember(p, ALICE, room="payments")
            bob = c.remember_ex(p, BOB, room="payments")
            # Told at once, from the words.
            assert [x["id"] for x in bob["conflicts"]] == [alice]
            old = c.remember(p, port_old, room="api")
            new = c.remember_ex(p, port_new, room="api")
            assert "conflicts" not in new and c.conflicts(p)["total"] == 1
            shutil.copytree(MODEL_DIR, model)
            _wait(lambda: c.palace_info(p)["pending_embeddings"] == 0, "backfill")
            _wait(lambda: c.conflicts(p)["total"] == 2, "the conflict found once embedded")
            pairs = {(x["newer_id"], x["older_id"]): x for x in c.conflicts(p)["conflicts"]}
            assert set(pairs) == {(bob["id"], alice), (new["id"], old)}
            assert pairs[(new["id"], old)]["reason"] == "9090 vs 8080"
            hits = {h["id"]: h for h in c.recall(p, "which port does the checkout API use?",
                                                 top_k=5)}
            assert hits[old]["conflicts_with"] == new["id"]
    finally:
        d.stop()


def test_remember_many_with_dedup_checks_the_batch_and_the_palace(
        shared_daemon: DaemonProc, store: str | None) -> None:
    p = _palace(shared_daemon, store)
    port = "The checkout API listens on port 8080."
    with shared_daemon.client() as c:
        old = c.remember(p, port, room="api")
        res = c.call("memory.remember_many", p, {"dedup": True, "items": [
            {"text": ALICE, "room": "payments"}, {"text": BOB, "room": "payments"},
            {"text": "The checkout API listens on port 9090.", "room": "api"}]})
        alice, bob, moved = res["ids"]
        assert {(x["newer_id"], x["id"], x["reason"]) for x in res["conflicts"]} == {
            (bob, alice, "bob vs alice"), (moved, old, "9090 vs 8080")}
        assert c.conflicts(p)["total"] == 2
        # Without dedup (the default: a bulk load of history) nothing is checked.
        q = _palace(shared_daemon)
        res = c.call("memory.remember_many", q, {"items": [
            {"text": ALICE, "room": "payments"}, {"text": BOB, "room": "payments"}]})
        assert "conflicts" not in res and c.conflicts(q)["total"] == 0


def test_cli_remember_many_lists_the_conflicts_it_found(shared_daemon: DaemonProc) -> None:
    p = _palace(shared_daemon)
    lines = "".join(json.dumps({"text": t, "room": "payments"}) + "\n" for t in (ALICE, BOB))
    res = shared_daemon.cli("remember-many", "--palace", p, "--dedup", input=lines, check=True)
    assert "stored 2 drawers" in res.stdout
    assert "conflicts with" in res.stdout and "bob vs alice" in res.stdout, res.stdout
    assert "palace conflicts list" in res.stdout
    res = shared_daemon.cli("remember-many", "--palace", _palace(shared_daemon), "--dedup",
                            "--json", input=lines, check=True)
    out = json.loads(res.stdout)
    [found] = out["conflicts"]
    assert (found["newer_id"], found["id"], found["reason"]) == (*out["ids"][::-1],
                                                                 "bob vs alice")


def test_detail_that_supersedes_a_drawer_takes_its_conflicts(shared_daemon: DaemonProc,
                                                            store: str | None) -> None:
    p = _palace(shared_daemon, store)
    more = "Alice owns the payment gateway integration and also the refunds service."
    with shared_daemon.client() as c:
        alice = c.remember(p, ALICE, room="payments")
        bob = c.remember_ex(p, BOB, room="payments")
        assert [x["id"] for x in bob["conflicts"]] == [alice]
        ext = c.remember_ex(p, more, room="payments")
        assert ext["extends"] == {"id": alice, "similarity": ext["extends"]["similarity"],
                                  "superseded": True}
        # The open conflict names the drawer restating Alice's claim, the later-written
        # one as the newer, its reason read that way round.
        [x] = c.conflicts(p)["conflicts"]
        assert (x["newer_id"], x["older_id"], x["reason"]) == (ext["id"], bob["id"],
                                                               "alice vs bob")
        hits = {h["id"]: h for h in c.recall(p, QUESTION, top_k=5)}
        assert alice not in hits and hits[bob["id"]]["conflicts_with"] == ext["id"]
        # An explicit supersedes moves them too.
        fix = c.remember_ex(p, "Bob owns the payment gateway integration since March.",
                            room="payments", supersedes=bob["id"])
        [x] = c.conflicts(p)["conflicts"]
        assert (x["newer_id"], x["older_id"]) == (fix["id"], ext["id"])
