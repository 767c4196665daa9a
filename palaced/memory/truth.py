"""Conflicting drawers: list them, and resolve one (supersede, keep both, merge).

``remember`` records a conflict when a new drawer restates an older one of its wing with
another value (``writes``, rule ``text.conflicts``); recall then ranks the newer first and
marks the older. Resolving closes the conflict: ``supersede`` retires the older drawer
(superseded by the newer, kept for ``get`` and history), ``keep_both`` leaves both current
(they were about different things after all), ``merge`` stores ``text`` as one drawer in the
newer one's room and retires both behind it. Every resolution is audited.
"""

from __future__ import annotations

from typing import Any

import apsw

from palaced.memory import writes
from palaced.palace.handle import Palace, now_ms
from palaced.store.knowledge import conflicts as rows
from palaced.store.rows import audit, drawers
from palaced.text.topics import extract_topics
from palaced.wire.errors import InvalidArgs, MemoryNotFound


async def list_conflicts(palace: Palace, *, include_resolved: bool, limit: int
                         ) -> dict[str, Any]:
    """``{conflicts, total}``: the palace's conflicts newest first, open ones only unless
    ``include_resolved``, each with both drawers' texts."""
    found, total = await palace.read(
        lambda c: rows.listing(c, include_resolved=include_resolved, limit=limit))
    return {"conflicts": found, "total": total}


def _conflict(c: apsw.Connection, palace: Palace, conflict_id: int) -> dict[str, Any]:
    found = rows.get(c, conflict_id)
    if found is None:
        raise MemoryNotFound(f"no conflict {conflict_id} in palace {palace.name!r}",
                             details={"conflict": conflict_id, "palace": palace.name})
    return found


async def resolve_conflict(palace: Palace, conflict_id: int, resolution: str, *,
                           text: str | None = None, actor: audit.Actor = audit.SYSTEM
                           ) -> dict[str, Any]:
    """Resolve conflict ``conflict_id`` with ``resolution``; returns the conflict as resolved,
    with ``retired`` (the drawers superseded now) and, for a merge, ``merged_id``.

    Resolving a resolved conflict again changes nothing (``already: true``).

    Raises:
        MemoryNotFound: no such conflict.
        InvalidArgs: an unknown resolution, or ``merge`` without ``text`` (or ``text``
            with another resolution).
    """
    if resolution not in rows.RESOLUTIONS:
        raise InvalidArgs(f"resolution must be one of {', '.join(rows.RESOLUTIONS)}",
                          details={"resolution": resolution})
    if (resolution == "merge") != (text is not None):
        raise InvalidArgs("merge takes the merged drawer's text (and only merge does)",
                          details={"resolution": resolution})
    found = await palace.read(lambda c: _conflict(c, palace, conflict_id))
    if found["resolved_ms"] is not None:
        return {**found, "already": True, "retired": []}
    merged_id: int | None = None
    if text is not None:
        newer = (await palace.read(lambda c: drawers.get_drawers(c, [found["newer_id"]])))
        base = newer[found["newer_id"]]
        made = await writes.remember(palace, drawers.NewDrawer(
            text=drawers.normalise_text(text), wing=str(base["wing"]), room=str(base["room"]),
            tags=tuple(base["tags"]), importance=float(base["importance"]),
            topics=tuple(extract_topics(text))), dedup=False, actor=actor)
        merged_id = int(made["id"])

    def tx(c: apsw.Connection) -> dict[str, Any]:
        ts = now_ms()
        current = _conflict(c, palace, conflict_id)
        pair = [int(current["newer_id"]), int(current["older_id"])]
        if current["resolved_ms"] is not None:
            return {**current, "already": True, "retired": []}
        if resolution == "supersede":
            retire, by = pair[1:], pair[0]
        elif merged_id is not None:
            retire, by = pair, merged_id
        else:
            retire, by = [], 0
        live = drawers.get_drawers(c, retire)
        retired = [i for i in retire if i in live and live[i]["superseded_by"] is None
                   and i != by]
        for i in retired:
            drawers.supersede(c, i, by, ts, actor.agent)
        rows.resolve(c, conflict_id, resolution, ts, actor.agent)
        rows.resolve_between(c, [*pair, *([by] if by else [])], resolution, ts, actor.agent)
        if merged_id is not None:
            # The merged drawer restates both: what else contradicted them contradicts it.
            for i in retired:
                rows.move(c, i, merged_id, ts, actor.agent)
        audit.append(c, actor, f"conflict {resolution}", ts,
                     drawer_ids=[*pair, *([merged_id] if merged_id else [])],
                     detail={"conflict": conflict_id, "retired": len(retired)})
        out = {**_conflict(c, palace, conflict_id), "retired": retired}
        if merged_id is not None:
            out["merged_id"] = merged_id
        return out

    return await palace.transact(tx)
