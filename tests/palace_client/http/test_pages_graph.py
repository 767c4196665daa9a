"""The graph pages of ``palace ui`` in process (Starlette's TestClient, a fake daemon pool):
the JSON a drawing gets, the as-of date, the bounds, escaping, and the memoir walk."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from palace_client.http.app import build_app
from palace_client.http.pages_graph import LABEL_CHARS, MAX_NODES, as_of_arg
from palace_client.http.security import COOKIE, Keys
from tests.palace_client.http import test_ui

BASE = "http://127.0.0.1:8765"
XSS = "<img src=x onerror=alert(1)>"


def _fact(fid: int, s: str, p: str, o: str, *, entity: bool = True, to: int | None = None,
          drawer: int | None = None) -> dict[str, Any]:
    return {"id": fid, "subject": s, "predicate": p, "object": o, "object_is_entity": entity,
            "valid_from_ms": 1_000, "valid_to_ms": to, "active": to is None, "confidence": 1.0,
            "source": {"drawer": drawer, "url": None, "agent": None}, "created_ms": 1_000,
            "invalidated_ms": to, "created_by": "cli", "invalidated_by": None}


def _concept(cid: int, name: str) -> dict[str, Any]:
    return {"id": cid, "memoir": "m", "name": name, "definition": name, "labels": [],
            "confidence": 0.5, "revision": 1, "sources": [], "consolidate": False,
            "created_ms": 1_000, "updated_ms": 1_000}


# The memoir: a - b - c linked in a chain, d alone, e beyond the page ("x" is not shown).
CONCEPTS = [_concept(i, n) for i, n in enumerate("abcd", 1)]
LINKS = {"a": [(1, "a", "b"), (2, "b", "c"), (3, "c", "x")], "d": []}


class _Pool(test_ui._Pool):
    """Answers the graph and memoir ops from the small graph above; records every call (as
    test_ui's fake pool does)."""

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        self.calls.append((op, palace, dict(args)))
        if op == "graph.overview":
            return {"as_of_ms": 5_000 if "as_of" in args else None, "truncated": True,
                    "changes": [86_400_000 * 2 + 5, 86_400_000 * 2, 1_000],
                    "nodes": [{"id": 1, "name": "Alice", "type": "person", "facts": 2},
                              {"id": 2, "name": XSS + "x" * 80, "type": None, "facts": 1}],
                    "edges": [_fact(7, "Alice", "works_at", XSS + "x" * 80, to=9_000),
                              _fact(8, "Alice", "role", "engineer", entity=False)]}
        if op == "graph.timeline":
            return {"subject": args["subject"], "entity": None, "facts": [
                _fact(7, "Alice", "works_at", XSS, to=9_000, drawer=3),
                _fact(8, "Alice", "role", XSS, entity=False)]}
        if op == "graph.query":
            return {"as_of_ms": 5_000, "facts": [], "entity": None, "subject": "Alice"}
        if op == "memoir.show":
            return {"memoir": {"name": "m", "concepts": 5, "links": 3, "description": XSS,
                               "created_ms": 1, "updated_ms": 1},
                    "stats": {"avg_confidence": 0.5, "labels": []},
                    "concepts": CONCEPTS, "next_offset": 4}
        if op == "memoir.inspect":
            chain = "a" if args["name"] in "abc" else "d"
            links = [{"id": i, "from": f, "relation": "depends_on", "to": t, "weight": 1.0,
                      "created_ms": 1} for i, f, t in LINKS[chain]]
            reached = {n for link in LINKS[chain] for n in link[1:]} | {args["name"]}
            return {"nodes": [{"name": n} for n in reached], "links": links,
                    "truncated": False}
        raise AssertionError(f"unexpected op {op}")


@pytest.fixture
def ui() -> tuple[TestClient, _Pool]:
    keys, pool = Keys(), _Pool()
    client = TestClient(build_app(keys, 8765, pool, ui=True), base_url=BASE)
    client.cookies.set(COOKIE, keys.session)
    return client, pool


def test_a_day_means_its_end_and_other_times_pass_as_typed() -> None:
    assert as_of_arg("2021-03-01") == "2021-03-01T23:59:59.999Z"
    assert as_of_arg(" 2021-03-01T12:00:00Z ") == "2021-03-01T12:00:00Z"
    assert as_of_arg("") is None and as_of_arg("  ") is None


def test_the_graph_json_is_entities_values_and_facts(ui: tuple[TestClient, _Pool]) -> None:
    client, pool = ui
    response = client.get("/p/pal/graph.json", params={"as_of": "2021-03-01"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert pool.calls == [("graph.overview", "pal", {
        "as_of": "2021-03-01T23:59:59.999Z", "max_nodes": MAX_NODES, "max_facts": 2_000})]
    got = response.json()
    assert got["truncated"] is True and got["entities"] == 2 and got["facts"] == 2
    nodes = {n["id"]: n for n in got["nodes"]}
    assert set(nodes) == {"e1", "e2", "v8"} and nodes["v8"]["kind"] == "value"
    # A long (hostile) name: cut for the canvas, still the text it was (never HTML).
    assert len(nodes["e2"]["label"]) == LABEL_CHARS and nodes["e2"]["label"].startswith(XSS)
    assert nodes["e1"]["href"] == ("/p/pal/graph/entity?name=Alice"
                                   "&as_of=2021-03-01T23%3A59%3A59.999Z")
    edges = {e["id"]: e for e in got["edges"]}
    assert edges["f7"] == {"id": "f7", "source": "e1", "target": "e2", "label": "works_at",
                           "ended": True, "href": nodes["e1"]["href"]}
    assert edges["f8"]["target"] == "v8" and edges["f8"]["ended"] is False


def test_the_graph_pages_need_the_secret_and_are_read_only(
        ui: tuple[TestClient, _Pool]) -> None:
    client, pool = ui
    client.cookies.clear()
    for path in ("/p/pal/graph", "/p/pal/graph.json", "/p/pal/graph/entity?name=A",
                 "/p/pal/memoirs", "/p/pal/memoirs/m", "/p/pal/memoir.json?name=m"):
        assert client.get(path).status_code == 401, path
    assert pool.calls == []
    assert client.post("/p/pal/graph.json").status_code == 405


def test_the_graph_page_escapes_names_and_runs_only_its_own_scripts(
        ui: tuple[TestClient, _Pool]) -> None:
    client, _ = ui
    html = client.get("/p/pal/graph").text
    assert XSS not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert '<script src="/static/cytoscape.min.js"></script>' in html
    assert html.count("<script") == html.count('<script src="/static/')
    assert 'data-src="/p/pal/graph.json"' in html and "cut at the first 500" in html
    assert 'id="__________cytoscape_stylesheet"' in html  # cytoscape adds no <style>
    assert 'href="/p/pal/graph"' in html and 'href="/p/pal/memoirs"' in html  # the nav
    # The days the graph changed, each once, newest first, each a link to the graph then.
    assert ('<a href="/p/pal/graph?as_of=1970-01-03">1970-01-03</a> · '
            '<a href="/p/pal/graph?as_of=1970-01-01">1970-01-01</a></p>') in html


def test_an_entity_shows_its_history_with_the_rows_valid_then(
        ui: tuple[TestClient, _Pool]) -> None:
    client, pool = ui
    fragment = client.get("/p/pal/graph/entity", params={"name": "Alice", "as_of": "2021-03-01"},
                          headers={"HX-Request": "true"}).text
    assert "<html" not in fragment and 'class="entity"' in fragment
    assert fragment.count('<tr class="then ended">') == 1  # works_at: valid then, ended since
    assert fragment.count('<tr class="then">') == 1
    assert XSS not in fragment and 'href="/p/pal/d/3"' in fragment
    assert ("graph.query", "pal", {"subject": "Alice", "as_of": "2021-03-01T23:59:59.999Z"}
            ) in pool.calls
    page = client.get("/p/pal/graph/entity", params={"name": "Alice"}).text
    assert "<html" in page and "then" not in page.split("<tbody>")[1].split("</tbody>")[0]


def test_a_memoir_graph_walks_each_component_once_and_keeps_shown_links(
        ui: tuple[TestClient, _Pool]) -> None:
    client, pool = ui
    got = client.get("/p/pal/memoir.json", params={"name": "m"}).json()
    walks = [args["name"] for op, _, args in pool.calls if op == "memoir.inspect"]
    assert walks == ["a", "d"]  # b and c were reached from a
    assert [n["id"] for n in got["nodes"]] == ["c1", "c2", "c3", "c4"]
    assert [(e["source"], e["label"], e["target"]) for e in got["edges"]] == [
        ("c1", "depends_on", "c2"), ("c2", "depends_on", "c3")]  # c-x: x is not drawn
    assert got["truncated"] is True and got["total"] == 5
    html = client.get("/p/pal/memoirs/m").text
    assert XSS not in html and 'data-src="/p/pal/memoir.json?name=m"' in html
