"""Health report of an open palace: per room, counts, stale drawers, duplicates, hints.

``report`` reads every drawer in one reader snapshot and judges it with the same rules as
decay and prune (``rules``): what is stale, what ``prune`` may delete, which drawers repeat
one another (the same words, or near-identical vectors), and which rooms have grown enough
to be worth consolidating (``upkeep.consolidate``).
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from palaced.index.vectors import from_blob
from palaced.palace.handle import Palace
from palaced.palace.handle import now_ms as clock_ms
from palaced.store.conn.meta import meta_get
from palaced.store.lookup.vectors import drawer_vectors
from palaced.store.rows import upkeep as sql
from palaced.store.rows.drawers import SUMMARY_KIND
from palaced.text import rules
from palaced.wire.errors import InvalidArgs
from palaced.wire.vocab import DEFAULT_PRUNE_THRESHOLD, HEALTH_LIST_LIMIT, STALE_DAYS

# Near-duplicate detection compares every pair of a room's vectors: quadratic, so bounded.
NEAR_DUP_MAX_ROOM = 2_000


@dataclass
class _RoomRows:
    wing: str
    room: str
    drawers: int = 0
    active: list[dict[str, Any]] = field(default_factory=list)


def _near_pairs(conn: apsw.Connection, rows: Sequence[dict[str, Any]],
                skip: set[tuple[int, int]]) -> list[tuple[int, int, float]]:
    by_id = {r["id"]: r for r in rows}
    chunks: dict[int, list[np.ndarray]] = defaultdict(list)
    for did, blob in drawer_vectors(conn, list(by_id)):
        chunks[did].append(from_blob(blob))
    ids = sorted(chunks)
    if len(ids) < 2:
        return []
    matrix = np.stack([np.mean(chunks[i], axis=0) for i in ids]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix /= np.where(norms == 0, 1.0, norms)
    sims = np.triu(matrix @ matrix.T, k=1)
    out: list[tuple[int, int, float]] = []
    for i, j in np.argwhere(sims >= rules.DEDUP_THRESHOLD).tolist():
        a, b = ids[i], ids[j]
        sim = float(sims[i, j])
        if (a, b) in skip:
            continue
        older, newer = (by_id[a], by_id[b]) if a < b else (by_id[b], by_id[a])
        if rules.is_near_duplicate(sim, newer["text"], older["text"]):
            out.append((min(a, b), max(a, b), sim))
    return out


def hint_text(wing: str, room: str, count: int) -> str:
    """The consolidation hint of a room holding ``count`` unconsolidated drawers."""
    return (f"{wing}/{room} holds {count} unconsolidated drawers: consider consolidating "
            f"them (palace consolidate --room {shlex.quote(room)} --wing {shlex.quote(wing)} "
            "--summary TEXT)")


async def consolidation_hint(palace: Palace, wing: str, room: str) -> dict[str, Any] | None:
    """``{wing, room, drawers, hint}`` when ``wing``/``room`` holds ``[upkeep]
    consolidate_hint_at`` or more active, unconsolidated drawers (``remember`` adds it to its
    answer), else None.

    Raises:
        StorageError: SQLite failed.
    """
    hint_at = palace.services.config.upkeep.consolidate_hint_at
    if hint_at <= 0:
        return None
    count = await palace.read(lambda c: sql.room_backlog(c, wing, room, clock_ms()))
    if count < hint_at:
        return None
    return {"wing": wing, "room": room, "drawers": count, "hint": hint_text(wing, room, count)}


async def report(palace: Palace, *, threshold: float = DEFAULT_PRUNE_THRESHOLD,
                 stale_days: float = STALE_DAYS, limit: int = HEALTH_LIST_LIMIT,
                 now_ms: int | None = None) -> dict[str, Any]:
    """Per-room report: counts, stale drawers, duplicate candidates, consolidation hints.

    Per ``(wing, room)``: ``drawers`` (all), ``active`` (not superseded, not expired),
    ``unconsolidated`` (active non-summary drawers not yet consolidated), ``summaries``;
    ``stale``: active drawers whose decayed weight is below ``threshold`` and unused for
    ``stale_days`` or more (``prunable`` says whether ``prune`` may delete them);
    ``duplicates``: pairs of active drawers with the same words (``exact``), or near
    duplicates by their vectors (``near``; only in rooms of at most NEAR_DUP_MAX_ROOM active
    drawers and when the vectors come from the daemon's model: ``near_duplicates_checked``);
    ``hint`` when ``[upkeep] consolidate_hint_at`` drawers or more are unconsolidated.
    Lists hold at most ``limit`` entries; the ``*_count`` fields give the full numbers.

    Raises:
        InvalidArgs: threshold outside 0..1, negative stale_days or limit below 1.
    """
    limit_threshold = rules.check_threshold(threshold)
    if stale_days < 0:
        raise InvalidArgs("stale_days must be >= 0", details={"stale_days": stale_days})
    if limit < 1:
        raise InvalidArgs("limit must be >= 1", details={"limit": limit})
    ts = clock_ms() if now_ms is None else now_ms

    def run(c: apsw.Connection) -> dict[str, Any]:
        rooms: dict[tuple[str, str], _RoomRows] = {}
        for row in sql.health_rows(c, ts):
            did, wing, room, text, imp, created, accessed, count, kind, cons, active = row
            entry = rooms.setdefault((str(wing), str(room)), _RoomRows(str(wing), str(room)))
            entry.drawers += 1
            if not active:
                continue
            entry.active.append({
                "id": int(did), "text": str(text), "importance": float(imp),
                "created_ms": int(created), "accessed_ms": None if accessed is None
                else int(accessed), "access_count": int(count), "kind": str(kind),
                "consolidated": cons is not None})
        # Vectors of another model than the daemon's: DEDUP_THRESHOLD means nothing for them.
        vectors_ok = palace.mismatch is None
        hint_at = palace.services.config.upkeep.consolidate_hint_at
        out_rooms = [_room_report(c, r, ts, limit_threshold, stale_days, limit, vectors_ok,
                                  hint_at) for r in rooms.values()]
        decayed = meta_get(c, "decay_ms")
        return {
            "palace": palace.name,
            "now_ms": ts,
            "threshold": limit_threshold,
            "stale_days": stale_days,
            "decay_ms": int(decayed) if decayed and decayed.isdigit() else None,
            "totals": {
                "rooms": len(out_rooms),
                "drawers": sum(r["drawers"] for r in out_rooms),
                "active": sum(r["active"] for r in out_rooms),
                "stale": sum(r["stale_count"] for r in out_rooms),
                "duplicates": sum(r["duplicate_count"] for r in out_rooms),
                "hints": sum(1 for r in out_rooms if r["hint"]),
            },
            "rooms": out_rooms,
        }

    return await palace.read(run)


def _room_report(c: apsw.Connection, r: _RoomRows, ts: int, threshold: float,
                 stale_days: float, limit: int, vectors_ok: bool, hint_at: int
                 ) -> dict[str, Any]:
    active = r.active
    stale: list[dict[str, Any]] = []
    for d in active:
        w = rules.drawer_weight(d, now_ms=ts)
        unused = rules.days_since_use(created_ms=d["created_ms"],
                                          accessed_ms=d["accessed_ms"], now_ms=ts)
        if w < threshold and unused >= stale_days:
            eligible = d["kind"] == "drawer" and not d["consolidated"]
            stale.append({
                "id": d["id"], "importance": d["importance"], "weight": w,
                "days_unused": round(unused, 3),
                "prunable": eligible and rules.importance_class(d["importance"])
                in rules.PRUNABLE_CLASSES,
                "preview": rules.preview(d["text"])})
    stale.sort(key=lambda s: (s["weight"], s["id"]))
    exact = rules.exact_duplicates(active)
    near: list[tuple[int, int, float]] = []
    checked = vectors_ok and len(active) <= NEAR_DUP_MAX_ROOM
    if checked:
        near = _near_pairs(c, active, {(min(a, b), max(a, b)) for a, b in exact})
    dups = [{"ids": [a, b], "kind": "exact", "similarity": 1.0} for a, b in exact]
    dups += [{"ids": [a, b], "kind": "near", "similarity": round(s, 4)}
             for a, b, s in sorted(near, key=lambda t: (-t[2], t[0], t[1]))]
    unconsolidated = sum(1 for d in active if d["kind"] == "drawer" and not d["consolidated"])
    hint = hint_text(r.wing, r.room, unconsolidated) if 0 < hint_at <= unconsolidated else None
    return {
        "wing": r.wing,
        "room": r.room,
        "drawers": r.drawers,
        "active": len(active),
        "unconsolidated": unconsolidated,
        "summaries": sum(1 for d in active if d["kind"] == SUMMARY_KIND),
        "stale_count": len(stale),
        "stale": stale[:limit],
        "duplicate_count": len(dups),
        "duplicates": dups[:limit],
        "near_duplicates_checked": checked,
        "hint": hint,
    }
