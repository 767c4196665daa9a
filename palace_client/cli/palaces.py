"""``palace create``, ``list``, ``info``, ``delete``, ``reembed``: the palaces themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from palace_client.cli.common import JsonOpt, PalaceOpt, client, emit, fail, need_palace, op_option
from palace_client.render.results import counted, pending_chunks, progress
from palaced.wire import errors as E

app = typer.Typer()


@app.command()
def create(name: str = typer.Argument(..., help="Palace name (lowercase kebab-case)."),
           exist_ok: bool = op_option("palace.create", "exist_ok", "--exist-ok",
                                      help="No error if it exists."),
           store: str | None = op_option("palace.create", "store", "--store",
                                         unset="a local palace"),
           as_json: bool = JsonOpt) -> None:
    """Create a palace (with --store: a team palace in PostgreSQL, or attach to it)."""
    with client(as_json) as c:
        info = c.create_palace(name, exist_ok=exist_ok, store=store)

    def human(i: dict[str, Any]) -> None:
        if store is None:
            typer.echo(f"palace {i['name']} ready at {i['path']}")
        else:
            typer.echo(f"team palace {i['name']} {'created' if i.get('created') else 'attached'}"
                       f" ({i.get('store', '')})")

    emit(info, as_json, human)


@app.command("list")
def list_(as_json: bool = JsonOpt) -> None:
    """List palaces."""
    with client(as_json) as c:
        palaces = c.list_palaces()

    def human(ps: list[dict[str, Any]]) -> None:
        if not ps:
            typer.echo("no palaces yet: create one with `palace create NAME`")
        for p in ps:
            typer.echo(f"{p['name']}{'  (open)' if p.get('open') else ''}")

    emit({"palaces": palaces} if as_json else palaces, as_json, human)


@app.command()
def info(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Show a palace's counts, embedder and rooms."""
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        data = c.palace_info(name)

    def human(i: dict[str, Any]) -> None:
        typer.echo(f"palace {i['name']}  ({i['path']})")
        typer.echo(f"  {counted(i['drawers'], 'drawer')}, {counted(i['vectors'], 'vector')}, "
                   f"index {i['index'] if i['index'] is not None else '-'}, "
                   f"{counted(i['pending_embeddings'], 'pending embedding')}"
                   f"{pending_chunks(i)}")
        typer.echo(f"  embedder {i.get('embedder') or '-'}")
        moving = i.get("reembedding")
        if moving:
            typer.echo(f"  re-embedding {progress(moving)} for {moving['model']} "
                       + ("(paused until that model is loaded)" if moving.get("paused") else
                          "(keyword-only recall until done)"))
        for r in i.get("rooms", []):
            typer.echo(f"  {r['wing']}/{r['room']}: {counted(r['drawers'], 'drawer')}")

    emit(data, as_json, human)


@app.command()
def delete(name: str = typer.Argument(..., help="Palace to delete."),
           yes: bool = typer.Option(False, "--yes", help="Really delete (required)."),
           purge: bool = op_option("palace.delete", "purge", "--purge"),
           as_json: bool = JsonOpt) -> None:
    """Delete a palace and every drawer in it (needs --yes); a team palace is only detached
    from this daemon unless --purge drops its schema."""
    if not yes:
        fail(E.InvalidArgs(f"refusing to delete palace {name!r} without --yes"), as_json)
    with client(as_json) as c:
        out = c.delete_palace(name, purge=purge)
    emit(out, as_json, lambda d: typer.echo(
        f"deleted palace {name}{' and dropped its schema' if d.get('purged') else ''}"))


@app.command()
def reembed(palace: str | None = PalaceOpt, as_json: bool = JsonOpt) -> None:
    """Re-embed every drawer of a palace with the daemon's current model now.

    After a model change palaces are re-embedded in the background anyway (recall is
    keyword-only meanwhile); this finishes it in the foreground.
    """
    name = need_palace(palace, as_json)
    with client(as_json) as c:
        data = c.reembed(name)
    emit(data, as_json, lambda d: typer.echo(
        f"re-embedded {counted(d['reembedded'], 'drawer')} with {d['embedder']}"))


@app.command()
def project(
    set_: str | None = typer.Option(None, "--set", metavar="NAME",
                                    show_default="show only",
                                    help="Use this palace for the project from now on (e.g. "
                                         "its old one after a rename)."),
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="A directory of the project (default: the working directory).")] = None,
    as_json: bool = JsonOpt,
) -> None:
    """Show (or with --set choose) the palace of the project you are in.

    A project is its git root; its palace is chosen by that path and remembered in
    projects.json in the data directory (`palaced print-paths`): the folder's name, or, when
    another project already holds that name, a derived one like api-3f9c1a. A moved
    repository keeps its palace when its old path is gone; a renamed one starts a new palace
    until `palace project --set OLD` points it back. Two projects may share a palace (say,
    worktrees of one repository): --set the same name in both. The CLI, `palace mcp` and the
    hooks all use this palace unless --palace or PALACE names another.
    """
    from palace_client.api.projects import current_project, project_root, set_project_palace

    where = (directory or Path.cwd()).absolute()
    if set_ is not None:
        root = project_root(where)
        if root is None:
            fail(E.InvalidArgs(f"{where} is no project (the home directory or /, outside "
                               "git): its palace is 'default'"), as_json)
        try:
            sharing = set_project_palace(root, set_)
        except ValueError as exc:
            fail(E.InvalidArgs(str(exc)), as_json)
        except (E.PalaceError, OSError) as exc:
            fail(exc if isinstance(exc, E.PalaceError) else E.InvalidArgs(str(exc)), as_json)
        if sharing:
            typer.echo(f"palace {set_} is shared with {', '.join(sharing)}", err=True)
    chosen = current_project({}, cwd=where)
    data = {"project": str(chosen.root) if chosen.root else None, "palace": chosen.name,
            "how": chosen.how}
    emit(data, as_json, lambda d: typer.echo(
        f"project {d['project'] or '(none: home directory)'}\npalace  {d['palace']}"))
