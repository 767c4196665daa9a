"""``palace remember``, ``remember-many``, ``recall``, ``wake-up``, ``get``, ``forget``,
``drawers``: storing and finding drawers."""

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
    op_arg,
    op_argument,
    op_option,
)
from palace_client.cli.jsonl import parse_jsonl, read_stdin
from palace_client.render import governance as governance_render
from palace_client.render import results as render
from palace_client.render.details import provenance
from palace_client.render.results import counted, one_line, remember_notes
from palaced.wire import errors as E
from palaced.wire.vocab import DEFAULT_IMPORTANCE, IMPORTANCE_PRESETS

app = typer.Typer()

BATCH = 2000  # drawers per memory.remember_many request
MAX_SHOWN = 10  # conflicts a remember-many lists (all of them in --json)
DRAWERS_PAGE = 20  # `palace drawers` shows a terminal page, not the daemon's 50


@app.command()
def remember(
    text: str = op_argument("memory.remember", "text",
                            help="The memory text; - reads it from stdin."),
    palace: str | None = PalaceOpt,
    wing: str | None = op_option("memory.remember", "wing", "--wing",
                                 help="Wing (top-level area) to store it in.", unset="general"),
    room: str | None = op_option("memory.remember", "room", "--room",
                                 help="Room (topic) within the wing.", unset="general"),
    tag: list[str] = op_option("memory.remember", "tags", "--tag",  # noqa: B008
                               help="Tag (repeatable).", unset="none"),
    importance: str = op_option("memory.remember", "importance", "--importance",
                                default=str(DEFAULT_IMPORTANCE),
                                help=f"0-1 or {'/'.join(IMPORTANCE_PRESETS)}."),
    source: str | None = op_option("memory.remember", "source", "--source",
                                   help="Where it comes from (a label).", unset="none"),
    when: str | None = op_option("memory.remember", "occurred_at", "--when",
                                 help="When it happened (ISO 8601).", unset="not recorded"),
    supersedes: int | None = op_option("memory.remember", "supersedes", "--supersedes",
                                       help="Drawer id this memory replaces.", unset="none"),
    ttl: str | None = op_option("memory.remember", "ttl", "--ttl",
                                help="Expire after 90s/15m/12h/7d/2w.", unset="never"),
    dedup: bool | None = op_option(
        "memory.remember", "dedup", "--dedup/--no-dedup",
        help="Refresh a near-duplicate in the same room instead of storing it.",
        unset="on; off with --supersedes"),
    as_json: bool = JsonOpt,
) -> None:
    """Store a memory (idempotent: the same text in the same room is stored once).

    Give - as TEXT to read the text from stdin, for long or multi-line memories:
    `git log -1 --format=%B | palace remember - --room commits`.
    """
    name = need_palace(palace, as_json)
    if text == "-":
        try:
            text = read_stdin()
        except E.InvalidArgs as exc:
            fail(exc, as_json)
    imp: Any = importance
    try:
        imp = float(importance)
    except ValueError:
        pass
    with client(as_json) as c:
        extra: dict[str, Any] = {} if dedup is None else {"dedup": dedup}
        if supersedes is not None:
            extra["supersedes"] = supersedes
        if ttl is not None:
            extra["ttl"] = ttl
        res = c.remember_ex(name, text, wing=wing, room=room, tags=tag, importance=imp,
                            source=source, occurred_at=when, **extra)
    out = {"id": res["id"], "created": res["created"],
           "deduplicated": bool(res.get("deduplicated"))}
    if res.get("pending_chunks"):
        out["pending_chunks"] = res["pending_chunks"]

    if res.get("consolidate"):
        out["consolidate"] = res["consolidate"]
    for key in ("extends", "conflicts"):
        if res.get(key):
            out[key] = res[key]

    def human(r: dict[str, Any]) -> None:
        if r["deduplicated"]:
            typer.echo(f"refreshed near-duplicate drawer {r['id']} (not stored twice)")
        elif r.get("pending_chunks"):
            typer.echo(f"stored drawer {r['id']} ({counted(r['pending_chunks'], 'chunk')} "
                       "being embedded in the background; found by its words until then)")
        else:
            typer.echo(f"{'stored' if r['created'] else 'already stored'} drawer {r['id']}")
        for line in remember_notes(r, "(`palace conflicts resolve {conflict} --supersede`)"):
            typer.echo(line)
        if r.get("consolidate"):
            typer.echo(f"hint: {r['consolidate']['hint']}", err=True)

    emit(out, as_json, human)


@app.command("remember-many")
def remember_many(palace: str | None = PalaceOpt,
                  dedup: bool = op_option("memory.remember_many", "dedup", "--dedup/--no-dedup",
                                          help="Merge near-duplicates (off: imports keep "
                                               "every line)."),
                  as_json: bool = JsonOpt) -> None:
    """Bulk-store drawers from JSONL on stdin (one object per line: text, wing, room, ...).

    Every line is checked before anything is stored; a bad one fails the command with its
    line number.
    """
    name = need_palace(palace, as_json)
    try:
        items, lines = parse_jsonl(read_stdin())
    except E.InvalidArgs as exc:
        fail(exc, as_json)
    ids: list[int] = []
    found: list[dict[str, Any]] = []
    with client(as_json) as c:
        for start in range(0, len(items), BATCH):
            try:
                res = c.remember_many_ex(name, items[start:start + BATCH], dedup=dedup)
                ids.extend(int(i) for i in res["ids"])
                found.extend(res.get("conflicts") or [])
            except E.PalaceError as exc:
                index = exc.details.get("index")
                if isinstance(index, int) and 0 <= start + index < len(lines):
                    # The daemon numbers the items of its batch; the user knows lines.
                    line = lines[start + index]
                    exc.message = f"line {line}: " + exc.message.removeprefix(f"item {index}: ")
                    exc.details["line"] = line
                raise
    def human(r: dict[str, Any]) -> None:
        typer.echo(f"stored {counted(r['count'], 'drawer')}")
        for x in r["conflicts"][:MAX_SHOWN]:
            typer.echo(f"#{x['newer_id']} conflicts with #{x['id']} ({x['reason']}): "
                       f"{one_line(str(x['text']))}")
        if r["conflicts"]:
            more = len(r["conflicts"]) - MAX_SHOWN
            typer.echo((f"... and {more} more; " if more > 0 else "")
                       + "`palace conflicts list` shows them, `palace conflicts resolve ID` "
                       "settles one")

    emit({"ids": ids, "count": len(ids), "conflicts": found}, as_json, human)


def parse_levels(value: str) -> list[int]:
    """``"0,1,3"`` as ``[0, 1, 3]`` (the daemon checks the range).

    Raises:
        InvalidArgs: a part is not an integer, or nothing is given.
    """
    parts = [part.strip() for part in value.split(",") if part.strip()]
    try:
        levels = [int(part) for part in parts]
    except ValueError:
        raise E.InvalidArgs(f"--levels takes a comma list of 0-3, got {value!r}",
                            details={"arg": "levels"}) from None
    if not levels:
        raise E.InvalidArgs("--levels needs at least one level", details={"arg": "levels"})
    return levels


# A drawer's date (occurred_at, else when it was stored) filters recall and drawers.
_SINCE = ("Only drawers dated at or after this time: ISO 8601 (2026-05-08, 2026-05-08T13:56Z), "
          "or a duration back from now (90m, 12h, 7d).")
_UNTIL = "Only drawers dated before this time (the same forms as --since)."


@app.command()
def recall(
    query: str = op_argument("memory.recall", "query", help="What to look for."),
    palace: str | None = PalaceOpt,
    top_k: int = op_option("memory.recall", "top_k", "--top-k", "-k",
                           help="Most drawers to return."),
    wing: str | None = op_option("memory.recall", "wing", "--wing",
                                 help="Search only this wing.", unset="all wings"),
    room: str | None = op_option("memory.recall", "room", "--room",
                                 help="Search only this room.", unset="all rooms"),
    tag: list[str] = op_option("memory.recall", "tags", "--tag",  # noqa: B008
                               help="Only drawers with this tag (repeatable: any of them).",
                               unset="any"),
    budget: int | None = op_option(
        "memory.recall", "budget", "--budget", default=None,
        help="Token budget of the packed context.",
        unset=f"ranked list; {op_arg('memory.recall', 'budget').default} with --levels/--deep"),
    levels: str | None = op_option(
        "memory.recall", "levels", "--levels", default=None, ranged=False,
        help="Context levels, comma list of 0-3: 0 identity, 1 essential, "
        "2 where the query points, 3 deep search.",
        unset=",".join(map(str, op_arg("memory.recall", "levels").default))),
    deep: bool = op_option("memory.recall", "deep", "--deep",
                           help="Always include L3 deep search."),
    include_superseded: bool = op_option(
        "memory.recall", "include_superseded", "--include-superseded",
        help="Also return retired drawers: replaced by newer ones or consolidated into a "
        "summary."),
    since: str | None = op_option("memory.recall", "since", "--since", help=_SINCE,
                                  unset="any date"),
    until: str | None = op_option("memory.recall", "until", "--until", help=_UNTIL,
                                  unset="any date"),
    all_palaces: bool = typer.Option(
        False, "--all", help="Search every palace (memory.recall_all): the best drawers of "
        "all of them by relevance, each with its palace; no context sections."),
    as_json: bool = JsonOpt,
) -> None:
    """Search a palace (hybrid keyword + semantic).

    Prints the ranked drawers with the score that ranks them; with --budget, --levels or
    --deep prints what an agent is shown instead: a heading with the tokens the whole text
    uses of the budget, the hits, then the L0/L2/L3 sections (L1 only when --levels names
    it). A recall with nothing above the relevance floor says so in one line.
    """
    if all_palaces:
        if since is not None or until is not None:
            fail(E.UsageError("--since and --until filter one palace's recall, not --all"),
                 as_json)
        _recall_all(query, top_k, wing, room, tag, include_superseded, as_json)
        return
    name = need_palace(palace, as_json)
    extra: dict[str, Any] = {k: v for k, v in (("since", since), ("until", until))
                             if v is not None}
    if budget is not None:
        extra["budget"] = budget
    if levels is not None:
        try:
            extra["levels"] = parse_levels(levels)
        except E.InvalidArgs as exc:
            fail(exc, as_json)
    if deep:
        extra["deep"] = True
    if include_superseded:
        extra["include_superseded"] = True
    packed = budget is not None or levels is not None or deep
    with client(as_json) as c:
        res = c.recall_ex(name, query, top_k=top_k, wing=wing, room=room, tags=tag, **extra)

    def human(r: dict[str, Any]) -> None:
        if packed:  # what an agent is shown: the daemon's text, whole within the budget
            typer.echo(r["text"])
            return
        if r.get("notice"):
            typer.echo(f"({r['notice']})", err=True)
        if r.get("substring"):
            typer.echo("(no word matched: these are substring matches)", err=True)
        if r.get("nothing_relevant"):
            typer.echo(render.nothing_relevant(name, query, r.get("unknown_names")))
        for d in r["results"]:
            # The score that orders the list (the 0-1 relevance orders only --all's merge).
            echo_lines(render.cli_drawer({**d, "score": d.get("rank_score", d["score"])},
                                         score=True))

    emit(res, as_json, human)


def _recall_all(query: str, top_k: int, wing: str | None, room: str | None, tags: list[str],
                include_superseded: bool, as_json: bool) -> None:
    """``palace recall --all``: one ``memory.recall_all`` request, printed like a recall."""
    extra = {"include_superseded": True} if include_superseded else {}
    with client(as_json) as c:
        res = c.recall_all(query, top_k=top_k, wing=wing, room=room, tags=tags, **extra)

    def human(r: dict[str, Any]) -> None:
        if r.get("nothing_relevant"):
            typer.echo(f"nothing relevant in any palace for: {query}")
        for d in r["results"]:
            head, *rest = render.cli_drawer(d, score=True)
            echo_lines([f"{d['palace']} {head}", *rest])
        for s in r.get("skipped") or []:
            typer.echo(f"(skipped {s['palace']}: {s['error']}: {s['message']})", err=True)

    emit(res, as_json, human)


@app.command("wake-up")
def wake_up(
    palace: str | None = PalaceOpt,
    budget: int = op_option("memory.wake_up", "budget", "--budget",
                            help="Token budget of the context."),
    as_json: bool = JsonOpt,
) -> None:
    """Print a palace's L0 identity and L1 essential drawers (for session-start hooks).

    Without --palace (or PALACE) the palace is the project's (CLAUDE_PROJECT_DIR, else the
    working directory), as for every command. A palace that does not exist yet prints an
    empty context (reads never create one; the first write does), so a hook installed by
    `palace init --hooks` works in a brand-new project.
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        try:
            res = c.wake_up(name, budget=budget)
        except E.PalaceNotFound:
            res = {"sections": [], "tokens_used": 0, "cut": [], "palace_exists": False,
                   "text": ""}
    emit(res, as_json, lambda r: typer.echo(r["text"]) if r["text"] else None)


@app.command()
def get(drawer_id: int = op_argument("memory.get", "id", help="Drawer id."),
        palace: str | None = PalaceOpt,
        history: bool = op_option("memory.get", "history", "--history",
                                  help="Also show its earlier versions (palace update)."),
        as_json: bool = JsonOpt) -> None:
    """Show one drawer, its whole text and its details."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        d = c.get(name, drawer_id, history=history)

    def human(d: dict[str, Any]) -> None:
        echo_lines(render.cli_drawer(d))
        typer.echo(render.cli_drawer_details(d))
        if (line := provenance(d)) is not None:
            typer.echo(line)
        if history:
            typer.echo("earlier versions, newest first:")
            echo_lines(render.cli_history(d.get("history") or []))

    emit(d, as_json, human)


_BULK = "memory.forget_many"


@app.command()
def forget(drawer_id: int | None = op_argument("memory.forget", "id", default=None,
                                               show_default="none: the selectors below",
                                               help="Drawer id (or select drawers with the "
                                                    "options below)."),
           palace: str | None = PalaceOpt,
           purge: bool = op_option("memory.forget", "purge", "--purge",
                                   help="Delete it for good now (also a drawer already in "
                                        "the trash), instead of moving it to the trash."),
           wing: str | None = op_option(_BULK, "wing", "--wing", help="Drawers of this wing.",
                                        unset="any"),
           room: str | None = op_option(_BULK, "room", "--room", help="Drawers of this room.",
                                        unset="any"),
           tag: list[str] = op_option(_BULK, "tags", "--tag",  # noqa: B008
                                      help="Drawers with this tag (repeatable: any of them).",
                                      unset="any"),
           source: str | None = op_option(_BULK, "source", "--source",
                                          help="Drawers whose source matches this glob "
                                               "(chatgpt:*).", unset="any"),
           older_than: str | None = op_option(
               _BULK, "older_than", "--older-than", unset="any age",
               help="Drawers stored before: a duration back from now (90d, 12h) or a time."),
           query: str | None = op_option(_BULK, "query", "--query",
                                         help="Drawers holding every word of it (keywords).",
                                         unset="any"),
           dry_run: bool = op_option(_BULK, "dry_run", "--dry-run",
                                     help="Only list what would be forgotten."),
           max_drawers: int = op_option(_BULK, "max_drawers", "--max",
                                        help="Refuse when more drawers match (raise it to "
                                             "confirm a larger forget)."),
           show: int = op_option(_BULK, "show", "--show",
                                 help="How many of the selected drawers to list."),
           expect: str | None = op_option(_BULK, "expect", "--expect",
                                          help="The selection a --dry-run printed: forget "
                                               "exactly those drawers, or nothing if the "
                                               "selectors match another set now.",
                                          unset="whatever matches now"),
           as_json: bool = JsonOpt) -> None:
    """Move one drawer to the trash (`palace restore-drawer ID` brings it back), or every
    drawer matching all the selectors given, as one batch (`palace restore-drawer --batch B`
    brings it back; try --dry-run first).
    """
    name = need_palace(palace, as_json)
    selected = any(v is not None for v in (wing, room, source, older_than, query)) or tag
    if drawer_id is not None:
        if selected or dry_run or expect is not None:
            fail(E.UsageError("give a drawer id or selectors (--room, --tag...), not both"),
                 as_json)
        with client(as_json) as c:
            res = c.forget(name, drawer_id, purge=purge)
        emit(res, as_json, lambda r: typer.echo(governance_render.forgotten(r, name)))
        return
    if purge:
        fail(E.UsageError("--purge forgets one drawer; a bulk forget goes to the trash"),
             as_json)
    with client(as_json) as c:
        res = c.forget_many(name, wing=wing, room=room, tags=tag, source=source,
                            older_than=older_than, query=query, dry_run=dry_run,
                            max_drawers=max_drawers, show=show, expect=expect)
    emit(res, as_json, lambda r: echo_lines(governance_render.forgotten_many(r, name)))


@app.command()
def drawers(
    palace: str | None = PalaceOpt,
    wing: str | None = op_option("memory.list", "wing", "--wing",
                                 help="Only this wing.", unset="all wings"),
    room: str | None = op_option("memory.list", "room", "--room",
                                 help="Only this room.", unset="all rooms"),
    tag: list[str] = op_option("memory.list", "tags", "--tag",  # noqa: B008
                               help="Only drawers with this tag (repeatable: any of them).",
                               unset="any"),
    since: str | None = op_option("memory.list", "since", "--since", help=_SINCE,
                                  unset="any date"),
    until: str | None = op_option("memory.list", "until", "--until", help=_UNTIL,
                                  unset="any date"),
    created_by: str | None = op_option("memory.list", "created_by", "--created-by",
                                       help="Only drawers this agent remembered (as `palace "
                                            "audit` names it: mcp:claude-code, user:ann).",
                                       unset="any agent"),
    limit: int = op_option("memory.list", "limit", "--limit", default=DRAWERS_PAGE,
                           help="Drawers per page."),
    offset: int = op_option("memory.list", "offset", "--offset",
                            help="Skip this many drawers (the newest) first."),
    as_json: bool = JsonOpt,
) -> None:
    """List drawers, newest first (paginated with --limit/--offset).

    A long drawer shows its first lines only; `palace get ID` prints all of it (--json
    carries every text whole).
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.drawers(name, wing=wing, room=room, tags=tag, since=since, until=until,
                        created_by=created_by, limit=limit, offset=offset)

    def human(r: dict[str, Any]) -> None:
        for d in r["drawers"]:
            echo_lines(render.cli_drawer(d, cut=True))
        typer.echo(page_footer(offset, len(r["drawers"]), r["total"], r.get("next_offset")))

    emit(res, as_json, human)


def page_footer(offset: int, shown: int, total: int, next_offset: int | None) -> str:
    """The line under a page of ``palace drawers``: which drawers of how many, and the next
    page's ``--offset``."""
    if not total:
        return "(no drawers)"
    if not shown:
        return f"(none at --offset {offset}; {counted(total, 'drawer')} in all)"
    where = f"{offset + 1}" if shown == 1 else f"{offset + 1}-{offset + shown}"
    more = f"; next: --offset {next_offset}" if next_offset is not None else ""
    return f"(showing {where} of {total}{more})"
