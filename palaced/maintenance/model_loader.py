"""Loading the embedding model: in the background at start, and again on ``model.load``.

Until a model is ready the daemon answers in keyword-only mode; ``ModelState`` says where it
is. A reload (after ``palace model fetch|import``, or an edited config) loads the new model
beside the old one, which keeps serving, then swaps them: open palaces are bound to it again
(those whose vectors are another model's go keyword-only and are re-embedded in the
background, see ``palaced.maintenance.reembed``), and the model's watchers are told. A configured
local model directory that is missing (an unmounted disk, a model being copied over) is looked for
again every ``MODEL_RETRY_S``, so the model is loaded once it is back, without a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from palaced.config.model import EmbedderSettings
from palaced.engine.embedder import Embedder, FastEmbedder
from palaced.engine.services import ModelState, Services
from palaced.palace.registry import Registry
from palaced.wire.errors import EmbedderUnavailable, PalaceError

log = logging.getLogger("palaced")


MODEL_RETRY_S = 2.0  # a glob of the model directory per period while it is missing


def _model_files(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Name, size and mtime of the ONNX files in ``path`` (empty when there are none)."""
    try:
        found = [(f.name, f.stat()) for f in path.glob("*.onnx")]
    except OSError:
        return ()
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in found))


async def load_model(model: ModelState, settings: EmbedderSettings, registry: Registry, *,
                     embedder: Embedder | None = None) -> None:
    """Load the model (or take ``embedder``), attach it to the open palaces, then mark it ready.

    A model that cannot load leaves the daemon keyword-only, with the reason in ``model``.
    With a configured model directory, its ONNX files are checked every ``MODEL_RETRY_S``
    and the load is retried once they appear or change (a directory that vanished, or a model
    still being copied); this runs until a model is ready (cancel it to stop), including one
    that ``model.load`` installed meanwhile. Never raises.
    """
    path = settings.model_path
    while True:
        seen = _model_files(path) if path is not None else ()
        if await _load_once(model, settings, registry, embedder):
            return
        if embedder is not None or settings.disabled or path is None:
            return  # nothing on disk to wait for
        # A file system has no event to wait on: poll it (a few stats per period).
        while not (now := _model_files(path)) or now == seen:
            if model.state == "ready":
                return  # ``model.load`` got one in the meantime
            await anyio.sleep(MODEL_RETRY_S)
        log.info("embedding model files changed in %s; loading again", path)


async def _load_once(model: ModelState, settings: EmbedderSettings, registry: Registry,
                     embedder: Embedder | None) -> bool:
    """One attempt of ``load_model``; True when the model is ready."""
    async with model.load_lock:
        started = time.monotonic()
        model.disabled = settings.disabled
        model.configured = None if settings.disabled else settings.model_name
        try:
            if embedder is None:
                embedder = await anyio.to_thread.run_sync(
                    FastEmbedder.load, settings, abandon_on_cancel=True)
        except PalaceError as exc:
            model.state = "unavailable"
            model.reason = exc.message
            log.warning("embedding model unavailable, keyword-only mode: %s", exc.message)
            return False
        except Exception as exc:
            model.state = "unavailable"
            model.reason = f"{type(exc).__name__}: {exc}"
            log.exception("embedding model failed to load; keyword-only mode")
            return False
        await _install(model, embedder, registry, time.monotonic() - started)
        return True


async def reload_model(services: Services, settings: EmbedderSettings, registry: Registry,
                       *, accept: Callable[[Embedder], Awaitable[None]] | None = None
                       ) -> dict[str, Any]:
    """Load the model ``settings`` name now and make it the daemon's (``model.load``).

    The model in use keeps serving until the new one is ready. ``accept(new model)`` runs
    between the load and the switch, and raising there keeps the model in use
    (``model.use``: a team palace on another model). Returns the model state.

    Raises:
        EmbedderUnavailable: the model could not be loaded (the one in use stays; without one,
            the daemon stays keyword-only with this reason).
        Exception: what ``accept`` raised.
    """
    model = services.model
    async with model.load_lock:
        started = time.monotonic()
        try:
            embedder = await anyio.to_thread.run_sync(FastEmbedder.load, settings)
        except Exception as exc:
            failure = exc if isinstance(exc, EmbedderUnavailable) else EmbedderUnavailable(
                f"the embedding model failed to load: {type(exc).__name__}: {exc}")
            if model.embedder is None:
                model.state, model.reason = "unavailable", failure.message
                model.disabled = settings.disabled
                model.configured = None if settings.disabled else settings.model_name
            raise failure from exc
        if accept is not None:
            await accept(embedder)
        model.disabled = False
        model.configured = settings.model_name
        # Same identity, other files (another export): cached query vectors are theirs.
        services.query_vectors.clear()
        await _install(model, embedder, registry, time.monotonic() - started)
    return model.as_dict()


async def _install(model: ModelState, embedder: Embedder, registry: Registry,
                   seconds: float) -> None:
    """Make ``embedder`` the daemon's model and bind the open palaces to it."""
    # Palaces opened from now on attach themselves; attach the ones already open before
    # announcing "ready", so a client that waits for ready sees consistent indexes.
    model.embedder = embedder
    model.source = getattr(embedder, "source", None) or None
    for name, palace in registry.open_palaces.items():
        try:
            await palace.attach(embedder)
        except Exception:
            log.exception("palace %s: attaching the model failed", name)
    model.state = "ready"
    model.reason = None
    model.load_seconds = seconds
    model.ready_event.set()
    model.notify()
    log.info("embedding model ready: %s (%.2fs, from %s)", embedder.identity, seconds,
             model.source or "the caller")
