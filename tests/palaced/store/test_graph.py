"""Knowledge graph: temporal facts, normalisation, traversal and entity search."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.store.conn.dialect import is_pg
from palaced.store.knowledge import entities
from palaced.store.knowledge.entities import upsert_entity
from palaced.store.knowledge.facts import (
    active_facts,
    assert_fact,
    facts_as_of,
    invalidate_fact,
    link,
    normalize_predicate,
    timeline,
)
from palaced.store.knowledge.graph_walk import (
    facts_matching,
    neighbors,
    overview,
    path,
    search_entities,
)
from palaced.store.schema.sqlite import GOVERNANCE_DDL, GRAPH_DDL
from palaced.text import timeparse
from palaced.text.timeparse import parse_when
from palaced.wire import vocab
from palaced.wire.errors import FactNotFound, InvalidArgs, InvalidContent, MemoryNotFound
from tests.support.pgstore_support import pg_conn


def _open(target: str) -> apsw.Connection:
    conn = apsw.Connection(target)
    conn.execute("PRAGMA foreign_keys=ON")
    # The facts' source_drawer references the drawers table of the palace schema.
    conn.execute("CREATE TABLE drawers(id INTEGER PRIMARY KEY)")
    with conn:
        for stmt in GRAPH_DDL:
            conn.execute(stmt)
        # The agent columns the governance migration adds to facts.
        for stmt in GOVERNANCE_DDL:
            if stmt.startswith("ALTER TABLE facts"):
                conn.execute(stmt)
    return conn


@pytest.fixture(params=["sqlite", "pg"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[apsw.Connection]:
    """The store connection of a local palace (SQLite), then of a team palace (PostgreSQL):
    every store-level graph test runs on both."""
    if request.param == "pg":
        yield from pg_conn(request.getfixturevalue("pg_url"))
        return
    c = _open(str(tmp_path / "graph.db"))
    c.execute("PRAGMA journal_mode=WAL")
    yield c
    c.close()


def fact(conn: apsw.Connection, s: str, p: str, o: str, at: int, **kw: Any) -> dict[str, Any]:
    with conn:
        made = assert_fact(conn, s, p, o, now_ms=at, **kw)
    return made


def objects(facts: list[dict[str, Any]]) -> list[Any]:
    return [f["object"] for f in facts]


def count(conn: apsw.Connection, table: str) -> int:
    (n,) = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0]
    assert isinstance(n, int)
    return n


# -- temporal facts -------------------------------------------------------------------------
def test_single_valued_predicate_closes_previous_interval(conn: apsw.Connection) -> None:
    paris = fact(conn, "Alice", "lives in", "Paris", 1000)
    berlin = fact(conn, "alice", "livesIn", "Berlin", 2000)
    london = fact(conn, "ALICE", "lives_in", "London", 3000)

    assert [f["id"] for f in timeline(conn, "Alice")] == [paris["id"], berlin["id"], london["id"]]
    assert [(f["valid_from_ms"], f["valid_to_ms"]) for f in timeline(conn, "Alice")] == [
        (1000, 2000),
        (2000, 3000),
        (3000, None),
    ]
    assert objects(active_facts(conn, "Alice")) == ["London"]
    assert facts_as_of(conn, "Alice", 999) == []
    assert objects(facts_as_of(conn, "Alice", 1000)) == ["Paris"]
    assert objects(facts_as_of(conn, "Alice", 1999)) == ["Paris"]
    assert objects(facts_as_of(conn, "Alice", 2000)) == ["Berlin"]
    assert objects(facts_as_of(conn, "Alice", 10**12)) == ["London"]
    assert count(conn, "facts") == 3  # history is kept


def test_fact_dict_shape(conn: apsw.Connection) -> None:
    with conn:
        conn.execute("INSERT INTO drawers(id, text, wing, room, created_ms, updated_ms, "
                     "occurred_ms, content_hash) VALUES (7, 'x', 'w', 'r', 0, 0, 0, 'h')"
                     if is_pg(conn) else "INSERT INTO drawers(id) VALUES (7)")
    f = fact(
        conn,
        "palace",
        "storage",
        "SQLite",
        5,
        valid_from_ms=2,
        confidence=0.7,
        source_drawer=7,
        source_url="https://sqlite.org",
        source_agent="claude",
    )
    assert f == {
        "id": f["id"],
        "subject": "palace",
        "predicate": "storage",
        "object": "SQLite",
        "object_is_entity": True,
        "valid_from_ms": 2,
        "valid_to_ms": None,
        "active": True,
        "confidence": 0.7,
        "source": {"drawer": 7, "url": "https://sqlite.org", "agent": "claude"},
        "created_ms": 5,
        "invalidated_ms": None,
        "created_by": None,
        "invalidated_by": None,
    }
    with pytest.raises(MemoryNotFound), conn:
        assert_fact(conn, "palace", "storage", "usearch", now_ms=6, source_drawer=8)
    # Forgetting the source drawer keeps the fact and drops the dangling reference.
    with conn:
        conn.execute("DELETE FROM drawers WHERE id = 7")
    assert active_facts(conn, "palace")[0]["source"]["drawer"] is None


def test_backdated_assertion_is_inserted_into_history(conn: apsw.Connection) -> None:
    fact(conn, "Alice", "lives_in", "Paris", 1000)
    fact(conn, "Alice", "lives_in", "Berlin", 2000)
    rome = fact(conn, "Alice", "lives_in", "Rome", 3000, valid_from_ms=1500)

    assert (rome["valid_from_ms"], rome["valid_to_ms"], rome["active"]) == (1500, 2000, False)
    assert [
        (f["object"], f["valid_from_ms"], f["valid_to_ms"]) for f in timeline(conn, "Alice")
    ] == [
        ("Paris", 1000, 1500),
        ("Rome", 1500, 2000),
        ("Berlin", 2000, None),
    ]
    assert objects(active_facts(conn, "Alice")) == ["Berlin"]


def test_multi_valued_relations_stay_active_together(conn: apsw.Connection) -> None:
    fact(conn, "palace", "dependsOn", "SQLite", 1)
    fact(conn, "palace", "depends_on", "usearch", 2)
    assert sorted(objects(active_facts(conn, "palace"))) == ["SQLite", "usearch"]

    # Free predicates are single-valued unless the assertion says otherwise ...
    fact(conn, "Bob", "likes", "tea", 1, object_is_entity=False, multi=True)
    fact(conn, "Bob", "likes", "coffee", 2, object_is_entity=False, multi=True)
    assert sorted(objects(active_facts(conn, "Bob"))) == ["coffee", "tea"]
    # ... and a typed multi-valued relation can be made single-valued for one assertion.
    fact(conn, "X", "related_to", "Y", 1)
    fact(conn, "X", "related_to", "Z", 2, multi=False)
    assert objects(active_facts(conn, "X")) == ["Z"]


def test_superseded_by_is_single_valued(conn: apsw.Connection) -> None:
    fact(conn, "API v1", "supersededBy", "API v2", 1)
    fact(conn, "API v1", "superseded_by", "API v3", 2)
    assert objects(active_facts(conn, "API v1")) == ["API v3"]


def test_reasserting_the_active_fact_is_idempotent(conn: apsw.Connection) -> None:
    first = fact(conn, "palace", "depends_on", "SQLite", 1)
    again = fact(conn, "Palace", "dependsOn", "sqlite", 50, valid_from_ms=40)
    assert again == first
    v1 = fact(conn, "Postgres", "version", "15", 1, object_is_entity=False)
    assert fact(conn, "postgres", "Version", "15", 9, object_is_entity=False) == v1
    # The object valid at valid_from, even if closed later, is not duplicated either.
    fact(conn, "Postgres", "version", "16", 100, object_is_entity=False)
    assert fact(
        conn, "Postgres", "version", "15", 200, object_is_entity=False, valid_from_ms=50
    ) == {
        **v1,
        "valid_to_ms": 100,
        "active": False,
    }
    assert count(conn, "facts") == 3


def test_literal_objects_are_values_not_entities(conn: apsw.Connection) -> None:
    f = fact(conn, "Postgres", "name", "Postgres", 1, object_is_entity=False)
    assert (f["object"], f["object_is_entity"]) == ("Postgres", False)
    assert count(conn, "entities") == 1
    assert neighbors(conn, "Postgres")["edges"] == []


def test_self_link_is_refused_in_code(conn: apsw.Connection) -> None:
    with pytest.raises(InvalidContent, match="itself"), conn:
        assert_fact(conn, "Alice", "knows", " alice ", now_ms=1)
    with pytest.raises(InvalidContent, match="itself"), conn:
        link(conn, "SQLite", "partOf", "sqlite", now_ms=1)
    assert count(conn, "entities") == 0
    assert count(conn, "facts") == 0


def test_self_link_is_refused_by_the_schema(conn: apsw.Connection) -> None:
    with conn:
        eid = upsert_entity(conn, "Alice", now_ms=1)["id"]
    with pytest.raises(apsw.ConstraintError), conn:
        conn.execute(
            "INSERT INTO facts(subject_id, predicate, object_id, valid_from_ms, created_ms) "
            "VALUES (?, 'knows', ?, 1, 1)",
            (eid, eid),
        )
    assert count(conn, "facts") == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("dependsOn", "depends_on"),
        ("DependsOn", "depends_on"),
        ("partOf", "part_of"),
        ("supersededBy", "superseded_by"),
        ("alternativeTo", "alternative_to"),
        ("depends on", "depends_on"),
        ("depends-on", "depends_on"),
        ("  DEPENDS_ON ", "depends_on"),
        ("Lives  In", "lives_in"),
        ("HTTPServer", "http_server"),
        ("version2", "version2"),
        ("vit_à", "vit_à"),
    ],
)
def test_predicates_are_normalised(raw: str, expected: str) -> None:
    assert normalize_predicate(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "_", "a/b", "x" * 65, "why?", "a.b"])
def test_invalid_predicates_are_refused(raw: str) -> None:
    with pytest.raises(InvalidContent):
        normalize_predicate(raw)


def test_link_stores_typed_relations_normalised(conn: apsw.Connection) -> None:
    with conn:
        f = link(conn, "auth", "dependsOn", "sessions", now_ms=1)
    assert f["predicate"] == "depends_on"
    assert "depends_on" in vocab.TYPED_RELATIONS


def test_invalid_arguments(conn: apsw.Connection) -> None:
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(InvalidArgs), conn:
            assert_fact(conn, "a", "p", "b", now_ms=1, confidence=bad)
    with pytest.raises(InvalidContent), conn:
        assert_fact(conn, "", "p", "b", now_ms=1)
    with pytest.raises(InvalidContent), conn:
        assert_fact(conn, "a\x00b", "p", "b", now_ms=1)
    with pytest.raises(InvalidContent), conn:
        assert_fact(conn, "a", "p", "x" * 201, now_ms=1)
    with pytest.raises(InvalidContent), conn:
        assert_fact(conn, "a", "p", "  ", now_ms=1, object_is_entity=False)
    with pytest.raises(InvalidContent), conn:
        assert_fact(conn, "a", "p", "b", now_ms=1, valid_from_ms="yesterday")  # type: ignore[arg-type]
    assert count(conn, "entities") == 0


def test_invalidate(conn: apsw.Connection) -> None:
    f = fact(conn, "Alice", "works_at", "Acme", 1000)
    with conn:
        done = invalidate_fact(conn, f["id"], at_ms=5000)
    assert (done["valid_to_ms"], done["invalidated_ms"], done["active"]) == (5000, 5000, False)
    assert objects(facts_as_of(conn, "Alice", 4999)) == ["Acme"]
    assert facts_as_of(conn, "Alice", 5000) == []
    assert active_facts(conn, "Alice") == []
    with conn:
        assert invalidate_fact(conn, f["id"], at_ms=9000) == done  # already closed
    with pytest.raises(FactNotFound), conn:
        invalidate_fact(conn, 12345, at_ms=1)
    # Re-asserting after invalidation opens a new interval.
    again = fact(conn, "Alice", "works_at", "Acme", 7000)
    assert again["id"] != f["id"] and again["active"]
    # Invalidating before the start retracts the fact outright.
    future = fact(conn, "Bob", "works_at", "Initech", 1, valid_from_ms=10_000)
    with conn:
        retracted = invalidate_fact(conn, future["id"], at_ms=2)
    assert (retracted["valid_from_ms"], retracted["valid_to_ms"]) == (10_000, 10_000)
    assert facts_as_of(conn, "Bob", 10_000) == []


# -- traversal ------------------------------------------------------------------------------
@pytest.fixture
def chain(conn: apsw.Connection) -> apsw.Connection:
    """A -depends_on-> B -part_of-> C -related_to-> D, E -depends_on-> A, and a literal."""
    fact(conn, "A", "depends_on", "B", 1)
    fact(conn, "B", "part_of", "C", 1)
    fact(conn, "C", "related_to", "D", 1)
    fact(conn, "E", "depends_on", "A", 1)
    fact(conn, "A", "version", "3", 1, object_is_entity=False)
    return conn


def names_by_distance(result: dict[str, Any]) -> dict[str, int]:
    return {n["name"]: n["distance"] for n in result["nodes"]}


def test_neighbors_depth_one_and_two(chain: apsw.Connection) -> None:
    one = neighbors(chain, "a", 1)
    assert one["entity"]["name"] == "A"
    assert names_by_distance(one) == {"A": 0, "B": 1, "E": 1}
    assert {(e["subject"], e["object"]) for e in one["edges"]} == {("A", "B"), ("E", "A")}
    assert one["truncated"] is False

    two = neighbors(chain, "A", 2)
    assert names_by_distance(two) == {"A": 0, "B": 1, "E": 1, "C": 2}
    assert len(two["edges"]) == 3
    assert names_by_distance(neighbors(chain, "A", 0)) == {"A": 0}


def test_neighbors_filters(chain: apsw.Connection) -> None:
    only = neighbors(chain, "A", 3, relation="dependsOn")
    assert names_by_distance(only) == {"A": 0, "B": 1, "E": 1}
    capped = neighbors(chain, "A", 3, max_nodes=2)
    assert len(capped["nodes"]) == 2 and capped["truncated"] is True
    assert all(
        {e["subject"], e["object"]} <= {n["name"] for n in capped["nodes"]} for e in capped["edges"]
    )
    assert neighbors(chain, "nobody") == {
        "entity": None,
        "nodes": [],
        "edges": [],
        "truncated": False,
    }
    with pytest.raises(InvalidArgs):
        neighbors(chain, "A", 7)
    with pytest.raises(InvalidArgs):
        neighbors(chain, "A", -1)


def test_neighbors_as_of(chain: apsw.Connection) -> None:
    with chain:
        closed = invalidate_fact(chain, active_facts(chain, "E")[0]["id"], at_ms=50)
    assert names_by_distance(neighbors(chain, "A")) == {"A": 0, "B": 1}
    assert names_by_distance(neighbors(chain, "A", as_of_ms=10)) == {"A": 0, "B": 1, "E": 1}
    assert closed["valid_to_ms"] == 50


def test_overview_is_the_whole_graph_as_it_stood(chain: apsw.Connection) -> None:
    whole = overview(chain)
    assert [(n["name"], n["facts"]) for n in whole["nodes"]] == [
        ("A", 3), ("B", 2), ("C", 2), ("D", 1), ("E", 1)]
    assert [(e["subject"], e["predicate"], e["object"]) for e in whole["edges"]] == [
        ("A", "depends_on", "B"), ("B", "part_of", "C"), ("C", "related_to", "D"),
        ("E", "depends_on", "A"), ("A", "version", "3")]
    assert whole["truncated"] is False and whole["as_of_ms"] is None
    assert whole["changes"] == [1]  # every fact began at 1
    # A fact closed at 50 is gone now and there before; a newer value replaces the literal.
    with chain:
        invalidate_fact(chain, whole["edges"][3]["id"], at_ms=50)
    fact(chain, "A", "version", "4", 60, object_is_entity=False)
    now = overview(chain)
    assert "E" not in {n["name"] for n in now["nodes"]}
    assert ("A", "version", "4") in {(e["subject"], e["predicate"], e["object"])
                                     for e in now["edges"]}
    assert now["changes"] == [60, 50, 1]  # "3" ended and "4" began at 60, E's fact ended at 50
    then = overview(chain, as_of_ms=10)
    assert {n["name"] for n in then["nodes"]} == {"A", "B", "C", "D", "E"}
    assert {e["object"] for e in then["edges"] if e["predicate"] == "version"} == {"3"}
    # Bounds: the oldest facts whose entities fit, and the cut said.
    capped = overview(chain, max_nodes=3)
    assert {n["name"] for n in capped["nodes"]} == {"A", "B", "C"}
    assert len(capped["edges"]) == 3 and capped["truncated"] is True
    assert len(overview(chain, max_facts=1)["edges"]) == 1
    with pytest.raises(InvalidArgs):
        overview(chain, max_nodes=0)
    with pytest.raises(InvalidArgs):
        overview(chain, max_facts=vocab.MAX_OVERVIEW_FACTS + 1)


def test_path(chain: apsw.Connection) -> None:
    steps = path(chain, "E", "D")
    assert steps is not None
    assert [(s["subject"], s["predicate"], s["object"]) for s in steps] == [
        ("E", "depends_on", "A"),
        ("A", "depends_on", "B"),
        ("B", "part_of", "C"),
        ("C", "related_to", "D"),
    ]
    back = path(chain, "D", "E")
    assert back is not None and [s["id"] for s in back] == [s["id"] for s in reversed(steps)]
    assert path(chain, "A", "a") == []
    assert path(chain, "A", "nobody") is None
    assert path(chain, "E", "D", max_depth=3) is None
    fact(chain, "lonely", "related_to", "island", 1)
    assert path(chain, "A", "lonely") is None
    # A shortcut wins, and a closed fact is no longer a bridge.
    shortcut = fact(chain, "E", "related_to", "D", 2)
    assert [s["id"] for s in path(chain, "E", "D") or []] == [shortcut["id"]]
    with chain:
        invalidate_fact(chain, shortcut["id"], at_ms=3)
    assert len(path(chain, "E", "D") or []) == 4
    with pytest.raises(InvalidArgs):
        path(chain, "A", "B", max_depth=0)


# -- entities and search --------------------------------------------------------------------
def test_upsert_entity_updates_and_keeps(conn: apsw.Connection) -> None:
    with conn:
        created = upsert_entity(conn, "postgres", type="database", now_ms=1)
        updated = upsert_entity(
            conn,
            "Postgres",
            definition="Relational database server",
            labels=["db", "sql", "db", " oltp "],
            now_ms=2,
        )
    assert updated["id"] == created["id"]
    assert updated == {
        "id": created["id"],
        "name": "Postgres",
        "type": "database",
        "definition": "Relational database server",
        "labels": ["db", "sql", "oltp"],
        "created_ms": 1,
        "updated_ms": 2,
    }
    assert [e["name"] for e in search_entities(conn, "relational")] == ["Postgres"]
    assert [e["name"] for e in search_entities(conn, "oltp")] == ["Postgres"]
    with conn:
        upsert_entity(conn, "Postgres", definition="Object-relational DBMS", labels=[], now_ms=3)
    assert search_entities(conn, "server") == []
    assert [e["name"] for e in search_entities(conn, "dbms")] == ["Postgres"]
    if not is_pg(conn):  # PostgreSQL's is a generated column: it cannot drift
        # The triggers kept the external-content index in step with the table.
        conn.execute("INSERT INTO entities_fts(entities_fts, rank) VALUES ('integrity-check', 1)")
    stored = entities.get_entity(conn, "POSTGRES")
    assert stored is not None and stored["labels"] == []
    with pytest.raises(InvalidContent), conn:
        upsert_entity(conn, "x", labels="db", now_ms=4)


def test_search_ranks_exact_name_first(conn: apsw.Connection) -> None:
    with conn:
        upsert_entity(conn, "Redis Cluster", definition="Sharded redis", now_ms=1)
        upsert_entity(conn, "Redis", now_ms=1)
        upsert_entity(conn, "Memcached", definition="Like redis but simpler", now_ms=1)
    hits = search_entities(conn, "redis")
    assert hits[0]["name"] == "Redis"
    assert {h["name"] for h in hits} == {"Redis", "Redis Cluster", "Memcached"}
    assert all(isinstance(h["score"], float) for h in hits)
    assert len(search_entities(conn, "redis", limit=1)) == 1
    with pytest.raises(InvalidArgs):
        search_entities(conn, "redis", limit=0)


@pytest.mark.parametrize(
    "query",
    [
        '"foo* AND (bar',
        "NEAR(foo bar",
        "name:foo",
        "definition : x",
        "*",
        '"',
        '""',
        "AND OR NOT",
        "^foo",
        "foo -bar",
        "'; DROP TABLE entities; --",
        "\x00",
        "",
        "   ",
        "{name}: x",
        "a" * 5000,
    ],
)
def test_search_neutralises_fts_syntax(conn: apsw.Connection, query: str) -> None:
    with conn:
        upsert_entity(conn, "foo bar", definition="AND NEAR name", now_ms=1)
    assert isinstance(search_entities(conn, query), list)
    assert isinstance(facts_matching(conn, [query], 5), list)


def test_facts_matching_needs_every_name_word(conn: apsw.Connection) -> None:
    apollo = fact(conn, "Project Apollo", "launch_date", "2024-03-01", 1, object_is_entity=False)
    fact(conn, "Project Gemini", "launch_date", "2023-01-01", 1, object_is_entity=False)
    both = fact(conn, "Project Apollo", "depends_on", "Postgres", 2)
    fact(conn, "Postgres", "version", "16", 3, object_is_entity=False)
    old = fact(conn, "Project Apollo", "owner", "Ann", 1)
    fact(conn, "Project Apollo", "owner", "Bea", 4)

    got = facts_matching(conn, ["when", "did", "project", "apollo", "launch"], 10)
    ids = [f["id"] for f in got]
    assert apollo["id"] in ids and both["id"] in ids
    assert old["id"] not in ids  # only active facts
    assert all("Gemini" not in f["subject"] for f in got)
    # Linking two named entities ranks first.
    ranked = facts_matching(conn, ["apollo project on postgres"], 10)
    assert ranked[0]["id"] == both["id"]
    assert facts_matching(conn, ["apollo"], 10) == []
    assert len(facts_matching(conn, ["Project", "APOLLO"], 2)) == 2
    assert facts_matching(conn, [], 5) == []


def test_facts_matching_names_of_stopwords(conn: apsw.Connection) -> None:
    the_who = fact(conn, "The Who", "genre", "rock", 1, object_is_entity=False)
    # A name made only of stopwords needs all of them.
    assert [f["id"] for f in facts_matching(conn, ["the", "who"], 5)] == [the_who["id"]]
    assert facts_matching(conn, ["who"], 5) == []
    beatles = fact(conn, "The Beatles", "genre", "pop", 1, object_is_entity=False)
    assert [f["id"] for f in facts_matching(conn, ["beatles"], 5)] == [beatles["id"]]
    assert facts_matching(conn, ["Beátles"], 5)[0]["id"] == beatles["id"]


# -- dates ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2023-05-08", 1683504000000),
        ("20230508", 1683504000000),
        ("2023-05-08T13:56:00", 1683554160000),
        ("2023-05-08 13:56", 1683554160000),
        ("2023-05-08T13:56:00Z", 1683554160000),
        ("2023-05-08T13:56:00z", 1683554160000),
        ("2023-05-08T15:56:00+02:00", 1683554160000),
        ("2023-05-08T13:56:00.250Z", 1683554160250),
        ("  2023-05-08T13:56:00-05:30 ", 1683573960000),
        ("2023-05", 1682899200000),
        ("2023", 1672531200000),
        ("2023-W19", 1683504000000),
        ("1969-12-31T23:59:59.999", -1),
        ("0001-01-01", timeparse.MIN_MS),
        ("1683554160000", 1683554160000),
        (1683554160000, 1683554160000),
        (0, 0),
        (None, 42),
    ],
)
def test_parse_when_accepts(value: str | int | None, expected: int) -> None:
    assert parse_when(value, now_ms=42) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "yesterday",
        "2023-13-01",
        "2023-02-30",
        "2023-05-08T25:00",
        "08/05/2023",
        "2023-00",
        "12345",
        "0000",
        10**16,
        True,
        1.5,
        "2023-05-08T13:56:00+25:00",
    ],
)
def test_parse_when_refuses(value: object) -> None:
    with pytest.raises(InvalidContent):
        parse_when(value, now_ms=0)  # type: ignore[arg-type]


# -- invariant ------------------------------------------------------------------------------
SUBJECTS = ["s0", "s1"]
PREDICATES = ["lives_in", "version", "superseded_by"]
OBJECTS = ["o0", "o1", "o2", "s0"]

assertion = st.tuples(
    st.just("assert"),
    st.sampled_from(SUBJECTS),
    st.sampled_from(PREDICATES),
    st.sampled_from(OBJECTS),
    st.booleans(),  # literal object?
    st.integers(0, 20),  # valid_from
)
invalidation = st.tuples(st.just("invalidate"), st.integers(0, 30), st.integers(0, 25))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(assertion, assertion, invalidation), max_size=25))
def test_single_valued_predicates_never_overlap(ops: list[tuple[Any, ...]]) -> None:
    conn = _open(":memory:")
    created: list[int] = []
    for op in ops:
        with conn:
            if op[0] == "assert":
                _, s, p, o, literal, start = op
                if not literal and s == o:
                    continue
                f = assert_fact(
                    conn, s, p, o, now_ms=100, valid_from_ms=start, object_is_entity=not literal
                )
                created.append(f["id"])
            elif created:
                _, pick, at = op
                invalidate_fact(conn, created[pick % len(created)], at_ms=at)
    for s in SUBJECTS:
        active = Counter(f["predicate"] for f in active_facts(conn, s))
        assert max(active.values(), default=0) <= 1
        for t in range(-1, 27):
            valid = Counter(f["predicate"] for f in facts_as_of(conn, s, t))
            assert max(valid.values(), default=0) <= 1, (s, t)
        for f in timeline(conn, s):
            assert f["valid_to_ms"] is None or f["valid_to_ms"] >= f["valid_from_ms"]
    conn.close()
