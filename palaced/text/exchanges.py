"""Reading a transcript incrementally into exchanges: one person's prompt and what answered it.

A :class:`TranscriptReader` reads *complete* lines from a byte offset on (a last line without
its newline counts only when it already parses as a JSON object: a line still being written
never does), classifies each record with its format's reader (:func:`records_for`: Claude
Code's ``palaced.text.transcript``, Codex CLI's ``transcript_codex``, Gemini CLI's
``transcript_gemini``, Copilot CLI's ``transcript_copilot``; every format is JSON lines) and
assembles exchanges: a prompt, then every answer part until the next prompt. An exchange is
*complete* once the next prompt appears; the last one of the file is the *tail*, still open:
its answer may grow. The reader hands them out in batches (:meth:`TranscriptReader.next_batch`)
with the position a later capture must resume from: the start of the first exchange not
complete, so nothing in progress is ever skipped.

Pure and synchronous (file reads only); the daemon runs it in a worker thread.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from palaced.text.transcript import Answer, ClaudeRecords, Malformed, Prompt, Records
from palaced.text.transcript_codex import CodexRecords
from palaced.text.transcript_copilot import CopilotRecords
from palaced.text.transcript_gemini import GeminiRecords
from palaced.wire.errors import InvalidArgs, SourceUnreadable
from palaced.wire.protocol import loads_json
from palaced.wire.vocab import MAX_FIELD_CHARS, TRANSCRIPT_FORMATS

_FORMATS: dict[str, type[Records]] = {
    "claude": ClaudeRecords, "codex": CodexRecords, "gemini": GeminiRecords,
    "copilot": CopilotRecords}
assert tuple(_FORMATS) == TRANSCRIPT_FORMATS, "one reader per format of wire.vocab"


def records_for(fmt: str) -> Records:
    """A fresh reader of format ``fmt``'s records (one per transcript pass: some keep state).

    Raises:
        InvalidArgs: ``fmt`` is not one of ``TRANSCRIPT_FORMATS``.
    """
    kind = _FORMATS.get(fmt)
    if kind is None:
        raise InvalidArgs(f"unknown transcript format {fmt!r}; one of "
                          + ", ".join(TRANSCRIPT_FORMATS),
                          details={"arg": "format", "value": fmt[:64]})
    return kind()

# A captured exchange's drawer names its transcript lines as its source (``source_label``);
# recall tells captured exchanges from curated drawers by it (``recall.curated_first``).
_EXCHANGE_SOURCE = re.compile(r":\d+-\d+\Z")


def source_label(path: str, first_line: int, last_line: int) -> str:
    """``<path>:<first>-<last>``, the path cut from the left to fit MAX_FIELD_CHARS."""
    suffix = f":{first_line}-{last_line}"
    room = MAX_FIELD_CHARS - len(suffix)
    if len(path) > room:
        path = "…" + path[-(room - 1):]
    return path + suffix


def is_exchange_source(source: str) -> bool:
    """Whether ``source`` is a captured exchange's (what ``source_label`` writes)."""
    return _EXCHANGE_SOURCE.search(source) is not None

BLOCK = 1 << 20  # bytes read at a time
MAX_LINE = 64 << 20  # a longer line is skipped as malformed (it cannot be a sane record)
MAX_LISTED = 100  # malformed line numbers reported (the count is always whole)
MAX_FIRST_LINE = 4 << 20  # the first record a stateful format reads again when resuming


@dataclass
class Exchange:
    """A prompt and its answer parts, with where they are in the transcript.

    ``start`` is the byte offset of the prompt's line; ``first_line``/``last_line`` are
    1-based line numbers of the prompt and of the last answer record.
    """

    prompt: Prompt
    start: int
    first_line: int
    last_line: int
    parts: list[str] = field(default_factory=list)
    # Where each keyed answer's parts are in ``parts`` (start, count), so that a later copy
    # of the same message replaces them.
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, answer: Answer) -> None:
        """Append ``answer``'s parts, or put them in place of its earlier copy's."""
        old = self.spans.get(answer.key) if answer.key is not None else None
        if old is None:
            if answer.key is not None:
                self.spans[answer.key] = (len(self.parts), len(answer.parts))
            self.parts.extend(answer.parts)
            return
        at, count = old
        self.parts[at:at + count] = answer.parts
        shift = len(answer.parts) - count
        self.spans = {k: (s + shift if s > at else s, n) for k, (s, n) in self.spans.items()}
        self.spans[answer.key or ""] = (at, len(answer.parts))

    @property
    def answered(self) -> bool:
        return bool(self.parts)


@dataclass
class Batch:
    """Exchanges read by one ``next_batch`` call and where to resume after them.

    ``complete`` were closed by a later prompt; ``tail`` (only once ``eof``) is the last,
    open exchange, answered or not. ``resume``/``resume_line`` is the byte offset and line
    count where a later capture starts: the start of ``tail`` (or of the exchange still being
    read), else the end of everything read.
    """

    complete: list[Exchange]
    tail: Exchange | None
    resume: int
    resume_line: int
    eof: bool
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)


def open_transcript(path: Path) -> BinaryIO:
    """Open ``path`` for reading, refusing anything but a readable regular file.

    Opened non-blocking first, so a FIFO planted at the path cannot hang the daemon, and
    checked with ``fstat`` on the open descriptor (no race with a swap of the path).

    Raises:
        SourceUnreadable: missing, not a regular file, or not readable by the daemon.
    """
    details = {"path": str(path)}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SourceUnreadable(f"no such file: {path}", details=details) from None
    except OSError as exc:
        raise SourceUnreadable(f"cannot read {path}: {exc.strerror or exc}",
                               details=details) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceUnreadable(f"not a regular file: {path}", details=details)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


class TranscriptReader:
    """Exchanges of one transcript from a byte offset on (see the module docstring).

    ``line`` is the number of lines before ``offset``; ``scanned`` the byte offset up to which
    an earlier capture already reported malformed lines (they are not reported again);
    ``records`` reads the format's records (default: Claude Code's). A stateful format
    resuming past the start is shown the file's first record first (the session's id and
    working directory are there).
    """

    def __init__(self, fh: BinaryIO, offset: int, line: int, scanned: int = 0,
                 records: Records | None = None) -> None:
        self._fh = fh
        self._records = records if records is not None else ClaudeRecords()
        self.size = os.fstat(fh.fileno()).st_size
        # A file shorter than the offset was replaced or truncated: read it again.
        self.restarted = offset > self.size
        if self.restarted:
            offset, line, scanned = 0, 0, 0
        if offset > 0 and self._records.stateful:
            self._prime()
        fh.seek(offset)
        self._pos = offset  # byte offset of the next unread line
        self._line = line
        self._scanned = scanned
        self._buf = b""
        self._eof = False
        self._current: Exchange | None = None
        self._seen: set[str] = set()

    def _prime(self) -> None:
        """Show the format's reader the file's first record (its events are not used; a
        first line that is too long or not a record is passed over)."""
        self._fh.seek(0)
        head = b""
        while len(head) <= MAX_FIRST_LINE and b"\n" not in head:
            chunk = self._fh.read(BLOCK)
            if not chunk:
                break
            head += chunk
        first = head.split(b"\n", 1)[0]
        if len(first) > MAX_FIRST_LINE:
            return
        try:
            self._records.classify(loads_json(first))
        except (ValueError, Malformed, RecursionError):
            pass

    @property
    def position(self) -> int:
        """Byte offset after the last complete line read."""
        return self._pos

    def _lines(self) -> tuple[int, int, bytes] | None:
        """The next complete line as ``(number, start, bytes)``, or None at the end."""
        while True:
            cut = self._buf.find(b"\n")
            if cut >= 0:
                raw, self._buf = self._buf[:cut], self._buf[cut + 1:]
                start = self._pos
                self._pos += cut + 1
                self._line += 1
                return self._line, start, raw
            if self._eof:
                return self._last_line()
            if len(self._buf) > MAX_LINE:
                return self._skip_long_line()
            chunk = self._fh.read(BLOCK)
            if not chunk:
                self._eof = True
            else:
                self._buf += chunk

    def _last_line(self) -> tuple[int, int, bytes] | None:
        # A last line without its newline is complete only if it already parses.
        raw = self._buf
        if not raw.strip():
            return None
        try:
            whole = isinstance(loads_json(raw), dict)
        except ValueError:
            whole = False
        if not whole:
            return None
        self._buf = b""
        start = self._pos
        self._pos += len(raw)
        self._line += 1
        return self._line, start, raw

    def _skip_long_line(self) -> tuple[int, int, bytes]:
        """Consume a line longer than MAX_LINE without buffering it; it reads as malformed."""
        start = self._pos
        skipped = len(self._buf)
        self._buf = b""
        while True:
            chunk = self._fh.read(BLOCK)
            if not chunk:
                self._eof = True
                break
            cut = chunk.find(b"\n")
            if cut >= 0:
                skipped += cut + 1
                self._buf = chunk[cut + 1:]
                break
            skipped += len(chunk)
        self._pos = start + skipped
        self._line += 1
        return self._line, start, b"\x00"  # not JSON: counted as malformed

    def next_batch(self, max_exchanges: int, max_bytes: int = 8 << 20) -> Batch:
        """Read on until ``max_exchanges`` exchanges are complete, ``max_bytes`` were read, or
        the end of the file; returns them with the resume position."""
        batch = Batch([], None, 0, 0, False)
        began = self._pos
        while len(batch.complete) < max_exchanges and self._pos - began < max_bytes:
            got = self._lines()
            if got is None:
                batch.eof = True
                break
            number, start, raw = got
            if not raw.strip():
                continue
            try:
                record = loads_json(raw)  # a lone surrogate: U+FFFD, never a failure
                event = self._records.classify(record)
            except (ValueError, Malformed, RecursionError):
                if start >= self._scanned:
                    batch.malformed += 1
                    if len(batch.malformed_lines) < MAX_LISTED:
                        batch.malformed_lines.append(number)
                continue
            self._feed(event, number, start, batch)
        self._scanned = max(self._scanned, self._pos)
        current = self._current
        if current is not None:
            batch.resume, batch.resume_line = current.start, current.first_line - 1
        else:
            batch.resume, batch.resume_line = self._pos, self._line
        if batch.eof:
            batch.tail = current
        return batch

    def _feed(self, event: Prompt | Answer | None, number: int, start: int,
              batch: Batch) -> None:
        if event is None:
            return
        key = event.key
        if key is not None:
            current = self._current
            if key in self._seen:
                # A copy of a record read before (a resumed session's copy), or a message
                # grown since: its answer parts replace the earlier ones while that is in the
                # exchange being read; anything else was read already.
                if isinstance(event, Answer) and current is not None and key in current.spans:
                    current.add(event)
                    current.last_line = number
                return
            self._seen.add(key)
        if isinstance(event, Prompt):
            done = self._current
            if done is not None and (done.answered or not done.prompt.command):
                batch.complete.append(done)
            self._current = Exchange(event, start, number, number)
        elif self._current is not None:
            self._current.add(event)
            self._current.last_line = number
        # An answer before any prompt (a session's opening, a compacted session's
        # continuation read from its start) belongs to no exchange here: dropped.

