"""``palace memoir ...``: memoirs, curated concept graphs (named containers of concepts with
definitions, labels, confidence and revisions, linked by typed relations).

Exit codes are those of ``palace_client.cli``: 4 for an unknown memoir or concept, 5 for
invalid input (a bad label, relation or self-link), 6 for a memoir that exists or a concept
that exists with another definition.
"""

from __future__ import annotations

from typing import Any

import typer

from palace_client.cli.common import (
    JsonOpt,
    PalaceOpt,
    client,
    echo_lines,
    emit,
    fail,
    need_palace,
    op_argument,
    op_option,
)
from palace_client.render import memoirs as mr
from palace_client.render.results import counted
from palaced.wire import errors as E
from palaced.wire.vocab import TYPED_RELATIONS

app = typer.Typer(no_args_is_help=True,
                  help="Memoirs: curated concepts (definition, labels, confidence) and typed "
                       "links between them.")

_RELATIONS = f"{', '.join(TYPED_RELATIONS)} (camelCase too)."


def _memoir_opt(op: str) -> Any:
    return op_option(op, "memoir", "--memoir", "-m", default=..., help="Memoir name.")


def _labels(op: str) -> Any:
    return op_option(op, "labels", "--label", "-l", unset="none",
                     help="Label namespace:value, e.g. domain:auth (repeatable).")


def _confirmed(yes: bool, what: str, as_json: bool) -> None:
    """End the command with INVALID_ARGS unless ``--yes`` confirmed deleting ``what``."""
    if not yes:
        fail(E.InvalidArgs(f"refusing to delete {what} without --yes"), as_json)


def _sources(op: str) -> Any:
    return op_option(op, "sources", "--source", unset="none",
                     help="Id of a drawer it was learnt from (repeatable).")


@app.command("create")
def create(
    memoir: str = op_argument("memoir.create", "memoir", metavar="NAME", help="Memoir name."),
    palace: str | None = PalaceOpt,
    description: str | None = op_option("memoir.create", "description", "--description", "-d",
                                        default=None, unset="none",
                                        help="What the memoir holds."),
    consolidation_threshold: int = op_option(
        "memoir.create", "consolidation_threshold", "--consolidation-threshold",
        help="Sources after which a concept is flagged for consolidation."),
    exist_ok: bool = op_option("memoir.create", "exist_ok", "--exist-ok",
                               help="An existing memoir is fine (left unchanged)."),
    as_json: bool = JsonOpt,
) -> None:
    """Create a memoir (a named container of concepts)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_create(name, memoir, description=description,
                              consolidation_threshold=consolidation_threshold,
                              exist_ok=exist_ok)
    verb = "created" if res["created"] else "already exists:"
    emit(res, as_json, lambda r: typer.echo(f"{verb} memoir {mr.memoir_line(r['memoir'])}"))


@app.command("list")
def list_(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """List the palace's memoirs with their counts."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        found = c.memoir_list(name)
    emit({"memoirs": found} if as_json else found, as_json, lambda ms: echo_lines(
        [mr.memoir_line(m) for m in ms] or [f"no memoirs in palace {name}"]))


@app.command("show")
def show(
    memoir: str = op_argument("memoir.show", "memoir", metavar="NAME", help="Memoir name."),
    palace: str | None = PalaceOpt,
    limit: int = op_option("memoir.show", "limit", "--limit", help="Most concepts to list."),
    offset: int = op_option("memoir.show", "offset", "--offset", help="Concepts to skip."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a memoir, its stats and its concepts by name."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_show(name, memoir, limit=limit, offset=offset)
    emit(res, as_json, lambda r: echo_lines(mr.cli_show(r)))


@app.command("delete")
def delete(
    memoir: str = op_argument("memoir.delete", "memoir", metavar="NAME", help="Memoir name."),
    palace: str | None = PalaceOpt,
    yes: bool = typer.Option(False, "--yes", help="Really delete (required)."),
    as_json: bool = JsonOpt,
) -> None:
    """Delete a memoir with all its concepts and links (needs --yes)."""
    name = need_palace(palace, as_json)
    _confirmed(yes, f"memoir {memoir!r}", as_json)
    with client(as_json) as c:
        res = c.memoir_delete(name, memoir)
    emit(res, as_json, lambda r: typer.echo(
        f"deleted memoir {r['memoir']} ({counted(r.get('concepts', 0), 'concept')}, "
        f"{counted(r.get('links', 0), 'link')})"))


@app.command("update")
def update(
    memoir: str = op_argument("memoir.update", "memoir", metavar="NAME", help="Memoir name."),
    palace: str | None = PalaceOpt,
    description: str | None = op_option("memoir.update", "description", "--description", "-d",
                                        unset="unchanged", help="What the memoir holds."),
    consolidation_threshold: int | None = op_option(
        "memoir.update", "consolidation_threshold", "--consolidation-threshold",
        unset="unchanged", help="Sources after which a concept is flagged for consolidation."),
    as_json: bool = JsonOpt,
) -> None:
    """Change a memoir's description and/or consolidation threshold."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_update(name, memoir, description=description,
                              consolidation_threshold=consolidation_threshold)
    note = f"updated ({', '.join(res['changed'])})" if res["changed"] else "unchanged:"
    emit(res, as_json, lambda r: typer.echo(f"{note} memoir {mr.memoir_line(r['memoir'])}"))


@app.command("rename-concept")
def rename_concept(
    concept: str = op_argument("memoir.rename_concept", "name", metavar="NAME",
                               help="Concept name."),
    new_name: str = op_argument("memoir.rename_concept", "new_name", metavar="NEW_NAME",
                                help="Its new name."),
    memoir: str = _memoir_opt("memoir.rename_concept"),
    palace: str | None = PalaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rename a concept; its definition, labels, sources and links stay."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_rename_concept(name, memoir, concept, new_name)
    note = [] if res["changed"] else ["(already so named: unchanged)"]
    emit(res, as_json, lambda r: echo_lines([*mr.cli_concept(r["concept"]), *note]))


@app.command("delete-concept")
def delete_concept(
    concept: str = op_argument("memoir.delete_concept", "name", metavar="NAME",
                               help="Concept name."),
    memoir: str = _memoir_opt("memoir.delete_concept"),
    palace: str | None = PalaceOpt,
    yes: bool = typer.Option(False, "--yes", help="Really delete (required)."),
    as_json: bool = JsonOpt,
) -> None:
    """Delete a concept with its labels, sources and links (needs --yes)."""
    name = need_palace(palace, as_json)
    _confirmed(yes, f"concept {concept!r}", as_json)
    with client(as_json) as c:
        res = c.memoir_delete_concept(name, memoir, concept)
    emit(res, as_json, lambda r: typer.echo(
        f"deleted concept {r['concept']['name']} ({counted(r.get('links', 0), 'link')})"))


@app.command("add-concept")
def add_concept(
    concept: str = op_argument("memoir.add_concept", "name", metavar="NAME",
                               help="Concept name (unique in the memoir, any case)."),
    definition: str = op_argument("memoir.add_concept", "definition", help="What it is."),
    memoir: str = _memoir_opt("memoir.add_concept"),
    palace: str | None = PalaceOpt,
    labels: list[str] = _labels("memoir.add_concept"),  # noqa: B008
    confidence: float = op_option("memoir.add_concept", "confidence", "--confidence",
                                  help="How sure, 0-1."),
    sources: list[int] = _sources("memoir.add_concept"),  # noqa: B008
    as_json: bool = JsonOpt,
) -> None:
    """Add a concept; the same name with another definition is refused (refine it)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_add_concept(name, memoir, concept, definition, labels=labels,
                                   confidence=confidence, sources=sources)
    note = [] if res["created"] else ["(already there, unchanged)"]
    emit(res, as_json, lambda r: echo_lines([*mr.cli_concept(r["concept"]), *note]))


@app.command("refine")
def refine(
    concept: str = op_argument("memoir.refine", "name", metavar="NAME", help="Concept name."),
    definition: str = op_argument("memoir.refine", "definition", help="The new definition."),
    memoir: str = _memoir_opt("memoir.refine"),
    palace: str | None = PalaceOpt,
    labels: list[str] = _labels("memoir.refine"),  # noqa: B008
    sources: list[int] = _sources("memoir.refine"),  # noqa: B008
    as_json: bool = JsonOpt,
) -> None:
    """Refine a concept: new definition, more labels/sources; revision +1, confidence +0.1.

    A refine that brings nothing new changes nothing.
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_refine(name, memoir, concept, definition, labels=labels, sources=sources)
    note = [] if res["changed"] else ["(nothing new: unchanged)"]
    emit(res, as_json, lambda r: echo_lines([*mr.cli_concept(r["concept"]), *note]))


@app.command("search")
def search(
    query: str | None = typer.Argument(None, show_default="none: give --label",
                                       help="Words to look for in names, definitions and "
                                            "labels."),
    palace: str | None = PalaceOpt,
    label: str | None = op_option("memoir.search", "label", "--label", "-l",
                                  help="Only concepts with this label.", unset="any"),
    memoir: str | None = op_option("memoir.search", "memoir", "--memoir", "-m",
                                   help="Search only this memoir.", unset="every memoir"),
    limit: int = op_option("memoir.search", "limit", "--limit", help="Most concepts to list."),
    as_json: bool = JsonOpt,
) -> None:
    """Find concepts by words and/or a label, in one memoir or all of them."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        found = c.memoir_search(name, query, label=label, memoir=memoir, limit=limit)
    emit({"concepts": found} if as_json else found, as_json, lambda cs: echo_lines(
        [ln for x in cs for ln in mr.cli_concept(x, show_memoir=True)]
        or ["no matching concepts"]))


@app.command("inspect")
def inspect(
    concept: str = op_argument("memoir.inspect", "name", metavar="NAME", help="Concept name."),
    memoir: str = _memoir_opt("memoir.inspect"),
    palace: str | None = PalaceOpt,
    depth: int = op_option("memoir.inspect", "depth", "--depth", "-d", help="Links to follow."),
    max_nodes: int = op_option("memoir.inspect", "max_nodes", "--max-nodes",
                               help="Most concepts to return."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a concept and the concepts within --depth links of it, with the links."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_inspect(name, memoir, concept, depth=depth, max_nodes=max_nodes)
    emit(res, as_json, lambda r: echo_lines(mr.cli_inspect(r)))


def _link_args(op: str) -> dict[str, Any]:
    return {"name": op_argument(op, "name", metavar="A", help="From this concept."),
            "relation": op_argument(op, "relation", help=_RELATIONS),
            "to": op_argument(op, "to", metavar="B", help="To this concept.")}


_LINK, _UNLINK = _link_args("memoir.link"), _link_args("memoir.unlink")


@app.command("link")
def link(
    concept: str = _LINK["name"],
    relation: str = _LINK["relation"],
    to: str = _LINK["to"],
    memoir: str = _memoir_opt("memoir.link"),
    palace: str | None = PalaceOpt,
    weight: float = op_option("memoir.link", "weight", "--weight", help="Strength, 0-1."),
    as_json: bool = JsonOpt,
) -> None:
    """Link concept A to concept B (a concept cannot link to itself; twice is once)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_link(name, memoir, concept, relation, to, weight=weight)
    note = "" if res["created"] else "  (already linked)"
    emit(res, as_json, lambda r: typer.echo(mr.link_line(r["link"]) + note))


@app.command("unlink")
def unlink(
    concept: str = _UNLINK["name"],
    relation: str = _UNLINK["relation"],
    to: str = _UNLINK["to"],
    memoir: str = _memoir_opt("memoir.unlink"),
    palace: str | None = PalaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Remove the link A --RELATION--> B (none there: nothing to do)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.memoir_unlink(name, memoir, concept, relation, to)
    emit(res, as_json, lambda r: typer.echo(
        f"unlinked {mr.link_line(r['link'])}" if r["removed"] else "no such link"))
