"""Round trips for every op through the client API and the CLI, against a real daemon."""

from __future__ import annotations

import json

import pytest

from palaced.wire import errors as E
from tests.conftest import DaemonProc

FACTS = [
    ("We use SQLite in WAL mode so readers never block the writer", "storage", ["db"]),
    ("The deploy pipeline runs on GitHub Actions every Friday afternoon", "ops", ["ci"]),
    ("Error code E4711 means the embedding cache is cold", "ops", []),
    ("Alice prefers green tea and hates coffee", "people", []),
    ("The billing service talks to Stripe through a retrying webhook queue", "billing", []),
    ("Our cat is called Miso and sleeps on the keyboard", "people", []),
]


@pytest.fixture
def filled(shared_daemon: DaemonProc) -> tuple[DaemonProc, str, dict[str, int]]:
    import uuid

    name = f"rt-{uuid.uuid4().hex[:8]}"
    with shared_daemon.client() as c:
        c.create_palace(name)
        ids = {}
        for text, room, tags in FACTS:
            ids[text] = c.remember(name, text, room=room, tags=tags)
    return shared_daemon, name, ids


def test_client_api_round_trip(filled: tuple[DaemonProc, str, dict[str, int]]) -> None:
    d, name, ids = filled
    with d.client() as c:
        assert name in [p["name"] for p in c.list_palaces()]
        # Idempotent by content: the same text in the same room returns the same id.
        again = c.remember_ex(name, FACTS[0][0], room="storage", tags=["db"])
        assert again["id"] == ids[FACTS[0][0]] and again["created"] is False
        drawer = c.get(name, ids[FACTS[0][0]])
        assert drawer["text"] == FACTS[0][0]
        assert drawer["room"] == "storage" and drawer["tags"] == ["db"]
        info = c.palace_info(name)
        assert info["drawers"] == len(FACTS) and info["vectors"] == len(FACTS)
        assert info["index"] == len(FACTS) and info["consistent"] is True
        listing = c.drawers(name, limit=4)
        assert len(listing["drawers"]) == 4 and listing["total"] == len(FACTS)
        assert listing["next_offset"] == 4
        rest = c.drawers(name, limit=4, offset=4)
        assert len(rest["drawers"]) == 2 and rest["next_offset"] is None
        seen = {x["id"] for x in listing["drawers"]} | {x["id"] for x in rest["drawers"]}
        assert seen == set(ids.values())
        victim = ids[FACTS[5][0]]
        c.forget(name, victim)
        with pytest.raises(E.MemoryNotFound):
            c.get(name, victim)
        with pytest.raises(E.MemoryNotFound):
            c.forget(name, victim)
        assert all(r["id"] != victim for r in c.recall(name, "cat keyboard Miso", top_k=10))
        info = c.palace_info(name)
        assert info["drawers"] == info["vectors"] == info["index"] == len(FACTS) - 1
        ids_many = c.remember_many(name, [
            {"text": "first bulk drawer about kites", "room": "bulk"},
            {"text": FACTS[1][0], "room": "ops", "tags": ["ci"]},
            {"text": "second bulk drawer about boats", "room": "bulk", "importance": "high"},
        ])
        assert ids_many[1] == ids[FACTS[1][0]]
        assert len(set(ids_many)) == 3
        assert c.get(name, ids_many[2])["importance"] == pytest.approx(0.8)
        status = c.status()
        mine = next(p for p in status["palaces"] if p["name"] == name)
        assert mine["drawers"] == mine["vectors"] == mine["index"]
        assert mine["consistent"] is True and mine["pending_embeddings"] == 0
        c.delete_palace(name)
        with pytest.raises(E.PalaceNotFound):
            c.palace_info(name)


def test_recall_semantic_lexical_and_filters(
    filled: tuple[DaemonProc, str, dict[str, int]],
) -> None:
    d, name, ids = filled
    with d.client() as c:
        # Paraphrase: shares almost no words with the stored text.
        res = c.recall_ex(name, "how do concurrent database reads and writes interact?",
                          top_k=3)
        assert res["mode"] == "hybrid"
        assert res["results"][0]["id"] == ids[FACTS[0][0]]
        res = c.recall(name, "which beverage does Alice dislike?", top_k=3)
        assert res[0]["id"] == ids[FACTS[3][0]]
        # Exact identifier: lexical.
        res = c.recall(name, "E4711", top_k=3)
        assert res[0]["id"] == ids[FACTS[2][0]]
        assert res[0]["lexical"] is not None
        # Filters: the best match overall is excluded by the room filter.
        res = c.recall(name, "deploy pipeline", room="people", top_k=5)
        assert res and all(r["room"] == "people" for r in res)
        res = c.recall(name, "database", tags=["ci"], top_k=5)
        assert [r["id"] for r in res] == [ids[FACTS[1][0]]]
        res = c.recall(name, "tea", wing="nowhere", top_k=5)
        assert res == []


def test_long_drawer_is_found_by_text_near_its_end(shared_daemon: DaemonProc) -> None:
    """A long drawer is chunked (one vector per window) and found by the meaning of its end."""
    d = shared_daemon
    name = "rt-long"
    filler = " ".join(
        f"Paragraph {i} of the onboarding guide covers office hours, badge access and "
        f"the coffee machine on floor {i % 5}." for i in range(60))
    tail = ("Finally, the disaster recovery drill restores the primary cluster from "
            "cold storage in another continent.")
    with d.client() as c:
        c.create_palace(name)
        long_id = c.remember(name, filler + " " + tail, room="docs")
        info = c.palace_info(name)
        assert info["vectors"] > 1  # chunked: one vector per window
        for i in range(5):
            c.remember(name, f"Short note {i} about team lunches and birthdays", room="misc")
        # A paraphrase of the last sentence only (semantic, not lexical).
        res = c.recall_ex(name, "how do we rebuild the main database cluster after a "
                                "catastrophe?", top_k=3)
        assert res["results"][0]["id"] == long_id
        assert res["results"][0]["vector"] is not None


def test_cli_round_trip(shared_daemon: DaemonProc) -> None:
    d = shared_daemon
    r = d.cli("create", "cli-work", "--json", check=True)
    assert json.loads(r.stdout)["name"] == "cli-work"
    assert d.cli("create", "cli-work").returncode == 6
    r = d.cli("remember", "We use SQLite in WAL mode so readers never block the writer",
              "--palace", "cli-work", "--room", "storage", "--tag", "db", "--json", check=True)
    out = json.loads(r.stdout)
    assert out["created"] is True and isinstance(out["id"], int)
    first = out["id"]
    r = d.cli("remember", "-", "--palace", "cli-work", "--json", "--when", "2024-05-08",
              "--importance", "critical", input="Release 2.3 shipped with the new planner\n",
              check=True)
    second = json.loads(r.stdout)["id"]
    r = d.cli("remember", "We use SQLite in WAL mode so readers never block the writer",
              "--palace", "cli-work", "--room", "storage", "--json", check=True)
    assert json.loads(r.stdout) == {"id": first, "created": False, "deduplicated": False}
    jsonl = "\n".join(json.dumps({"text": f"bulk line {i} about topic {i}", "room": "bulk"})
                      for i in range(5))
    r = d.cli("remember-many", "--palace", "cli-work", "--json", input=jsonl, check=True)
    assert json.loads(r.stdout)["count"] == 5
    r = d.cli("recall", "how do readers and writers interact?", "--palace", "cli-work",
              "--json", check=True)
    rec = json.loads(r.stdout)
    assert rec["results"][0]["id"] == first
    assert {"id", "text", "score", "wing", "room"} <= set(rec["results"][0])
    r = d.cli("recall", "planner", "--palace", "cli-work", "--top-k", "1", check=True)
    assert "Release 2.3" in r.stdout
    r = d.cli("get", str(second), "--palace", "cli-work", "--json", check=True)
    got = json.loads(r.stdout)
    assert got["importance"] == 1.0 and got["occurred_ms"] == 1715126400000
    r = d.cli("drawers", "--palace", "cli-work", "--room", "bulk", "--limit", "2", "--json",
              check=True)
    page = json.loads(r.stdout)
    assert page["total"] == 5 and len(page["drawers"]) == 2 and page["next_offset"] == 2
    r = d.cli("info", "--palace", "cli-work", "--json", check=True)
    assert json.loads(r.stdout)["drawers"] == 7
    r = d.cli("list", "--json", check=True)
    assert "cli-work" in [p["name"] for p in json.loads(r.stdout)["palaces"]]
    r = d.cli("status", "--json", check=True)
    st = json.loads(r.stdout)
    assert st["model"]["state"] == "ready" and st["tokenizer"]["exact"] is True
    r = d.cli("status", check=True)
    assert "hybrid recall" in r.stdout
    r = d.cli("forget", str(second), "--palace", "cli-work", "--json", check=True)
    assert json.loads(r.stdout)["forgotten"] is True
    # Exit codes: not found, invalid input, usage, palace missing.
    assert d.cli("get", str(second), "--palace", "cli-work").returncode == 4
    assert d.cli("recall", "x", "--palace", "no-such").returncode == 4
    assert d.cli("create", "../x").returncode == 5
    assert d.cli("remember", "x", "--palace", "cli-work", "--importance", "huge"
                 ).returncode == 5
    assert d.cli("recall").returncode == 2
    # No --palace and no PALACE: the palace of the project the tests run in, which this
    # daemon does not have (a read never creates it).
    unnamed = d.cli("recall", "x")
    assert unnamed.returncode == 4 and "is the palace of the project at" in unnamed.stderr
    r = d.cli("get", "999999", "--palace", "cli-work", "--json")
    assert r.returncode == 4 and json.loads(r.stdout)["error"]["name"] == "MEMORY_NOT_FOUND"
    assert d.cli("delete", "cli-work").returncode == 5  # needs --yes
    d.cli("delete", "cli-work", "--yes", check=True)
    assert d.cli("info", "--palace", "cli-work").returncode == 4


@pytest.mark.daemon
def test_daemon_unreachable_exit_code(home) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import base_env

    d = DaemonProc(home, base_env(home))
    # daemon stop never starts a daemon; it says it is not running.
    r = d.cli("daemon", "stop", "--json", check=True)
    assert json.loads(r.stdout) == {"running": False, "stopped": False}
    from palace_client import Client

    with Client(d.socket, autostart=False) as c, pytest.raises(E.DaemonUnreachable):
        c.status()
