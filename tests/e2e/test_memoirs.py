"""Memoirs, curated concept graphs (issue 13): the ``memoir.*`` ops through the client and the
CLI against a real daemon (real model, real socket, real SQLite), the database's own
constraints in raw SQL, and recall's L2 showing the concepts a query names."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from palace_client import Client
from palaced.store import Store
from palaced.wire import errors as E
from palaced.wire.vocab import TYPED_RELATIONS, typed_relation
from tests.conftest import DaemonProc


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def palace(shared_daemon: DaemonProc) -> Iterator[tuple[Client, str]]:
    """A fresh palace on the shared real daemon, with a client."""
    name = _name("memoir")
    with shared_daemon.client() as c:
        c.create_palace(name)
        yield c, name


def _db(c: Client, palace: str) -> apsw.Connection:
    """A read-only connection to the palace's database, beside the daemon (WAL)."""
    path = Path(c.palace_info(palace)["path"]) / "palace.db"
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)


def _count(db: apsw.Connection, sql: str) -> int:
    return int(db.execute(sql).fetchall()[0][0])


# -- the CLI, end to end --------------------------------------------------------------------------
def test_cli_round_trip_and_exit_codes(shared_daemon: DaemonProc) -> None:
    d, name = shared_daemon, _name("memoir-cli")
    d.cli("create", name, check=True)

    def cli(*args: str) -> Any:
        res = d.cli("memoir", *args, "-p", name, "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    made = cli("create", "architecture", "-d", "System design decisions")
    assert made["created"] is True and made["memoir"]["description"] == "System design decisions"
    cli("add-concept", "auth-service", "Handles JWT tokens and OAuth2 flows", "-m",
        "Architecture", "-l", "domain:auth", "--label", "Type: Service")
    cli("add-concept", "api-gateway", "Routes every request", "-m", "architecture")
    linked = cli("link", "api-gateway", "dependsOn", "auth-service", "-m", "architecture")
    assert linked["link"]["relation"] == "depends_on" and linked["created"] is True
    shown = cli("show", "architecture")
    assert [c["name"] for c in shown["concepts"]] == ["api-gateway", "auth-service"]
    assert shown["concepts"][1]["labels"] == ["domain:auth", "type:Service"]
    assert shown["memoir"]["links"] == 1
    found = cli("search", "--label", "domain:auth")["concepts"]
    assert [(c["memoir"], c["name"]) for c in found] == [("architecture", "auth-service")]
    refined = cli("refine", "auth-service", "Issues RS256 JWTs; OAuth2 flows", "-m",
                  "architecture")
    assert refined["changed"] is True and refined["concept"]["revision"] == 2
    inspected = cli("inspect", "auth-service", "-m", "architecture", "--depth", "1")
    assert [n["name"] for n in inspected["nodes"]] == ["auth-service", "api-gateway"]

    # Human output and exit codes: 4 not found, 5 invalid input, 6 exists.
    text = d.cli("memoir", "inspect", "auth-service", "-m", "architecture", "-p", name,
                 check=True).stdout
    assert "api-gateway --depends_on--> auth-service" in text and "[r2 c0.60]" in text
    cases = [
        (("show", "nowhere"), 4, "MEMOIR_NOT_FOUND"),
        (("add-concept", "auth-service", "Something else", "-m", "architecture"), 6,
         "CONCEPT_EXISTS"),
        (("create", "ARCHITECTURE"), 6, "MEMOIR_EXISTS"),
        (("link", "auth-service", "part_of", "Auth-Service", "-m", "architecture"), 5,
         "INVALID_CONTENT"),
        (("add-concept", "x", "y", "-m", "architecture", "-l", "bad namespace:v"), 5,
         "INVALID_CONTENT"),
        (("delete", "architecture"), 5, "INVALID_ARGS"),  # no --yes
    ]
    for args, code, error in cases:
        res = d.cli("memoir", *args, "-p", name)
        assert res.returncode == code, (args, res.stderr)
        assert f"[{error}]" in res.stderr, (args, res.stderr)
    gone = cli("delete", "architecture", "--yes")
    assert (gone["concepts"], gone["links"], gone["deleted"]) == (2, 1, True)
    assert cli("list")["memoirs"] == []


# -- concepts ---------------------------------------------------------------------------------------
def test_concept_names_are_unique_per_memoir_case_aside(palace: tuple[Client, str]) -> None:
    c, p = palace
    c.memoir_create(p, "infra")
    c.memoir_create(p, "people")
    first = c.memoir_add_concept(p, "infra", "Auth Service", "Issues tokens")
    assert first["created"] is True
    again = c.memoir_add_concept(p, "INFRA", "  auth   SERVICE ", "Issues tokens")
    assert again["created"] is False and again["concept"]["id"] == first["concept"]["id"]
    assert again["concept"]["name"] == "Auth Service"
    with pytest.raises(E.ConceptExists) as exists:
        c.memoir_add_concept(p, "infra", "AUTH service", "Something else entirely")
    assert exists.value.code == 307
    # The same name is another concept in another memoir.
    other = c.memoir_add_concept(p, "people", "auth service", "The team that owns auth")
    assert other["created"] is True and other["concept"]["memoir"] == "people"
    assert c.memoir_show(p, "infra")["memoir"]["concepts"] == 1
    with pytest.raises(E.MemoirExists):
        c.memoir_create(p, "Infra")
    assert c.memoir_create(p, "Infra", exist_ok=True)["created"] is False
    with pytest.raises(E.MemoirNotFound):
        c.memoir_add_concept(p, "nowhere", "x", "y")


def test_refine_raises_revision_and_confidence(palace: tuple[Client, str]) -> None:
    c, p = palace
    d1 = c.remember(p, "The billing job runs nightly at 02:00 UTC")
    d2 = c.remember(p, "Billing retries failed charges three times")
    c.memoir_create(p, "ops")
    made = c.memoir_add_concept(p, "ops", "billing job", "Runs nightly", sources=[d1],
                                labels=["team:payments"])["concept"]
    assert (made["revision"], made["confidence"], made["sources"]) == (1, 0.5, [d1])

    same = c.memoir_refine(p, "ops", "Billing Job", "Runs nightly", labels=["TEAM:payments"],
                           sources=[d1])
    assert same["changed"] is False and same["concept"]["revision"] == 1  # nothing new

    refined = c.memoir_refine(p, "ops", "billing job", "Runs nightly at 02:00 UTC, retries 3x",
                              sources=[d2], labels=["domain:billing"])["concept"]
    assert refined["revision"] == 2 and refined["confidence"] == pytest.approx(0.6)
    assert refined["sources"] == sorted([d1, d2])
    assert refined["labels"] == ["team:payments", "domain:billing"]
    # +0.1 per refinement that changes something, capped at 1.
    for i in range(6):
        last = c.memoir_refine(p, "ops", "billing job", f"Definition {i}")["concept"]
    assert last["revision"] == 8 and last["confidence"] == 1.0

    # Bad input changes nothing: an unknown source drawer, a bad label, an unknown concept.
    with pytest.raises(E.MemoryNotFound) as missing:
        c.memoir_refine(p, "ops", "billing job", "Changed", sources=[d2, 999_999])
    assert missing.value.details["missing"] == [999_999]
    with pytest.raises(E.InvalidContent):
        c.memoir_refine(p, "ops", "billing job", "Changed", labels=[":nothing"])
    with pytest.raises(E.ConceptNotFound):
        c.memoir_refine(p, "ops", "payroll job", "Changed")
    with pytest.raises(E.InvalidArgs):
        c.call("memoir.add_concept", p, {"memoir": "ops", "name": "x", "definition": "y",
                                         "confidence": 1.5})
    assert c.memoir_show(p, "ops")["concepts"][0]["revision"] == 8

    # Forgetting a source drawer removes it from the concepts citing it.
    c.forget(p, d1)
    assert c.memoir_show(p, "ops")["concepts"][0]["sources"] == [d2]


def test_labels_are_validated_and_searchable_across_memoirs(palace: tuple[Client, str]) -> None:
    c, p = palace
    for memoir in ("backend", "frontend"):
        c.memoir_create(p, memoir)
    c.memoir_add_concept(p, "backend", "session store", "Redis keeps web sessions",
                         labels=["domain:auth", "store:redis"])
    c.memoir_add_concept(p, "frontend", "login form", "Posts credentials to /login",
                         labels=["Domain:auth", "urgent"])
    c.memoir_add_concept(p, "frontend", "theme", "Dark and light palettes", labels=["ui:css"])
    form = c.memoir_search(p, "login")[0]
    assert form["labels"] == ["domain:auth", "tag:urgent"]  # namespace lower-cased, bare -> tag

    both = c.memoir_search(p, label="DOMAIN:auth")
    assert sorted((x["memoir"], x["name"]) for x in both) == [
        ("backend", "session store"), ("frontend", "login form")]
    assert [x["name"] for x in c.memoir_search(p, label="domain:auth", memoir="backend")] == [
        "session store"]
    assert [x["name"] for x in c.memoir_search(p, "credentials", label="domain:auth")] == [
        "login form"]
    # Text search covers names, definitions and labels, words matching the words they begin.
    assert [x["name"] for x in c.memoir_search(p, "redis")] == ["session store"]
    assert [x["name"] for x in c.memoir_search(p, "palet")] == ["theme"]
    assert c.memoir_search(p, "kubernetes") == []
    for bad in ("no colon allowed:", "bad ns:x", ":x", "x" * 200):
        with pytest.raises(E.InvalidContent):
            c.memoir_add_concept(p, "backend", "cache", "Caches things", labels=[bad])
    with pytest.raises(E.InvalidArgs):  # the spec bounds the list
        c.memoir_add_concept(p, "backend", "cache", "Caches", labels=[f"n:{i}" for i in range(33)])
    with pytest.raises(E.InvalidArgs):
        c.memoir_search(p)  # neither words nor a label
    assert c.memoir_show(p, "backend")["memoir"]["concepts"] == 1


# -- links ----------------------------------------------------------------------------------------
def test_links_relations_inspect_depth_and_cascading_delete(palace: tuple[Client, str]) -> None:
    c, p = palace
    c.memoir_create(p, "graph")
    c.memoir_create(p, "other")
    drawer = c.remember(p, "The checkout calls the payments API")
    for n in ("checkout", "payments", "stripe", "vendors", "webshop"):
        c.memoir_add_concept(p, "graph", n, f"The {n} concept", sources=[drawer])
    c.memoir_add_concept(p, "other", "checkout", "Another memoir's checkout")

    assert c.memoir_link(p, "graph", "checkout", "dependsOn", "payments")["created"] is True
    dup = c.memoir_link(p, "graph", "Checkout", "depends-on", "PAYMENTS")
    assert dup["created"] is False and dup["link"]["relation"] == "depends_on"
    c.memoir_link(p, "graph", "payments", "DependsOn", "stripe")
    c.memoir_link(p, "graph", "stripe", "partOf", "vendors")
    heavy = c.memoir_link(p, "graph", "webshop", "instance_of", "checkout", weight=0.4)
    assert heavy["link"]["weight"] == 0.4
    with pytest.raises(E.InvalidContent) as self_link:
        c.memoir_link(p, "graph", "stripe", "related_to", " Stripe ")
    assert "itself" in self_link.value.message
    with pytest.raises(E.InvalidContent) as unknown:
        c.memoir_link(p, "graph", "stripe", "knows", "vendors")
    assert unknown.value.details["relations"] == list(TYPED_RELATIONS)
    with pytest.raises(E.ConceptNotFound):  # concepts of another memoir are not reachable
        c.memoir_link(p, "other", "checkout", "related_to", "stripe")

    def names(res: dict[str, Any]) -> dict[str, int]:
        return {n["name"]: n["distance"] for n in res["nodes"]}

    assert names(c.memoir_inspect(p, "graph", "checkout", depth=0)) == {"checkout": 0}
    one = c.memoir_inspect(p, "graph", "checkout")
    assert names(one) == {"checkout": 0, "payments": 1, "webshop": 1}
    assert len(one["links"]) == 2 and one["concept"]["definition"] == "The checkout concept"
    three = c.memoir_inspect(p, "graph", "checkout", depth=3)
    assert names(three) == {"checkout": 0, "payments": 1, "webshop": 1, "stripe": 2,
                            "vendors": 3}
    capped = c.memoir_inspect(p, "graph", "checkout", depth=3, max_nodes=2)
    assert capped["truncated"] is True and len(capped["nodes"]) == 2
    with pytest.raises(E.InvalidArgs):
        c.memoir_inspect(p, "graph", "checkout", depth=7)

    assert c.memoir_unlink(p, "graph", "stripe", "part_of", "vendors")["removed"] is True
    assert c.memoir_unlink(p, "graph", "stripe", "part_of", "vendors") == {
        "removed": False, "link": None}
    assert "vendors" not in names(c.memoir_inspect(p, "graph", "checkout", depth=3))

    db = _db(c, p)
    try:
        assert _count(db, "SELECT count(*) FROM concept_links") == 3
        gone = c.memoir_delete(p, "graph")
        assert (gone["concepts"], gone["links"]) == (5, 3)
        for table in ("concept_links", "concept_sources"):
            assert _count(db, f"SELECT count(*) FROM {table}") == 0, table
        assert _count(db, "SELECT count(*) FROM concepts") == 1  # the other memoir's
        fts = "SELECT count(*) FROM concepts_fts WHERE concepts_fts MATCH "
        assert _count(db, fts + "'concept'") == 0  # "The ... concept": all gone
        assert _count(db, fts + "'checkout'") == 1  # the other memoir's
    finally:
        db.close()
    with pytest.raises(E.MemoirNotFound):
        c.memoir_delete(p, "graph")
    assert c.get(p, drawer)["id"] == drawer  # the cited drawer stays


def test_database_refuses_self_links_bad_relations_and_cross_memoir_links(
        tmp_path: Path) -> None:
    """The constraints hold in raw SQL, whatever the code above them checks."""
    path = tmp_path / "palace.db"
    Store(path).close()  # creates and migrates
    db = apsw.Connection(str(path))
    db.execute("PRAGMA foreign_keys=ON")
    db.execute("INSERT INTO memoirs(id, name, name_key, created_ms, updated_ms) VALUES "
               "(1, 'a', 'a', 0, 0), (2, 'b', 'b', 0, 0)")
    db.execute("INSERT INTO concepts(id, memoir_id, name, name_key, definition, labels, "
               "confidence, created_ms, updated_ms) VALUES (1, 1, 'x', 'x', 'd', '[\"k:v\"]', "
               "0.5, 0, 0), (2, 1, 'y', 'y', 'd', '[]', 0.5, 0, 0), "
               "(3, 2, 'z', 'z', 'd', '[]', 0.5, 0, 0)")
    link = "INSERT INTO concept_links(source_id, target_id, relation, created_ms) VALUES "
    with pytest.raises(apsw.ConstraintError, match="CHECK"):
        db.execute(link + "(1, 1, 'related_to', 0)")
    with pytest.raises(apsw.ConstraintError, match="CHECK"):
        db.execute(link + "(1, 2, 'relatedTo', 0)")  # only the canonical names are stored
    with pytest.raises(apsw.ConstraintError, match="one memoir"):
        db.execute(link + "(1, 3, 'related_to', 0)")
    db.execute(link + "(1, 2, 'related_to', 0)")
    with pytest.raises(apsw.ConstraintError, match="UNIQUE"):
        db.execute(link + "(1, 2, 'related_to', 0)")
    with pytest.raises(apsw.ConstraintError, match="UNIQUE"):
        db.execute("INSERT INTO concepts(memoir_id, name, name_key, definition, confidence, "
                   "created_ms, updated_ms) VALUES (1, 'X', 'x', 'd', 0.5, 0, 0)")
    with pytest.raises(apsw.ConstraintError, match="CHECK"):
        db.execute("UPDATE concepts SET confidence = 1.5 WHERE id = 1")
    assert db.execute("SELECT label FROM concept_labels").fetchall() == [("k:v",)]
    db.execute("DELETE FROM memoirs WHERE id = 1")
    assert [db.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("concepts", "concept_links", "concept_labels")] == [1, 0, 0]
    db.close()


def test_relation_spellings() -> None:
    for spelling in ("depends_on", "dependsOn", "DependsOn", "depends-on", "Depends On",
                     "DEPENDS_ON", "dependson"):
        assert typed_relation(spelling) == "depends_on", spelling
    assert typed_relation("supersededBy") == "superseded_by"
    assert typed_relation("uses") is None and typed_relation("") is None


# -- recall's L2 ------------------------------------------------------------------------------------
def _l2(res: dict[str, Any]) -> list[dict[str, Any]]:
    return next((s["items"] for s in res["sections"] if s["level"] == 2), [])


def test_recall_l2_shows_the_concepts_a_query_points_at(palace: tuple[Client, str]) -> None:
    c, p = palace
    c.remember(p, "We moved the session store from Memcached to Redis in May", room="infra")
    c.remember(p, "The login page posts credentials over HTTPS", room="web")
    c.memoir_create(p, "architecture")
    c.memoir_add_concept(p, "architecture", "session store",
                         "Redis cluster holding web sessions for 24 hours",
                         labels=["domain:auth"])
    c.memoir_add_concept(p, "architecture", "login page", "Posts credentials to the API")
    c.memoir_add_concept(p, "architecture", "billing", "Stripe charges, nightly invoices")
    c.memoir_link(p, "architecture", "login page", "depends_on", "session store")

    named = c.recall_ex(p, "where does the session store keep data?")
    concepts = [i for i in _l2(named) if i.get("kind") == "concept"]
    assert [i["text"].split(" (")[0] for i in concepts] == ["session store"]
    item = concepts[0]
    assert item["id"] == f"concept:{item['concept_id']}" and item["memoir"] == "architecture"
    assert "Redis cluster holding web sessions" in item["text"]
    assert "login page depends_on session store" in item["text"]
    assert item["labels"] == ["domain:auth"] and item["revision"] == 1
    # Matched by its definition and labels, not its name: enough of the query's words.
    by_words = [i for i in _l2(c.recall_ex(p, "stripe invoices nightly")) if
                i.get("kind") == "concept"]
    assert [i["text"].split(" (")[0] for i in by_words] == ["billing"]
    assert not [i for i in _l2(c.recall_ex(p, "deploy schedule")) if i.get("kind") == "concept"]
    assert not [i for i in _l2(c.recall_ex(p, "session store", levels=[0, 3]))]

    c.memoir_delete(p, "architecture")
    assert not [i for i in _l2(c.recall_ex(p, "where does the session store keep data?"))
                if i.get("kind") == "concept"]
