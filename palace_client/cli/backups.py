"""``palace backup`` and ``palace restore``: consistent copies of live palaces, and back."""

from __future__ import annotations

from typing import Any

import typer

from palace_client.cli.common import EXIT_ERROR, JsonOpt, client, emit, op_argument, op_option
from palace_client.render.results import counted

app = typer.Typer()


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _contents(counts: dict[str, int]) -> str:
    return (f"{counted(counts.get('drawers', 0), 'drawer')}, "
            f"{counted(counts.get('facts', 0), 'fact')}")


@app.command("backup")
def backup(
    palace: str | None = typer.Option(None, "--palace", "-p",
                                      help="Back up only this palace (default: every palace; "
                                           "PALACE is not read)."),
    to: str | None = op_option("palace.backup", "to", "--to",
                               help="Directory to write backups under, as "
                                    "DIR/<palace>/<time>/ (a relative DIR is taken from "
                                    "the current directory; ~ is expanded).",
                               unset="[backup] dir, else <data_dir>/backups"),
    keep: int | None = op_option("palace.backup", "keep", "--keep",
                                 help="Backups of each palace to keep (older ones are "
                                      "deleted).", unset="[backup] keep, else 7"),
    as_json: bool = JsonOpt,
) -> None:
    """Copy every palace (or one) while the daemon keeps serving: a consistent snapshot of its
    database, its identity.txt and a manifest with checksums. The vector index is not copied
    (it is rebuilt on restore). Exits 1 when a palace could not be backed up."""
    with client(as_json) as c:
        res = c.backup(palace, to=to, keep=keep)

    def human(r: dict[str, Any]) -> None:
        if not r["backups"] and not r["failed"]:
            typer.echo("no palaces to back up")
        for b in r["backups"]:
            gone = f"; removed {counted(len(b['removed']), 'older backup')}" if b["removed"] else ""
            typer.echo(f"backed up {b['palace']} ({_contents(b['counts'])}) to {b['path']} "
                       f"({_size(b['bytes'])} in {b['seconds']:.2f} s){gone}")
        for f in r["failed"]:
            err = f["error"]
            typer.echo(f"palace: error: could not back up {f['palace']}: {err['message']} "
                       f"[{err['name']}]", err=True)

    emit(res, as_json, human)
    if res["failed"]:
        raise typer.Exit(EXIT_ERROR)


@app.command("restore")
def restore(
    path: str = op_argument("palace.restore", "path", metavar="BACKUP",
                            help="A backup directory (<backups>/<palace>/<time>)."),
    palace: str | None = typer.Option(None, "--palace", "-p",
                                      help="Restore under this name (default: the palace the "
                                           "backup was taken of; PALACE is not read)."),
    force: bool = op_option("palace.restore", "force", "--force",
                            help="Replace the palace even if it was written after the backup."),
    as_json: bool = JsonOpt,
) -> None:
    """Verify a backup (manifest, checksums, SQLite check, counts) and restore it, replacing
    the palace only if it was not written after the backup (or with --force). The vector
    index is rebuilt from the restored database."""
    with client(as_json) as c:
        res = c.restore(path, palace=palace, force=force)

    def human(r: dict[str, Any]) -> None:
        how = "replaced the previous palace" if r["replaced"] else "a new palace"
        index = ("keyword-only (no vector index)" if r["index"] is None
                 else f"vector index rebuilt: {counted(r['index'], 'vector')}")
        typer.echo(f"restored palace {r['palace']} from {r['from']} "
                   f"({_contents(r['counts'])}; {how}); {index}")
        if r.get("mismatch"):
            typer.echo(f"  ! {r['mismatch']}")

    emit(res, as_json, human)
