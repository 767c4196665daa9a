"""The web app's graph pages (docs/ui.md#the-knowledge-graph-and-memoirs): the knowledge graph
and the memoirs drawn as graphs, with their temporal history.

Pages: ``/p/{palace}/graph`` (the knowledge graph as of a date; ``graph/entity?name=`` an
entity's facts, closed ones included), ``/p/{palace}/memoirs`` (the list) and
``/p/{palace}/memoirs/{name}`` (a memoir's concepts and links). Each graph comes as JSON from
a GET of its own (``graph.json``, ``memoir.json``) that ``static/graph.js`` fetches and hands
to the vendored cytoscape.js, which draws labels as canvas text (never HTML). All read-only.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from palace_client.http.pages import UI, palace_url
from palaced.wire.vocab import MAX_DEPTH, MAX_LIMIT

# What one drawing shows at most: a browser lays out a few hundred nodes in about a second;
# past that the page says the graph was cut (the op's ``truncated``).
MAX_NODES = 500
MAX_FACTS = 2_000
MAX_CONCEPTS = 500
LABEL_CHARS = 60  # a node's label on the canvas (the tables show the whole text)
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def as_of_arg(text: str) -> str | None:
    """The ``as_of`` a page was given, as the op's time: a bare day (the date picker's value)
    means the end of that day UTC, so the facts recorded that day are in; anything else
    (an ISO time, epoch ms) goes to the daemon as typed, which refuses what it cannot read."""
    text = text.strip()
    if not text:
        return None
    return f"{text}T23:59:59.999Z" if _DAY.fullmatch(text) else text


def change_days(changes: list[int], limit: int = 20) -> list[str]:
    """The UTC days of the graph's latest changes (epoch ms), newest first, each once: the
    as-of dates worth stepping back to."""
    days: list[str] = []
    for ms in changes:
        day = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d")
        if day not in days:
            days.append(day)
    return days[:limit]


def short(text: str, limit: int = LABEL_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (a canvas label stays small)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entity_url(palace: str, name: str, as_of: str | None = None) -> str:
    """The URL of an entity's facts and history (the name in the query: it may hold ``/``)."""
    query = {"name": name, **({"as_of": as_of} if as_of else {})}
    return palace_url(palace, "graph", "entity") + "?" + urlencode(query)


def kg_elements(palace: str, got: dict[str, Any], as_of: str | None) -> dict[str, Any]:
    """A ``graph.overview`` answer as the drawing's nodes and edges: an entity per node, a
    fact per edge labelled by its predicate (a click on it: its subject's facts); a literal
    fact's value is a node of its own (kind ``value``), so a changed value shows as a changed
    edge too."""
    nodes: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for n in got["nodes"]:
        ids[n["name"]] = f"e{n['id']}"
        nodes.append({"id": f"e{n['id']}", "label": short(n["name"]), "kind": "entity",
                      "type": n.get("type") or "", "facts": n["facts"],
                      "href": entity_url(palace, n["name"], as_of)})
    edges: list[dict[str, Any]] = []
    for f in got["edges"]:
        target = ids.get(f["object"]) if f["object_is_entity"] else None
        if target is None:
            target = f"v{f['id']}"
            nodes.append({"id": target, "label": short(str(f["object"])), "kind": "value"})
        edges.append({"id": f"f{f['id']}", "source": ids[f["subject"]], "target": target,
                      "label": f["predicate"], "ended": f["valid_to_ms"] is not None,
                      "href": entity_url(palace, f["subject"], as_of)})
    return {"nodes": nodes, "edges": edges, "truncated": got["truncated"],
            "entities": len(got["nodes"]), "facts": len(got["edges"]),
            "as_of_ms": got["as_of_ms"], "max_nodes": MAX_NODES}


async def memoir_graph(ui: UI, palace: str, name: str) -> dict[str, Any]:
    """A memoir's concepts (the first ``MAX_CONCEPTS`` by name) and every link between them.

    No op lists a memoir's links at once: ``memoir.inspect`` gives a concept's neighbourhood,
    so each concept not reached yet starts one walk (a connected memoir takes one call)."""
    shown = await ui.run_op("memoir.show", palace, {"memoir": name, "limit": MAX_CONCEPTS})
    concepts = shown["concepts"]
    names = {c["name"] for c in concepts}
    reached: set[str] = set()
    links: dict[int, dict[str, Any]] = {}
    for c in concepts:
        if c["name"] in reached:
            continue
        walk = await ui.run_op("memoir.inspect", palace, {
            "memoir": name, "name": c["name"], "depth": MAX_DEPTH, "max_nodes": MAX_LIMIT})
        reached.update(n["name"] for n in walk["nodes"])
        links.update((link["id"], link) for link in walk["links"]
                     if link["from"] in names and link["to"] in names)
    ids = {c["name"]: f"c{c['id']}" for c in concepts}
    return {
        "nodes": [{"id": ids[c["name"]], "label": short(c["name"]), "kind": "concept",
                   "confidence": c["confidence"], "revision": c["revision"],
                   "href": f"#c{c['id']}"} for c in concepts],
        "edges": [{"id": f"l{link['id']}", "source": ids[link["from"]],
                   "target": ids[link["to"]], "label": link["relation"],
                   "weight": link["weight"]} for _, link in sorted(links.items())],
        "truncated": shown["next_offset"] is not None, "concepts": len(concepts),
        "total": shown["memoir"]["concepts"], "max_nodes": MAX_CONCEPTS,
    }


def routes(ui: UI) -> list[BaseRoute]:
    """The graph pages: the knowledge graph, an entity's history, the memoirs."""
    run_op, page = ui.run_op, ui.page

    async def overview(palace: str, as_of: str | None) -> dict[str, Any]:
        """The graph as a drawing shows it (now, or as of ``as_of``), bounded."""
        return await run_op("graph.overview", palace, {
            "max_nodes": MAX_NODES, "max_facts": MAX_FACTS,
            **({"as_of": as_of} if as_of else {})})

    async def graph_page(request: Request) -> Response:
        palace = request.path_params["palace"]
        typed = request.query_params.get("as_of", "").strip()
        as_of = as_of_arg(typed)
        # The entities as a list too (the same op as the drawing): reachable without the
        # canvas, by keyboard, and the place a bad date is refused with its message.
        got = await overview(palace, as_of)
        query = "?" + urlencode({"as_of": as_of}) if as_of else ""
        entities = [{**n, "url": entity_url(palace, n["name"], as_of)} for n in got["nodes"]]
        days = [(day, palace_url(palace, "graph") + "?" + urlencode({"as_of": day}))
                for day in change_days(got["changes"])]
        return page("graph.html", palace=palace, as_of=typed, as_of_ms=got["as_of_ms"],
                    days=days, json_url=palace_url(palace, "graph.json") + query, entities=entities,
                    facts=len(got["edges"]), truncated=got["truncated"], max_nodes=MAX_NODES)

    async def graph_json(request: Request) -> Response:
        palace = request.path_params["palace"]
        as_of = as_of_arg(request.query_params.get("as_of", ""))
        got = await overview(palace, as_of)
        return JSONResponse(kg_elements(palace, got, as_of))

    async def entity(request: Request) -> Response:
        palace = request.path_params["palace"]
        name = request.query_params.get("name", "")
        as_of = as_of_arg(request.query_params.get("as_of", ""))
        got = await run_op("graph.timeline", palace, {"subject": name})
        at = None
        if as_of:  # which rows were valid then: the daemon reads the time, as the graph did
            at = (await run_op("graph.query", palace, {"subject": name, "as_of": as_of})
                  )["as_of_ms"]
        rows = []
        for f in got["facts"]:
            other = f["subject"] if f["object"] == name and f["object_is_entity"] else (
                f["object"] if f["object_is_entity"] else None)
            then = at is not None and f["valid_from_ms"] <= at and (
                f["valid_to_ms"] is None or f["valid_to_ms"] > at)
            rows.append({**f, "then": then,
                         "other_url": entity_url(palace, other, as_of) if other else None})
        fragment = request.headers.get("hx-request") == "true"
        return page("graph_entity_part.html" if fragment else "graph_entity.html",
                    palace=palace, subject=name, entity=got["entity"], facts=rows, as_of_ms=at,
                    subject_url=entity_url(palace, name, as_of))

    async def memoirs_page(request: Request) -> Response:
        palace = request.path_params["palace"]
        listed = (await run_op("memoir.list", palace, {}))["memoirs"]
        rows = [{**m, "url": palace_url(palace, "memoirs", m["name"])} for m in listed]
        return page("graph_memoirs.html", palace=palace, memoirs=rows)

    async def memoir_page(request: Request) -> Response:
        palace, name = request.path_params["palace"], request.path_params["name"]
        shown = await run_op("memoir.show", palace, {"memoir": name, "limit": MAX_CONCEPTS})
        return page("graph_memoir.html", palace=palace, shown=shown,
                    json_url=palace_url(palace, "memoir.json") + "?"
                    + urlencode({"name": name}), max_nodes=MAX_CONCEPTS)

    async def memoir_json(request: Request) -> Response:
        palace = request.path_params["palace"]
        drawn = await memoir_graph(ui, palace, request.query_params.get("name", ""))
        return JSONResponse(drawn)

    g = ui.guarded
    return [
        Route("/p/{palace}/graph", g(graph_page), methods=["GET"]),
        Route("/p/{palace}/graph.json", g(graph_json), methods=["GET"]),
        Route("/p/{palace}/graph/entity", g(entity), methods=["GET"]),
        Route("/p/{palace}/memoirs", g(memoirs_page), methods=["GET"]),
        Route("/p/{palace}/memoir.json", g(memoir_json), methods=["GET"]),
        # A memoir's name may hold "/": the path converter takes the rest of the path.
        Route("/p/{palace}/memoirs/{name:path}", g(memoir_page), methods=["GET"]),
    ]
