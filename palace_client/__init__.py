"""palace_client: thin clients of palaced (Python API, CLI, MCP bridge).

Importing this package loads no apsw, usearch, fastembed or numpy.
"""

from __future__ import annotations

from palaced.errors import PalaceError

from .client import Client

__all__ = ["Client", "PalaceError"]
