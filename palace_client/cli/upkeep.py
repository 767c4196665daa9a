"""``palace update``, ``decay``, ``prune``, ``merge``, ``consolidate``, ``health``: keeping a
palace in shape."""

from __future__ import annotations

import sys
from typing import Any

import typer

from palace_client.cli.common import (
    JsonOpt,
    PalaceOpt,
    client,
    emit,
    fail,
    need_palace,
    op_arg,
    op_argument,
    op_option,
)
from palace_client.cli.jsonl import read_stdin
from palace_client.render import governance as governance_render
from palace_client.render.results import counted
from palaced.wire import errors as E

app = typer.Typer()

_THRESHOLD_HELP = "Weight below which a drawer counts as faded."
_THRESHOLD_DEFAULT = f"{op_arg('memory.prune', 'threshold').default:g}"


@app.command("update")
def update(
    drawer_id: int = op_argument("memory.update", "id", help="Drawer id."),
    palace: str | None = PalaceOpt,
    text: str | None = op_option("memory.update", "text", "--text",
                                 help="The new text; - reads it from stdin.", unset="kept"),
    importance: str | None = op_option("memory.update", "importance", "--importance",
                                       help="0-1 or critical/high/medium/low.", unset="kept"),
    tag: list[str] = op_option("memory.update", "tags", "--tag",  # noqa: B008
                               default=[], help="Tag (repeatable): replaces the tags.",
                               unset="kept"),
    clear_tags: bool = typer.Option(False, "--clear-tags", help="Remove every tag."),
    wing: str | None = op_option("memory.update", "wing", "--wing",
                                 help="Move it to this wing.", unset="kept"),
    room: str | None = op_option("memory.update", "room", "--room",
                                 help="Move it to this room.", unset="kept"),
    as_json: bool = JsonOpt,
) -> None:
    """Edit a drawer in place: same id, the given fields change, a new text is re-embedded.

    The version it replaces is kept: `palace get ID --history` shows every earlier version.
    """
    name = need_palace(palace, as_json)
    if tag and clear_tags:
        fail(E.InvalidArgs("give --tag or --clear-tags, not both", details={"arg": "tags"}),
             as_json)
    if text == "-":
        try:
            text = read_stdin()
        except E.InvalidArgs as exc:
            fail(exc, as_json)
    imp: float | str | None = importance
    try:
        imp = float(importance) if importance is not None else None
    except ValueError:
        pass
    tags = [] if clear_tags else (tag or None)
    with client(as_json) as c:
        res = c.update(name, drawer_id, text=text, wing=wing, room=room, tags=tags,
                       importance=imp)

    def human(r: dict[str, Any]) -> None:
        if not r["changed"]:
            typer.echo(f"drawer {r['id']} already says that; nothing changed")
        else:
            typer.echo(f"updated drawer {r['id']} ({', '.join(r['changed'])}); now version "
                       f"{r['version']}")

    emit(res, as_json, human)


@app.command("decay")
def decay(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Recompute every drawer's decayed weight (also done daily by the daemon)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.decay(name)
    emit(res, as_json, lambda r: typer.echo(
        f"weighed {counted(r['drawers'], 'drawer')} ({r['updated']} changed)"))


@app.command("prune")
def prune(
    palace: str | None = PalaceOpt,
    threshold: float | None = op_option("memory.prune", "threshold", "--threshold",
                                        default=None, help=_THRESHOLD_HELP,
                                        unset=_THRESHOLD_DEFAULT),
    dry_run: bool = op_option("memory.prune", "dry_run", "--dry-run",
                              help="Only list what would be deleted."),
    as_json: bool = JsonOpt,
) -> None:
    """Delete low/medium drawers whose weight faded below --threshold (never critical
    or high ones, never history)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.prune(name, threshold=threshold, dry_run=dry_run)

    def human(r: dict[str, Any]) -> None:
        for d in r["candidates"]:
            typer.echo(f"[{d['id']}] {d['wing']}/{d['room']}  weight={d['weight']:.4f}  "
                       f"{d['preview']}")
        verb = "would prune" if r["dry_run"] else "pruned"
        typer.echo(f"{verb} {counted(len(r['ids']), 'drawer')} (threshold {r['threshold']:g})")

    emit(res, as_json, human)


@app.command("merge")
def merge(
    ids: list[int] = op_argument("memory.merge", "ids",  # noqa: B008
                                 help="The duplicate drawers' ids (two or more)."),
    palace: str | None = PalaceOpt,
    dry_run: bool = op_option("memory.merge", "dry_run", "--dry-run",
                              help="Only say what the merge would do."),
    as_json: bool = JsonOpt,
) -> None:
    """Merge duplicate drawers (`palace health` lists them) into one: the longest text
    (then the newest) is kept with the union of their tags; the others go to the trash as
    one batch (`palace restore-drawer --batch B` brings them back)."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.merge(name, ids, dry_run=dry_run)
    emit(res, as_json, lambda r: typer.echo(governance_render.merged(r, name)))


@app.command("consolidate")
def consolidate(
    palace: str | None = PalaceOpt,
    room: str = op_option("memory.consolidate", "room", "--room", default=...,
                          help="Room the summary goes to."),
    summary: str = op_option("memory.consolidate", "summary", "--summary", default=...,
                             help="The summary text, or - for stdin."),
    wing: str | None = op_option("memory.consolidate", "wing", "--wing",
                                 help="Wing of the room.", unset="the sources' wing"),
    ids: list[int] = op_option(  # noqa: B008
        "memory.consolidate", "ids", "--id", default=[],
        help="Drawer to consolidate (repeatable).", unset="the whole room"),
    as_json: bool = JsonOpt,
) -> None:
    """Store a summary drawer in place of its sources (kept, out of recall and wake-up)."""
    name = need_palace(palace, as_json)
    text = sys.stdin.read() if summary == "-" else summary
    with client(as_json) as c:
        res = c.consolidate(name, room, text, wing=wing, ids=ids or None)
    emit(res, as_json, lambda r: typer.echo(
        f"summary drawer {r['summary_id']} in {r['wing']}/{r['room']} consolidates "
        f"{counted(len(r['source_ids']), 'drawer')}"))


@app.command("health")
def health(
    palace: str | None = PalaceOpt,
    threshold: float | None = op_option("memory.health", "threshold", "--threshold",
                                        default=None, help=_THRESHOLD_HELP,
                                        unset=_THRESHOLD_DEFAULT),
    stale_days: float = op_option("memory.health", "stale_days", "--stale-days",
                                  help="Days unused after which a faded drawer counts as "
                                       "stale."),
    limit: int = op_option("memory.health", "limit", "--limit",
                           help="Most stale drawers and duplicate pairs listed per room (the "
                                "counts are whole)."),
    as_json: bool = JsonOpt,
) -> None:
    """Per room: drawer counts, stale drawers, duplicate candidates, consolidation hints."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.health(name, threshold=threshold, stale_days=stale_days, limit=limit)

    def human(r: dict[str, Any]) -> None:
        t = r["totals"]
        typer.echo(f"palace {r['palace']}: {counted(t['drawers'], 'drawer')} in "
                   f"{counted(t['rooms'], 'room')}, {t['stale']} stale, "
                   f"{counted(t['duplicates'], 'duplicate pair')}")
        for room in r["rooms"]:
            typer.echo(f"  {room['wing']}/{room['room']}: {counted(room['drawers'], 'drawer')}, "
                       f"{room['active']} active, {room['stale_count']} stale, "
                       f"{counted(room['duplicate_count'], 'duplicate pair')}")
            for s in room["stale"]:
                typer.echo(f"    stale [{s['id']}] weight={s['weight']:.4f} unused "
                           f"{s['days_unused']:.0f}d  {s['preview']}")
            if (more := room["stale_count"] - len(room["stale"])) > 0:
                typer.echo(f"    ... {more} more stale (--limit {limit} per room)")
            for dup in room["duplicates"]:
                typer.echo(f"    {dup['kind']} duplicate {dup['ids'][0]} ~ {dup['ids'][1]}"
                           f" ({dup['similarity']:.3f})")
            if (more := room["duplicate_count"] - len(room["duplicates"])) > 0:
                typer.echo(f"    ... {counted(more, 'more duplicate pair')} (--limit {limit} "
                           "per room)")
            if room["hint"]:
                typer.echo(f"    hint: {room['hint']}")

    emit(res, as_json, human)
