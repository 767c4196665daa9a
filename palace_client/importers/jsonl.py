"""``palace import jsonl``: restore a palace export (``docs/export-format.md``).

Every line is checked here against the record specs (``palaced.wire.export_format``) before it is
sent, so a dry run finds what the daemon would refuse; a malformed line is skipped and
reported with its line number. The header must open the file: without it nothing can be
restored.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from palace_client.importers.runner import Problem, Unit
from palaced.wire import errors as E
from palaced.wire.args import decode_args
from palaced.wire.export_format import FORMAT, KIND_KEY, RECORDS, VERSION, record_kind
from palaced.wire.protocol import loads_json

MAX_LINE_BYTES = 64 << 20  # a record is sent in one request, whose frame is smaller (8 MiB)
TOO_LONG = b"\x00 line too long"  # what _lines yields for a longer line (never real JSON)


class JsonlImport:
    """The records of one export file (or stdin, ``-``), header first."""

    name = "jsonl"
    unit = "record"

    def __init__(self, path: str) -> None:
        """Open the export and read its header.

        Raises:
            InvalidContent: the file does not start with the header of a palace export this
                client reads (its fields within their bounds).
            ClientError: the file cannot be read.
        """
        self.source = "stdin" if path == "-" else path
        self._file = "stdin" if path == "-" else Path(path).name
        try:
            self._stream: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")
        except OSError as exc:
            raise E.ClientError(f"cannot read {path}: {exc.strerror or exc}",
                                details={"path": path}) from exc
        self._line = 0
        self.header = self._read_header()
        palace = self.header.get("palace")
        self.palace = palace if isinstance(palace, str) else None  # the exported palace

    def _lines(self) -> Iterator[bytes]:
        """The stream's lines, each read at most ``MAX_LINE_BYTES`` + 1 bytes at a time: a
        longer line is skipped in chunks, never held whole, and yields ``TOO_LONG``."""
        while raw := self._stream.readline(MAX_LINE_BYTES + 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := self._stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                raw = TOO_LONG
            yield raw

    def _read_header(self) -> dict[str, Any]:
        for raw in self._lines():
            self._line += 1
            if raw.strip():
                self._first = raw
                break
        else:
            raise E.InvalidContent(f"{self.source} is empty: not a palace export")
        try:
            header = loads_json(raw)
        except ValueError:
            header = None
        except RecursionError:  # nested deeper than Python's parser goes: no header either
            header = None
        if record_kind(header) != "header" or header.get("format") != FORMAT:
            raise E.InvalidContent(f"{self.source}:{self._line}: not a palace export (its first "
                                   f"record must be a {FORMAT!r} header)")
        if not isinstance(header.get("version"), int) or header["version"] > VERSION:
            raise E.InvalidContent(f"{self.source}: export format version "
                                   f"{header.get('version')!r} is not one this palace reads "
                                   f"(1..{VERSION}); upgrade palace")
        try:  # checked here: skipped like another record, it would leave nothing restorable
            decode_args(RECORDS["header"], header)
        except E.InvalidArgs as exc:
            raise E.InvalidContent(f"{self.source}:{self._line}: {exc.message}",
                                   details=exc.details) from None
        return dict(header)

    def total(self) -> int | None:
        counts = self.header.get("counts")
        if isinstance(counts, dict) and all(isinstance(n, int) for n in counts.values()):
            return sum(counts.values()) + 3  # header, identity, end
        return None

    def _unit(self, raw: bytes, line: int) -> Unit | Problem:
        if raw is TOO_LONG:
            return Problem(self._file, line, f"longer than {MAX_LINE_BYTES} bytes: no record "
                           "of an export is")
        try:
            record = loads_json(raw)
        except ValueError as exc:
            return Problem(self._file, line, f"not JSON: {exc}")
        except RecursionError:  # too deep for Python's parser: one bad line, not the end
            return Problem(self._file, line, "JSON nested deeper than palace reads")
        kind = record_kind(record)
        if kind is None:
            return Problem(self._file, line, f"not an export record: a JSON object whose "
                           f"{KIND_KEY!r} is one of {', '.join(RECORDS)}")
        try:
            decode_args(RECORDS[kind], record)
        except E.InvalidArgs as exc:
            return Problem(self._file, line, exc.message)
        return Unit(self._file, line, [record], size=len(raw), redact=False)

    def parse(self) -> Iterator[Unit | Problem]:
        ended = False
        try:
            yield self._unit(self._first, self._line)
            for raw in self._lines():
                self._line += 1
                if not raw.strip():
                    continue
                got = self._unit(raw, self._line)
                ended = ended or (isinstance(got, Unit) and record_kind(got.items[0]) == "end")
                yield got
        finally:
            if self._stream is not sys.stdin.buffer:
                self._stream.close()
        if not ended:
            yield Problem(self._file, None, "no end record: the export is cut short (the "
                          "records before the cut were restored; run the import again with "
                          "the whole file to finish)")
