"""Switching a palace to another embedding model without breaking it: re-embedding.

When the daemon's model differs from the one a palace's vectors come from, the palace keeps
working keyword-only (recall says why; writes are stored and wait for vectors) while its
drawers are embedded again with the new model, batch by batch, into ``vectors_next``
(``store/lookup/reembed.py``) beside the old vectors. Once every drawer has them, one transaction
makes them the live vectors and records the new model, and the index is rebuilt: from then on
recall is hybrid again. Progress is in the database, so a pass stopped anywhere (a restart, a
kill -9) resumes where it was.

* ``Reembedder`` does it in the background for every palace on disk whose vectors are
  another model's, one palace and one batch at a time, at low priority: its slices wait for
  interactive embedding (``EmbedLanes`` background lane) and it embeds at most
  ``BACKGROUND_SHARE`` of the time.
* ``reembed_now`` (``palace reembed``) does it in the request, at full speed; for a palace
  already on the loaded model it recomputes every vector (after installing another export of
  the same model), while the current vectors keep serving recall.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import numpy as np

from palaced.engine.embedder import Embedder
from palaced.engine.services import Services
from palaced.index.vector_file import IndexLoad, build_index
from palaced.index.vectors import VectorIndex, to_blob
from palaced.palace.handle import Palace
from palaced.palace.registry import Registry
from palaced.store.lookup import reembed as sql
from palaced.text.chunking import chunk_text as split
from palaced.wire.errors import EmbedderUnavailable, PalaceError, PalaceNotFound

log = logging.getLogger("palaced.maintenance.reembed")

BATCH = 64  # drawers per batch: one read, one embedding call, one short write
# The background pass sleeps after each batch so that it embeds at most this share of the
# time: on two cores a pass at full speed would slow every interactive recall beside it.
BACKGROUND_SHARE = 0.5
RETRY_S = 60.0  # a palace whose pass failed (locked, damaged...) is tried again this late


async def begin(palace: Palace, emb: Embedder, *, fresh: bool) -> None:
    """Aim the palace's re-embedding at ``emb`` (kept progress unless ``fresh``)."""
    await palace.write(partial(palace.store.write, lambda c: sql.begin(
        c, emb.identity, emb.dims, fresh=fresh)), wrote=False)


async def step(palace: Palace, emb: Embedder, after: int, *, background: bool
               ) -> tuple[int, int, float]:
    """Embed the next batch of drawers (ids above ``after``) lacking ``emb``'s vectors.

    Returns ``(last id read, drawers stored, seconds spent embedding)``; ``(0, 0, 0.0)`` when
    no drawer past ``after`` lacks them. Raises StorageError.
    """
    batch = await palace.read(lambda c: sql.todo(c, after, BATCH))
    if not batch:
        return 0, 0, 0.0
    # Chunking a 200k-character text takes ~0.1 s: not on the event loop.
    chunks: list[list[str]] = await anyio.to_thread.run_sync(
        lambda: [split(text) or [text] for _, text in batch])
    started = time.perf_counter()
    vectors = await palace.services.embeds.passages(
        emb, [c for per in chunks for c in per], background=background)
    seconds = time.perf_counter() - started
    stored = await palace.write(partial(_store_sync, palace, batch, chunks, vectors,
                                        emb.identity), wrote=False)
    return batch[-1][0], stored, seconds


def _store_sync(palace: Palace, batch: list[tuple[int, str]], chunks: list[list[str]],
                vectors: np.ndarray, identity: str) -> int:
    """Write one batch's vectors into ``vectors_next`` (worker thread, under write_lock)."""
    def tx(c: Any) -> int:
        stored, offset = 0, 0
        for (did, _), per in zip(batch, chunks, strict=True):
            blobs = [to_blob(v) for v in vectors[offset:offset + len(per)]]
            offset += len(per)
            stored += sql.store_next(c, identity, did, blobs)
        return stored

    return 0 if palace.closed else int(palace.store.write(tx))


async def finish(palace: Palace, emb: Embedder) -> bool:
    """Make ``emb``'s vectors the live ones if every drawer has them; True if it did."""
    return bool(await palace.write(partial(_switch_sync, palace, emb)))


def _switch_sync(palace: Palace, emb: Embedder) -> bool:
    """The switch (worker thread, under write_lock). The new index is built inside the
    switching transaction, so readers see the old state until the new one is whole."""
    built: list[VectorIndex] = []

    def tx(c: Any) -> bool:
        if not sql.switch(c, emb.identity):
            return False
        built.append(build_index(c, emb.dims))
        return True

    if palace.closed or not palace.store.write(tx):
        return False
    palace.bind_model(emb.identity, built[0])
    palace.replace_index(built[0], IndexLoad("rebuilt", reason=f"switched to {emb.identity}"))
    palace.all_embedded()
    try:
        palace.save_index_sync()
    except PalaceError:
        # The index in memory serves; the file is a cache the checkpointer saves later.
        log.exception("palace %s: saving the index after the switch failed", palace.name)
    log.info("palace %s: switched to %s (%d vectors)", palace.name, emb.identity,
             len(built[0]))
    return True


async def run_pass(palace: Palace, emb: Embedder, *, background: bool) -> int:
    """Batches until every drawer has ``emb``'s vectors, then the switch; drawers embedded.

    In the foreground the caller holds ``palace.reembed_lock`` throughout and has called
    ``begin``. In the background the lock is taken batch by batch, so a ``palace reembed``
    can take over between two batches; the pass ends when it finds the work done.

    Raises:
        EmbedderUnavailable: the daemon's model changed, or the palace was closed, meanwhile.
        StorageError: SQLite failed.
    """
    count, after = 0, 0
    while True:
        if palace.closed:
            raise EmbedderUnavailable(
                f"palace {palace.name!r} was closed (deleted?) while it was re-embedded",
                details={"palace": palace.name, "condition": "palace-closed"})
        if palace.services.model.embedder is not emb:
            raise EmbedderUnavailable(
                f"the embedding model changed while palace {palace.name!r} was re-embedded "
                f"for {emb.identity}; the new model's re-embedding takes over",
                details={"palace": palace.name, "condition": "model-changed"})
        async with palace.reembed_lock if background else contextlib.nullcontext():
            if background and not await due(palace, emb):
                return count  # a `palace reembed` finished it meanwhile
            last, stored, seconds = await step(palace, emb, after, background=background)
            count += stored
            finished = not last and not after and await finish(palace, emb)
            # Nothing stored (a batch of drawers all forgotten meanwhile, or a switch that
            # found drawers left): unless the target was dropped, go on; never spin on it.
            if not finished and not stored and await palace.read(
                    sql.next_model) != emb.identity:
                raise EmbedderUnavailable(
                    f"the re-embedding of palace {palace.name!r} for {emb.identity} was "
                    "dropped", details={"palace": palace.name, "condition": "model-changed"})
        if finished:
            return count
        if background and seconds:
            await anyio.sleep(seconds * (1 / BACKGROUND_SHARE - 1))
        # Past the last id, one more look from the start (drawers skipped meanwhile) before
        # the switch; a batch whose drawers were all forgotten meanwhile stores none.
        after = last


async def due(palace: Palace, emb: Embedder) -> bool:
    """Whether the palace still needs a pass for ``emb``: its vectors are another model's,
    or a recompute for ``emb`` was left unfinished."""
    return palace.embedder_identity != emb.identity or await palace.read(
        lambda c: sql.next_model(c) == emb.identity)


async def reembed_now(palace: Palace, emb: Embedder) -> dict[str, Any]:
    """Re-embed the palace with ``emb`` in this request and switch it (``palace reembed``).

    A palace whose vectors are another model's continues the background progress; one already
    on ``emb`` is recomputed from scratch. Raises StorageError.
    """
    async with palace.reembed_lock:
        await begin(palace, emb, fresh=palace.embedder_identity == emb.identity)
        count = await run_pass(palace, emb, background=False)
    await palace.checkpoint()
    return {"palace": palace.name, "embedder": emb.identity, "reembedded": count}


class Reembedder:
    """Re-embeds, in the background, every palace whose vectors are not the loaded model's.

    Woken when a model is loaded (``ModelState.notify``) or a palace needing it is opened;
    goes through the palaces on disk one at a time (opening them), and starts over when the
    model changes meanwhile. Failures are logged; the palace is tried again ``RETRY_S`` later.
    """

    def __init__(self, registry: Registry, services: Services) -> None:
        self._registry = registry
        self._services = services
        self._wake = anyio.Event()
        self._failing: dict[str, str] = {}  # palace -> the failure last logged for it
        services.model.watch(self.wake)

    def wake(self) -> None:
        """Look for palaces to re-embed now (cheap)."""
        self._wake.set()

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            self._wake = anyio.Event()
            try:
                failed = await self.run_once()
            except Exception:  # the daemon must outlive any failure here (listing palaces...)
                log.exception("background re-embedding failed; retrying in %.0fs", RETRY_S)
                failed = True
            with anyio.move_on_after(RETRY_S if failed else math.inf):
                await self._wake.wait()

    async def run_once(self) -> bool:
        """One round over the palaces on disk; True if one of them failed."""
        emb = self._services.model.embedder
        failed = False
        for name in self._registry.names():
            if emb is None or self._services.model.embedder is not emb:
                return failed  # no model, or another one: the wake-up starts over
            if self._registry.damage(name) is not None or self._registry.is_team(name):
                continue  # damaged: palace status reports it; team palaces keep their model
            try:
                stored, target = await self._registry.recorded_models(name)
                if stored not in (None, emb.identity) or target == emb.identity:
                    await self._palace(name, emb)
                if self._failing.pop(name, None) is not None:
                    log.info("palace %s: background re-embedding works again", name)
            except PalaceNotFound:
                continue  # deleted meanwhile
            except Exception as exc:
                why = exc.details.get("condition") if isinstance(exc, EmbedderUnavailable) else None
                if why == "model-changed":
                    return failed  # the wake-up of the new model starts over
                failed = True
                if why == "palace-closed":
                    continue  # deleted meanwhile (the next round skips it), or shutting down
                # A lasting cause (locked by another process, read-only disk) would log every
                # RETRY_S: once per condition, again when it changes.
                condition = f"{type(exc).__name__}: {exc}"
                if self._failing.get(name) != condition:
                    self._failing[name] = condition
                    log.exception("palace %s: background re-embedding failed; retrying every "
                                  "%.0fs (logged again if the failure changes)", name, RETRY_S)
        return failed

    async def _palace(self, name: str, emb: Embedder) -> None:
        palace = await self._registry.get(name)
        palace.begin_work()  # not closed as idle in the middle of a batch
        try:
            if await due(palace, emb):
                if palace.embedder_identity != emb.identity:
                    await begin(palace, emb, fresh=False)  # resumes a pass toward emb
                total = await run_pass(palace, emb, background=True)
                log.info("palace %s: re-embedded %d drawers for %s in the background", name,
                         total, emb.identity)
        finally:
            palace.end_work()
