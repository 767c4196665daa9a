"""palace_client: thin clients of palaced (Python API, CLI, MCP bridge).

Importing this package loads no apsw, usearch, fastembed or numpy. ``Client`` is imported on
first use, so the commands that need only a connection (the Claude Code hook, which must exit
within 200 ms) do not pay for the op specs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from palaced.wire.errors import PalaceError

if TYPE_CHECKING:
    from palace_client.api.client import Client

__all__ = ["Client", "PalaceError"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from palace_client.api.client import Client

        return Client
    raise AttributeError(f"module 'palace_client' has no attribute {name!r}")
