"""CLI commands of the knowledge graph (``palace kg ...``) and memory lifecycle
(``palace decay``, ``prune``, ``consolidate``, ``health``).

``palace_client.cli`` calls ``register(app)`` once its helpers exist; the helpers are imported
inside ``register`` so importing this module never runs the CLI module half-initialised.
Exit codes are those of ``palace_client.cli`` (5 for invalid input such as a self-link).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer


def when_text(ms: int | None) -> str:
    """Epoch ms as a UTC date, with the time of day when it is not midnight."""
    if ms is None:
        return "now"
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    if (dt.hour, dt.minute, dt.second, dt.microsecond) == (0, 0, 0, 0):
        return f"{dt:%Y-%m-%d}"
    return f"{dt:%Y-%m-%d %H:%M:%S}Z"


def fact_line(f: dict[str, Any]) -> str:
    """One fact as ``#id subject --predicate--> object  [from → to]``."""
    obj = f["object"] if f.get("object_is_entity", True) else f'"{f["object"]}"'
    empty = f["valid_to_ms"] is not None and f["valid_to_ms"] == f["valid_from_ms"]
    span = ("retracted" if empty
            else f"{when_text(f['valid_from_ms'])} → {when_text(f['valid_to_ms'])}")
    extra = f"  confidence {f['confidence']:g}" if f.get("confidence", 1.0) != 1.0 else ""
    return f"#{f['id']} {f['subject']} --{f['predicate']}--> {obj}  [{span}]{extra}"


def _print_facts(facts: list[dict[str, Any]], empty: str) -> None:
    if not facts:
        typer.echo(empty)
    for f in facts:
        typer.echo(fact_line(f))


def register(app: typer.Typer) -> None:
    """Add the ``kg`` sub-app and the lifecycle commands to ``app``."""
    kg = typer.Typer(no_args_is_help=True,
                     help="Knowledge graph: temporal facts and relations between concepts.")
    app.add_typer(kg, name="kg")
    _register_kg(kg)
    _register_lifecycle(app)


def _register_kg(kg: typer.Typer) -> None:
    from palace_client.cli import JsonOpt, PalaceOpt, _client, _emit, _need_palace

    valid_from_opt = typer.Option(None, "--valid-from",
                                  help="When it became true (ISO 8601 or epoch ms; default now).")
    confidence_opt = typer.Option(None, "--confidence", min=0.0, max=1.0,
                                  help="Confidence 0-1 (default 1).")
    source_drawer_opt = typer.Option(None, "--source-drawer", help="Drawer id it comes from.")
    source_url_opt = typer.Option(None, "--source-url", help="URL it comes from.")
    source_agent_opt = typer.Option(None, "--source-agent", help="Agent that stated it.")
    as_of_opt = typer.Option(None, "--as-of", help="Facts valid at this time (ISO 8601).")

    @kg.command("assert")
    def kg_assert(
        subject: str = typer.Argument(..., help="Entity the fact is about."),
        predicate: str = typer.Argument(..., help="Relation, e.g. lives_in or works_at."),
        obj: str = typer.Argument(..., metavar="OBJECT", help="Entity or (--literal) value."),
        palace: str | None = PalaceOpt,
        valid_from: str | None = valid_from_opt,
        literal: bool = typer.Option(False, "--literal",
                                     help="OBJECT is a value (number, text), not an entity."),
        confidence: float | None = confidence_opt,
        source_drawer: int | None = source_drawer_opt,
        source_url: str | None = source_url_opt,
        source_agent: str | None = source_agent_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Record a fact; a single-valued predicate closes the previous value's interval."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            fact = c.kg_assert(name, subject, predicate, obj, valid_from=valid_from,
                               confidence=confidence, source_drawer=source_drawer,
                               source_url=source_url, source_agent=source_agent,
                               literal=literal)
        _emit(fact, as_json, lambda f: typer.echo(fact_line(f)))

    @kg.command("link")
    def kg_link(
        a: str = typer.Argument(..., help="First concept."),
        relation: str = typer.Argument(
            ..., help="part_of, depends_on, related_to, contradicts, refines, alternative_to, "
                      "caused_by, instance_of, superseded_by, or your own."),
        b: str = typer.Argument(..., help="Second concept."),
        palace: str | None = PalaceOpt,
        valid_from: str | None = valid_from_opt,
        confidence: float | None = confidence_opt,
        source_drawer: int | None = source_drawer_opt,
        source_url: str | None = source_url_opt,
        source_agent: str | None = source_agent_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Relate two concepts (a concept cannot relate to itself)."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            fact = c.kg_link(name, a, relation, b, valid_from=valid_from, confidence=confidence,
                             source_drawer=source_drawer, source_url=source_url,
                             source_agent=source_agent)
        _emit(fact, as_json, lambda f: typer.echo(fact_line(f)))

    @kg.command("invalidate")
    def kg_invalidate(
        fact_id: int = typer.Argument(..., help="Fact id (from kg query or kg timeline)."),
        palace: str | None = PalaceOpt,
        at: str | None = typer.Option(None, "--at", help="When it stopped being true."),
        as_json: bool = JsonOpt,
    ) -> None:
        """End an active fact (history is kept)."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            fact = c.kg_invalidate(name, fact_id, at=at)
        _emit(fact, as_json, lambda f: typer.echo(fact_line(f)))

    @kg.command("query")
    def kg_query(
        subject: str = typer.Argument(..., help="Entity name."),
        palace: str | None = PalaceOpt,
        as_of: str | None = as_of_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Show what is true about an entity now, or at --as-of."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.kg_query(name, subject, as_of=as_of)
        when = f" as of {when_text(res['as_of_ms'])}" if res.get("as_of_ms") is not None else ""
        _emit(res, as_json, lambda r: _print_facts(r["facts"], f"no facts about {subject}{when}"))

    @kg.command("timeline")
    def kg_timeline(
        subject: str = typer.Argument(..., help="Entity name."),
        palace: str | None = PalaceOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Show every fact about an entity, past ones included, oldest first."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.kg_timeline(name, subject)
        _emit(res, as_json, lambda r: _print_facts(r["facts"], f"no facts about {subject}"))

    @kg.command("neighbors")
    def kg_neighbors(
        entity: str = typer.Argument(..., help="Entity name."),
        palace: str | None = PalaceOpt,
        depth: int = typer.Option(1, "--depth", "-d", min=0, help="Hops to follow (0-6)."),
        relation: str | None = typer.Option(None, "--relation", "-r",
                                            help="Follow only this relation."),
        as_of: str | None = as_of_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Show the entities linked to one, up to --depth hops away."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.kg_neighbors(name, entity, depth=depth, relation=relation, as_of=as_of)

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
                typer.echo(f"   {fact_line(f)}")
            if r.get("truncated"):
                typer.echo("(truncated)")

        _emit(res, as_json, human)

    @kg.command("path")
    def kg_path(
        a: str = typer.Argument(..., help="From this entity."),
        b: str = typer.Argument(..., help="To this entity."),
        palace: str | None = PalaceOpt,
        max_depth: int | None = typer.Option(None, "--max-depth", min=1,
                                             help="Longest chain to look for (default 6)."),
        as_of: str | None = as_of_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Show a shortest chain of facts linking two entities."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.kg_path(name, a, b, max_depth=max_depth, as_of=as_of)

        def human(r: dict[str, Any]) -> None:
            if not r["found"]:
                typer.echo(f"no path from {a} to {b}")
                return
            _print_facts(r["path"], f"{a} and {b} are the same entity")

        _emit(res, as_json, human)

    @kg.command("search")
    def kg_search(
        query: str = typer.Argument(..., help="Words to look for."),
        palace: str | None = PalaceOpt,
        limit: int = typer.Option(20, "--limit", min=1, max=1000),
        as_json: bool = JsonOpt,
    ) -> None:
        """Find entities by name, definition or labels."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            entities = c.kg_search(name, query, limit=limit)

        def human(es: list[dict[str, Any]]) -> None:
            if not es:
                typer.echo("no matching entities")
            for e in es:
                kind = f" ({e['type']})" if e.get("type") else ""
                typer.echo(f"{e['name']}{kind}")
                if e.get("definition"):
                    typer.echo(f"    {e['definition']}")

        _emit({"entities": entities} if as_json else entities, as_json, human)


def _register_lifecycle(app: typer.Typer) -> None:
    from palace_client.cli import JsonOpt, PalaceOpt, _client, _emit, _need_palace

    threshold_opt = typer.Option(None, "--threshold", min=0.0, max=1.0,
                                 help="Weight below which a drawer counts as faded "
                                      "(default 0.05).")

    @app.command("decay")
    def decay(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
        """Recompute every drawer's decayed weight (also done daily by the daemon)."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.decay(name)
        _emit(res, as_json, lambda r: typer.echo(
            f"weighed {r['drawers']} drawers ({r['updated']} changed)"))

    @app.command("prune")
    def prune(
        palace: str | None = PalaceOpt,
        threshold: float | None = threshold_opt,
        dry_run: bool = typer.Option(False, "--dry-run",
                                     help="Only list what would be deleted."),
        as_json: bool = JsonOpt,
    ) -> None:
        """Delete low/medium drawers whose weight faded below --threshold (never critical
        or high ones, never history)."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.prune(name, threshold=threshold, dry_run=dry_run)

        def human(r: dict[str, Any]) -> None:
            for d in r["candidates"]:
                typer.echo(f"[{d['id']}] {d['wing']}/{d['room']}  weight={d['weight']:.4f}  "
                           f"{d['preview']}")
            verb = "would prune" if r["dry_run"] else "pruned"
            typer.echo(f"{verb} {len(r['ids'])} drawers (threshold {r['threshold']:g})")

        _emit(res, as_json, human)

    @app.command("consolidate")
    def consolidate(
        palace: str | None = PalaceOpt,
        room: str = typer.Option(..., "--room", help="Room the summary goes to."),
        summary: str = typer.Option(..., "--summary", help="The summary text, or - for stdin."),
        wing: str | None = typer.Option(None, "--wing"),
        ids: list[int] = typer.Option(  # noqa: B008
            [], "--id", help="Drawer to consolidate (repeatable; default: the whole room)."),
        as_json: bool = JsonOpt,
    ) -> None:
        """Store a summary drawer and mark its sources consolidated (sources are kept)."""
        import sys

        name = _need_palace(palace, as_json)
        text = sys.stdin.read() if summary == "-" else summary
        with _client(as_json) as c:
            res = c.consolidate(name, room, text, wing=wing, ids=ids or None)
        _emit(res, as_json, lambda r: typer.echo(
            f"summary drawer {r['summary_id']} in {r['wing']}/{r['room']} consolidates "
            f"{len(r['source_ids'])} drawers"))

    @app.command("health")
    def health(
        palace: str | None = PalaceOpt,
        threshold: float | None = threshold_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        """Per room: drawer counts, stale drawers, duplicate candidates, consolidation hints."""
        name = _need_palace(palace, as_json)
        with _client(as_json) as c:
            res = c.health(name, threshold=threshold)

        def human(r: dict[str, Any]) -> None:
            t = r["totals"]
            typer.echo(f"palace {r['palace']}: {t['drawers']} drawers in {t['rooms']} rooms, "
                       f"{t['stale']} stale, {t['duplicates']} duplicate pairs")
            for room in r["rooms"]:
                typer.echo(f"  {room['wing']}/{room['room']}: {room['drawers']} drawers, "
                           f"{room['active']} active, {room['stale_count']} stale, "
                           f"{room['duplicate_count']} duplicate pairs")
                for s in room["stale"]:
                    typer.echo(f"    stale [{s['id']}] weight={s['weight']:.4f} unused "
                               f"{s['days_unused']:.0f}d  {s['preview']}")
                for dup in room["duplicates"]:
                    typer.echo(f"    {dup['kind']} duplicate {dup['ids'][0]} ~ {dup['ids'][1]}"
                               f" ({dup['similarity']:.3f})")
                if room["hint"]:
                    typer.echo(f"    hint: {room['hint']}")

        _emit(res, as_json, human)
