"""The ``Client`` methods that keep memories in shape: update in place, decay, prune,
consolidate and the health report.

A mixin of ``palace_client.Client`` (kept apart so that the client module stays small); each
method is one request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Lifecycle:
    """Editing and upkeep methods (see ``palace_client.Client``)."""

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        raise NotImplementedError  # Client.call

    @staticmethod
    def _some(**values: Any) -> dict[str, Any]:
        """The arguments that were given (None means "use the daemon's default")."""
        return {k: v for k, v in values.items() if v is not None}

    def update(self, palace: str, drawer_id: int, *, text: str | None = None,
               wing: str | None = None, room: str | None = None,
               tags: Iterable[str] | None = None, importance: float | str | None = None
               ) -> dict[str, Any]:
        """Edit a drawer in place (same id): only the fields given change; a new text is
        re-embedded and the replaced version kept (``get(..., history=True)``).

        Returns ``{"id", "changed", "version", "embedded"}`` (``changed`` empty: nothing to
        change). Raises ``MemoryNotFound``, or ``InvalidContent`` when another drawer already
        holds the new text in that wing/room.
        """
        return self.call("memory.update", palace, self._some(
            id=drawer_id, text=text, wing=wing, room=room,
            tags=None if tags is None else list(tags), importance=importance))

    def decay(self, palace: str) -> dict[str, Any]:
        """Recompute every drawer's decayed weight: ``{"drawers", "updated", "decay_ms"}``."""
        return self.call("memory.decay", palace)

    def prune(self, palace: str, *, threshold: float | None = None, dry_run: bool = False
              ) -> dict[str, Any]:
        """Delete (or with ``dry_run`` only list) low/medium drawers whose weight is below
        ``threshold``: ``{"threshold", "dry_run", "ids", "candidates", "pruned"}``.
        """
        return self.call("memory.prune", palace, self._some(threshold=threshold, dry_run=dry_run))

    def consolidate(self, palace: str, room: str, summary: str, *, wing: str | None = None,
                    ids: Iterable[int] | None = None) -> dict[str, Any]:
        """Store ``summary`` as a summary drawer in ``room`` and mark the sources (``ids``,
        or the room's active drawers) consolidated into it; sources stay retrievable.

        Returns ``{"summary_id", "created", "wing", "room", "source_ids", "missing"}``.
        """
        id_list = None if ids is None else [int(i) for i in ids]
        return self.call("memory.consolidate", palace,
                         self._some(room=room, summary=summary, wing=wing, ids=id_list))

    def health(self, palace: str, *, threshold: float | None = None,
               stale_days: float | None = None, limit: int | None = None) -> dict[str, Any]:
        """Per-room drawer counts, stale drawers, duplicate candidates and consolidation
        hints: ``{"rooms": [...], "totals": {...}, ...}``.
        """
        return self.call("memory.health", palace,
                         self._some(threshold=threshold, stale_days=stale_days, limit=limit))
