"""``palace model fetch|import|load``: install the embedding model and have the daemon load it.

``fetch`` downloads the default model from the model hub, ``import`` installs a local copy (a
directory or an archive); both check the files' sha256 against the manifest
(``palace_client.models.files``), install them where the daemon looks
(``<data_dir>/models/``) and send ``model.load``. A copy the daemon cannot load is rolled
back. ``load`` only sends ``model.load`` (after editing the config file, say).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from palace_client.cli.common import JsonOpt, client, emit, fail
from palaced.wire import errors as E
from palaced.wire.paths import Paths, resolve

if TYPE_CHECKING:
    from palace_client.models.files import Verdict

# A model.load may have the daemon download the model (no installed copy, allow_download on).
LOAD_TIMEOUT_MS = 600_000

app = typer.Typer(no_args_is_help=True,
                  help="Install the embedding model (fetch, import) and (re)load it (load).")


@app.command("fetch")
def fetch(timeout: float = typer.Option(10.0, "--timeout", min=0.1,
                                        help="Seconds to wait for the model hub (the name "
                                             "lookup, the connect, each read)."),
          as_json: bool = JsonOpt) -> None:
    """Download the default model from the model hub (HF_ENDPOINT), verify it, load it.

    Fails fast, naming the host, when the hub is unreachable: then use `palace model import`.
    """
    from palace_client.models import fetch as model_fetch
    from palace_client.models import files as model_files

    base = model_fetch.endpoint()
    try:
        model_fetch.probe(base, timeout)
    except E.PalaceError as exc:
        fail(exc, as_json)
    paths = resolve()
    staging = model_files.new_staging(paths)
    source = f"{base}/{model_fetch.REPO}@{model_fetch.REVISION}"
    try:
        hashes = model_fetch.download(base, staging, timeout, model_fetch.tty_progress)
        checked = model_files.verdict(hashes)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, E.PalaceError):
            fail(exc, as_json)
        raise
    _install_and_load(paths, staging, checked, source, as_json)


@app.command("import")
def import_(path: str = typer.Argument(..., help="A directory holding the model files, or a "
                                                 ".tar.gz/.tgz/.tar/.zip archive of one."),
            as_json: bool = JsonOpt) -> None:
    """Install a local copy of the default model (checked, sha256 recorded) and load it.

    A copy that is no export palace knows is installed with a warning when it is complete and
    the daemon loads it; an archive with a member escaping its directory is refused.
    """
    from palace_client.models import archive as model_archive
    from palace_client.models import files as model_files

    source = Path(path).expanduser().absolute()
    paths = resolve()
    staging = model_files.new_staging(paths)
    try:
        if source.is_dir():
            found = model_files.locate(source)
        elif model_archive.is_archive(source):
            unpacked = staging / ".unpacked"
            unpacked.mkdir(mode=0o700)
            model_archive.unpack(source, unpacked)
            found = model_files.locate(unpacked)
        else:
            raise E.InvalidContent(
                f"{source} is neither a directory nor a .tar(.gz) or .zip archive",
                details={"condition": "not-an-archive", "path": str(source)})
        checked = model_files.stage_files(found, staging)
        shutil.rmtree(staging / ".unpacked", ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            exc = E.ClientError(f"cannot import {source}: {exc}", details={"path": str(source)})
        if isinstance(exc, E.PalaceError):
            fail(exc, as_json)
        raise
    _install_and_load(paths, staging, checked, str(source), as_json)


@app.command("load")
def load(as_json: bool = JsonOpt) -> None:
    """Have the daemon (re)load the model from the config file's settings or the installed
    copy, without a restart; palaces of another model are re-embedded in the background."""
    with client(as_json) as c:
        state = c.call("model.load", timeout_ms=LOAD_TIMEOUT_MS)
    emit(state, as_json, lambda s: typer.echo(_loaded(s)))


def _install_and_load(paths: Paths, staging: Path, checked: Verdict, source: str,
                      as_json: bool) -> None:
    """Swap the staged copy in and have the daemon load it; roll back if it cannot."""
    from palace_client.models import files as model_files

    try:
        installed = model_files.install(paths, staging, checked, source)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        fail(E.ClientError(f"cannot install the model: {exc}"), as_json)
    with client(as_json) as c:
        try:
            state = c.call("model.load", timeout_ms=LOAD_TIMEOUT_MS)
        except E.PalaceError:
            installed.rollback()
            raise
    installed.commit()
    warnings = [checked.warning] if checked.warning else []
    if state.get("source") != str(installed.path):
        warnings.append(f"the daemon loads {state.get('source')} (model_path is set in its "
                        "config or PALACE_EMBED_MODEL_PATH), not this copy")
    result = {"installed": str(installed.path), "model": model_files.MODEL,
              "files": checked.files, "verified": checked.export, "warnings": warnings,
              "daemon": state}

    def human(r: dict[str, Any]) -> None:
        typer.echo(f"installed {r['model']} in {r['installed']}")
        typer.echo(f"  verified: {r['verified']}" if r["verified"] else
                   "  not verified: no export palace knows")
        for name, digest in sorted(r["files"].items()):
            typer.echo(f"  {digest}  {name}")
        typer.echo(_loaded(r["daemon"]))

    for warning in warnings:  # on stderr with --json too: for the person who ran it
        typer.echo(f"palace: warning: {warning}", err=True)
    emit(result, as_json, human)


def _loaded(state: dict[str, Any]) -> str:
    return (f"model ready: {state.get('identity')} from {state.get('source')} (hybrid recall; "
            "palaces of another model are re-embedded in the background)")
