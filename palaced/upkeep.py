"""Memory lifecycle over an open Palace: the async decay, prune, expiry, consolidation, health.

The rules live in the synchronous ``lifecycle`` (importance, decay, pruning, near-duplicates)
and ``store.memories``; this module runs them with one worker-thread hop per unit of work
(``hops``). Reads run in one reader snapshot. Writes run under the palace's ``write_lock`` in a
shielded scope, so a disconnecting client never leaves a half-applied write, and bump
``write_counter`` so caches keyed on it are invalidated. Writes that delete drawers remove
their vectors from the in-memory index in the same hop.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from palaced import hops, lifecycle
from palaced.errors import InvalidArgs, InvalidContent, MemoryNotFound, quote
from palaced.index import from_blob
from palaced.palace import Palace
from palaced.palace import now_ms as clock_ms
from palaced.store import memories as m
from palaced.vocab import (
    DEFAULT_PRUNE_THRESHOLD,
    HEALTH_LIST_LIMIT,
    IMPORTANCE_PRESETS,
    STALE_DAYS,
)

DECAY_INTERVAL_MS = lifecycle.MS_PER_DAY
CONSOLIDATE_OVER = 50  # a room with more unconsolidated active drawers gets a hint
# Near-duplicate detection compares every pair of a room's vectors: quadratic, so bounded.
NEAR_DUP_MAX_ROOM = 2_000
SWEEP_BATCH = 500
SUMMARY_IMPORTANCE = IMPORTANCE_PRESETS["high"]
SUMMARY_SOURCE = "consolidation"
SUMMARY_KIND = "summary"
PREVIEW_CHARS = 120

# When each open palace last decayed, so maybe_decay costs no thread hop between runs.
_last_decay: weakref.WeakKeyDictionary[Palace, int] = weakref.WeakKeyDictionary()


# -- plumbing ---------------------------------------------------------------------------------
def _flush_touches(palace: Palace) -> None:
    # Recall records accesses in memory until the checkpointer flushes them; decay and prune
    # must see them, or a drawer recalled a second ago could be weighed as unused and deleted.
    palace._flush_touch_sync()


def _drop_vectors(palace: Palace, vector_ids: Sequence[int]) -> None:
    if vector_ids and palace.index is not None:
        palace.index.remove(vector_ids)


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


# -- decay and prune --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Weighed:
    id: int
    wing: str
    room: str
    text: str
    importance: float
    weight: float
    stored_weight: float
    days_unused: float
    prunable: bool  # eligible for prune by status (not history); importance is checked later


# Only a preview of the text is needed: decay runs over every drawer of large palaces.
_WEIGH_SQL = (
    f"SELECT id, wing, room, substr(text, 1, {PREVIEW_CHARS * 2}), importance, created_ms, "
    "accessed_ms, access_count, weight, "
    "kind = 'drawer' AND consolidated_into IS NULL AND superseded_by IS NULL FROM drawers"
)


def _weigh(conn: apsw.Connection, now: int) -> list[_Weighed]:
    """Every drawer with its weight decayed to ``now``."""
    out: list[_Weighed] = []
    for row in conn.execute(_WEIGH_SQL):
        did, wing, room, text, imp, created, accessed, count, stored, eligible = row
        last_use = None if accessed is None else int(accessed)
        drawer = {"importance": float(imp), "created_ms": int(created),
                  "accessed_ms": last_use, "access_count": int(count)}
        out.append(_Weighed(
            id=int(did), wing=str(wing), room=str(room), text=str(text),
            importance=float(imp), weight=lifecycle.drawer_weight(drawer, now_ms=now),
            stored_weight=float(stored),
            days_unused=lifecycle.days_since_use(created_ms=int(created), accessed_ms=last_use,
                                                 now_ms=now),
            prunable=bool(eligible)))
    return out


def _store_weights(conn: apsw.Connection, rows: Sequence[_Weighed]) -> int:
    changed = [(r.weight, r.id) for r in rows if r.weight != r.stored_weight]
    conn.executemany("UPDATE drawers SET weight = ? WHERE id = ?", changed)
    return len(changed)


def _prune_pick(rows: Sequence[_Weighed], threshold: float) -> list[_Weighed]:
    # History is never pruned: superseded drawers, consolidated sources and summaries.
    by_id = {r.id: r for r in rows if r.prunable}
    chosen = lifecycle.prune_candidates(
        ({"id": r.id, "importance": r.importance, "weight": r.weight} for r in by_id.values()),
        threshold=threshold)
    return [by_id[int(c["id"])] for c in chosen]


async def decay(palace: Palace, *, now_ms: int | None = None) -> dict[str, Any]:
    """Recompute and store the decayed ``weight`` of every drawer; record meta ``decay_ms``.

    Accesses recorded by recent recalls are flushed first so they count. ``now_ms`` fixes
    the clock (tests, replays). Returns ``{"drawers", "updated", "decay_ms"}``.

    Raises:
        StorageError: SQLite failed (nothing is changed).
    """
    ts = clock_ms() if now_ms is None else now_ms

    def run() -> dict[str, Any]:
        _flush_touches(palace)

        def tx(c: apsw.Connection) -> dict[str, Any]:
            rows = _weigh(c, ts)
            updated = _store_weights(c, rows)
            m.meta_set(c, "decay_ms", str(ts))
            return {"drawers": len(rows), "updated": updated, "decay_ms": ts}

        return palace.store.write(tx)

    out = await hops.exclusive(palace, run)
    _last_decay[palace] = ts
    return out


async def maybe_decay(palace: Palace, *, now_ms: int | None = None,
                      interval_ms: int = DECAY_INTERVAL_MS) -> dict[str, Any] | None:
    """Run ``decay`` when the palace last decayed ``interval_ms`` ago or never; else None.

    Meant for the checkpointer: after the first call per open palace it costs no I/O until a
    decay is due.

    Raises:
        StorageError: SQLite failed.
    """
    if palace.closed:
        return None
    ts = clock_ms() if now_ms is None else now_ms
    last = _last_decay.get(palace)
    if last is None:
        stored = await hops.read(palace, lambda c: m.meta_get(c, "decay_ms"))
        last = int(stored) if stored is not None and stored.strip().isdigit() else 0
        _last_decay[palace] = last
    if ts - last < interval_ms:
        return None
    return await decay(palace, now_ms=ts)


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not (
        0.0 <= threshold <= 1.0
    ):
        raise InvalidArgs("threshold must be a number in 0..1", details={"threshold": threshold})
    return float(threshold)


async def prune(palace: Palace, *, threshold: float = DEFAULT_PRUNE_THRESHOLD,
                dry_run: bool = False, now_ms: int | None = None) -> dict[str, Any]:
    """Delete low and medium drawers whose decayed weight is below ``threshold``.

    Critical and high drawers are never selected, nor history (superseded drawers,
    consolidated sources, summaries). Weights are computed at call time after flushing
    recent accesses; the real run selects inside its delete transaction (and stores the
    fresh weights), so a dry run lists exactly what a real run at the same moment deletes.
    Returns ``{"threshold", "dry_run", "ids", "candidates", "pruned"}``.

    Raises:
        InvalidArgs: threshold outside 0..1.
    """
    limit = _check_threshold(threshold)
    ts = clock_ms() if now_ms is None else now_ms

    def describe(chosen: Sequence[_Weighed]) -> list[dict[str, Any]]:
        return [{"id": r.id, "wing": r.wing, "room": r.room, "importance": r.importance,
                 "weight": r.weight, "days_unused": round(r.days_unused, 3),
                 "preview": _preview(r.text)} for r in chosen]

    def run() -> tuple[list[_Weighed], list[int]]:
        _flush_touches(palace)
        if dry_run:
            return palace.store.read(lambda c: _prune_pick(_weigh(c, ts), limit)), []

        def tx(c: apsw.Connection) -> tuple[list[_Weighed], list[int]]:
            rows = _weigh(c, ts)
            _store_weights(c, rows)
            chosen = _prune_pick(rows, limit)
            return chosen, m.delete_drawers(c, [r.id for r in chosen]) or []

        chosen, vids = palace.store.write(tx)
        _drop_vectors(palace, vids)
        return chosen, vids

    chosen, _ = await hops.exclusive(palace, run, wrote=not dry_run)
    return {"threshold": limit, "dry_run": dry_run, "ids": [r.id for r in chosen],
            "candidates": describe(chosen), "pruned": 0 if dry_run else len(chosen)}


# -- expiry -----------------------------------------------------------------------------------
_EXPIRED_SQL = (
    "SELECT id FROM drawers WHERE expires_ms IS NOT NULL AND expires_ms <= ? ORDER BY id LIMIT ?"
)


async def sweep_expired(palace: Palace, *, now_ms: int | None = None) -> dict[str, Any]:
    """Delete every drawer whose ``expires_ms`` has passed, with its vectors.

    Deletes in batches of SWEEP_BATCH, one transaction each, so a large sweep never holds the
    write lock for long. Takes no write lock when nothing has expired. Returns
    ``{"deleted": [ids]}``.

    Raises:
        StorageError: SQLite failed (the current batch is rolled back).
    """
    ts = clock_ms() if now_ms is None else now_ms
    deleted: list[int] = []
    while True:
        due = await hops.read(palace, lambda c: [int(r[0]) for r in c.execute(
            _EXPIRED_SQL, (ts, 1))])
        if not due:
            return {"deleted": deleted}

        def run() -> list[int]:
            def tx(c: apsw.Connection) -> tuple[list[int], list[int]]:
                ids = [int(r[0]) for r in c.execute(_EXPIRED_SQL, (ts, SWEEP_BATCH))]
                return ids, m.delete_drawers(c, ids) or []

            ids, vids = palace.store.write(tx)
            _drop_vectors(palace, vids)
            return ids

        batch = await hops.exclusive(palace, run)
        deleted.extend(batch)
        if len(batch) < SWEEP_BATCH:
            return {"deleted": deleted}


# -- consolidation ----------------------------------------------------------------------------
async def consolidate(palace: Palace, room: str, summary: str, *, wing: str | None = None,
                      ids: Sequence[int] | None = None) -> dict[str, Any]:
    """Write one summary drawer for many and mark them ``consolidated_into`` it.

    ``summary`` and ``room``/``wing`` are already validated (``api.check_text`` /
    ``check_label``). Sources are ``ids`` when given (any drawers, any room), else every
    active, not yet consolidated, non-summary drawer of ``room`` (in ``wing`` when given).
    The summary lands in ``room`` (of ``wing``, else of the sources' single wing) with kind
    ``summary`` and high importance, and is embedded like any drawer. Sources are kept whole
    and stay retrievable by id. Returns ``{"summary_id", "created", "wing", "room",
    "source_ids", "missing"}`` (``missing``: sources deleted meanwhile).

    Raises:
        MemoryNotFound: an explicit id names no drawer.
        InvalidArgs: no sources, or the sources span several wings and no wing was given.
        InvalidContent: the summary is word for word one of its sources.
        EmbedderMismatch: the palace needs a reembed first.
    """
    wanted = list(dict.fromkeys(int(i) for i in ids)) if ids else None
    ts = clock_ms()

    def pick(c: apsw.Connection) -> list[tuple[int, str]]:
        if wanted is not None:
            found = {int(r[0]): str(r[1]) for r in c.execute(
                "SELECT id, wing FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
                (_json_ids(wanted),))}
            missing = [i for i in wanted if i not in found]
            if missing:
                raise MemoryNotFound(f"no drawer {missing[0]} in palace {palace.name!r}",
                                     details={"ids": missing, "palace": palace.name})
            return [(i, found[i]) for i in wanted]
        where = (f"{m.ACTIVE_SQL} AND d.consolidated_into IS NULL AND d.kind != :summary "
                 "AND d.room = :room" + (" AND d.wing = :wing" if wing is not None else ""))
        return [(int(r[0]), str(r[1])) for r in c.execute(
            f"SELECT d.id, d.wing FROM drawers d WHERE {where} ORDER BY d.occurred_ms, d.id",
            {"now": ts, "summary": SUMMARY_KIND, "room": room, "wing": wing})]

    sources = await hops.read(palace, pick)
    if not sources:
        where = f"room {quote(room)}" + (f" of wing {quote(wing)}" if wing is not None else "")
        raise InvalidArgs(f"nothing to consolidate: {where} has no active, unconsolidated "
                          "drawers", details={"room": room, "wing": wing})
    target_wing = wing
    if target_wing is None:
        wings = sorted({w for _, w in sources})
        if len(wings) > 1:
            shown = ", ".join(quote(w, 60) for w in wings[:10]) + (
                f" and {len(wings) - 10} more" if len(wings) > 10 else "")
            raise InvalidArgs(f"the drawers to consolidate span several wings ({shown})"
                              "; pass wing", details={"wings": wings[:10]})
        target_wing = wings[0]
    from palaced.closets import extract_topics

    new = m.NewDrawer(text=summary, wing=target_wing, room=room, importance=SUMMARY_IMPORTANCE,
                      source=SUMMARY_SOURCE, kind=SUMMARY_KIND,
                      topics=tuple(extract_topics(summary)))
    source_ids = [i for i, _ in sources]
    existing = await hops.read(palace, lambda c: m.find_by_hash(c, new.content_hash))
    if existing is not None and existing in source_ids:
        raise InvalidContent(f"the summary repeats drawer {existing} word for word",
                             details={"id": existing})
    # No near-duplicate merge: a summary of one short drawer would be folded into it.
    made = await palace.remember(new, dedup=False)
    summary_id = int(made["id"])

    def mark(c: apsw.Connection) -> tuple[list[int], list[int]]:
        # remember() returns an existing drawer for a known text: make it the summary.
        c.execute("UPDATE drawers SET kind = ?, importance = max(importance, ?) WHERE id = ?",
                  (SUMMARY_KIND, SUMMARY_IMPORTANCE, summary_id))
        present = {int(r[0]) for r in c.execute(
            "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
            (_json_ids(source_ids),))}
        marked = [i for i in source_ids if i in present and i != summary_id]
        c.executemany("UPDATE drawers SET consolidated_into = ? WHERE id = ?",
                      [(summary_id, i) for i in marked])
        return marked, [i for i in source_ids if i not in present]

    marked, missing = await hops.write(palace, mark)
    return {"summary_id": summary_id, "created": bool(made["created"]), "wing": target_wing,
            "room": room, "source_ids": marked, "missing": missing}


# -- health -----------------------------------------------------------------------------------
_PUNCT = re.compile(r"[^\w]+", re.UNICODE)


def duplicate_key(text: str) -> str:
    """Text reduced to its words: NFKC, case-folded, punctuation and spacing ignored."""
    return " ".join(_PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


@dataclass
class _RoomRows:
    wing: str
    room: str
    drawers: int = 0
    active: list[dict[str, Any]] = field(default_factory=list)


_HEALTH_SQL = (
    "SELECT d.id, d.wing, d.room, d.text, d.importance, d.created_ms, d.accessed_ms, "
    "d.access_count, d.kind, d.consolidated_into, "
    f"({m.ACTIVE_SQL}) FROM drawers d ORDER BY d.wing, d.room, d.id"
)


def _exact_pairs(rows: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        key = duplicate_key(r["text"])
        if key:
            groups[key].append(r["id"])
    # A group of k copies is reported as k - 1 pairs against its oldest drawer.
    return [(ids[0], other) for ids in groups.values() for other in ids[1:]]


def _near_pairs(conn: apsw.Connection, rows: Sequence[dict[str, Any]],
                skip: set[tuple[int, int]]) -> list[tuple[int, int, float]]:
    by_id = {r["id"]: r for r in rows}
    chunks: dict[int, list[np.ndarray]] = defaultdict(list)
    for did, blob in conn.execute(
        "SELECT drawer_id, vec FROM vectors WHERE drawer_id IN "
        "(SELECT value FROM json_each(?)) ORDER BY drawer_id, chunk",
        (_json_ids(list(by_id)),),
    ):
        chunks[int(did)].append(from_blob(bytes(blob)))
    ids = sorted(chunks)
    if len(ids) < 2:
        return []
    matrix = np.stack([np.mean(chunks[i], axis=0) for i in ids]).astype(np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix /= np.where(norms == 0, 1.0, norms)
    sims = np.triu(matrix @ matrix.T, k=1)
    out: list[tuple[int, int, float]] = []
    for i, j in np.argwhere(sims >= lifecycle.DEDUP_THRESHOLD).tolist():
        a, b = ids[i], ids[j]
        sim = float(sims[i, j])
        if (a, b) in skip:
            continue
        older, newer = (by_id[a], by_id[b]) if a < b else (by_id[b], by_id[a])
        if lifecycle.is_near_duplicate(sim, newer["text"], older["text"]):
            out.append((min(a, b), max(a, b), sim))
    return out


async def health(palace: Palace, *, threshold: float = DEFAULT_PRUNE_THRESHOLD,
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
    ``hint`` when more than CONSOLIDATE_OVER drawers are unconsolidated. Lists hold at most
    ``limit`` entries; the ``*_count`` fields give the full numbers.

    Raises:
        InvalidArgs: threshold outside 0..1, negative stale_days or limit below 1.
    """
    limit_threshold = _check_threshold(threshold)
    if stale_days < 0:
        raise InvalidArgs("stale_days must be >= 0", details={"stale_days": stale_days})
    if limit < 1:
        raise InvalidArgs("limit must be >= 1", details={"limit": limit})
    ts = clock_ms() if now_ms is None else now_ms

    def run(c: apsw.Connection) -> dict[str, Any]:
        rooms: dict[tuple[str, str], _RoomRows] = {}
        for row in c.execute(_HEALTH_SQL, {"now": ts}):
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
        out_rooms = [_room_report(c, r, ts, limit_threshold, stale_days, limit, vectors_ok)
                     for r in rooms.values()]
        decayed = m.meta_get(c, "decay_ms")
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

    return await hops.read(palace, run)


def _room_report(c: apsw.Connection, r: _RoomRows, ts: int, threshold: float,
                 stale_days: float, limit: int, vectors_ok: bool) -> dict[str, Any]:
    active = r.active
    stale: list[dict[str, Any]] = []
    for d in active:
        w = lifecycle.drawer_weight(d, now_ms=ts)
        unused = lifecycle.days_since_use(created_ms=d["created_ms"],
                                          accessed_ms=d["accessed_ms"], now_ms=ts)
        if w < threshold and unused >= stale_days:
            eligible = d["kind"] == "drawer" and not d["consolidated"]
            stale.append({
                "id": d["id"], "importance": d["importance"], "weight": w,
                "days_unused": round(unused, 3),
                "prunable": eligible and lifecycle.importance_class(d["importance"])
                in lifecycle.PRUNABLE_CLASSES,
                "preview": _preview(d["text"])})
    stale.sort(key=lambda s: (s["weight"], s["id"]))
    exact = _exact_pairs(active)
    near: list[tuple[int, int, float]] = []
    checked = vectors_ok and len(active) <= NEAR_DUP_MAX_ROOM
    if checked:
        near = _near_pairs(c, active, {(min(a, b), max(a, b)) for a, b in exact})
    dups = [{"ids": [a, b], "kind": "exact", "similarity": 1.0} for a, b in exact]
    dups += [{"ids": [a, b], "kind": "near", "similarity": round(s, 4)}
             for a, b, s in sorted(near, key=lambda t: (-t[2], t[0], t[1]))]
    unconsolidated = sum(1 for d in active if d["kind"] == "drawer" and not d["consolidated"])
    hint = None
    if unconsolidated > CONSOLIDATE_OVER:
        hint = (f"{r.wing}/{r.room} holds {unconsolidated} active drawers: consider "
                f"consolidating them (palace consolidate --room {shlex.quote(r.room)} "
                f"--wing {shlex.quote(r.wing)} --summary TEXT)")
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
