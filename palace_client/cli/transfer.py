"""``palace export`` and ``palace import jsonl|chatgpt|markdown``: memories in and out in bulk.

The importers and their runner live in ``palace_client.importers``; ``run_import`` is the
one way a command runs one (dry run, progress, report, exit code), for every format.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

import typer

from palace_client.cli.common import (
    EXIT_OK,
    EXIT_SKIPPED,
    JsonOpt,
    PalaceOpt,
    client,
    emit,
    fail,
    need_palace,
)
from palace_client.render.results import counted
from palaced.wire import errors as E
from palaced.wire.safe_files import private_file

if TYPE_CHECKING:
    from palace_client.api.client import Client
    from palace_client.importers.runner import Importer, Sink

app = typer.Typer()
imports = typer.Typer(no_args_is_help=True, help=(
    "Import memories from files: a palace export (jsonl), a ChatGPT export (chatgpt), a "
    "directory of documents (markdown), coding agents' sessions (claude-code, codex, gemini, "
    "copilot). Re-running an import stores only what changed. Exits 10 when malformed "
    "records were skipped (they are listed)."))

DryRunOpt = typer.Option(False, "--dry-run", help="Parse and count; store nothing.")
TagOpt = typer.Option([], "--tag", help="Tag every imported drawer (repeatable).",
                      show_default="none")


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[str]]:
    """stdout, or a new private file (0600) renamed over ``path`` once complete (made under
    a random name with O_EXCL: nothing another user placed beside ``path`` is written to)."""
    if path is None:
        yield sys.stdout
        return
    with private_file(path) as out:
        yield out


@app.command("export")
def export(
    file: str | None = typer.Argument(None, help="Write the export here (default: stdout)."),
    palace: str | None = PalaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write a palace's every memory as JSON Lines (docs/export-format.md): its identity,
    drawers, knowledge graph and import ledger; `palace import jsonl` restores it.

    Streams page by page, in bounded memory whatever the palace's size. The file is created
    0600 and appears only once complete.
    """
    name = need_palace(palace, as_json)
    if as_json and file is None:
        fail(E.InvalidArgs("--json prints a summary of the export: give FILE for the export "
                           "itself"), as_json)
    counts: Counter[str] = Counter()
    with client(as_json) as c:
        try:
            with _output(file) as out:
                for record in c.export(name):
                    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
                    out.write("\n")
                    counts[str(record["record"])] += 1
        except OSError as exc:
            fail(E.ClientError(f"cannot write {file}: {exc.strerror or exc}"), as_json)
    if file is None:
        return
    done = {"palace": name, "file": file, "records": sum(counts.values()),
            "drawers": counts["drawer"], "entities": counts["entity"],
            "facts": counts["fact"], "sources": counts["source"], "memoirs": counts["memoir"],
            "concepts": counts["concept"], "concept_links": counts["concept_link"]}
    emit(done, as_json, lambda r: typer.echo(
        f"exported palace {name} to {file}: {counted(r['drawers'], 'drawer')}, "
        f"{counted(r['entities'], 'entity', 'entities')}, {counted(r['facts'], 'fact')}, "
        f"{counted(r['sources'], 'source')}, {counted(r['memoirs'], 'memoir')}, "
        f"{counted(r['concepts'], 'concept')}"))


def run_import(make: Callable[[], Importer], palace: str | None, *, dry_run: bool,
               as_json: bool, sink: Callable[[Client, str, Importer], Sink]) -> None:
    """Run one import: parse with ``make()``'s importer and feed ``sink(client, palace,
    importer)`` (nothing with ``dry_run``); report, then exit 0, or ``EXIT_SKIPPED`` when records
    were skipped. ``palace`` None: the importer's own (a jsonl header's)."""
    from palace_client.importers.runner import Tally, report, run

    with client(as_json) as c:
        importer = make()
        name = palace or getattr(importer, "palace", None)
        tally = Tally(importer.name, importer.unit, importer.source, name, dry_run)
        live = not as_json and sys.stderr.isatty()
        if dry_run:
            run(importer, None, tally, show_progress=live)
        else:
            name = need_palace(name, as_json)
            c.create_palace(name, exist_ok=True)
            run(importer, sink(c, name, importer), tally, show_progress=live)
    report(tally, as_json)
    raise typer.Exit(EXIT_SKIPPED if tally.skipped else EXIT_OK)


def ledger_sink(prune: bool) -> Callable[[Client, str, Any], Sink]:
    """A sink into the import ledger for importers with ``name`` (and, with ``prune``, a
    ``prefix`` they own whole: sources under it not seen again are dropped)."""
    from palace_client.importers.sinks import LedgerSink

    def make(c: Client, palace: str, importer: Any) -> Sink:
        return LedgerSink(c, palace, importer.name, prefix=getattr(importer, "prefix", ""),
                          prune=prune)

    return make


@imports.command("jsonl")
def import_jsonl(
    file: str = typer.Argument(..., help="A `palace export` file, or - for stdin."),
    palace: str | None = typer.Option(
        None, "--palace", "-p", envvar="PALACE",
        help="Palace to restore into (or set PALACE; default: the export's own name)."),
    dry_run: bool = DryRunOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Restore a palace export into a new (or empty) palace, every field and id as it was.

    A palace holding other memories is refused (PALACE_NOT_EMPTY, exit 6). Running it again,
    or after an interruption, stores only what is missing. Vectors are computed again in the
    background.
    """
    from palace_client.importers.jsonl import JsonlImport
    from palace_client.importers.sinks import RestoreSink

    run_import(lambda: JsonlImport(file), palace, dry_run=dry_run, as_json=as_json,
               sink=lambda c, name, _imp: RestoreSink(c, name))


@imports.command("chatgpt")
def import_chatgpt(
    file: str = typer.Argument(..., help="conversations.json of a ChatGPT data export, or "
                               "the export's zip."),
    palace: str | None = PalaceOpt,
    wing: str = typer.Option("chatgpt", "--wing", help="Wing of the conversations."),
    tag: list[str] = TagOpt,
    dry_run: bool = DryRunOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Import ChatGPT conversations: one drawer per exchange (question and answer) of the
    branch shown last, a room per conversation (its title), dated as they happened.

    A re-run stores only new or changed conversations.
    """
    from palace_client.importers.chatgpt import ChatGptImport

    run_import(lambda: ChatGptImport(file, wing=wing, tags=tag), palace, dry_run=dry_run,
               as_json=as_json, sink=ledger_sink(prune=False))


@imports.command("markdown")
def import_markdown(
    directory: str = typer.Argument(..., help="Directory of .md, .markdown, .txt, .rst files."),
    palace: str | None = PalaceOpt,
    wing: str = typer.Option("docs", "--wing", help="Wing of the documents."),
    room: str | None = typer.Option(None, "--room", help="One room for every file.",
                                    show_default="the file's path without extension"),
    tag: list[str] = TagOpt,
    dry_run: bool = DryRunOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Import a directory of documents, cut at headings and by size; .gitignore is respected.

    A re-run replaces the sections of changed files, deletes those of files that are gone and
    leaves unchanged files untouched.
    """
    from palace_client.importers.markdown import MarkdownImport

    run_import(lambda: MarkdownImport(directory, wing=wing, room=room, tags=tag), palace,
               dry_run=dry_run, as_json=as_json, sink=ledger_sink(prune=True))
