"""The progress of an import on a terminal: a bar (when the total is known), the units done,
their rate and what was stored, on stderr. Off the terminal (and with ``--json``) nothing is
drawn: the summary line says it all at the end.

The line fits the terminal: at 80 columns every part was cut to ``…`` (``━━ 2…
conversations … 0:…``). Under ``WIDE`` columns it shows the file's name rather than its path
(none under ``NO_DESCRIPTION``), the counts that are not zero, and no unit, rate or elapsed
time (the summary line at the end has them all); the bar takes what is left.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

# Columns from which the whole line (path, rate, every count, elapsed time) fits.
WIDE = 132
# At most this many columns of the description on a narrow terminal, and the width under
# which there is no room for one.
NARROW_DESCRIPTION = 24
NO_DESCRIPTION = 76


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


class Progress:
    """A rich progress bar when ``enabled``, else nothing; a context manager.

    ``description`` is ``"<importer> <source path>"``; ``console`` (tests) replaces the
    terminal on stderr.
    """

    def __init__(self, enabled: bool, description: str, unit: str, total: int | None, *,
                 console: Any = None) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._wide = True
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
        from rich.table import Column

        console = console if console is not None else Console(stderr=True)
        self._wide = console.width >= WIDE
        bar = BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=4))

        def fixed() -> Column:  # one each: rich keeps a table column's index on it
            return Column(no_wrap=True)

        if self._wide:
            columns: list[Any] = [
                TextColumn("{task.description}", table_column=fixed()), bar,
                MofNCompleteColumn(table_column=fixed()), TextColumn(f"{unit}s"),
                TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[counts]}"),
                TimeElapsedColumn()]
            short = _shorten(description, 40)
        else:
            kind, _, source = description.partition(" ")
            short = f"{kind} {os.path.basename(source.rstrip(os.sep)) or source}"
            columns = [bar, MofNCompleteColumn(table_column=fixed()),
                       TextColumn("{task.fields[counts]}", table_column=fixed())]
            if console.width >= NO_DESCRIPTION:
                columns.insert(0, TextColumn("{task.description}", table_column=Column(
                    max_width=NARROW_DESCRIPTION, no_wrap=True, overflow="ellipsis")))
        self._bar = Bar(*columns, console=console, transient=True, expand=True)
        self._task = self._bar.add_task(short, total=total, rate="", counts="")

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, **counts: int) -> None:
        """One more unit done; ``counts`` says what happened so far (``stored=3, skipped=0``:
        all of them on a wide terminal, the ones not zero on a narrow one)."""
        if self._bar is None:
            return
        task = self._bar.tasks[0]
        rate = f"{task.speed:.0f}/s" if task.speed else ""
        shown = [f"{n} {word}" for word, n in counts.items() if self._wide or n] or [
            f"{n} {word}" for word, n in list(counts.items())[:1]]
        self._bar.update(self._task, advance=1, rate=rate, counts=", ".join(shown))

    def render(self) -> Any:
        """What the bar draws now (tests); None when not drawn."""
        return None if self._bar is None else self._bar.get_renderable()
