"""Progress of a long command on a terminal: one line on stderr, rewritten in place.

Off when stderr is not a terminal (a pipe, a log file, a test), so scripts get only the
command's one-line summary or ``--json`` document on stdout.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

MIN_INTERVAL_S = 0.1  # at most ten redraws a second


class Progress:
    """``update(text)`` redraws the line (throttled); ``close()`` clears it."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            try:
                enabled = self._stream.isatty()
            except (AttributeError, ValueError):
                enabled = False
        self.enabled = enabled
        self._last = 0.0
        self._width = 0

    def update(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        line = text[:119]
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
        self._width = len(line)

    def close(self) -> None:
        if self.enabled and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
