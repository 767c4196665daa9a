"""``Client`` methods of the trash, the audit log, the policy and the caller's identity.

A mixin so that ``client.py`` stays readable; ``Client`` inherits it, and each method sends
one op through ``Client.call``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from palace_client.api import identity


class GovernanceMethods:
    """Forget (into the trash), restore, the trash, the audit log and the policy."""

    _agent: str

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]:
        raise NotImplementedError  # Client.call

    @property
    def agent(self) -> str:
        """Who this client says it is in every request (see ``palace_client.api.identity``)."""
        return self._agent

    @agent.setter
    def agent(self, name: str) -> None:
        """Raises ``InvalidArgs`` for a name that is not 1-200 printable characters."""
        self._agent = identity.checked(name)

    def forget(self, palace: str, drawer_id: int, *, purge: bool = False) -> dict[str, Any]:
        """Move one drawer to the trash (restorable for the daemon's ``[trash] keep_days``);
        with ``purge`` delete it, or its trash entry, for good. Returns ``{"id", "trashed",
        "purged", "restorable_until_ms", ...}``."""
        return self.call("memory.forget", palace, {"id": drawer_id, "purge": purge})

    def restore_drawer(self, palace: str, drawer_id: int) -> dict[str, Any]:
        """Bring a drawer back from the trash: ``{"id", "restored", "embedded"}``.

        Raises ``MemoryNotFound`` when it is not in the trash (any more), ``InvalidContent``
        when the same text was stored again in the same room meanwhile.
        """
        return self.call("memory.restore", palace, {"id": drawer_id})

    def trash(self, palace: str, *, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """The restorable drawers, most recently forgotten first:
        ``{"drawers", "total", "next_offset", "keep_days"}``."""
        return self.call("memory.trash", palace, {"limit": limit, "offset": offset})

    def empty_trash(self, palace: str) -> dict[str, Any]:
        """Delete every drawer in the trash for good: ``{"purged": [ids]}``."""
        return self.call("memory.empty_trash", palace)

    def audit(self, palace: str, *, since: str | int | None = None, agent: str | None = None,
              op: str | None = None, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """Audit entries newest first: ``{"entries", "total", "next_offset"}``; ``since`` is a
        time or a duration back from now (``7d``), ``agent`` and ``op`` are globs."""
        args = {k: v for k, v in (("since", since), ("agent", agent), ("op", op))
                if v is not None}
        return self.call("palace.audit", palace, {**args, "limit": limit, "offset": offset})

    def policy(self, palace: str) -> dict[str, Any]:
        """The palace's policy and what this client's agent may do:
        ``{"policy": {permission: [globs]}, "agent", "allowed": {permission: bool}}``."""
        return self.call("palace.policy", palace)

    def set_policy(self, palace: str, permission: str, agents: Iterable[str]) -> dict[str, Any]:
        """Grant ``permission`` (write, delete, admin) to exactly these agent globs (none:
        nobody); answers like ``policy``. Raises ``Forbidden`` without admin."""
        return self.call("palace.policy_set", palace,
                         {"permission": permission, "agents": list(agents)})
