"""Progressive recall through the in-process daemon core (``tests/support/inproc.py``): L1 cache,
closets narrowing L2, budgets. (Chunked long drawers found by meaning need the real model:
``test_roundtrip.py``.)"""

from __future__ import annotations

import uuid

from tests.support.inproc import InProcDaemon


def _palace(d: InProcDaemon, store: str | None = None) -> str:
    name = f"prog-{uuid.uuid4().hex[:8]}"
    with d.client() as c:
        c.create_palace(name, store=store)
    return name


def _section(res: dict, level: int) -> list:  # type: ignore[type-arg]
    return [s for s in res["sections"] if s["level"] == level]


def test_l1_essential_cache_is_invalidated_by_writes(inproc: InProcDaemon,
                                                     store: str | None) -> None:
    d = inproc
    name = _palace(d, store)
    with d.client() as c:
        low = c.remember(name, "Lunch menu rotates weekly", importance="low")
        first = c.call("memory.wake_up", name, {"budget": 500})
        l1 = _section(first, 1)[0]["items"]
        assert [i["id"] for i in l1] == [low]
        crit = c.remember(name, "Never force-push to main", importance="critical")
        second = c.call("memory.wake_up", name, {"budget": 500})
        ids = [i["id"] for i in _section(second, 1)[0]["items"]]
        assert ids[0] == crit and low in ids
        # Recall's L1 comes from the same cache and sees the write too.
        res = c.recall_ex(name, "lunch", levels=[1], budget=500)
        shown = [i["id"] for s in res["sections"] for i in s["items"]]
        assert crit in shown and low in shown  # each once: a hit is not repeated in L1
        c.forget(name, crit)
        third = c.call("memory.wake_up", name, {"budget": 500})
        assert [i["id"] for i in _section(third, 1)[0]["items"]] == [low]
        # L0 (still the placeholder a new palace gets) is not shown; the budget holds.
        assert third["sections"][0]["level"] == 1
        assert third["tokens_used"] <= 500 and third["tokenizer"]["name"] == "cl100k_base"


def test_closets_narrow_l2(inproc: InProcDaemon, store: str | None) -> None:
    d = inproc
    name = _palace(d, store)
    with d.client() as c:
        kafka = c.remember(name, "KafkaConsumer lag alerts page the data team", room="alerts")
        c.remember(name, "Disk usage alerts page the infra team", room="alerts")
        c.remember(name, "The data team meets on Tuesdays", room="people")
        res = c.recall_ex(name, "who gets paged for KafkaConsumer lag?", top_k=3,
                          levels=[2, 3], budget=1000)
        # The drawer filed under the closet the query names is the best hit, shown first ...
        hits = res["sections"][0]
        assert hits["level"] is None and hits["items"][0]["id"] == kafka
        # ... and no drawer is repeated in L2 or L3.
        ids = [i["id"] for s in res["sections"] for i in s["items"]]
        assert len(ids) == len(set(ids))
        # A room named in the query narrows L2 to that room.
        res = c.recall_ex(name, "what is in people", top_k=3, levels=[2], budget=1000)
        rooms = {i["room"] for s in _section(res, 2) for i in s["items"] if "room" in i}
        assert rooms <= {"people"}


def test_budget_never_exceeded_and_l0_kept(inproc: InProcDaemon, store: str | None) -> None:
    d = inproc
    name = _palace(d, store)
    with d.client() as c:
        c.remember_many(name, [{"text": f"fact number {i} about the release train " * 5}
                               for i in range(30)])
        for budget in (0, 5, 40, 120, 700, 3000):
            res = c.recall_ex(name, "release train", top_k=20, budget=budget, deep=True)
            assert res["tokens_used"] <= budget
            if budget >= 120:  # the hits first (at 40 the heading leaves no room for them)
                assert res["sections"][0]["level"] is None
        res = c.recall_ex(name, "release train", top_k=20, budget=120, deep=True)
        assert res["cut"], "a small budget must report what was cut"
        ids = [i["id"] for s in res["sections"] for i in s["items"]]
        assert len(ids) == len(set(ids))


def test_ids_are_never_reused_and_cached_l1_drops_expired(inproc: InProcDaemon,
                                                          store: str | None) -> None:
    import time

    d = inproc
    name = _palace(d, store)
    with d.client() as c:
        c.remember(name, "first memory about kites")
        last = c.remember(name, "second memory about boats")
        c.forget(name, last)
        again = c.remember(name, "third memory about trains")
        # SQLite would hand the highest freed rowid out again without AUTOINCREMENT.
        assert again > last
        short = c.remember(name, "a short-lived but critical note", importance="critical",
                           ttl=1)
        first = c.wake_up(name, budget=500)
        assert short in [i["id"] for i in _section(first, 1)[0]["items"]]
        time.sleep(1.2)
        # No write happened, so L1 comes from the cache: the expired drawer must still go.
        later = c.wake_up(name, budget=500)
        assert short not in [i["id"] for i in _section(later, 1)[0]["items"]]
        res = c.recall_ex(name, "note", levels=[1], budget=500)
        assert short not in [i["id"] for sec in _section(res, 1) for i in sec["items"]]


def test_every_requested_level_with_content_shows_at_small_budgets(inproc: InProcDaemon,
                                                                   store: str | None) -> None:
    d = inproc
    name = _palace(d, store)
    with d.client() as c:
        c.remember_many(name, [{"text": f"release train note {i}: " + "the rollback plan " * 30}
                               for i in range(30)])
        c.remember(name, "Rules of the release train", importance="critical")
        for budget in (120, 200):
            res = c.recall_ex(name, "release train rollback", budget=budget, deep=True,
                              levels=[0, 1, 3])
            assert res["tokens_used"] <= budget
            levels = [s["level"] for s in res["sections"]]
            # L0 has no content: a new palace's placeholder identity is not shown.
            assert levels == [None, 1, 3], (budget, levels)
            # The hits' first item comes whole or cut with the marker; nothing is repeated.
            ids = [i["id"] for s in res["sections"] for i in s["items"]]
            assert len(ids) == len(set(ids))
            assert any(c["truncated"] for c in res["cut"])
