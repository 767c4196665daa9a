"""The trash of an open palace: forgetting, restoring, listing and emptying drawers.

``forget``, ``upkeep.prune`` and the expiry sweep all discard drawers through ``discard_sync``:
into the trash (``store.rows.trash``), where a drawer stays restorable, hidden from everything else,
for the configured keep period; or, with a purge or a keep period of 0, deleted at once.
Every change is recorded in the palace's audit log in the same transaction. The keep period
is the caller's (``config.Retention``): entries trashed before ``now - keep`` count as gone
even before the upkeep (``audit.retention``) purges them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw
import numpy as np

from palaced.index.vectors import from_blob
from palaced.palace.handle import Palace, now_ms
from palaced.store.rows import audit, drawers
from palaced.store.rows import trash as sql
from palaced.store.rows import upkeep as upkeep_sql
from palaced.wire.errors import MemoryNotFound


def discard_sync(c: apsw.Connection, ids: Sequence[int], *, reason: str, actor: audit.Actor,
                 now: int, keep_ms: int, purge: bool = False) -> tuple[list[int], list[int]]:
    """Trash (or with ``purge`` or no keep period, delete) drawers and audit it, inside the
    caller's transaction; ``(ids discarded, vector ids to drop from the index)``."""
    if purge or keep_ms <= 0:
        found = upkeep_sql.drawer_wings(c, ids)
        present = [int(i) for i in ids if int(i) in found]
        vids = (drawers.delete_drawers(c, present) or []) if present else []
        outcome = "purged"
    else:
        present, vids = sql.trash_drawers(c, ids, reason=reason, agent=actor.agent,
                                          now_ms=now)
        outcome = "trashed"
    if present:
        audit.append(c, actor, outcome, now, drawer_ids=present, detail={"reason": reason})
    return present, vids


def drop_vectors(palace: Palace, vector_ids: Sequence[int]) -> None:
    """Remove discarded vectors from the in-memory index (same write hop)."""
    if vector_ids and palace.index is not None:
        palace.index.remove(vector_ids)


def _not_found(palace: Palace, drawer_id: int, where: str = "") -> MemoryNotFound:
    return MemoryNotFound(f"no drawer {drawer_id} in {where}palace {palace.name!r}",
                          details={"id": drawer_id, "palace": palace.name})


async def forget(palace: Palace, drawer_id: int, actor: audit.Actor, *, keep_ms: int,
                 purge: bool = False) -> dict[str, Any]:
    """Move a drawer to the trash; with ``purge`` delete it (or its trash entry) for good.

    Returns ``{"id", "forgotten", "trashed", "purged", "restorable_until_ms", "keep_days"}``.

    Raises:
        MemoryNotFound: no such drawer (nor, with ``purge``, trash entry); a drawer in the
            trash already says so (``details["in_trash"]``) and stays there.
    """
    def tx(c: apsw.Connection) -> tuple[dict[str, Any], list[int]]:
        ts = now_ms()
        done, vids = discard_sync(c, [drawer_id], reason="forget", actor=actor, now=ts,
                                  keep_ms=keep_ms, purge=purge)
        result = {"id": drawer_id, "forgotten": True, "trashed": False, "purged": False,
                  "restorable_until_ms": None, "keep_days": keep_ms / 86_400_000}
        if done:
            trashed = not purge and keep_ms > 0
            return {**result, "trashed": trashed, "purged": not trashed,
                    "restorable_until_ms": ts + keep_ms if trashed else None}, vids
        kept = sql.entry(c, drawer_id, ts - keep_ms)
        if purge and sql.purge(c, [drawer_id]):
            audit.append(c, actor, "purged", ts, drawer_ids=[drawer_id],
                         detail={"reason": "trash"})
            return {**result, "purged": True}, []
        if kept is not None:
            raise MemoryNotFound(
                f"drawer {drawer_id} is in the trash of palace {palace.name!r} already; "
                f"`palace forget {drawer_id} --purge` deletes it for good",
                details={"id": drawer_id, "palace": palace.name, "in_trash": True})
        raise _not_found(palace, drawer_id)

    def write() -> dict[str, Any]:
        result, vids = palace.store.write(tx)
        drop_vectors(palace, vids)
        return result

    return await palace.write(write)


async def restore(palace: Palace, drawer_id: int, actor: audit.Actor, *, keep_ms: int
                  ) -> dict[str, Any]:
    """Bring a drawer back from the trash: text, keyword index, closets, vectors, links.

    Returns ``{"id", "restored", "embedded"}``; a drawer that is not in the trash but active
    answers ``restored: false`` (a resent restore converges).

    Raises:
        MemoryNotFound: the drawer is neither active nor kept in the trash.
        InvalidContent: the same text is stored in the same wing and room again.
    """
    def tx(c: apsw.Connection) -> tuple[dict[str, Any], tuple[list[bytes], list[int]] | None]:
        ts = now_ms()
        # The trash entry first (locked on PostgreSQL): a restore by another daemon at the
        # same time then finds it gone, and the drawer active, instead of a duplicate id.
        got = None if drawers.get_drawer(c, drawer_id) is not None else sql.restore(
            c, drawer_id, agent=actor.agent, now_ms=ts, kept_since_ms=ts - keep_ms)
        if got is None:
            if drawers.get_drawer(c, drawer_id) is not None:
                return {"id": drawer_id, "restored": False, "embedded": None}, None
            raise _not_found(palace, drawer_id, "the trash or ")
        audit.append(c, actor, "restored", ts, drawer_ids=[drawer_id],
                     detail={"vectors": len(got[1])})
        return {"id": drawer_id, "restored": True, "embedded": bool(got[1])}, got

    def write() -> dict[str, Any]:
        result, got = palace.store.write(tx)
        if got is not None:
            blobs, vids = got
            if vids and palace.index is not None:
                palace.index.add(vids, np.stack([from_blob(b) for b in blobs]))
            elif not vids:
                # Embedded in the background, at once when a model is ready.
                palace.note_unembedded(soon=True)
        return result

    return await palace.write(write)


async def list_trash(palace: Palace, *, keep_ms: int, limit: int, offset: int
                     ) -> dict[str, Any]:
    """A page of the kept trash, most recently trashed first:
    ``{"drawers", "total", "next_offset", "keep_days"}``; each drawer has ``reason``,
    ``trashed_ms``, ``trashed_by`` and ``restorable_until_ms``."""
    found, total = await palace.read(
        lambda c: sql.list_trash(c, now_ms() - keep_ms, limit, offset))
    for d in found:
        d["restorable_until_ms"] = d["trashed_ms"] + keep_ms
    nxt = offset + len(found)
    return {"drawers": found, "total": total, "next_offset": nxt if nxt < total else None,
            "keep_days": keep_ms / 86_400_000}


async def in_trash(palace: Palace, drawer_id: int, *, keep_ms: int) -> dict[str, Any] | None:
    """Drawer ``drawer_id``'s kept trash entry, or None."""
    return await palace.read(lambda c: sql.entry(c, drawer_id, now_ms() - keep_ms))


async def empty(palace: Palace, actor: audit.Actor) -> dict[str, Any]:
    """Purge every trash entry now: ``{"purged": [ids]}``."""
    def tx(c: apsw.Connection) -> list[int]:
        gone = sql.purge_before(c, 1 << 62, 1 << 62)
        if gone:
            audit.append(c, actor, "purged", now_ms(), drawer_ids=gone,
                         detail={"reason": "empty"})
        return gone

    return {"purged": await palace.transact(tx)}
