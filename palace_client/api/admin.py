"""The maintenance methods of ``palace_client.Client``: doctor, backup, restore, reembed.

A mixin, so that ``client.py`` keeps to the drawer, graph and upkeep calls. Paths are made
absolute here: the daemon runs from ``/`` and resolves them on its side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Whole-palace work (a backup or check of a large palace, a restore that rebuilds the vector
# index) may take minutes: the longest deadline the daemon grants.
MAINTENANCE_TIMEOUT_MS = 3_600_000


class Maintenance:
    """``reembed``, ``doctor``, ``backup`` and ``restore``, mixed into ``Client``."""

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        raise NotImplementedError  # Client.call

    def reembed(self, name: str) -> dict[str, Any]:
        """Re-embed every drawer of palace ``name`` with the daemon's current model now."""
        return self.call("palace.reembed", name, timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def doctor(self, palace: str | None = None, *, repair: bool = False, full: bool = False
               ) -> dict[str, Any]:
        """Check the daemon and every palace (or ``palace``); with ``repair`` mend what is
        derivable and check again. Returns ``{"healthy", "summary", "checks", "repairs",
        ...}``: each check has ``name``, ``palace``, ``status`` (ok/warn/fail), ``detail``,
        ``fixable``, ``advice`` and ``repaired``.
        """
        return self.call("palace.doctor", palace, {"repair": repair, "full": full},
                         timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def backup(self, palace: str | None = None, *, to: str | Path | None = None,
               keep: int | None = None) -> dict[str, Any]:
        """Back up every palace (or ``palace``) online under ``to`` (default: the daemon's
        ``[backup] dir``), keeping the newest ``keep`` of each: ``{"backups": [...],
        "failed": [...]}``, each backup with its ``path``, ``counts`` and ``removed`` ones.
        """
        args: dict[str, Any] = {}
        if to is not None:
            args["to"] = os.path.abspath(os.fspath(to))
        if keep is not None:
            args["keep"] = keep
        return self.call("palace.backup", palace, args, timeout_ms=MAINTENANCE_TIMEOUT_MS)

    def restore(self, path: str | Path, *, palace: str | None = None, force: bool = False
                ) -> dict[str, Any]:
        """Verify the backup at ``path`` and restore it as ``palace`` (default: the palace it
        was taken of). Raises ``BackupInvalid`` for a damaged or altered backup and
        ``PalaceExists`` when the palace was written after the backup (``force`` replaces
        it anyway).
        """
        return self.call("palace.restore", palace,
                         {"path": os.path.abspath(os.fspath(path)), "force": force},
                         timeout_ms=MAINTENANCE_TIMEOUT_MS)
