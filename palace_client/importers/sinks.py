"""Where imported units go: the import ledger (``LedgerSink``) or a restore (``RestoreSink``).

``LedgerSink`` lists the sources its importer recorded before, skips a unit whose content
hash is the recorded one without sending it, sends the others (``source.sync``: new drawers
stored, vanished ones deleted) and, for importers that own a whole tree (markdown), drops the
sources that were not seen again. ``RestoreSink`` sends export records in bounded batches
(``palace.import_records``) and maps the records the daemon refused back to their lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from palace_client.importers.runner import Problem, Tally, Unit
from palaced.wire import errors as E

if TYPE_CHECKING:
    from palace_client.api.client import Client

RESTORE_BATCH = 500  # records per palace.import_records request ...
REQUEST_SHARE = 4  # ... and at most 1/4 of the daemon's max_frame of text in one request


def _max_bytes(client: Client) -> int:
    return int(client.server_info.get("max_frame", 8 << 20)) // REQUEST_SHARE


class LedgerSink:
    """Units of one importer into the palace's import ledger."""

    def __init__(self, client: Client, palace: str, importer: str, *, prefix: str = "",
                 prune: bool = False) -> None:
        """``prune``: the importer owns every source under ``prefix`` (a directory): those
        not seen again are dropped at the end."""
        self._client, self._palace, self._importer = client, palace, importer
        self._prefix, self._prune = prefix, prune
        self._known = {s["key"]: (s["hash"], int(s["drawers"]))
                       for s in client.sources(palace, importer, prefix=prefix)}
        self._seen: set[str] = set()
        self._max_bytes = _max_bytes(client)

    def keep(self, key: str) -> None:
        self._seen.add(key)

    def put(self, unit: Unit, tally: Tally) -> None:
        self._seen.add(unit.key)
        known = self._known.get(unit.key)
        if known is not None and known[0] == unit.digest:
            tally.unchanged += known[1]
            return
        if unit.size > self._max_bytes:
            tally.problem(Problem(unit.file, unit.line, f"too large for one request "
                                  f"({unit.size} bytes, at most {self._max_bytes})", unit.key))
            return
        try:
            res = self._client.sync_source(self._palace, self._importer, unit.key,
                                           unit.digest, unit.items)
        except (E.InvalidArgs, E.ContentError) as exc:
            # One bad drawer (too long, bad date...) refuses its unit; the others go on.
            tally.problem(Problem(unit.file, unit.line, exc.message, unit.key))
            return
        tally.stored += int(res["stored"])
        tally.unchanged += int(res["unchanged"])
        tally.removed += int(res["removed"])

    def finish(self, tally: Tally) -> None:
        if not self._prune:
            return
        for key in sorted(set(self._known) - self._seen):
            res = self._client.drop_source(self._palace, self._importer, key)
            tally.removed += int(res["removed"])


class RestoreSink:
    """Export records into ``palace.import_records`` batches (the header opens the first one)."""

    def __init__(self, client: Client, palace: str) -> None:
        self._client, self._palace = client, palace
        self._batch: list[tuple[Unit, dict[str, Any]]] = []
        self._bytes = 0
        self._max_bytes = _max_bytes(client)
        self._dropped = 0
        self.finished = False

    def keep(self, key: str) -> None:
        pass

    def put(self, unit: Unit, tally: Tally) -> None:
        for record in unit.items:
            self._batch.append((unit, record))
        self._bytes += unit.size
        if len(self._batch) >= RESTORE_BATCH or self._bytes >= self._max_bytes:
            self._flush(tally)

    def _flush(self, tally: Tally) -> None:
        if not self._batch:
            return
        batch, self._batch, self._bytes = self._batch, [], 0
        res = self._client.import_records(self._palace, [record for _, record in batch])
        tally.stored += int(res["stored"])
        tally.unchanged += int(res["unchanged"])
        for refused in res["rejected"]:
            unit = batch[int(refused["index"])][0]
            tally.problem(Problem(unit.file, unit.line, f"{refused['message']} "
                                  f"[{refused['name']}]"))
        self._dropped += int(res["dropped_links"])
        self.finished = self.finished or bool(res["finished"])

    def finish(self, tally: Tally) -> None:
        self._flush(tally)
        if self._dropped:
            tally.notes.append(f"{self._dropped} links to drawers missing from the export "
                               "were dropped")
