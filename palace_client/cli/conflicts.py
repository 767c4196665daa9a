"""``palace conflicts list`` and ``palace conflicts resolve``: drawers that contradict older
ones (found at remember time), and settling them."""

from __future__ import annotations

from typing import Any

import typer

from palace_client.cli.common import (
    JsonOpt,
    PalaceOpt,
    client,
    emit,
    fail,
    need_palace,
    op_argument,
    op_option,
)
from palace_client.render.results import counted, one_line
from palaced.wire import errors as E

app = typer.Typer(help="Conflicting drawers: list them, resolve one.", no_args_is_help=True)


@app.command("list")
def list_conflicts(
    palace: str | None = PalaceOpt,
    include_resolved: bool = op_option("memory.conflicts", "include_resolved", "--all",
                                       help="Also the resolved conflicts."),
    limit: int = op_option("memory.conflicts", "limit", "--limit", help="At most this many."),
    as_json: bool = JsonOpt,
) -> None:
    """List conflicts newest first: each newer drawer and the older one it contradicts."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        res = c.conflicts(name, include_resolved=include_resolved, limit=limit)

    def human(r: dict[str, Any]) -> None:
        for x in r["conflicts"]:
            state = (f"resolved: {x['resolution']}" if x["resolved_ms"] is not None
                     else "open")
            typer.echo(f"conflict {x['id']} [{x['wing']}/{x['room']}] {x['reason']} ({state})")
            typer.echo(f"  newer #{x['newer_id']}: {one_line(x['newer_text'])}")
            typer.echo(f"  older #{x['older_id']}: {one_line(x['older_text'])}")
        shown = len(r["conflicts"])
        more = f" (showing {shown})" if shown < r["total"] else ""
        typer.echo(f"{counted(r['total'], 'conflict')}{more}")

    emit(res, as_json, human)


@app.command("resolve")
def resolve(
    conflict_id: int = op_argument("memory.resolve_conflict", "id", help="Conflict id."),
    palace: str | None = PalaceOpt,
    supersede: bool = typer.Option(False, "--supersede",
                                   help="Retire the older drawer behind the newer one."),
    keep_both: bool = typer.Option(False, "--keep-both", help="Both stay current."),
    merge: str | None = op_option("memory.resolve_conflict", "text", "--merge",
                                  help="Store this text as one drawer, retiring both.",
                                  unset="no merge"),
    as_json: bool = JsonOpt,
) -> None:
    """Resolve a conflict: exactly one of --supersede, --keep-both, --merge TEXT."""
    name = need_palace(palace, as_json)
    chosen = [r for r, on in (("supersede", supersede), ("keep_both", keep_both),
                              ("merge", merge is not None)) if on]
    if len(chosen) != 1:
        fail(E.InvalidArgs("give exactly one of --supersede, --keep-both, --merge TEXT",
                           details={"arg": "resolution"}), as_json)
    with client(as_json) as c:
        res = c.resolve_conflict(name, conflict_id, chosen[0], text=merge)

    def human(r: dict[str, Any]) -> None:
        if r.get("already"):
            typer.echo(f"conflict {r['id']} was already resolved ({r['resolution']})")
            return
        line = f"resolved conflict {r['id']}: {r['resolution']}"
        if r.get("merged_id") is not None:
            line += f"; merged into drawer {r['merged_id']}"
        if r["retired"]:
            line += "; retired " + ", ".join(f"#{i}" for i in r["retired"])
        typer.echo(line)

    emit(res, as_json, human)
