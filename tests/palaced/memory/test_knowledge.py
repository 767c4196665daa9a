"""Knowledge graph and memory lifecycle wiring (issue 5): ops, client API and CLI against a
real daemon or the in-process daemon core, plus decay/prune/sweep over an in-process Palace
with a controllable clock."""

from __future__ import annotations

import json
import re
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from palaced.memory import graph, health, upkeep, writes
from palaced.palace import reads
from palaced.store.rows import drawers as m
from palaced.text.rules import IMPORTANCE_PRESETS, MS_PER_DAY
from palaced.text.timeparse import parse_when
from palaced.wire import errors as E
from tests.conftest import DaemonProc
from tests.support.inproc import InProcDaemon


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _ms(text: str) -> int:
    return parse_when(text, now_ms=0)


def _objects(res: dict[str, Any]) -> list[str]:
    return [f["object"] for f in res["facts"]]


def _room(report: dict[str, Any], room: str) -> dict[str, Any]:
    return next(r for r in report["rooms"] if r["room"] == room)


# -- facts over time --------------------------------------------------------------------------
def test_facts_over_time_through_the_client(inproc: InProcDaemon, store: str | None) -> None:
    name = _name("kg-time")
    with inproc.client() as c:
        c.create_palace(name, store=store)
        paris = c.kg_assert(name, "Alice", "lives in", "Paris", valid_from="2020-01-01")
        assert paris["predicate"] == "lives_in" and paris["active"] is True
        berlin = c.kg_assert(name, "Alice", "lives_in", "Berlin", valid_from="2022-06-01")
        london = c.kg_assert(name, "alice", "livesIn", "London", valid_from="2024-01-01")

        # Each assertion closed the previous interval exactly where the next one starts.
        history = c.kg_timeline(name, "Alice")["facts"]
        assert [f["object"] for f in history] == ["Paris", "Berlin", "London"]
        assert history[0]["valid_to_ms"] == berlin["valid_from_ms"] == _ms("2022-06-01")
        assert history[1]["valid_to_ms"] == london["valid_from_ms"] == _ms("2024-01-01")
        assert history[2]["valid_to_ms"] is None

        assert _objects(c.kg_query(name, "ALICE")) == ["London"]
        assert _objects(c.kg_query(name, "Alice", as_of="2021-03-01")) == ["Paris"]
        assert _objects(c.kg_query(name, "Alice", as_of="2022-06-01")) == ["Berlin"]
        assert _objects(c.kg_query(name, "Alice", as_of="2019-12-31")) == []
        as_of = c.kg_query(name, "Alice", as_of=_ms("2023-01-01"))
        assert as_of["as_of_ms"] == _ms("2023-01-01") and as_of["entity"]["name"] == "Alice"

        # A back-dated assertion is slotted into history without overlapping it.
        rome = c.kg_assert(name, "Alice", "lives_in", "Rome", valid_from="2023-01-01")
        assert rome["valid_to_ms"] == _ms("2024-01-01")
        assert _objects(c.kg_query(name, "Alice", as_of="2022-12-31")) == ["Berlin"]
        assert _objects(c.kg_query(name, "Alice", as_of="2023-06-01")) == ["Rome"]
        assert _objects(c.kg_query(name, "Alice")) == ["London"]

        closed = c.kg_invalidate(name, london["id"], at="2025-01-01")
        assert closed["active"] is False and closed["valid_to_ms"] == _ms("2025-01-01")
        assert _objects(c.kg_query(name, "Alice")) == []
        assert _objects(c.kg_query(name, "Alice", as_of="2024-06-01")) == ["London"]

        age = c.kg_assert(name, "Alice", "age", "34", literal=True, confidence=0.9)
        assert age["object_is_entity"] is False and age["confidence"] == pytest.approx(0.9)
        assert c.kg_query(name, "34")["entity"] is None  # a literal is not an entity

        did = c.remember(name, "Alice joined Acme as a data engineer", room="people")
        cited = c.kg_assert(name, "Alice", "works_at", "Acme", source_drawer=did,
                            source_url="https://example.org/a", source_agent="tests")
        assert cited["source"] == {"drawer": did, "url": "https://example.org/a",
                                   "agent": "tests"}
        assert _objects(c.kg_query(name, "Alice")) == ["34", "Acme"]

        with pytest.raises(E.MemoryNotFound):
            c.kg_assert(name, "Alice", "works_at", "Initech", source_drawer=999_999)
        with pytest.raises(E.FactNotFound):
            c.kg_invalidate(name, 999_999)
        with pytest.raises(E.InvalidContent):
            c.kg_assert(name, "Alice", "lives_in", "Oslo", valid_from="next tuesday")
        with pytest.raises(E.InvalidArgs):
            c.kg_assert(name, "Alice", "likes", "Bob", confidence=1.5)
        with pytest.raises(E.InvalidArgs):
            c.call("graph.query", name, {"subject": "Alice", "asof": "2020"})
        with pytest.raises(E.PalaceNotFound):
            c.kg_query(_name("missing"), "Alice")
        # Failed writes changed nothing.
        assert len(c.kg_timeline(name, "Alice")["facts"]) == 6


def test_multi_valued_is_chosen_at_assert_and_entity_search_takes_prefixes(
        shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _name("multi")
    with d.client() as c:
        c.create_palace(name, store=store)
        c.kg_assert(name, "checkout-service", "uses", "redis")
        # `uses` is single-valued by default: a second value would close redis; --multi keeps it.
        c.kg_assert(name, "checkout-service", "uses", "kafka", multi=True)
        assert sorted(_objects(c.kg_query(name, "checkout-service"))) == ["kafka", "redis"]
        c.kg_assert(name, "checkout-service", "uses", "postgres")  # the default: replaces both
        assert _objects(c.kg_query(name, "checkout-service")) == ["postgres"]
        c.kg_assert(name, "billing-service", "owned_by", "Priya")
        found = [e["name"] for e in c.kg_search(name, "bill")]
        assert found[:1] == ["billing-service"]
        assert "checkout-service" in [e["name"] for e in c.kg_search(name, "check")]
    r = d.cli("kg", "assert", "api", "uses", "nats", "--multi", "-p", name, "--json")
    assert r.returncode == 0, r.stderr
    r = d.cli("kg", "assert", "api", "uses", "grpc", "--multi", "-p", name, "--json")
    assert r.returncode == 0, r.stderr
    with d.client() as c:
        assert sorted(_objects(c.kg_query(name, "api"))) == ["grpc", "nats"]


def test_facts_over_time_through_the_cli(shared_daemon: DaemonProc) -> None:
    d = shared_daemon
    name = _name("kg-cli")
    d.cli("create", name, check=True)
    r = d.cli("kg", "assert", "Bob", "works_at", "Initech", "--palace", name,
              "--valid-from", "2019-05-01", "--json", check=True)
    initech = json.loads(r.stdout)
    assert initech["object"] == "Initech" and initech["valid_from_ms"] == _ms("2019-05-01")
    r = d.cli("kg", "assert", "Bob", "works at", "Acme", "-p", name, "--valid-from",
              "2023-02-01", "--json", check=True)
    acme = json.loads(r.stdout)

    r = d.cli("kg", "query", "Bob", "-p", name, "--as-of", "2020-01-01", "--json", check=True)
    assert _objects(json.loads(r.stdout)) == ["Initech"]
    r = d.cli("kg", "query", "Bob", "-p", name, "--json", check=True)
    assert _objects(json.loads(r.stdout)) == ["Acme"]
    r = d.cli("kg", "timeline", "Bob", "-p", name, "--json", check=True)
    facts = json.loads(r.stdout)["facts"]
    assert [f["id"] for f in facts] == [initech["id"], acme["id"]]
    assert facts[0]["valid_to_ms"] == facts[1]["valid_from_ms"] == _ms("2023-02-01")

    r = d.cli("kg", "assert", "Bob", "height_cm", "183", "--literal", "-p", name, check=True)
    assert '--height_cm--> "183"' in r.stdout
    r = d.cli("kg", "timeline", "Bob", "-p", name, check=True)
    assert "Bob --works_at--> Initech  [2019-05-01 → 2023-02-01]" in r.stdout
    assert "Bob --works_at--> Acme  [2023-02-01 → now]" in r.stdout

    r = d.cli("kg", "invalidate", str(acme["id"]), "-p", name, "--at", "2024-01-01", "--json",
              check=True)
    assert json.loads(r.stdout)["valid_to_ms"] == _ms("2024-01-01")
    r = d.cli("kg", "query", "Bob", "-p", name, "--as-of", "2024-06-01", check=True)
    assert "Acme" not in r.stdout and "Initech" not in r.stdout

    # Self-links are typed INVALID_CONTENT errors: exit code 5.
    r = d.cli("kg", "link", "Bob", "related_to", " bob ", "-p", name, "--json")
    assert r.returncode == 5
    assert json.loads(r.stdout)["error"]["name"] == "INVALID_CONTENT"
    assert d.cli("kg", "assert", "Bob", "knows", "BOB", "-p", name).returncode == 5
    assert d.cli("kg", "query", "Bob", "-p", name, "--as-of", "someday").returncode == 5
    # No --palace and no PALACE: the palace of the project the tests run in, which this
    # daemon does not have (a read never creates it).
    unnamed = d.cli("kg", "query", "Bob")
    assert unnamed.returncode == 4 and "is the palace of the project at" in unnamed.stderr
    assert d.cli("kg", "invalidate", "999999", "-p", name).returncode == 4
    assert d.cli("kg", "assert", "Bob", "x", "-p", name).returncode == 2


# -- relations and traversal ------------------------------------------------------------------
def test_links_traversal_and_search(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _name("kg-graph")
    with d.client() as c:
        c.create_palace(name, store=store)
        c.kg_link(name, "checkout", "dependsOn", "payments")
        c.kg_link(name, "payments", "depends_on", "stripe")
        c.kg_link(name, "stripe", "part_of", "vendors")
        c.kg_link(name, "checkout", "part of", "webshop")
        with pytest.raises(E.InvalidContent) as refused:
            c.kg_link(name, "Postgres", "depends_on", "  postgres ")
        assert refused.value.name == "INVALID_CONTENT"
        assert c.kg_query(name, "Postgres")["facts"] == []

        def names(res: dict[str, Any]) -> dict[str, int]:
            return {n["name"]: n["distance"] for n in res["nodes"]}

        one = c.kg_neighbors(name, "checkout")
        assert names(one) == {"checkout": 0, "payments": 1, "webshop": 1}
        assert len(one["edges"]) == 2
        two = c.kg_neighbors(name, "checkout", depth=2)
        assert names(two) == {"checkout": 0, "payments": 1, "webshop": 1, "stripe": 2}
        deps = c.kg_neighbors(name, "checkout", depth=3, relation="depends on")
        assert names(deps) == {"checkout": 0, "payments": 1, "stripe": 2}
        assert c.kg_neighbors(name, "nowhere")["entity"] is None
        with pytest.raises(E.InvalidArgs):
            c.kg_neighbors(name, "checkout", depth=7)

        chain = c.kg_path(name, "checkout", "vendors")
        assert chain["found"] is True and chain["length"] == 3
        assert [f["predicate"] for f in chain["path"]] == ["depends_on", "depends_on", "part_of"]
        # Edges are followed in both directions: webshop <- checkout -> payments -> stripe.
        back = c.kg_path(name, "webshop", "stripe")
        assert back["length"] == 3 and back["path"][0]["subject"] == "checkout"
        assert c.kg_path(name, "checkout", "vendors", max_depth=2)["found"] is False
        missing = c.kg_path(name, "checkout", "nowhere")
        assert missing == {"from": "checkout", "to": "nowhere", "found": False,
                           "length": None, "path": None}
        assert c.kg_path(name, "stripe", "Stripe")["path"] == []

        assert c.kg_search(name, "payments")[0]["name"] == "payments"
        assert c.kg_search(name, "no such words") == []

    r = d.cli("kg", "neighbors", "checkout", "-p", name, "--depth", "2", "--json", check=True)
    assert names(json.loads(r.stdout)) == {"checkout": 0, "payments": 1, "webshop": 1,
                                           "stripe": 2}
    r = d.cli("kg", "neighbors", "checkout", "-p", name, check=True)
    assert "1  payments" in r.stdout and "stripe" not in r.stdout
    r = d.cli("kg", "path", "checkout", "vendors", "-p", name, "--json", check=True)
    assert json.loads(r.stdout)["length"] == 3
    r = d.cli("kg", "path", "checkout", "nowhere", "-p", name, check=True)
    assert "no path" in r.stdout
    r = d.cli("kg", "search", "stripe", "-p", name, "--json", check=True)
    assert json.loads(r.stdout)["entities"][0]["name"] == "stripe"


# -- lifecycle through the daemon -------------------------------------------------------------
def _by_importance(c: Any, name: str, room: str) -> dict[str, int]:
    return {
        level: c.remember(name, f"A {level} note number {i} about the {room} room", room=room,
                          importance=level, dedup=False)
        for i, level in enumerate(IMPORTANCE_PRESETS)
    }


def test_decay_and_prune_through_the_daemon(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _name("life")
    with d.client() as c:
        c.create_palace(name, store=store)
        ids = _by_importance(c, name, "notes")
        out = c.decay(name)
        assert out["drawers"] == 4 and out["decay_ms"] > 0
        # Just stored: nothing has aged yet, and critical never decays at all.
        assert c.get(name, ids["critical"])["weight"] == 1.0
        for level, did in ids.items():
            assert c.get(name, did)["weight"] == pytest.approx(IMPORTANCE_PRESETS[level],
                                                               rel=1e-4)

        # Threshold 1 makes every low and medium drawer a candidate: high and critical never.
        dry = c.prune(name, threshold=1.0, dry_run=True)
        assert dry["dry_run"] is True and dry["pruned"] == 0
        assert dry["ids"] == [ids["low"], ids["medium"]]  # lowest weight first
        assert {x["id"] for x in dry["candidates"]} == set(dry["ids"])
        assert c.palace_info(name)["drawers"] == 4
        real = c.prune(name, threshold=1.0)
        assert real["ids"] == dry["ids"] and real["pruned"] == 2
        for level in ("low", "medium"):
            with pytest.raises(E.MemoryNotFound):
                c.get(name, ids[level])
        assert c.get(name, ids["critical"])["id"] == ids["critical"]
        assert c.get(name, ids["high"])["id"] == ids["high"]
        info = c.palace_info(name)
        assert info["drawers"] == 2 and info["vectors"] == 2
        assert info["index"] == (None if store else 2)  # a team palace: pgvector, no index
        assert c.prune(name, threshold=1.0)["ids"] == []
        with pytest.raises(E.InvalidArgs):
            c.prune(name, threshold=1.5)

    with d.client() as c:
        more = _by_importance(c, name, "cli")
    r = d.cli("prune", "-p", name, "--threshold", "1", "--dry-run", "--json", check=True)
    assert json.loads(r.stdout)["ids"] == [more["low"], more["medium"]]
    r = d.cli("prune", "-p", name, "--threshold", "1", check=True)
    assert "pruned 2 drawers" in r.stdout
    r = d.cli("decay", "-p", name, "--json", check=True)
    assert json.loads(r.stdout)["drawers"] == 4
    assert d.cli("prune", "-p", name, "--threshold", "2").returncode == 2


def test_consolidation_keeps_every_source(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _name("consol")
    texts = [
        "Monday standup: the billing migration is blocked on the schema review",
        "Tuesday standup: schema review done, billing migration resumed",
        "Wednesday standup: billing migration finished, dashboards updated",
        "Thursday standup: on-call handed over to Priya",
    ]
    with d.client() as c:
        c.create_palace(name, store=store)
        sources = [c.remember(name, t, room="standup", dedup=False) for t in texts]
        other = c.remember(name, "The office plants need water on Fridays", room="office")
        res = c.consolidate(name, "standup", "Week summary: the billing migration went from "
                            "blocked to finished; Priya took over on-call.")
        assert res["source_ids"] == sources and res["missing"] == []
        assert res["created"] is True and (res["wing"], res["room"]) == ("general", "standup")
        summary = c.get(name, res["summary_id"])
        assert summary["kind"] == "summary" and summary["room"] == "standup"
        assert summary["importance"] == pytest.approx(0.8) and summary["embedded"] is True
        for did, text in zip(sources, texts, strict=True):
            kept = c.get(name, did)
            assert kept["text"] == text and kept["consolidated_into"] == res["summary_id"]
        assert c.get(name, other)["consolidated_into"] is None
        hits = c.recall(name, "how did the billing migration go this week?", top_k=10)
        assert res["summary_id"] in [h["id"] for h in hits]
        # The room has nothing left to consolidate.
        with pytest.raises(E.InvalidArgs):
            c.consolidate(name, "standup", "Another summary of the same week")

        # Explicit ids may come from any room; the summary lands in the room given.
        res2 = c.consolidate(name, "digest", "Digest: standups and plants", ids=[sources[0], other])
        assert res2["source_ids"] == [sources[0], other]
        assert c.get(name, other)["consolidated_into"] == res2["summary_id"]
        assert c.get(name, sources[0])["text"] == texts[0]
        with pytest.raises(E.MemoryNotFound):
            c.consolidate(name, "digest", "Digest of nothing", ids=[999_999])
        with pytest.raises(E.InvalidContent):
            c.consolidate(name, "office", "The office plants need water on Fridays",
                          ids=[other])

        c.remember(name, "Wing a keeps this note", wing="a", room="shared")
        c.remember(name, "Wing b keeps that note", wing="b", room="shared")
        with pytest.raises(E.InvalidArgs):
            c.consolidate(name, "shared", "Both wings")
        only_a = c.consolidate(name, "shared", "Wing a summary", wing="a")
        assert only_a["wing"] == "a" and len(only_a["source_ids"]) == 1
        loose = [c.remember(name, f"Loose idea {i} about kites", room="ideas", dedup=False)
                 for i in range(2)]
    r = d.cli("consolidate", "-p", name, "--room", "ideas", "--summary", "Kite ideas",
              "--id", str(loose[0]), "--id", str(loose[1]), "--json", check=True)
    out = json.loads(r.stdout)
    assert out["source_ids"] == loose
    with d.client() as c:
        assert all(c.get(name, i)["consolidated_into"] == out["summary_id"] for i in loose)


def test_forgetting_a_summary_frees_its_sources(inproc: InProcDaemon, store: str | None) -> None:
    # Regression: forget used its own deletion path, which left the sources'
    # consolidated_into pointing at the deleted summary, so the room could never be
    # consolidated again and the sources could never be pruned.
    d = inproc
    name = _name("unconsol")
    with d.client() as c:
        c.create_palace(name, store=store)
        sources = [c.remember(name, f"Retro note {i}: the deploy train slipped again",
                              room="retro", dedup=False) for i in range(3)]
        res = c.consolidate(name, "retro", "Retro summary: the deploy train keeps slipping")
        c.forget(name, res["summary_id"])
        for did in sources:
            assert c.get(name, did)["consolidated_into"] is None
        again = c.consolidate(name, "retro", "Retro summary, take two")
        assert again["source_ids"] == sources


def test_health_reports_duplicates_and_hints(shared_daemon: DaemonProc, store: str | None) -> None:
    d = shared_daemon
    name = _name("health")
    with d.client() as c:
        c.create_palace(name, store=store)
        first = c.remember(name, "We use Postgres 16 for billing.", room="db", dedup=False)
        second = c.remember(name, "we use   POSTGRES 16 for billing", room="db", dedup=False)
        c.remember(name, "Redis caches the session tokens", room="db")
        c.remember(name, "We use Postgres 16 for billing.", room="elsewhere", dedup=False)
        near = [c.remember(name, text, room="ops", dedup=False) for text in (
            "The staging server restarts every night at midnight.",
            "Every night at midnight the staging server restarts.",
            "We run Python 3.11 on the build agents.",
            "We run Python 3.12 on the build agents.",
        )]
        c.remember_many(name, [{"text": f"Deploy step {i} of release {i * 3} finished",
                                "room": "deploys"} for i in range(51)])
        report = c.health(name)
        db = _room(report, "db")
        assert db["drawers"] == 3 and db["active"] == 3 and db["stale"] == []
        exact = [p for p in db["duplicates"] if p["kind"] == "exact"]
        assert exact == [{"ids": [first, second], "kind": "exact", "similarity": 1.0}]
        assert db["hint"] is None
        # Same words in another room are not a duplicate of this room.
        assert _room(report, "elsewhere")["duplicates"] == []
        # Paraphrases are near duplicates by their vectors; different versions are not.
        ops = _room(report, "ops")
        assert [(p["ids"], p["kind"]) for p in ops["duplicates"]] == [(near[:2], "near")]
        assert 0.85 <= ops["duplicates"][0]["similarity"] < 1.0
        deploys = _room(report, "deploys")
        assert deploys["unconsolidated"] == 51 and deploys["duplicates"] == []
        assert deploys["hint"] is not None and "51" in deploys["hint"]
        assert report["totals"]["hints"] == 1 and report["totals"]["drawers"] == 59

    r = d.cli("health", "-p", name, "--json", check=True)
    assert _room(json.loads(r.stdout), "db")["duplicate_count"] >= 1
    r = d.cli("health", "-p", name, check=True)
    assert "hint:" in r.stdout and f"exact duplicate {first} ~ {second}" in r.stdout
    with d.client() as c:
        c.consolidate(name, "deploys", "Release deploys 0-50 all finished")
        after = _room(c.health(name), "deploys")
        assert after["hint"] is None and after["summaries"] == 1


# -- in-process: controllable clock, vectors in the index ------------------------------------
class HashEmbedder:
    """A deterministic bag-of-words embedder: enough to exercise the vector index."""

    identity = "test/hash-64"
    dims = 64

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.embed_query(t) for t in texts])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dims, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            vec[zlib.crc32(word.encode()) % self.dims] += 1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec


@pytest.fixture
async def palace(tmp_path: Path) -> AsyncIterator[Any]:
    from palaced.palace.handle import Palace
    from tests.palaced.palace.test_palace_unit import services

    p = await Palace.open("inproc", tmp_path / "palaces" / "inproc",
                          services(tmp_path, HashEmbedder()))
    yield p
    await p.aclose()


async def _store(p: Any, text: str, level: str, room: str = "r", **kw: Any) -> int:
    new = m.NewDrawer(text=text, room=room, importance=IMPORTANCE_PRESETS[level], **kw)
    return int((await writes.remember(p, new, dedup=False))["id"])


@pytest.mark.anyio
async def test_decay_formula_per_importance(palace: Any) -> None:
    ids = {level: await _store(palace, f"{level} drawer about subject {i}", level)
           for i, level in enumerate(IMPORTANCE_PRESETS)}
    created = {k: (await reads.get(palace, i))["created_ms"] for k, i in ids.items()}
    later = max(created.values()) + 60 * MS_PER_DAY
    before = palace.write_counter
    out = await upkeep.decay(palace, now_ms=later)
    assert out == {"drawers": 4, "updated": 3, "decay_ms": later}
    assert palace.write_counter == before + 1

    def expected(level: str, rate: float) -> float:
        age = (later - created[level]) / MS_PER_DAY
        return float(IMPORTANCE_PRESETS[level] * 2 ** (-rate * age / 30))

    weights = {k: (await reads.get(palace, i))["weight"] for k, i in ids.items()}
    assert weights["critical"] == 1.0  # never decays
    assert weights["high"] == pytest.approx(expected("high", 0.5))  # half-life 60 days
    assert weights["medium"] == pytest.approx(expected("medium", 1.0))  # 30 days
    assert weights["low"] == pytest.approx(expected("low", 2.0))  # 15 days
    assert weights["high"] == pytest.approx(0.4, rel=1e-3)

    # A recall not yet flushed by the checkpointer still counts: decay flushes it first.
    palace.note_touched([ids["medium"]])
    await upkeep.decay(palace, now_ms=later)
    touched = await reads.get(palace, ids["medium"])
    assert touched["access_count"] == 1 and touched["weight"] > weights["medium"]

    # The time of the last decay is stored in the palace (the scheduler asks it when a decay
    # may be due, so a manual decay postpones the automatic one).
    assert await upkeep.last_decay_ms(palace) == later


@pytest.mark.anyio
async def test_prune_and_health_over_time(palace: Any) -> None:
    ids = {level: await _store(palace, f"{level} memo on topic {i}", level)
           for i, level in enumerate(IMPORTANCE_PRESETS)}
    old = await _store(palace, "low memo that was replaced later", "low")
    replacing = await _store(palace, "low memo replacing the earlier one", "low", supersedes=old)
    sources = [await _store(palace, f"low standup number {i}", "low", room="standup")
               for i in range(2)]
    made = await upkeep.consolidate(palace, "standup", "Standups, summarised")
    assert made["source_ids"] == sources
    far = (await reads.get(palace, ids["low"]))["created_ms"] + 400 * MS_PER_DAY

    report = await health.report(palace, now_ms=far)
    stale = {s["id"]: s for s in _room(report, "r")["stale"]}
    assert ids["critical"] not in stale
    assert stale[ids["high"]]["prunable"] is False  # faded, but high is never pruned
    assert stale[ids["low"]]["prunable"] is True and stale[ids["low"]]["days_unused"] >= 399
    # Consolidated sources are history, and a summary is high: neither may be pruned.
    assert {s["id"]: s["prunable"] for s in _room(report, "standup")["stale"]} == {
        sources[0]: False, sources[1]: False, made["summary_id"]: False}

    vectors = len(palace.index)
    dry = await upkeep.prune(palace, dry_run=True, now_ms=far)
    assert dry["ids"] == [ids["low"], replacing, ids["medium"]]  # by weight
    real = await upkeep.prune(palace, now_ms=far)
    assert real["ids"] == dry["ids"] and real["pruned"] == 3
    for did in real["ids"]:
        with pytest.raises(E.MemoryNotFound):
            await reads.get(palace, did)
    # Critical, high, the superseded drawer, consolidated sources and the summary remain.
    for did in (ids["critical"], ids["high"], old, *sources, made["summary_id"]):
        assert (await reads.get(palace, did))["id"] == did
    assert len(palace.index) == vectors - 3
    info = await reads.info(palace)
    assert info["vectors"] == info["index"] == len(palace.index)


@pytest.mark.anyio
async def test_sweep_expired_deletes_drawers_and_vectors(palace: Any) -> None:
    from palaced.palace.handle import now_ms

    now = now_ms()
    gone = await _store(palace, "temporary token abc", "medium", expires_ms=now - 1000)
    soon = await _store(palace, "temporary token for an hour", "medium",
                        expires_ms=now + 3_600_000)
    keep = await _store(palace, "permanent note", "medium")
    fact = await graph.kg_assert(palace, "token", "issued_by", "vault", source_drawer=gone)
    vectors = len(palace.index)

    assert await upkeep.sweep_expired(palace, now_ms=now) == {"deleted": [gone]}
    with pytest.raises(E.MemoryNotFound):
        await reads.get(palace, gone)
    assert len(palace.index) == vectors - 1
    # The fact citing it survives without its source.
    timeline = await graph.kg_timeline(palace, "token")
    assert timeline["facts"][0]["id"] == fact["id"]
    assert timeline["facts"][0]["source"]["drawer"] is None

    counter = palace.write_counter
    assert await upkeep.sweep_expired(palace, now_ms=now) == {"deleted": []}
    assert palace.write_counter == counter  # nothing due: no write at all

    # A deleted summary's sources are no longer consolidated into anything.
    made = await upkeep.consolidate(palace, "r", "Summary of the notes", ids=[keep])
    palace.store.write(lambda c: c.execute(
        "UPDATE drawers SET expires_ms = ? WHERE id = ?", (now - 1, made["summary_id"])))
    swept = await upkeep.sweep_expired(palace, now_ms=now + 7_200_000)
    assert sorted(swept["deleted"]) == sorted([soon, made["summary_id"]])
    assert (await reads.get(palace, keep))["consolidated_into"] is None
    info = await reads.info(palace)
    assert info["drawers"] == 1 and info["vectors"] == info["index"] == 1
