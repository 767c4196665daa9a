"""Reads of an open palace: one drawer, a page of drawers, the palace's info and identity.

Each is an async function taking the ``Palace`` handle and making one ``Palace.read`` hop.
``read_identity`` (``palace.identity``, kept here for recall) is the one place that reads a
local palace's L0 identity file.
"""

from __future__ import annotations

import logging
from typing import Any

import apsw

from palaced.palace.handle import Palace, now_ms
from palaced.palace.identity import read_identity
from palaced.store.lookup import reembed as next_vectors
from palaced.store.rows import drawers, edits
from palaced.wire.errors import MemoryNotFound

log = logging.getLogger("palaced.palace.reads")
__all__ = ["get", "identity_text", "info", "list_drawers", "read_identity", "reembedding"]


async def get(palace: Palace, drawer_id: int, *, history: bool = False) -> dict[str, Any]:
    """Return one drawer, with ``supersedes`` (the ids of the drawers it replaced) and
    ``versions`` (1 + how often it was edited in place); with ``history`` also its earlier
    versions, newest first (``store.rows.edits.history``).

    Raises:
        MemoryNotFound: no such drawer.
    """
    def read(c: apsw.Connection) -> dict[str, Any] | None:
        d = drawers.get_drawer(c, drawer_id)
        if d is not None:
            d["supersedes"] = drawers.superseded_ids(c, drawer_id)
            earlier = edits.history(c, drawer_id) if history else None
            d["versions"] = 1 + (len(earlier) if earlier is not None else
                                 edits.history_counts(c, [drawer_id]).get(drawer_id, 0))
            if earlier is not None:
                d["history"] = earlier
        return d

    drawer = await palace.read(read)
    if drawer is None:
        raise MemoryNotFound(f"no drawer {drawer_id} in palace {palace.name!r}",
                             details={"id": drawer_id, "palace": palace.name})
    return drawer


async def list_drawers(palace: Palace, filters: drawers.Filters, limit: int, offset: int
                       ) -> dict[str, Any]:
    """A page of drawers, newest first: ``{drawers, total, next_offset}``."""
    found, total = await palace.read(
        lambda c: drawers.list_drawers(c, filters, limit, offset, now_ms()))
    nxt = offset + len(found)
    return {"drawers": found, "total": total,
            "next_offset": nxt if nxt < total else None}


def reembedding(stored: str | None, moving: tuple[str | None, int, int], current: str | None
                ) -> dict[str, Any] | None:
    """A palace's re-embedding for another model, ``{"model", "done", "total", "percent",
    "paused"}`` (drawers), from its recorded model, ``store.lookup.reembed.progress`` and the
    daemon's model; None if none runs or is due. ``paused``: its model is not the one loaded
    now."""
    target, done, total = moving
    if current is not None and stored not in (None, current) and target != current:
        target, done = current, 0  # not started
    elif target is None:
        return None
    return {"model": target, "done": done, "total": total,
            "percent": done * 100 // total if total else 100, "paused": target != current}


async def info(palace: Palace) -> dict[str, Any]:
    """Counts, embedder identity, index agreement and any re-embedding's progress."""
    # A shared (team) palace is never re-embedded here and has no local index or keyword
    # engine (pgvector serves it).
    shared = palace.storage.shared
    counts = await palace.read(drawers.counts)
    rooms = await palace.read(drawers.rooms)
    moving = (None, 0, 0) if shared else await palace.read(next_vectors.progress)
    current = palace.services.model.embedder
    index_count = len(palace.index) if palace.index is not None and not shared else None
    if index_count is not None and index_count != counts["vectors"]:
        # A write between its commit and its index update looks like disagreement: count
        # again behind the write lock, where no write is half done.
        async with palace.write_lock:
            counts = await palace.read(drawers.counts)
            index_count = len(palace.index) if palace.index is not None else None
    return {
        "name": palace.name,
        "path": str(palace.dir),
        **counts,
        "index": index_count,
        "consistent": index_count == counts["vectors"] if index_count is not None else None,
        "index_load": palace.index_load.as_dict() if palace.index_load is not None else None,
        # Vectors a kill -9 now would have to replay at the next open.
        "index_unsaved": palace.index.unsaved if palace.index is not None else None,
        # The keyword engine of large palaces (palaced/palace/keywords.py); none on a team palace.
        "keywords": None if shared else palace.keywords.state(),
        "embedder": palace.embedder_identity,
        "mismatch": palace.mismatch,
        "reembedding": reembedding(palace.embedder_identity, moving,
                                   current.identity if current else None),
        "rooms": rooms,
        "identity": await identity_text(palace),
        **palace.storage.describe(),
    }


async def identity_text(palace: Palace) -> str:
    """L0 without comment lines (a local palace's identity.txt, a team palace's database)."""
    return await palace.identity()
