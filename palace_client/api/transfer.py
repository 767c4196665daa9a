"""The ``Client`` methods that move memories in bulk: export, restore, the import ledger and
captures of Claude Code transcripts.

A mixin of ``palace_client.Client`` (kept apart so that the client module stays small); each
method is one request, or a loop of page requests that holds one page at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

BULK_TIMEOUT_MS = 600_000  # a batch may embed thousands of texts


class Transfers:
    """Export, restore, import-ledger and capture methods (see ``palace_client.Client``)."""

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        raise NotImplementedError  # Client.call

    def export(self, palace: str, *, limit: int = 1000) -> Iterator[dict[str, Any]]:
        """Every record of the palace's export (``docs/export-format.md``), header first and
        ``end`` last, fetched ``limit`` records a page: write them out as they come."""
        cursor: str | None = None
        while True:
            page = self.call("palace.export", palace, {"cursor": cursor, "limit": limit})
            yield from page["records"]
            cursor = page["next"]
            if cursor is None:
                return

    def import_records(self, palace: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Restore a batch of export records (the first batch starts with the header):
        ``{"stored", "unchanged", "rejected", "dropped_links", "resumed", "finished"}``.

        Raises ``PalaceNotEmpty`` when the palace holds other memories.
        """
        return self.call("palace.import_records", palace, {"records": list(records)},
                         timeout_ms=BULK_TIMEOUT_MS)

    def sources(self, palace: str, importer: str, *, prefix: str = "",
                limit: int = 1000) -> Iterator[dict[str, Any]]:
        """Every source ``importer`` recorded whose key starts with ``prefix``, by key:
        ``{"key", "hash", "imported_ms", "drawers"}``."""
        after: str | None = None
        while True:
            args: dict[str, Any] = {"importer": importer, "prefix": prefix, "limit": limit}
            if after is not None:
                args["after"] = after
            page = self.call("source.list", palace, args)
            yield from page["sources"]
            after = page["next"]
            if after is None:
                return

    def sync_source(self, palace: str, importer: str, key: str, digest: str,
                    items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Make ``items`` (maps with the ``remember`` arguments) the drawers of source ``key``
        unless its recorded hash is ``digest``:
        ``{"changed", "stored", "unchanged", "removed", "ids"}``."""
        return self.call("source.sync", palace, {"importer": importer, "key": key,
                                                 "hash": digest, "items": list(items)},
                         timeout_ms=BULK_TIMEOUT_MS)

    def drop_source(self, palace: str, importer: str, key: str) -> dict[str, Any]:
        """Forget source ``key``: delete the drawers no other source claims
        (``{"found", "removed"}``)."""
        return self.call("source.drop", palace, {"importer": importer, "key": key})

    def capture_transcript(self, palace: str, path: str | os.PathLike[str], **args: Any
                           ) -> dict[str, Any]:
        """Capture what is new in a Claude Code transcript (one drawer per exchange): queued,
        or with ``wait=True`` done and counted; other ``capture.transcript`` arguments by name
        (``session_id``, ``wing``, ``project_wing``, ``create``, ``dry_run``)."""
        return self.call("capture.transcript", palace,
                         {**args, "path": os.path.abspath(os.fspath(path))},
                         timeout_ms=BULK_TIMEOUT_MS if args.get("wait") else None)
