"""Dedup on write, supersede, TTL and context-aware recall against a real daemon."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from palaced.wire import errors as E
from tests.conftest import DaemonProc


def _palace(d: DaemonProc, store: str | None) -> str:
    """A new palace: local, or a team palace in PostgreSQL (``store``: see conftest)."""
    name = f"life-{uuid.uuid4().hex[:8]}"
    with d.client() as c:
        c.create_palace(name, store=store)
    return name


def test_dedup_on_write_true_and_false_near_duplicates(shared_daemon: DaemonProc,
                                                       store: str | None) -> None:
    d = shared_daemon
    name = _palace(d, store)
    with d.client() as c:
        first = c.remember_ex(name, "The staging database runs Postgres 15 on a single node",
                              room="infra")
        assert first["created"] and not first["deduplicated"]
        # A rephrasing of the same memory refreshes it instead of adding a drawer.
        again = c.remember_ex(name, "The staging database runs on Postgres 15, on a single node",
                              room="infra")
        assert again["deduplicated"] is True and again["id"] == first["id"]
        assert again["similarity"] >= 0.85
        # A different fact (another version number) is not a duplicate.
        other = c.remember_ex(name, "The staging database runs Postgres 16 on a single node",
                              room="infra")
        assert other["created"] and other["id"] != first["id"]
        # Same words in another room: distinct memory.
        elsewhere = c.remember_ex(name, "the staging database runs postgres 15 on one node",
                                  room="notes")
        assert elsewhere["created"]
        # Opt out.
        forced = c.remember_ex(name, "The staging DB runs Postgres 15 on a single node",
                               room="infra", dedup=False)
        assert forced["created"]
        # Bulk imports keep repeated transcript lines by default ...
        ids = c.remember_many(name, [{"text": "ok sounds good to me", "room": "chat"},
                                     {"text": "OK, sounds good to me!", "room": "chat"}])
        assert len(set(ids)) == 2
        # ... and merge them when asked.
        ids2 = c.remember_many(name, [{"text": "ok sounds good to me!!", "room": "chat"}],
                               dedup=True)
        assert ids2[0] in ids
        assert c.palace_info(name)["drawers"] == 6
    r = d.cli("remember", "the staging database runs postgres 15 on a single node",
              "--palace", name, "--room", "infra", "--json", check=True)
    assert json.loads(r.stdout)["deduplicated"] is True


def test_supersede_is_atomic_and_kept(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _palace(d, store)
    with d.client() as c:
        old = c.remember(name, "The API rate limit is 100 requests per minute", room="api")
        stop = threading.Event()
        seen: list[set[int]] = []
        errors: list[BaseException] = []

        def reader() -> None:
            with d.client() as rc:
                while not stop.is_set():
                    try:
                        hits = rc.recall(name, "API rate limit requests per minute", top_k=5)
                        seen.append({h["id"] for h in hits})
                    except BaseException as exc:  # pragma: no cover - reported below
                        errors.append(exc)
                        return

        def wait_for(count: int) -> None:
            # Wait for recalls, not for wall time: a loaded machine may need seconds for one.
            deadline = time.monotonic() + 20
            while len(seen) < count and not errors and time.monotonic() < deadline:
                time.sleep(0.01)

        t = threading.Thread(target=reader)
        t.start()
        wait_for(1)
        new = c.remember_ex(name, "The API rate limit is 300 requests per minute", room="api",
                            supersedes=old)
        wait_for(len(seen) + 2)  # at least one recall that started after the write returned
        stop.set()
        t.join(10)
        assert not errors
        # Every concurrent recall saw exactly one of the two, never both, never neither.
        assert seen and all(len(s & {old, new["id"]}) == 1 for s in seen)
        assert seen[-1] & {old, new["id"]} == {new["id"]}
        kept = c.get(name, old)
        assert kept["superseded_by"] == new["id"]
        assert c.get(name, new["id"])["supersedes"] == [old]
        shown = c.recall(name, "API rate limit", top_k=5, include_superseded=True)
        assert old in {h["id"] for h in shown}
        with pytest.raises(E.MemoryNotFound):
            c.remember(name, "replacement of nothing", supersedes=999_999)
        with pytest.raises(E.InvalidContent):
            c.remember(name, "a second replacement", supersedes=old)
        # The refused writes changed nothing.
        assert c.palace_info(name)["drawers"] == 2
    r = d.cli("recall", "rate limit", "--palace", name, "--json", check=True)
    assert old not in {h["id"] for h in json.loads(r.stdout)["results"]}


def test_ttl_leaves_recall_at_once(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _palace(d, store)
    with d.client() as c:
        short = c.remember(name, "The deploy freeze lasts until the incident review", ttl=1)
        keep = c.remember(name, "The deploy checklist lives in the ops wiki")
        past = c.remember(name, "The deploy window already closed", expires_at="2001-01-01")
        hits = {h["id"] for h in c.recall(name, "deploy", top_k=10)}
        assert short in hits and keep in hits and past not in hits
        time.sleep(1.2)
        hits = {h["id"] for h in c.recall(name, "deploy", top_k=10)}
        assert hits == {keep}
        with pytest.raises(E.InvalidArgs):
            c.remember(name, "bad ttl", ttl="soon")
        with pytest.raises(E.InvalidArgs):
            c.remember(name, "both", ttl=5, expires_at="2030-01-01")
    r = d.cli("remember", "temporary note", "--palace", name, "--ttl", "2h", "--json",
              check=True)
    tmp = json.loads(r.stdout)["id"]
    with d.client() as c:
        exp = c.get(name, tmp)["expires_ms"]
        assert abs(exp - (time.time() * 1000 + 7_200_000)) < 60_000


def test_neighbour_context_and_dates_are_searchable(shared_daemon: DaemonProc,
                                                    store: str | None) -> None:
    """A drawer is found through words of its room neighbours and through its date."""
    d = shared_daemon
    name = _palace(d, store)
    with d.client() as c:
        ids = c.remember_many(name, [
            {"text": "Let's talk about the kayak trip", "room": "s1",
             "occurred_at": "2023-05-08"},
            {"text": "Sure, it was amazing, we saw whales", "room": "s1",
             "occurred_at": "2023-05-08"},
            {"text": "I bought new running shoes", "room": "s2",
             "occurred_at": "2023-06-20"},
        ])
        # "whales" only occurs in drawer 2; "kayak" only in drawer 1; drawer 2 is its
        # neighbour, so a kayak+whales query ranks both above the unrelated room.
        res = c.recall_ex(name, "kayak whales", top_k=3)
        top2 = {r["id"] for r in res["results"][:2]}
        assert top2 == {ids[0], ids[1]}
        assert res["rooms"][0]["room"] == "s1"
        # Keyword-only date match: the June drawer is found by its month.
        res = c.recall(name, "June 2023", top_k=1)
        assert res[0]["id"] == ids[2]
