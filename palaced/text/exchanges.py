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

A format that also had a whole-document shape (Gemini CLI's chats before its JSONL recording:
one JSON object with a ``messages`` list, rewritten after every message; ``Records.documents``)
is read from such a file as one record per message: there "line" *n* is the document's *n*-th
message, offsets are message indexes, and the document (at most ``MAX_DOCUMENT`` bytes) is
parsed whole on each capture; everything else (resume, the open tail, dedupe) is the same.

Pure and synchronous (file reads only); the daemon runs it in a worker thread.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

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
MAX_DOCUMENT = 64 << 20  # a whole-document transcript larger than this is not read


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
    working directory are there). A whole document (see the module docstring) is read by
    message: offsets and lines count messages.

    Raises:
        SourceUnreadable: a whole-document transcript larger than MAX_DOCUMENT.
    """

    def __init__(self, fh: BinaryIO, offset: int, line: int, scanned: int = 0,
                 records: Records | None = None) -> None:
        self._fh = fh
        self._records = records if records is not None else ClaudeRecords()
        self._document: list[Any] | None = None
        if self._records.documents and _is_document(self._first_line()):
            self._document = self._load_document()
            self.size = len(self._document)
        else:
            self.size = os.fstat(fh.fileno()).st_size
        # A file shorter than the offset was replaced or truncated: read it again.
        self.restarted = offset > self.size
        if self.restarted:
            offset, line, scanned = 0, 0, 0
        if offset > 0 and self._records.stateful and self._document is None:
            self._prime()
        fh.seek(offset if self._document is None else 0)
        self._pos = offset  # byte offset of the next unread line
        self._line = line
        self._scanned = scanned
        self._buf = b""
        self._at = 0  # where the next line starts in _buf
        self._eof = False
        self._current: Exchange | None = None
        self._seen: set[str] = set()

    def _first_line(self) -> bytes:
        """The file's first line (b"" when longer than MAX_FIRST_LINE)."""
        self._fh.seek(0)
        head = b""
        while len(head) <= MAX_FIRST_LINE and b"\n" not in head:
            chunk = self._fh.read(BLOCK)
            if not chunk:
                break
            head += chunk
        first = head.split(b"\n", 1)[0]
        return b"" if len(first) > MAX_FIRST_LINE else first

    def _prime(self) -> None:
        """Show the format's reader the file's first record (its events are not used; a
        first line that is too long or not a record is passed over)."""
        first = self._first_line()
        if not first:
            return
        try:
            self._records.classify(loads_json(first))
        except (ValueError, Malformed, RecursionError):
            pass

    def _load_document(self) -> list[Any]:
        """The messages of a whole-document transcript, after showing the format's reader the
        document without them (its metadata); a document that does not parse, or has no
        ``messages`` list, is one malformed "line".

        Raises:
            SourceUnreadable: the file is larger than MAX_DOCUMENT.
        """
        self._fh.seek(0)
        data = b""
        while len(data) <= MAX_DOCUMENT:
            chunk = self._fh.read(BLOCK)
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_DOCUMENT:
            raise SourceUnreadable(
                f"a transcript document larger than {MAX_DOCUMENT >> 20} MiB is not read",
                details={"size": os.fstat(self._fh.fileno()).st_size})
        try:
            doc = loads_json(data)
        except (ValueError, RecursionError):
            return [None]
        messages = doc.get("messages") if isinstance(doc, dict) else None
        if not isinstance(messages, list):
            return [None]
        try:
            self._records.classify({k: v for k, v in doc.items() if k != "messages"})
        except Malformed:
            pass
        return messages

    @property
    def position(self) -> int:
        """Byte offset after the last complete line read."""
        return self._pos

    def _lines(self) -> tuple[int, int, bytes | _Parsed] | None:
        """The next complete line as ``(number, start, bytes)`` (of a whole document: the
        next message, parsed), or None at the end."""
        if self._document is not None:
            if self._pos >= len(self._document):
                return None
            start = self._pos
            self._pos += 1
            self._line += 1
            return self._line, start, _Parsed(self._document[start])
        while True:
            # Lines are cut from the buffer by index: slicing the rest off after each line
            # copied the whole 1 MiB block per line (quadratic, and mostly page faults).
            cut = self._buf.find(b"\n", self._at)
            if cut >= 0:
                raw = self._buf[self._at:cut]
                start = self._pos
                self._pos += cut + 1 - self._at
                self._at = cut + 1
                self._line += 1
                return self._line, start, raw
            self._buf, self._at = self._buf[self._at:], 0
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
            if isinstance(raw, bytes) and not raw.strip():
                continue
            try:
                # A lone surrogate: U+FFFD, never a failure.
                record = raw.value if isinstance(raw, _Parsed) else loads_json(raw)
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



@dataclass(frozen=True)
class _Parsed:
    """A record of a whole document, already parsed (``TranscriptReader._lines``)."""

    value: Any


def _is_document(first: bytes) -> bool:
    """Whether a file whose first line is ``first`` holds one JSON document rather than JSON
    lines: a first line that opens an object and is not one (a pretty-printed document), or
    one line holding the whole document (an object with a ``messages`` list)."""
    stripped = first.strip()
    if stripped == b"{":
        return True
    if not stripped.startswith(b"{"):
        return False
    try:
        value = loads_json(stripped)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and isinstance(value.get("messages"), list)
