"""Loading the embedding model in the background while the daemon already serves.

Until it is ready the daemon answers in keyword-only mode; ``ModelState`` says where it is.
"""

from __future__ import annotations

import logging
import time

import anyio.to_thread

from palaced.embedder import Embedder, EmbedderSettings, FastEmbedder
from palaced.errors import PalaceError
from palaced.registry import Registry
from palaced.services import ModelState

log = logging.getLogger("palaced")


async def load_model(model: ModelState, settings: EmbedderSettings, registry: Registry, *,
                     embedder: Embedder | None = None) -> None:
    """Load the model (or take ``embedder``), attach it to the open palaces, then mark it ready.

    A model that cannot load leaves the daemon keyword-only, with the reason in ``model``;
    never raises.
    """
    started = time.monotonic()
    try:
        if embedder is None:
            embedder = await anyio.to_thread.run_sync(
                FastEmbedder.load, settings, abandon_on_cancel=True)
    except PalaceError as exc:
        model.state = "unavailable"
        model.reason = exc.message
        log.warning("embedding model unavailable, keyword-only mode: %s", exc.message)
        return
    except Exception as exc:
        model.state = "unavailable"
        model.reason = f"{type(exc).__name__}: {exc}"
        log.exception("embedding model failed to load; keyword-only mode")
        return
    # Palaces opened from now on attach themselves; attach the ones already open before
    # announcing "ready", so a client that waits for ready sees consistent indexes.
    model.embedder = embedder
    for name, palace in registry.open_palaces.items():
        try:
            if palace.index is None and palace.mismatch is None:
                await palace.attach(embedder)
        except Exception:
            log.exception("palace %s: attaching the model failed", name)
    model.state = "ready"
    model.reason = None
    model.load_seconds = time.monotonic() - started
    model.ready_event.set()
    log.info("embedding model ready: %s (%.2fs)", embedder.identity, model.load_seconds)
