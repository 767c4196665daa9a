"""``palace kg ...``: the knowledge graph (temporal facts and relations between concepts).

Exit codes are those of ``palace_client.cli`` (5 for invalid input such as a self-link).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import typer

from palace_client.cli.common import (
    JsonOpt,
    PalaceOpt,
    client,
    echo_lines,
    emit,
    need_palace,
    op_arg,
    op_argument,
    op_option,
)
from palace_client.render import results as render
from palaced.wire.vocab import TYPED_RELATIONS

app = typer.Typer(no_args_is_help=True,
                  help="Knowledge graph: temporal facts and relations between concepts.")


def _print_facts(facts: Iterable[Mapping[str, Any]], empty: str) -> None:
    shown = False
    for f in facts:
        typer.echo(render.cli_fact(f))
        shown = True
    if not shown:
        typer.echo(empty)


def _source_options(op: str) -> dict[str, Any]:
    """The options naming where a fact comes from, shared by ``kg assert`` and ``kg link``."""
    return {
        "valid_from": op_option(op, "valid_from", "--valid-from",
                                help="When it became true (ISO 8601 or epoch ms).",
                                unset="now"),
        "confidence": op_option(op, "confidence", "--confidence", default=None,
                                help="Confidence 0-1.",
                                unset=f"{op_arg(op, 'confidence').default:g}"),
        "source_drawer": op_option(op, "source_drawer", "--source-drawer",
                                   help="Drawer id it comes from.", unset="none"),
        "source_url": op_option(op, "source_url", "--source-url", help="URL it comes from.",
                                unset="none"),
        "source_agent": op_option(op, "source_agent", "--source-agent",
                                  help="Agent that stated it.", unset="none"),
    }


_ASSERT = _source_options("graph.assert")
_LINK = _source_options("graph.link")
_AS_OF_HELP = "Facts valid at this time (ISO 8601)."
_NOW = "now"


@app.command("assert")
def kg_assert(
    subject: str = op_argument("graph.assert", "subject", help="Entity the fact is about."),
    predicate: str = op_argument("graph.assert", "predicate",
                                 help="Relation, e.g. lives_in or works_at."),
    obj: str = op_argument("graph.assert", "object", metavar="OBJECT",
                           help="Entity or (--literal) value."),
    palace: str | None = PalaceOpt,
    valid_from: str | None = _ASSERT["valid_from"],
    literal: bool = op_option("graph.assert", "literal", "--literal",
                              help="OBJECT is a value (number, text), not an entity."),
    multi: bool | None = op_option(
        "graph.assert", "multi", "--multi/--single",
        help="Keep several objects at once (--multi) or one, closing the previous (--single).",
        unset="typed relations but superseded_by: multi; other predicates: single"),
    confidence: float | None = _ASSERT["confidence"],
    source_drawer: int | None = _ASSERT["source_drawer"],
    source_url: str | None = _ASSERT["source_url"],
    source_agent: str | None = _ASSERT["source_agent"],
    as_json: bool = JsonOpt,
) -> None:
    """Record a fact; a single-valued predicate closes the previous value's interval."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        fact = c.kg_assert(name, subject, predicate, obj, valid_from=valid_from,
                           confidence=confidence, source_drawer=source_drawer,
                           source_url=source_url, source_agent=source_agent, literal=literal,
                           multi=multi)
    emit(fact, as_json, lambda f: typer.echo(render.cli_fact(f)))


@app.command("link")
def kg_link(
    a: str = op_argument("graph.link", "a", help="First concept."),
    relation: str = op_argument("graph.link", "relation",
                                help=f"{', '.join(TYPED_RELATIONS)}, or your own."),
    b: str = op_argument("graph.link", "b", help="Second concept."),
    palace: str | None = PalaceOpt,
    valid_from: str | None = _LINK["valid_from"],
    confidence: float | None = _LINK["confidence"],
    source_drawer: int | None = _LINK["source_drawer"],
    source_url: str | None = _LINK["source_url"],
    source_agent: str | None = _LINK["source_agent"],
    as_json: bool = JsonOpt,
) -> None:
    """Relate two concepts (a concept cannot relate to itself)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        fact = c.kg_link(name, a, relation, b, valid_from=valid_from, confidence=confidence,
                         source_drawer=source_drawer, source_url=source_url,
                         source_agent=source_agent)
    emit(fact, as_json, lambda f: typer.echo(render.cli_fact(f)))


@app.command("invalidate")
def kg_invalidate(
    fact_id: int = op_argument("graph.invalidate", "id",
                               help="Fact id (from kg query or kg timeline)."),
    palace: str | None = PalaceOpt,
    at: str | None = op_option("graph.invalidate", "at", "--at",
                               help="When it stopped being true (ISO 8601).", unset=_NOW),
    as_json: bool = JsonOpt,
) -> None:
    """End an active fact (history is kept)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        fact = c.kg_invalidate(name, fact_id, at=at)
    emit(fact, as_json, lambda f: typer.echo(render.cli_fact(f)))


@app.command("query")
def kg_query(
    subject: str = op_argument("graph.query", "subject", help="Entity name."),
    palace: str | None = PalaceOpt,
    as_of: str | None = op_option("graph.query", "as_of", "--as-of", help=_AS_OF_HELP,
                                  unset=_NOW),
    as_json: bool = JsonOpt,
) -> None:
    """Show what is true about an entity now, or at --as-of."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.kg_query(name, subject, as_of=as_of)
    when = (f" as of {render.format_time(res['as_of_ms'])}"
            if res.get("as_of_ms") is not None else "")
    emit(res, as_json, lambda r: _print_facts(r["facts"], f"no facts about {subject}{when}"))


@app.command("timeline")
def kg_timeline(
    subject: str = op_argument("graph.timeline", "subject", help="Entity name."),
    palace: str | None = PalaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show every fact about an entity, past ones included, oldest first."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.kg_timeline(name, subject)
    emit(res, as_json, lambda r: _print_facts(r["facts"], f"no facts about {subject}"))


@app.command("neighbors")
def kg_neighbors(
    entity: str = op_argument("graph.neighbors", "entity", help="Entity name."),
    palace: str | None = PalaceOpt,
    depth: int = op_option("graph.neighbors", "depth", "--depth", "-d",
                           help="Hops to follow."),
    relation: str | None = op_option("graph.neighbors", "relation", "--relation", "-r",
                                     help="Follow only this relation.", unset="all"),
    as_of: str | None = op_option("graph.neighbors", "as_of", "--as-of", help=_AS_OF_HELP,
                                  unset=_NOW),
    max_nodes: int = op_option("graph.neighbors", "max_nodes", "--max-nodes",
                               help="Most entities to show, this one included (the nearest "
                                    "first)."),
    as_json: bool = JsonOpt,
) -> None:
    """Show the entities linked to one, up to --depth hops away."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.kg_neighbors(name, entity, depth=depth, relation=relation, as_of=as_of,
                             max_nodes=max_nodes)

    def human(r: dict[str, Any]) -> None:
        if r["entity"] is None:
            typer.echo(f"unknown entity {entity}")
            return
        for n in r["nodes"]:
            if n["distance"]:
                typer.echo(f"{n['distance']}  {n['name']}")
        if len(r["nodes"]) <= 1:
            typer.echo(f"{r['entity']['name']} has no linked entities")
        for f in r["edges"]:
            typer.echo(f"   {render.cli_fact(f)}")
        if r.get("truncated"):
            typer.echo(f"(truncated: at most {render.counted(max_nodes, 'entity', 'entities')}"
                       ", --max-nodes)")

    emit(res, as_json, human)


@app.command("path")
def kg_path(
    a: str = op_argument("graph.path", "a", help="From this entity."),
    b: str = op_argument("graph.path", "b", help="To this entity."),
    palace: str | None = PalaceOpt,
    max_depth: int | None = op_option(
        "graph.path", "max_depth", "--max-depth", default=None,
        help="Longest chain to look for (in facts).",
        unset=f"{op_arg('graph.path', 'max_depth').default}"),
    as_of: str | None = op_option("graph.path", "as_of", "--as-of", help=_AS_OF_HELP,
                                  unset=_NOW),
    as_json: bool = JsonOpt,
) -> None:
    """Show a shortest chain of facts linking two entities."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.kg_path(name, a, b, max_depth=max_depth, as_of=as_of)

    def human(r: dict[str, Any]) -> None:
        if not r["found"]:
            typer.echo(f"no path from {a} to {b}")
            return
        _print_facts(r["path"], f"{a} and {b} are the same entity")

    emit(res, as_json, human)


@app.command("search")
def kg_search(
    query: str = op_argument("graph.search", "query", help="Words to look for."),
    palace: str | None = PalaceOpt,
    limit: int = op_option("graph.search", "limit", "--limit", help="Most entities to list."),
    type: str | None = op_option("graph.search", "type", "--type", unset="any",
                                 help="Only entities of this type."),
    as_json: bool = JsonOpt,
) -> None:
    """Find entities by name, definition or labels."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        entities = c.kg_search(name, query, limit=limit, type=type)

    def human(es: list[dict[str, Any]]) -> None:
        if not es:
            typer.echo("no matching entities")
        for e in es:
            echo_lines(_entity_lines(e))

    emit({"entities": entities} if as_json else entities, as_json, human)


def _entity_lines(e: Mapping[str, Any]) -> list[str]:
    kind = f" ({e['type']})" if e.get("type") else ""
    labels = f"  [{', '.join(e['labels'])}]" if e.get("labels") else ""
    return [f"{e['name']}{kind}{labels}",
            *([f"    {e['definition']}"] if e.get("definition") else [])]


@app.command("describe")
def kg_describe(
    entity: str = op_argument("graph.describe", "entity", help="Entity name."),
    palace: str | None = PalaceOpt,
    type: str | None = op_option("graph.describe", "type", "--type", unset="unchanged",
                                 help="Its type, e.g. person, service."),
    definition: str | None = op_option("graph.describe", "definition", "--definition",
                                       unset="unchanged", help="What it is, in a sentence."),
    labels: list[str] | None = op_option("graph.describe", "labels", "--label",  # noqa: B008
                                         default=None, unset="unchanged",
                                         help="A label (repeatable; replaces its labels)."),
    as_json: bool = JsonOpt,
) -> None:
    """Set an entity's type, definition and/or labels (created when new); `palace kg
    search` finds them."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.kg_describe(name, entity, type=type, definition=definition, labels=labels)
    note = f"({', '.join(res['changed'])} set)" if res["changed"] else "(unchanged)"
    emit(res, as_json, lambda r: echo_lines([*_entity_lines(r["entity"]), note]))
