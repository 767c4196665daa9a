"""Editing a drawer in place: ``update`` (text, wing, room, tags, importance).

The drawer keeps its id; the version it replaces is kept in ``drawer_history``
(``reads.get`` with ``history`` returns it). A new text is embedded before the write lock is
taken, like ``remember``; the new vectors replace the old ones in the database and the index
in the same write hop as the edit, so recall never sees the new text with the old vectors.
A text of more than ``writes.INLINE_MAX_CHUNKS`` chunks is embedded in the background, and
without a model (or while the palace is re-embedded for another one) the drawer waits for the
background embedding like one stored keyword-only.
Corrections that should keep both drawers visible as separate memories still use
``remember --supersedes``; see docs/concepts.md.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
import apsw
import numpy as np

from palaced.index.vectors import to_blob
from palaced.memory.writes import INLINE_MAX_CHUNKS, chunk_text
from palaced.palace.handle import Palace, now_ms
from palaced.store.lookup.vectors import store_vectors
from palaced.store.rows import audit
from palaced.store.rows.drawers import get_drawer
from palaced.store.rows.edits import Edit, edit_drawer, history_counts
from palaced.text import rules
from palaced.text.topics import extract_topics
from palaced.wire.errors import EmbedderUnavailable, MemoryNotFound

log = logging.getLogger("palaced.palace.handle")


async def update(palace: Palace, drawer_id: int, edit: Edit, *,
                 actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Edit drawer ``drawer_id`` for ``actor``; returns ``{id, changed, version, embedded}``.

    ``changed`` lists the fields whose value changed (empty: nothing was written, nor
    audited; else the audit log records ``updated`` with the fields' names);
    ``version`` counts the drawer's versions, this one included; ``embedded`` says whether
    the drawer has vectors for its current text.

    Raises:
        MemoryNotFound: no such drawer.
        InvalidContent: another drawer holds the new text in the new wing/room.
    """
    current = await palace.read(lambda c: get_drawer(c, drawer_id))
    if current is None:
        raise _missing(palace, drawer_id)
    text = edit.text if edit.text is not None and edit.text != current["text"] else None
    emb = None
    vectors: np.ndarray | None = None
    if text is not None:
        emb = palace.vector_embedder()
        # Topics and chunks of a 200k-character text take ~0.2 s: not on the event loop.
        topics, chunks = await anyio.to_thread.run_sync(
            lambda: (tuple(extract_topics(text)), chunk_text(text)))
        edit = Edit(text, edit.wing, edit.room, edit.tags, edit.importance, topics,
                    len(chunks))
        # A long text is embedded in the background, like a long remember (writes).
        if emb is not None and len(chunks) <= INLINE_MAX_CHUNKS:
            vectors = await palace.services.embeds.passages(emb, chunks)
    weight = None
    ts = now_ms()
    if edit.importance is not None and edit.importance != current["importance"]:
        weight = rules.drawer_weight({**current, "importance": edit.importance}, now_ms=ts)
    identity = emb.identity if emb is not None else None

    def write() -> dict[str, Any]:
        if identity is not None and identity != palace.embedder_identity:
            raise EmbedderUnavailable("embedder changed during the update; retry")
        added: list[int] = []

        def tx(c: apsw.Connection) -> tuple[list[str], list[int], int]:
            done = edit_drawer(c, drawer_id, edit, ts, weight, actor.agent)
            if done is None:
                raise _missing(palace, drawer_id)
            changed, dropped = done
            if changed:
                audit.append(c, actor, "updated", ts, drawer_ids=[drawer_id],
                             detail={"changed": ",".join(changed)})
            if "text" in changed and vectors is not None:
                added.extend(store_vectors(c, drawer_id, [to_blob(v) for v in vectors]))
            return changed, dropped, 1 + history_counts(c, [drawer_id]).get(drawer_id, 0)

        changed, dropped, version = palace.store.write(tx)
        index = palace.index
        if index is not None and (dropped or added):
            try:
                index.remove(dropped)
                if added and vectors is not None:
                    index.add(added, vectors)
            except Exception:
                # The database is the truth; the checkpointer rebuilds the index from it.
                log.exception("palace %s: index update failed; marking stale", palace.name)
                palace.index_lacks_vectors()
        if "text" in changed and not added:
            # embedded in the background (now, with a model)
            palace.note_unembedded(soon=emb is not None)
        return {"id": drawer_id, "changed": changed, "version": version,
                "embedded": bool(added) or ("text" not in changed and current["embedded"])}

    return await palace.write(write)


def _missing(palace: Palace, drawer_id: int) -> MemoryNotFound:
    return MemoryNotFound(f"no drawer {drawer_id} in palace {palace.name!r}",
                          details={"id": drawer_id, "palace": palace.name})
