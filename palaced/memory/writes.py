"""Writes of drawers to an open palace: remember and embedding what waits for it.

Each verb is an async function taking the ``Palace`` handle. Embedding (the slow part) runs
before the write lock is taken, through the daemon's embedding lanes; the write itself is one
``Palace.write`` hop: drawers, their full-text rows, closets, vectors and the audit entry
commit in one transaction, then the in-memory vector index is updated in the same hop.
``remember`` may refresh a near-duplicate instead of storing a new drawer
(``rules.is_near_duplicate``); forgetting is the trash's (``palaced.memory.trash``).

Dedup never meets a forgotten drawer: the trash holds it outside ``drawers`` (and its vectors
outside the index), so remembering the same text again stores a new drawer with a new id,
and the trashed one can then no longer be restored over it (see ``store.rows.trash.restore``).
Without vectors for the loaded model (none is loaded, or the palace is being re-embedded for
it, ``palaced.maintenance.reembed``) drawers are stored without vectors and embedded later.

A text of more than ``INLINE_MAX_CHUNKS`` chunks is not embedded inline either: it is
committed without vectors, the remember returns, and the scheduler embeds it in the
background at once (``embed_pending``); until its vectors land, recall finds it by its words
alone.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio.to_thread
import apsw
import numpy as np

from palaced.engine.embedder import Embedder
from palaced.index.vectors import PgVectors, to_blob
from palaced.memory.health import consolidation_hint
from palaced.palace.handle import Palace, now_ms
from palaced.store.knowledge import conflicts as conflict_rows
from palaced.store.lookup import pg_search, search
from palaced.store.lookup.context import vectors_changed
from palaced.store.lookup.vectors import (
    awaits_vectors,
    owners_of,
    pending_embeddings,
    store_vectors,
    vector_ids,
)
from palaced.store.rows import audit, drawers
from palaced.text import conflicts, rules
from palaced.text.chunking import chunk_text as split
from palaced.wire.errors import EmbedderUnavailable

log = logging.getLogger("palaced.palace.handle")

EMBED_BATCH = 64  # pending drawers looked at per background step
EMBED_CHUNKS = 128  # chunks embedded per background step (one write each; one drawer at least)
REMEMBER_BATCH = 256  # drawers per transaction of remember_many
# Longer texts are embedded in the background after the remember returns. 16 chunks (~9,000
# characters) are ~0.5 s of model time on 2 cores (bench/bigmem.py: ~30 chunks/s); up to
# that a remember embeds inline as before, and can refresh a near-duplicate.
INLINE_MAX_CHUNKS = 16


def chunk_text(text: str) -> list[str]:
    """Split a drawer into the pieces that get a vector each."""
    return split(text) or [text]


async def _embed(palace: Palace, emb: Embedder, texts: list[str], *,
                 background: bool = False) -> np.ndarray:
    """Passage vectors, embedded slice by slice (the caller's deadline applies between;
    ``background`` slices let interactive ones go first)."""
    return await palace.services.embeds.passages(emb, texts, background=background)


# -- remember ---------------------------------------------------------------------------------
async def remember(palace: Palace, new: drawers.NewDrawer, *, dedup: bool = True,
                   actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Store one drawer for ``actor``; returns ``{id, created, embedded, deduplicated}``, plus
    ``pending_chunks`` when its text is embedded in the background and ``consolidate``
    (``health.consolidation_hint``) when its room is due a consolidation.

    Idempotent by content hash. With ``dedup``, a near-duplicate of an active drawer in
    the same wing/room refreshes that drawer instead (``deduplicated: true``); a text
    embedded in the background is never merged (it has no vector yet to compare). A
    near-duplicate that adds detail is stored, never folded in: ``extends`` names the drawer
    it extends (``superseded`` when it holds all that drawer said, which it then retires).
    With ``dedup``, ``conflicts`` lists the older drawers of the wing the new one
    contradicts (``text.conflicts``), each recorded as an open conflict.

    Raises:
        MemoryNotFound: ``new.supersedes`` names no drawer.
    """
    outcome = (await _insert_many(palace, [new], dedup=dedup, actor=actor))[0]
    hint = await consolidation_hint(palace, new.wing, new.room)
    if hint is not None:
        outcome["consolidate"] = hint
    return outcome


async def remember_many(palace: Palace, items: Sequence[drawers.NewDrawer], *,
                        dedup: bool = False, actor: audit.Actor = audit.SYSTEM
                        ) -> dict[str, Any]:
    """Store many drawers, one transaction per batch of 256; ids in input order.

    With ``dedup`` (off by default: a bulk load of history), near-duplicates are merged as
    by ``remember`` and conflicts are checked, against the palace and the batch's earlier
    items: ``conflicts`` lists them (``newer_id`` and ``remember``'s fields).

    Raises:
        MemoryNotFound: an item supersedes no drawer.
    """
    outcomes: list[dict[str, Any]] = []
    step = REMEMBER_BATCH
    for start in range(0, len(items), step):
        outcomes.extend(await _insert_many(palace, items[start:start + step], dedup=dedup,
                                           actor=actor))
    out = {
        "ids": [o["id"] for o in outcomes],
        "created": [o["created"] for o in outcomes],
        "deduplicated": [o["deduplicated"] for o in outcomes],
        "embedded": all(o["embedded"] for o in outcomes),
    }
    found = [{"newer_id": o["id"], **x} for o in outcomes for x in o.get("conflicts", ())]
    if found:
        out["conflicts"] = found
    return out


@dataclass(frozen=True)
class TxHooks:
    """Work that must commit in the same transaction as a batch of drawers.

    ``before(conn)`` runs first and returns the vector ids of drawers it deleted (dropped from
    the index after the commit); ``after(conn, outcomes)`` runs last, with each item's
    ``{id, created, ...}``. A capture uses them to replace the drawer of an exchange that
    grew and to advance its transcript offset together with the drawers it covers.
    """

    before: Callable[[apsw.Connection], list[int]] | None = None
    after: Callable[[apsw.Connection, list[dict[str, Any]]], None] | None = None


async def remember_captured(palace: Palace, items: Sequence[drawers.NewDrawer],
                            hooks: TxHooks, actor: audit.Actor = audit.SYSTEM
                            ) -> list[dict[str, Any]]:
    """Store ``items`` for ``actor`` (no near-duplicate merging) and run ``hooks``, all in one
    transaction (the audit entry too).

    Raises:
        StorageError: SQLite failed (nothing of the batch is stored).
    """
    return await _insert_many(palace, items, dedup=False, actor=actor, hooks=hooks)


async def _insert_many(palace: Palace, items: Sequence[drawers.NewDrawer], *, dedup: bool,
                       actor: audit.Actor, hooks: TxHooks | None = None
                       ) -> list[dict[str, Any]]:
    emb = palace.vector_embedder()
    hashes = [it.content_hash for it in items]
    known = await palace.read(lambda c: drawers.existing_hashes(c, hashes))
    # Chunking a 200k-character text takes ~0.1 s: not on the event loop. Texts are chunked
    # even without a model: their chunk count is the pending work recorded for later.
    chunk_lists: list[list[str]] = await anyio.to_thread.run_sync(lambda: [
        [] if it.content_hash in known else chunk_text(it.text) for it in items])
    inline = [emb is not None and 0 < len(chunks) <= INLINE_MAX_CHUNKS
              for chunks in chunk_lists]
    flat = [c for chunks, now in zip(chunk_lists, inline, strict=True) if now for c in chunks]
    # A deadline that passes while embedding cancels here, before anything is written.
    vectors = await _embed(palace, emb, flat) if (emb is not None and flat) else None
    identity = emb.identity if emb is not None else None
    outcomes = await palace.write(
        lambda: _insert_sync(palace, items, chunk_lists, inline, vectors, identity, dedup,
                             actor, hooks))
    if any(not o["embedded"] for o in outcomes):
        # Left to the background on purpose (not for want of a model): start at once.
        palace.note_unembedded(soon=any("pending_chunks" in o for o in outcomes))
    return outcomes


def _insert_sync(palace: Palace, items: Sequence[drawers.NewDrawer],
                 chunk_lists: list[list[str]], inline: list[bool], vectors: np.ndarray | None,
                 identity: str | None, dedup: bool, actor: audit.Actor,
                 hooks: TxHooks | None = None
                 ) -> list[dict[str, Any]]:
    """The write half of remember: runs in a worker thread under ``write_lock``."""
    # The palace may have switched models (palaced.maintenance.reembed) while we embedded.
    if identity is not None and identity != palace.embedder_identity:
        raise EmbedderUnavailable("embedder changed during the write; retry")
    ts = now_ms()
    outcomes: list[dict[str, Any]] = []
    added: list[tuple[int, list[int], np.ndarray]] = []
    removed: list[int] = []

    def tx(c: apsw.Connection) -> None:
        if hooks is not None and hooks.before is not None:
            removed.extend(hooks.before(c))
        offset = 0
        superseded: list[int] = []
        new_ids: list[int] = []
        # The batch's own drawers, for its later items' conflict checks: the index learns
        # their vectors only after the commit.
        batch: list[tuple[int, str, str, np.ndarray]] = []
        for it, chunks, now in zip(items, chunk_lists, inline, strict=True):
            vecs = None
            if now and vectors is not None:
                vecs = vectors[offset:offset + len(chunks)]
                offset += len(chunks)
            near: list[Neighbour] = []
            if dedup and vecs is not None and len(vecs) and palace.index is not None:
                near = neighbours(palace, c, it.wing, vecs[0], ts)
            dup = near_duplicate(it, near)
            extends: Neighbour | None = None
            if dup is not None and conflicts.adds_detail(it.text, dup.text):
                # Folding it in would lose what it adds: it is stored (below), and retires
                # the older drawer when it says all that one did (history kept).
                dup, extends = None, dup
            if dup is not None:
                drawers.refresh_duplicate(c, dup.id, it.importance, ts, actor.agent)
                outcomes.append({"id": dup.id, "created": False, "deduplicated": True,
                                 "similarity": round(dup.similarity, 4), "embedded": True})
                continue
            # The room context (keyword context, context vectors) of the new drawers and
            # their neighbours is computed once, after the loop, with every vector stored:
            # per drawer it cost five context-vector refreshes, ~20 % of a write.
            did, created = drawers.insert_drawer(c, it, ts, actor.agent,
                                                 chunks=len(chunks) or None, context=False)
            if created:
                new_ids.append(did)
            if created and vecs is not None and len(vecs):
                vids = store_vectors(c, did, [to_blob(v) for v in vecs], context=False)
                added.append((did, vids, vecs))
            if created and it.supersedes is not None:
                drawers.supersede(c, it.supersedes, did, ts, actor.agent)
                conflict_rows.move(c, it.supersedes, did, ts, actor.agent)
                superseded.append(it.supersedes)
            out: dict[str, Any] = {
                "id": did, "created": created, "deduplicated": False,
                "embedded": vecs is not None if created else identity is not None}
            if created and extends is not None and it.supersedes is None:
                out["extends"] = _extend(c, extends, it, did, ts, actor.agent)
                if out["extends"]["superseded"]:
                    superseded.append(extends.id)
            found: list[dict[str, Any]] = []
            if created and dedup:
                if vecs is not None and len(vecs):
                    found = _conflicts(c, did, it, [*near, *_batch_near(it, vecs[0], batch)],
                                       ts)
                    batch.append((did, it.wing, it.text, vecs[0]))
                else:
                    # No vector to compare now (keyword-only, the model still loading, a
                    # long text): the words find candidates, and the vectors, once
                    # embedded, look again (``_check_later``).
                    found = _conflicts(c, did, it, word_neighbours(c, it.wing, it.text, did,
                                                                   ts), ts)
                    _check_later(palace, did, it.text)
            if found:
                out["conflicts"] = found
            if created and vecs is None and identity is not None:
                out["pending_chunks"] = len(chunks)
            outcomes.append(out)
        drawers.refresh_around(c, new_ids)
        if hooks is not None and hooks.after is not None:
            hooks.after(c, outcomes)
        _audit(c, actor, outcomes, superseded, ts)

    palace.store.write(tx)
    if palace.index is not None:
        try:
            if removed:
                palace.index.remove(removed)
            for _did, vids, vecs in added:
                palace.index.add(vids, vecs)
        except Exception:
            # Data is committed; the checkpointer rebuilds the cache from SQLite.
            log.exception("palace %s: index add failed; marking stale", palace.name)
            palace.index_lacks_vectors()
    return outcomes


def _audit(c: apsw.Connection, actor: audit.Actor, outcomes: Sequence[dict[str, Any]],
           superseded: Sequence[int], ts: int) -> None:
    """One audit entry for a remember transaction: the ids (those stored, then those they
    superseded), and what became of them; none for a transaction that stored nothing."""
    if not outcomes and not superseded:
        return  # a capture batch that only moved its state: nothing to account for
    created = sum(1 for o in outcomes if o["created"])
    merged = sum(1 for o in outcomes if o["deduplicated"])
    if len(outcomes) == 1:
        outcome = "created" if created else "deduplicated" if merged else "exists"
    else:
        outcome = "stored"
    audit.append(c, actor, outcome, ts,
                 drawer_ids=[int(o["id"]) for o in outcomes] + list(superseded),
                 detail={"created": created, "deduplicated": merged,
                         "existing": len(outcomes) - created - merged,
                         "superseded": len(superseded)})


@dataclass(frozen=True)
class Neighbour:
    """An active drawer of the new drawer's wing near it in meaning."""

    id: int
    similarity: float
    room: str
    text: str
    consolidated: bool = False  # retired into a summary: no current truth to contradict
    by_words: bool = False  # found by the words alone (no vector): ``similarity`` is not one


def neighbours(palace: Palace, c: apsw.Connection, wing: str, vec: np.ndarray, ts: int
               ) -> list[Neighbour]:
    """The active drawers of ``wing`` among the index's 10 nearest vectors, at a
    cosine of at least ``conflicts.CONFLICT_SIMILARITY`` (below ``rules.DEDUP_THRESHOLD``:
    one search serves the near-duplicate and the conflict checks), nearest first. Needs
    the index (worker thread)."""
    assert palace.index is not None
    if isinstance(palace.index, PgVectors):
        hits = pg_search.vector_search(c, pg_search.vector_literal(vec), palace.index.dims,
                                       None, 10, ts)
    else:
        hits = palace.index.search(vec, 10, lambda keys: owners_of(c, keys))
    floor = min(conflicts.CONFLICT_SIMILARITY, rules.DEDUP_THRESHOLD)
    candidates = [(i, s) for i, s in hits if s >= floor]
    if not candidates:
        return []
    rows = drawers.get_drawers(c, [i for i, _ in candidates])
    out = []
    for did, sim in candidates:
        d = rows.get(did)
        if (d is None or d["wing"] != wing or d["superseded_by"] is not None
                or (d["expires_ms"] is not None and d["expires_ms"] <= ts)):
            continue
        out.append(Neighbour(did, sim, str(d["room"]), str(d["text"]),
                             d["consolidated_into"] is not None))
    return out


def near_duplicate(new: drawers.NewDrawer, near: Sequence[Neighbour]) -> Neighbour | None:
    """The first of ``near`` in ``new``'s room that ``new`` nearly repeats
    (``rules.is_near_duplicate``), if any."""
    for n in near:
        if n.room == new.room and rules.is_near_duplicate(n.similarity, new.text, n.text):
            return n
    return None


MAX_CONFLICTS = 3  # conflicts recorded per new drawer (its nearest)


def _conflicts(c: apsw.Connection, did: int, new: drawers.NewDrawer,
               near: Sequence[Neighbour], ts: int) -> list[dict[str, Any]]:
    """Record the conflicts of new drawer ``did`` with its ``near`` neighbours
    (``text.conflicts.conflict_reason``); each as ``{id, conflict, reason, text}``."""
    found: list[dict[str, Any]] = []
    for n in near:
        if len(found) >= MAX_CONFLICTS:
            break
        if n.consolidated:
            continue
        reason = conflicts.conflict_reason(new.text, n.text, strict=n.by_words)
        if reason is None:
            continue
        cid = conflict_rows.record(
            c, did, n.id, kind="text", reason=reason,
            similarity=None if n.by_words else round(n.similarity, 4), ts=ts)
        if cid is not None:
            found.append({"id": n.id, "conflict": cid, "reason": reason,
                          "text": rules.preview(n.text)})
    return found


def _batch_near(new: drawers.NewDrawer, vec: np.ndarray,
                batch: Sequence[tuple[int, str, str, np.ndarray]]) -> list[Neighbour]:
    """The drawers stored earlier in the same transaction (``remember_many``) of ``new``'s
    wing at a cosine of at least ``CONFLICT_SIMILARITY``, nearest first."""
    if not batch:
        return []
    mine = [(did, text, v) for did, wing, text, v in batch if wing == new.wing]
    if not mine:
        return []
    others = np.stack([v for _, _, v in mine])
    sims = others @ vec / np.maximum(np.linalg.norm(others, axis=1) * np.linalg.norm(vec),
                                     1e-9)
    near = [Neighbour(did, float(sim), "", text)
            for (did, text, _), sim in zip(mine, sims, strict=True)
            if sim >= conflicts.CONFLICT_SIMILARITY]
    return sorted(near, key=lambda n: -n.similarity)


WORD_CANDIDATES = 10  # drawers of the wing a text without a vector is compared with


def word_neighbours(c: apsw.Connection, wing: str, text: str, exclude: int, ts: int
                    ) -> list[Neighbour]:
    """The active drawers of ``wing`` that share the most words with ``text`` (BM25 over
    its words, as recall's keyword search), best first, but ``exclude``: the candidates of
    a conflict check without a vector. None for a text too long to be compared."""
    if len(text) > conflicts.MAX_CHARS:
        return []
    hits = search.fts_search(c, text, drawers.Filters(wing=wing), WORD_CANDIDATES + 1, ts)
    rows = drawers.get_drawers(c, [i for i, _ in hits if i != exclude])
    return [Neighbour(did, 0.0, str(d["room"]), str(d["text"]), by_words=True)
            for did, d in rows.items()]


# Drawers a remember stored without a vector, with its checks on: once embedded, their
# vectors' neighbours are checked for conflicts too (``_conflicts_later``). Kept in memory
# per open palace: imports and other writes without the check are not looked at, and the
# palace closing in between (idle, a restart) forgets them (their words were compared when
# they were stored).
_LATER: weakref.WeakKeyDictionary[Palace, set[int]] = weakref.WeakKeyDictionary()
LATER_MAX = 100_000  # ids remembered per palace (a keyword-only palace never embeds them)


def _check_later(palace: Palace, did: int, text: str) -> None:
    if len(text) > conflicts.MAX_CHARS:
        return  # never compared
    later = _LATER.setdefault(palace, set())
    if len(later) < LATER_MAX:
        later.add(did)


def _conflicts_later(palace: Palace, due: dict[int, np.ndarray], c: apsw.Connection) -> None:
    """Record the conflicts of drawers just embedded in the background (``due``: their
    first vectors) with their nearest drawers, the later-written of each pair as the newer
    (worker thread, under ``write_lock``, the vectors in the index)."""
    if palace.index is None:
        return
    ts = now_ms()
    rows = drawers.get_drawers(c, list(due))
    for did, vec in due.items():
        d = rows.get(did)
        if d is None or d["superseded_by"] is not None or d["consolidated_into"] is not None:
            continue
        found = 0
        for n in neighbours(palace, c, str(d["wing"]), vec, ts):
            if n.id == did or n.consolidated or found >= MAX_CONFLICTS:
                continue
            newer, older = (did, n.id) if did > n.id else (n.id, did)
            texts = {did: str(d["text"]), n.id: n.text}
            reason = conflicts.conflict_reason(texts[newer], texts[older])
            if reason is not None and conflict_rows.record(
                    c, newer, older, kind="text", reason=reason,
                    similarity=round(n.similarity, 4), ts=ts) is not None:
                found += 1


def _extend(c: apsw.Connection, old: Neighbour, new: drawers.NewDrawer, did: int, ts: int,
            agent: str | None) -> dict[str, Any]:
    """New drawer ``did`` adds detail to near-duplicate ``old``: when it holds every word and
    value of ``old``, ``old`` is superseded by it (kept, reachable with ``get``)."""
    whole = conflicts.covers(new.text, old.text)
    if whole:
        drawers.supersede(c, old.id, did, ts, agent)
        # What contradicted the old drawer contradicts the one restating it with detail.
        conflict_rows.move(c, old.id, did, ts, agent)
    return {"id": old.id, "similarity": round(old.similarity, 4), "superseded": whole}


# -- embedding --------------------------------------------------------------------------------
async def embed_pending(palace: Palace, *, background: bool = False) -> int:
    """Embed drawers stored without vectors (a keyword-only period, or long texts left to
    the background), oldest first, ``EMBED_CHUNKS`` chunks per write; returns how many.

    ``background`` (the scheduler) lets every remember's embedding go before its slices.
    """
    total = 0
    while True:
        emb = palace.vector_embedder()
        if emb is None or palace.closed:
            return total
        batch = await palace.read(lambda c: pending_embeddings(c, EMBED_BATCH, EMBED_CHUNKS))
        if not batch:
            palace.all_embedded()
            return total
        per_drawer = await anyio.to_thread.run_sync(_chunk_all, [text for _, text in batch])
        vectors = await _embed(palace, emb, [c for chunks in per_drawer for c in chunks],
                               background=background)
        await palace.write(partial(_store_pending_sync, palace, batch, per_drawer, vectors,
                                   emb.identity))
        total += len(batch)


def _chunk_all(texts: list[str]) -> list[list[str]]:
    return [chunk_text(text) for text in texts]


def _store_pending_sync(palace: Palace, batch: list[tuple[int, str]],
                        per_drawer: list[list[str]], vectors: np.ndarray, identity: str
                        ) -> None:
    """Write vectors computed for pending drawers (worker thread, under write_lock)."""
    index = palace.index
    if identity != palace.embedder_identity or index is None or palace.closed:
        return
    added: list[tuple[int, list[int], np.ndarray]] = []

    def tx(c: apsw.Connection) -> None:
        offset = 0
        for (did, _), chunks in zip(batch, per_drawer, strict=True):
            vecs = vectors[offset:offset + len(chunks)]
            offset += len(chunks)
            # Skip drawers forgotten or embedded meanwhile.
            if not awaits_vectors(c, did):
                continue
            old = vector_ids(c, did)
            vids = store_vectors(c, did, [to_blob(v) for v in vecs], context=False)
            if old:
                index.remove(old)
            added.append((did, vids, vecs))
        # The neighbours' context vectors once for the batch, not once per drawer.
        vectors_changed(c, [did for did, _, _ in added])

    palace.store.write(tx)
    for _did, vids, vecs in added:
        index.add(vids, vecs)
    later = _LATER.get(palace, set())
    due = {did: vecs[0] for did, _, vecs in added if did in later and len(vecs)}
    later.difference_update(did for did, _ in batch)
    if due:
        palace.store.write(partial(_conflicts_later, palace, due))


