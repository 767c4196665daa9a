"""``palace model list|use|fetch|import|load``: choose the embedding model, install it, load it.

``list`` shows the model catalog (``palaced.wire.models``) with what is installed here and which
model the daemon runs; ``use`` sends ``model.use`` (the daemon writes its config file, loads the
model and re-embeds in the background). ``fetch`` downloads the default model from the model
hub, ``import`` installs a local copy of a catalog model (a directory or an archive); both
check the files' sha256 against the manifest (``palace_client.models.files``), install them
where the daemon looks (``<data_dir>/models/``) and send ``model.load`` (``model.check`` for a
model the daemon is not configured with). A copy the daemon cannot load is rolled back.
``load`` only sends ``model.load`` (after editing the config file, say).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from palace_client.cli.common import JsonOpt, client, emit, fail, op_argument
from palace_client.render.results import counted
from palaced.wire import errors as E
from palaced.wire.models import MODELS, ModelEntry, entry
from palaced.wire.paths import MODEL_RECORD, Paths, model_dir_name, resolve
from palaced.wire.vocab import DEFAULT_MODEL

if TYPE_CHECKING:
    from palace_client.models.files import Verdict

# A model.load may have the daemon download the model (no installed copy, allow_download on).
LOAD_TIMEOUT_MS = 600_000

app = typer.Typer(no_args_is_help=True,
                  help="Choose the embedding model (list, use), install it (fetch, import) and "
                       "(re)load it (load).")
# fastembed's catalog holds more models than palace's (any of them works by its full name).
MORE = ("more: any model of fastembed's catalog by its full name (`palace model use "
        "thenlper/gte-base`); fastembed downloads it on first use, so it needs internet and is "
        "untested here")


def _installed(paths: Paths, model: ModelEntry) -> str | None:
    """The installed copy of ``model`` (its directory), if there is one."""
    path = paths.models_dir / model_dir_name(model.name)
    return str(path) if (path / MODEL_RECORD).is_file() else None


@app.command("list")
def list_(as_json: bool = JsonOpt) -> None:
    """The models palace knows: name, size, dimensions, license, installed here?, active?

    The active model is the daemon's (started if needed). Models fetched by fastembed on first
    use need internet and are untested here (offline).
    """
    paths = resolve()
    with client(as_json) as c:
        model = c.status()["model"]
    identity = model.get("identity") or ""
    rows = [{"short": m.short, "name": m.name, "dims": m.dims, "size_mb": m.size_mb,
             "license": m.license, "installed": _installed(paths, m),
             "active": identity == f"fastembed:{m.name}:{m.dims}",
             "default": m.name == DEFAULT_MODEL, "tested": m.tested,
             "query_prefix": m.query_prefix or None, "passage_prefix": m.passage_prefix or None,
             "note": m.note} for m in MODELS]

    def human(r: dict[str, Any]) -> None:
        typer.echo(f"{'':2}{'MODEL':10} {'DIMS':>4} {'SIZE':>7}  {'LICENSE':10} "
                   f"{'INSTALLED':9}  NAME / NOTE")
        for m in r["models"]:
            mark = "*" if m["active"] else " "
            typer.echo(f"{mark} {m['short']:10} {m['dims']:>4} {m['size_mb']:>4} MB  "
                       f"{m['license']:10} {'yes' if m['installed'] else 'no':9}  {m['name']}")
            typer.echo(f"{'':47}{m['note']}")
        typer.echo(f"* the daemon's model: {r['daemon'].get('identity') or r['daemon']['state']}")
        typer.echo(r["more"])
        typer.echo("switch with `palace model use NAME`; install the files of a local copy "
                   "with `palace model import PATH --name NAME`")

    emit({"models": rows, "daemon": model, "more": MORE}, as_json, human)


@app.command("use")
def use(model: str = op_argument("model.use", "model"), as_json: bool = JsonOpt) -> None:
    """Switch the daemon to MODEL: set `[embedder] model` in the config file, load it, and
    re-embed every local palace in the background (recall is keyword-only in a palace until
    its re-embedding is done; `palace status` shows the progress).
    """
    with client(as_json) as c:
        out = c.call("model.use", None, {"model": model}, timeout_ms=LOAD_TIMEOUT_MS)

    def human(r: dict[str, Any]) -> None:
        typer.echo(f"now using {r['daemon'].get('identity')} (from {r['daemon'].get('source')}"
                   f"); {r['config_file']} says [embedder] model = \"{r['model']}\"")
        if r["model_path_cleared"]:
            typer.echo("  its model_path (the files of the previous model) is commented out")
        moving = r["reembedding"]
        if not moving:
            typer.echo("  every palace is on this model: recall is hybrid")
            return
        for p in moving:
            typer.echo(f"  palace {p['palace']}: re-embedding "
                       f"{counted(int(p['drawers'] or 0), 'drawer')} in the background; "
                       "keyword-only recall until done")
        typer.echo("  follow it with `palace status` (re-embedding done/total (percent))")

    emit(out, as_json, human)


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
            name: str = typer.Option("minilm", "--name",
                                     help="Which model of the catalog the files are (`palace "
                                          "model list`: short or full name)."),
            as_json: bool = JsonOpt) -> None:
    """Install a local copy of a catalog model (checked, sha256 recorded) and load or check it.

    The daemon loads it when it is the configured model, else loads it on the side to check
    that it makes the catalog's vectors (`palace model use NAME` then switches to it). A copy
    that is no export palace knows is installed with a warning when it is complete and loads;
    an archive with a member escaping its directory is refused.
    """
    from palace_client.models import archive as model_archive
    from palace_client.models import files as model_files

    model = entry(name)
    if model is None:
        fail(E.InvalidArgs(f"no model {name!r} in palace's catalog; `palace model list` shows "
                           "them", details={"model": name}), as_json)
    source = Path(path).expanduser().absolute()
    paths = resolve()
    staging = model_files.new_staging(paths)
    try:
        if source.is_dir():
            found = model_files.locate(source, model.name)
        elif model_archive.is_archive(source):
            unpacked = staging / ".unpacked"
            unpacked.mkdir(mode=0o700)
            model_archive.unpack(source, unpacked)
            found = model_files.locate(unpacked, model.name)
        else:
            raise E.InvalidContent(
                f"{source} is neither a directory nor a .tar(.gz) or .zip archive",
                details={"condition": "not-an-archive", "path": str(source)})
        checked = model_files.stage_files(found, staging, model.name, model.dims)
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
            # The configured model is loaded; another one only checked on the side.
            configured = c.status()["model"].get("configured")
            if configured in (None, checked.model):
                state = c.call("model.load", timeout_ms=LOAD_TIMEOUT_MS)
            else:
                state = {**c.call("model.check", None, {"model": checked.model},
                                  timeout_ms=LOAD_TIMEOUT_MS), "checked": True}
        except E.PalaceError:
            installed.rollback()
            raise
    installed.commit()
    warnings = [checked.warning] if checked.warning else []
    if state.get("source") != str(installed.path):
        warnings.append(f"the daemon loads {state.get('source')} (model_path is set in its "
                        "config or PALACE_EMBED_MODEL_PATH), not this copy")
    result = {"installed": str(installed.path), "model": checked.model,
              "files": checked.files, "verified": checked.export, "warnings": warnings,
              "daemon": state}

    def human(r: dict[str, Any]) -> None:
        typer.echo(f"installed {r['model']} in {r['installed']}")
        typer.echo(f"  verified: {r['verified']}" if r["verified"] else
                   "  not verified: no export palace knows")
        for name, digest in sorted(r["files"].items()):
            typer.echo(f"  {digest}  {name}")
        typer.echo(_checked(r["daemon"]) if r["daemon"].get("checked") else
                   _loaded(r["daemon"]))

    for warning in warnings:  # on stderr with --json too: for the person who ran it
        typer.echo(f"palace: warning: {warning}", err=True)
    emit(result, as_json, human)


def _checked(state: dict[str, Any]) -> str:
    known = entry(str(state.get("model")))
    return (f"checked: {state.get('identity')} loads from {state.get('source')}; the daemon "
            f"keeps its model: `palace model use {known.short if known else state.get('model')}`"
            " switches to it")


def _loaded(state: dict[str, Any]) -> str:
    return (f"model ready: {state.get('identity')} from {state.get('source')} (hybrid recall; "
            "palaces of another model are re-embedded in the background)")
