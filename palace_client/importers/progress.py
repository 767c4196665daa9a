"""The progress of an import on a terminal: a bar (when the total is known), the units done,
their rate and what was stored, on stderr. Off the terminal (and with ``--json``) nothing is
drawn: the summary line says it all at the end."""

from __future__ import annotations

from types import TracebackType
from typing import Any


class Progress:
    """A rich progress bar when ``enabled``, else nothing; a context manager."""

    def __init__(self, enabled: bool, description: str, unit: str, total: int | None) -> None:
        self._bar: Any = None
        self._task: Any = None
        if not enabled:
            return
        # Imported only when drawn: `palace import --json` and pipes never load it.
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn(f"{unit}s"),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        short = description if len(description) <= 40 else "…" + description[-39:]
        self._task = self._bar.add_task(short, total=total, rate="", counts="")

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, counts: str) -> None:
        """One more unit done; ``counts`` says what happened so far."""
        if self._bar is None:
            return
        task = self._bar.tasks[0]
        rate = f"{task.speed:.0f}/s" if task.speed else ""
        self._bar.update(self._task, advance=1, rate=rate, counts=counts)
