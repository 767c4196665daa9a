"""Current truth first (issue 31): conflicts found at remember time, the newer ranked first and
the older marked, resolved through the CLI and the MCP ``upkeep`` tool; a near-duplicate that
adds detail is stored, never folded in; consolidation retires its sources from recall and L1.

One real palaced with the real model serves the module (each test a palace of its own); the
conflict and consolidation tests run on a local and a team (PostgreSQL) palace.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.conftest import DaemonProc
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
