"""The importer runner shared by every ``palace import`` format.

An importer parses its input into ``Unit``s (one source of the import ledger with its
drawers, or one export record) and ``Problem``s (a malformed record, named by file and line:
skipped, the import goes on). ``run`` feeds the units to a sink (nothing with ``--dry-run``),
passes every ledger text through ``redaction.redact``, counts what happened in a ``Tally``
and shows a progress bar on a terminal; ``report`` prints the summary (or the ``--json``
document) and the problems. The command exits ``EXIT_SKIPPED`` when anything was skipped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from palace_client.importers import redaction
from palace_client.importers.progress import Progress

MAX_LISTED = 100  # problems kept for the report (all are counted)
MAX_PRINTED = 20  # problems printed on stderr by a human report


@dataclass(frozen=True)
class Problem:
    """Something of the input that was skipped, and where (``line`` None: the whole unit).

    ``key``: the ledger source it belongs to, so that its drawers stored by an earlier run
    are kept rather than taken for those of a deleted file.
    """

    file: str
    line: int | None
    message: str
    key: str | None = None

    def where(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass
class Unit:
    """One unit of an import: a ledger source (``key``, ``digest``, its drawers in ``items``)
    or one export record (``items`` holds it). ``size``: its bytes, roughly."""

    file: str
    line: int | None
    items: list[dict[str, Any]]
    key: str = ""
    digest: str = ""
    size: int = 0
    redact: bool = True


class Importer(Protocol):
    """A format: its name (the ledger's importer), the noun of its units, what it reads."""

    name: str
    unit: str
    source: str

    def total(self) -> int | None:
        """How many units ``parse`` will yield, if known (for the progress bar)."""

    def parse(self) -> Iterator[Unit | Problem]:
        """Units and problems, in input order."""


@dataclass
class Tally:
    """The counts of one import (``--json`` prints them)."""

    importer: str
    unit: str
    source: str
    palace: str | None
    dry_run: bool
    read: int = 0  # units read
    records: int = 0  # drawers (or export records) in them
    stored: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: int = 0
    redacted: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def problem(self, problem: Problem) -> None:
        self.skipped += 1
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)

    def listed(self) -> list[Problem]:
        """The problems kept, in input order (those found when a batch came back from the
        daemon are reported after the parser's own)."""
        return sorted(self.problems, key=lambda p: (p.file, p.line is None, p.line or 0))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["problems"] = [{"file": p.file, "line": p.line, "message": p.message}
                           for p in self.listed()]
        out["elapsed_s"] = round(self.elapsed_s, 3)
        return out


class Sink(Protocol):
    """Where units go (the daemon); nothing is sent in a dry run."""

    def put(self, unit: Unit, tally: Tally) -> None:
        """Store one unit; counts go to ``tally``, its problems too."""

    def keep(self, key: str) -> None:
        """Source ``key`` was seen but could not be imported: keep what it filed before."""

    def finish(self, tally: Tally) -> None:
        """After the last unit (flush, delete the sources that are gone)."""


def run(importer: Importer, sink: Sink | None, tally: Tally, *, show_progress: bool) -> Tally:
    """Parse ``importer``'s input and feed ``sink`` (None: a dry run); returns ``tally``.

    Raises:
        PalaceError: the daemon failed (unreachable, refused the palace...): the import stops.
    """
    started = time.monotonic()
    with Progress(show_progress, f"{importer.name} {importer.source}", importer.unit,
                  importer.total()) as bar:
        for got in importer.parse():
            if isinstance(got, Problem):
                tally.problem(got)
                if sink is not None and got.key:
                    sink.keep(got.key)
                continue
            tally.read += 1
            tally.records += len(got.items)
            if got.redact:
                for item in got.items:
                    item["text"], masked = redaction.redact(item["text"])
                    tally.redacted += masked
            if sink is not None:
                sink.put(got, tally)
            bar.advance(stored=tally.stored, unchanged=tally.unchanged, skipped=tally.skipped)
        if sink is not None:
            sink.finish(tally)
    tally.elapsed_s = time.monotonic() - started
    return tally


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def summary(t: Tally) -> str:
    """The one-line summary of an import."""
    rate = f", {t.read / t.elapsed_s:.0f} {t.unit}s/s" if t.elapsed_s >= 0.05 else ""
    took = f" ({t.elapsed_s:.1f} s{rate})"
    if t.dry_run:
        return (f"dry run: {_plural(t.read, t.unit)} with {t.records} to store read from "
                f"{t.source}, {t.skipped} skipped; nothing stored{took}")
    return (f"imported {_plural(t.read, t.unit)} from {t.source} into palace {t.palace}: "
            f"{t.stored} stored, {t.unchanged} unchanged, {t.removed} removed, "
            f"{t.skipped} skipped" + (f", {t.redacted} secrets redacted" if t.redacted else "")
            + took)


def report(tally: Tally, as_json: bool) -> None:
    """Print the problems (stderr) and the summary (stdout), or the ``--json`` document."""
    if as_json:
        sys.stdout.write(json.dumps(tally.to_json(), ensure_ascii=False) + "\n")
        return
    for problem in tally.listed()[:MAX_PRINTED]:
        sys.stderr.write(f"palace: skipped {problem.where()}: {problem.message}\n")
    if tally.skipped > MAX_PRINTED:
        sys.stderr.write(f"palace: ... and {tally.skipped - MAX_PRINTED} more skipped "
                         "(--json lists the first 100)\n")
    for note in tally.notes:
        sys.stderr.write(f"palace: {note}\n")
    sys.stdout.write(summary(tally) + "\n")
