"""Daemon-wide services shared by every open palace: model state, limiter, caches.

The model loads in the background; ``ModelState`` is how palaces learn whether vectors can be
used right now. All of it is owned by the daemon's composition root and passed explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from cachetools import LRUCache

from palaced.config import DaemonConfig
from palaced.embedder import Embedder

if TYPE_CHECKING:
    from palaced.tokens import Tokenizer


@dataclass
class ModelState:
    """Where the embedding model is: loading, ready or unavailable (with the reason)."""

    state: str = "loading"
    reason: str | None = None
    embedder: Embedder | None = None
    load_seconds: float | None = None
    ready_event: anyio.Event = field(default_factory=anyio.Event)

    @property
    def ready(self) -> bool:
        return self.embedder is not None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "reason": self.reason}
        if self.embedder is not None:
            out["identity"] = self.embedder.identity
            out["dims"] = self.embedder.dims
        if self.load_seconds is not None:
            out["load_seconds"] = round(self.load_seconds, 3)
        return out


@dataclass
class Services:
    """Shared services handed to palaces."""

    config: DaemonConfig
    model: ModelState
    tokenizer: Tokenizer
    # One ONNX session already uses every core; concurrent runs would only contend.
    embed_limiter: anyio.CapacityLimiter = field(
        default_factory=lambda: anyio.CapacityLimiter(1)
    )
    query_vectors: LRUCache[tuple[str, str], Any] = field(
        default_factory=lambda: LRUCache(maxsize=2048)
    )
