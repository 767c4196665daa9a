"""What recalls do to the drawers they return: access counts, promotion, TTL renewal and the
access boost of ranking; and the v4 migration that made room for them.

The rules are pure functions (``palaced.palace.access``, ``palaced.retrieval.fusion``); the behaviour runs
through a real palaced with the real model whose checkpointer flushes touches quickly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from palaced.config.settings import Upkeep
from palaced.palace.access import TOUCH_TOP, promoted, renewed_expiry
from palaced.retrieval.fusion import (
    ACCESS_SATURATION,
    DrawerMeta,
    access_share,
    apply_boosts,
)
from palaced.store import Store
from palaced.store.lookup.search import substring_search
from palaced.store.rows import drawers as m
from palaced.store.schema.sqlite import MIGRATIONS, migrate
from tests.conftest import DaemonProc
from tests.e2e.test_upkeep_edit import _palace, tuned_daemon

POLICY = Upkeep(promote_after=2, promote_max=0.8)


def test_promotion_steps_up_presets_and_stops_at_the_cap() -> None:
    assert promoted(0.2, 0, 1, POLICY) == 0.2
    assert promoted(0.2, 1, 2, POLICY) == 0.5  # the 2nd recall
    assert promoted(0.2, 0, 4, POLICY) == 0.8  # two steps in one flush
    assert promoted(0.5, 3, 9, POLICY) == 0.8  # capped at high
    assert promoted(0.3, 1, 2, POLICY) == 0.5  # between presets: to the next one
    assert promoted(0.7, 1, 2, POLICY) == 0.8
    assert promoted(1.0, 0, 100, POLICY) == 1.0  # never down
    assert promoted(0.2, 0, 100, Upkeep(promote_after=0)) == 0.2  # off
    assert promoted(0.5, 1, 2, Upkeep(promote_after=2, promote_max=0.6)) == 0.6


def test_ttl_renewal() -> None:
    now = 1_000_000
    assert renewed_expiry(now + 10, 3_600_000, now, POLICY) == now + 3_600_000
    assert renewed_expiry(now + 7_200_000, 3_600_000, now, POLICY) == now + 7_200_000
    assert renewed_expiry(now - 1, 3_600_000, now, POLICY) == now - 1  # expired stays so
    assert renewed_expiry(None, None, now, POLICY) is None
    assert renewed_expiry(now + 10, 3_600_000, now, Upkeep(recall_extends_ttl=False)) == now + 10


def test_access_boost_is_bounded() -> None:
    assert access_share(0) == 0.0 and access_share(ACCESS_SATURATION) == 1.0
    assert access_share(10 * ACCESS_SATURATION) == 1.0 and 0 < access_share(3) < 1
    scores = {1: 1.0, 2: 0.99, 3: 0.0}
    meta = {1: DrawerMeta(), 2: DrawerMeta(accesses=1_000), 3: DrawerMeta(accesses=1_000)}
    boosted = apply_boosts(scores, meta, now_ms=0, importance_weight=0, recency_weight=0,
                           access_weight=0.05)
    assert boosted[2] > boosted[1]  # a near-tie goes to the drawer used more
    assert boosted[3] == pytest.approx(0.05)  # at most 5 % of the score range
    unused = {i: DrawerMeta() for i in meta}
    assert apply_boosts(scores, meta, now_ms=0, access_weight=0.0) == apply_boosts(
        scores, unused, now_ms=0)
    assert apply_boosts(scores, meta, now_ms=0)[3] == pytest.approx(0.025)  # on by default


def test_v3_palace_migrates_with_trigrams_and_lifetimes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    c = apsw.Connection(str(path))
    for step in range(3):
        with c:
            MIGRATIONS[step](c)
            c.execute("PRAGMA application_id=0x50414C43")
            c.execute(f"PRAGMA user_version={step + 1}")
    with c:
        for i, (text, expires) in enumerate([("Postgres 16 on port 5433", None),
                                             ("a short-lived note", 5_000)]):
            c.execute("INSERT INTO drawers(text, wing, room, created_ms, updated_ms, "
                      "occurred_ms, content_hash, expires_ms) VALUES(?,?,?,?,?,?,?,?)",
                      (text, "w", "r", 1_000, 1_000, 1_000, f"h{i}", expires))
    assert migrate(c) == 3
    assert c.execute("SELECT id, ttl_ms FROM drawers ORDER BY id").fetchall() == [
        (1, None), (2, 4_000)]
    c.close()
    store = Store(path)
    try:
        hits = store.read(lambda c: substring_search(c, "GRES", m.Filters(), 10, 0))
        assert [i for i, _ in hits] == [1]
    finally:
        store.close()


@pytest.fixture(scope="module")
def tuned() -> Iterator[DaemonProc]:
    yield from tuned_daemon()


def _wait(fn: Any, timeout: float = 20.0) -> Any:
    """Poll ``fn`` until it returns something true (the checkpointer flushes touches)."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_recalls_count_promote_and_renew(tuned: DaemonProc) -> None:
    p = _palace(tuned, "acc")
    with tuned.client() as c:
        note = c.remember(p, "The canary deploy flag is CANARY_PCT=5 in the ops repo",
                          importance="low", ttl="1h")
        other = c.remember(p, "Bob prefers tea over coffee in the afternoon",
                           importance="medium")
        stored = c.get(p, note)
        assert (stored["access_count"], stored["importance"]) == (0, 0.2)

        def essential() -> list[int]:
            sections = c.wake_up(p)["sections"]
            return [i["id"] for s in sections if s.get("level") == 1 for i in s["items"]]

        assert essential() == [other, note]  # and now cached
        # An unrelated question: its hits are under the floor, nobody read them.
        c.recall(p, "lattice quantum chromodynamics on GPUs")
        before = time.time() * 1000
        for _ in range(2):
            assert c.recall(p, "canary deploy flag", top_k=1)[0]["id"] == note
        got = _wait(lambda: (lambda d: d if d["access_count"] == 2 else None)(c.get(p, note)))
        assert got, c.get(p, note)
        assert got["importance"] == 0.5  # promoted at its 2nd recall
        assert got["accessed_ms"] >= before
        # Its hour of life restarts at the recall.
        assert got["expires_ms"] >= got["accessed_ms"] + 3_600_000 - 1
        assert got["expires_ms"] > stored["expires_ms"]
        assert c.get(p, other)["access_count"] == 0
        assert essential() == [other, note]  # a tie at medium: the newer first
        for _ in range(6):
            c.recall(p, "canary deploy flag", top_k=1)
        capped = _wait(lambda: (lambda d: d if d["access_count"] == 8 else None)(
            c.get(p, note)))
        assert capped and capped["importance"] == 0.8  # high, never critical
        # L1 follows the promotions: the L1 cached above is invalidated by them.
        assert _wait(lambda: essential() == [note, other])


def test_only_the_read_results_count(tuned: DaemonProc) -> None:
    p = _palace(tuned, "top")
    with tuned.client() as c:
        ids = c.remember_many(p, [{"text": f"Service {n} runs on port {8000 + n}"}
                                  for n in range(TOUCH_TOP + 5)])
        ranked = [r["id"] for r in c.recall(p, "service port", top_k=len(ids))]
        assert len(ranked) == len(ids)
        read = set(ranked[:TOUCH_TOP])
        assert _wait(lambda: all(c.get(p, i)["access_count"] == 1 for i in read))
        assert all(c.get(p, i)["access_count"] == 0 for i in ranked[TOUCH_TOP:])
