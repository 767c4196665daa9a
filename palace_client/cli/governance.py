"""``palace restore-drawer``, ``trash list``/``empty``, ``audit``, ``policy show``/``set``:
the trash, who did what, and who may."""

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
from palace_client.cli.memory import DRAWERS_PAGE, page_footer
from palace_client.render import governance as governance_render
from palace_client.render import results as render
from palace_client.render.results import counted, format_time
from palaced.wire import errors as E
from palaced.wire.vocab import PERMISSIONS

app = typer.Typer()
trash_app = typer.Typer(no_args_is_help=True,
                        help="Forgotten drawers, restorable for the daemon's [trash] keep_days.")
policy_app = typer.Typer(no_args_is_help=True,
                         help="Which agents may write, delete or change a palace's policy.")


@app.command("restore-drawer")
def restore_drawer(drawer_id: int | None = op_argument("memory.restore", "id", default=None,
                                                       show_default="none: --batch",
                                                       help="Drawer id."),
                   batch: str | None = op_option(
                       "memory.restore_batch", "batch", "--batch", default=None,
                       unset="none: DRAWER_ID",
                       help="Restore every drawer of this batch (what a bulk forget or a "
                            "merge printed) instead."),
                   palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Bring a forgotten drawer back from the trash (text, keyword index, vectors), or with
    --batch every drawer a bulk `palace forget` or a `palace merge` moved there."""
    name = need_palace(palace, as_json)
    if (drawer_id is None) == (batch is None):
        fail(E.UsageError("give a drawer id or --batch (one of them)"), as_json)
    if batch is not None:
        with client(as_json) as c:
            res = c.restore_batch(name, batch)
        emit(res, as_json, lambda r: echo_lines(governance_render.restored_batch(r)))
        return
    assert drawer_id is not None
    with client(as_json) as c:
        res = c.restore_drawer(name, drawer_id)
    emit(res, as_json, lambda r: typer.echo(
        f"restored drawer {drawer_id}" if r["restored"]
        else f"drawer {drawer_id} is not in the trash: it is active"))


@trash_app.command("list")
def trash_list(
    palace: str | None = PalaceOpt,
    limit: int = op_option("memory.trash", "limit", "--limit", default=DRAWERS_PAGE,
                           help="Drawers per page."),
    offset: int = op_option("memory.trash", "offset", "--offset",
                            help="Skip this many (the most recently forgotten) first."),
    as_json: bool = JsonOpt,
) -> None:
    """List the drawers in the trash, most recently forgotten first."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.trash(name, limit=limit, offset=offset)

    def human(r: dict[str, Any]) -> None:
        for d in r["drawers"]:
            echo_lines(render.cli_drawer(d, cut=True))
            typer.echo(f"    forgotten {format_time(d['trashed_ms'])} by {d['trashed_by']} "
                       f"({d['reason']}); restorable until "
                       f"{format_time(d['restorable_until_ms'])}")
        if not r["total"]:
            typer.echo("(the trash is empty)")
        else:
            typer.echo(page_footer(offset, len(r["drawers"]), r["total"], r.get("next_offset")))

    emit(res, as_json, human)


@trash_app.command("empty")
def trash_empty(palace: str | None = PalaceOpt,
                yes: bool = typer.Option(False, "--yes", help="Really empty it (required)."),
                as_json: bool = JsonOpt) -> None:
    """Delete every drawer in the trash for good (needs --yes)."""
    name = need_palace(palace, as_json)
    if not yes:
        fail(E.InvalidArgs(f"refusing to empty the trash of palace {name!r} without --yes"),
             as_json)
    with client(as_json) as c:
        res = c.empty_trash(name)
    emit(res, as_json, lambda r: typer.echo(
        f"deleted {counted(len(r['purged']), 'drawer')} from the trash for good"))


@app.command("audit")
def audit(
    palace: str | None = PalaceOpt,
    since: str | None = op_option("palace.audit", "since", "--since",
                                  help="Only since this time (ISO 8601) or this long ago "
                                       "(90m, 12h, 7d).", unset="all"),
    agent: str | None = op_option("palace.audit", "agent", "--agent",
                                  help="Only agents matching this glob ('mcp:*').",
                                  unset="all"),
    op: str | None = op_option("palace.audit", "op", "--op",
                               help="Only ops matching this glob ('memory.*').", unset="all"),
    limit: int = op_option("palace.audit", "limit", "--limit", help="Entries per page."),
    offset: int = op_option("palace.audit", "offset", "--offset",
                            help="Skip this many (the newest) first."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a palace's audit log, newest first: who changed what, when (never the texts).

    `palace audit --agent NAME` filters by agent; `palace --agent NAME audit` says who asks.
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.audit(name, since=since, agent=agent, op=op, limit=limit, offset=offset)

    def human(r: dict[str, Any]) -> None:
        for e in r["entries"]:
            typer.echo(governance_render.audit_line(e))
        if not r["total"]:
            typer.echo("(no audit entries match)")
        elif r.get("next_offset") is not None:
            typer.echo(f"(showing {len(r['entries'])} of {r['total']}; next: --offset "
                       f"{r['next_offset']})")

    emit(res, as_json, human)


def _show_policy(r: dict[str, Any]) -> None:
    for permission in PERMISSIONS:
        globs = r["policy"].get(permission) or []
        mark = "yes" if r["allowed"].get(permission) else "no"
        typer.echo(f"{permission:<7} {' '.join(globs) or '(nobody)'}   [{r['agent']}: {mark}]")


@policy_app.command("show")
def policy_show(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Show which agents (globs) hold each permission, and what you may do."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.policy(name)
    emit(res, as_json, _show_policy)


@policy_app.command("set")
def policy_set(
    permission: str = op_argument("palace.policy_set", "permission",
                                  help=f"One of {', '.join(PERMISSIONS)}."),
    agents: list[str] | None = op_argument(  # noqa: B008
        "palace.policy_set", "agents", default=None, show_default="none: give --nobody",
        help="Agent globs granted it, e.g. 'user:*' 'mcp:claude-code*' ('*': everyone)."),
    nobody: bool = typer.Option(False, "--nobody", help="Grant it to no agent at all."),
    palace: str | None = PalaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Grant PERMISSION to exactly the agents matching the globs (needs admin).

    write: store and change memories and facts; delete: forget, purge, prune, empty the
    trash, delete the palace; admin: change this policy.
    """
    name = need_palace(palace, as_json)
    if bool(agents) == nobody:
        fail(E.UsageError("give agent globs, or --nobody (not both)",
                          details={"param": "agents"}), as_json)
    with client(as_json) as c:
        res = c.set_policy(name, permission, agents or [])
    emit(res, as_json, _show_policy)
