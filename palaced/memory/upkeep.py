"""Upkeep of an open palace's memories: decay, prune, expiry sweep and consolidation.

Each verb is an async function taking the ``Palace`` handle. The rules live in the
synchronous ``rules`` (importance, decay, pruning, duplicates) and the queries in
``store.rows.upkeep``; each unit of work is one hop of the handle: reads in one reader snapshot,
writes under the palace's ``write_lock`` in a shielded scope (``Palace.write``), bumping
``write_counter`` so caches keyed on it are invalidated. Prune and the expiry sweep discard
drawers into the trash (``trash.discard_sync``: restorable for the keep period, audited in the
same transaction) and remove their vectors from the in-memory index in the same hop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from palaced.config.settings import Retention
from palaced.memory import trash, writes
from palaced.palace.handle import Palace
from palaced.palace.handle import now_ms as clock_ms
from palaced.store.conn.meta import meta_get, meta_set
from palaced.store.rows import audit, drawers
from palaced.store.rows import upkeep as sql
from palaced.text import rules
from palaced.text.topics import extract_topics
from palaced.wire.errors import InvalidArgs, InvalidContent, MemoryNotFound, quote
from palaced.wire.vocab import DEFAULT_PRUNE_THRESHOLD, IMPORTANCE_PRESETS

DECAY_INTERVAL_MS = rules.MS_PER_DAY
SWEEP_BATCH = 500
SUMMARY_IMPORTANCE = IMPORTANCE_PRESETS["high"]
SUMMARY_SOURCE = "consolidation"
KEEP_MS = Retention().trash_keep_ms  # the default keep period of the trash
EXPIRE = audit.Actor(audit.SYSTEM_AGENT, "upkeep.expire")


# -- plumbing ---------------------------------------------------------------------------------
def _flush_touches(palace: Palace) -> None:
    # Recall records accesses in memory until the checkpointer flushes them; decay and prune
    # must see them, or a drawer recalled a second ago could be weighed as unused and deleted.
    palace.flush_touches_sync()


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


def _weigh(conn: apsw.Connection, now: int) -> list[_Weighed]:
    """Every drawer with its weight decayed to ``now``."""
    out: list[_Weighed] = []
    # Only a preview of the text is needed: decay runs over every drawer of large palaces.
    for row in sql.weigh_rows(conn, rules.PREVIEW_CHARS * 2):
        did, wing, room, text, imp, created, accessed, count, stored, eligible = row
        last_use = None if accessed is None else int(accessed)
        drawer = {"importance": float(imp), "created_ms": int(created),
                  "accessed_ms": last_use, "access_count": int(count)}
        out.append(_Weighed(
            id=int(did), wing=str(wing), room=str(room), text=str(text),
            importance=float(imp), weight=rules.drawer_weight(drawer, now_ms=now),
            stored_weight=float(stored),
            days_unused=rules.days_since_use(created_ms=int(created), accessed_ms=last_use,
                                                 now_ms=now),
            prunable=bool(eligible)))
    return out


def _store_weights(conn: apsw.Connection, rows: Sequence[_Weighed]) -> int:
    changed = [(r.weight, r.id) for r in rows if r.weight != r.stored_weight]
    sql.store_weights(conn, changed)
    return len(changed)


def _prune_pick(rows: Sequence[_Weighed], threshold: float) -> list[_Weighed]:
    # History is never pruned: superseded drawers, consolidated sources and summaries.
    by_id = {r.id: r for r in rows if r.prunable}
    chosen = rules.prune_candidates(
        ({"id": r.id, "importance": r.importance, "weight": r.weight} for r in by_id.values()),
        threshold=threshold)
    return [by_id[int(c["id"])] for c in chosen]


async def decay(palace: Palace, *, now_ms: int | None = None,
                unless_since_ms: int | None = None) -> dict[str, Any]:
    """Recompute and store the decayed ``weight`` of every drawer; record meta ``decay_ms``.

    Accesses recorded by recent recalls are flushed first so they count. ``now_ms`` fixes
    the clock (tests, replays). With ``unless_since_ms``, nothing is done when the palace
    decayed at or after that time (checked under the write lock: a restore or another decay
    may have recorded one since the caller looked). Returns ``{"drawers", "updated",
    "decay_ms"}`` (``decay_ms``: the last decay, this one or the one that made it skip).

    Raises:
        StorageError: SQLite failed (nothing is changed).
    """
    ts = clock_ms() if now_ms is None else now_ms

    def run() -> dict[str, Any]:
        _flush_touches(palace)

        def tx(c: apsw.Connection) -> dict[str, Any]:
            last = _stored_decay_ms(c)
            if unless_since_ms is not None and last >= unless_since_ms:
                return {"drawers": 0, "updated": 0, "decay_ms": last}
            rows = _weigh(c, ts)
            updated = _store_weights(c, rows)
            meta_set(c, "decay_ms", str(ts))
            return {"drawers": len(rows), "updated": updated, "decay_ms": ts}

        # Weights follow from the clock: a decay since a backup does not make it older.
        return palace.store.write(tx, stamp=False)

    return await palace.write(run)


async def last_decay_ms(palace: Palace) -> int:
    """When the palace last decayed (its stored ``decay_ms``, set by ``decay``); 0 for never.

    Raises:
        StorageError: SQLite failed.
    """
    return await palace.read(_stored_decay_ms)


def _stored_decay_ms(c: apsw.Connection) -> int:
    stored = meta_get(c, "decay_ms")
    return int(stored) if stored is not None and stored.strip().isdigit() else 0


async def prune(palace: Palace, *, threshold: float = DEFAULT_PRUNE_THRESHOLD,
                dry_run: bool = False, now_ms: int | None = None,
                actor: audit.Actor = audit.SYSTEM, keep_ms: int = KEEP_MS) -> dict[str, Any]:
    """Move low and medium drawers whose decayed weight is below ``threshold`` to the trash
    (kept ``keep_ms``; 0: deleted at once), for ``actor``.

    Critical and high drawers are never selected, nor history (superseded drawers,
    consolidated sources, summaries). Weights are computed at call time after flushing
    recent accesses; the real run selects inside its delete transaction (and stores the
    fresh weights), so a dry run lists exactly what a real run at the same moment deletes.
    Returns ``{"threshold", "dry_run", "ids", "candidates", "pruned"}``.

    Raises:
        InvalidArgs: threshold outside 0..1.
    """
    limit = rules.check_threshold(threshold)
    ts = clock_ms() if now_ms is None else now_ms

    def describe(chosen: Sequence[_Weighed]) -> list[dict[str, Any]]:
        return [{"id": r.id, "wing": r.wing, "room": r.room, "importance": r.importance,
                 "weight": r.weight, "days_unused": round(r.days_unused, 3),
                 "preview": rules.preview(r.text)} for r in chosen]

    def run() -> tuple[list[_Weighed], list[int]]:
        _flush_touches(palace)
        if dry_run:
            return palace.store.read(lambda c: _prune_pick(_weigh(c, ts), limit)), []

        def tx(c: apsw.Connection) -> tuple[list[_Weighed], list[int]]:
            rows = _weigh(c, ts)
            _store_weights(c, rows)
            chosen = _prune_pick(rows, limit)
            _, vids = trash.discard_sync(c, [r.id for r in chosen], reason="prune",
                                         actor=actor, now=ts, keep_ms=keep_ms)
            return chosen, vids

        chosen, vids = palace.store.write(tx)
        trash.drop_vectors(palace, vids)
        return chosen, vids

    chosen, _ = await palace.write(run, wrote=not dry_run)
    return {"threshold": limit, "dry_run": dry_run, "ids": [r.id for r in chosen],
            "candidates": describe(chosen), "pruned": 0 if dry_run else len(chosen)}


# -- expiry -----------------------------------------------------------------------------------

async def sweep_expired(palace: Palace, *, now_ms: int | None = None,
                        keep_ms: int = KEEP_MS) -> dict[str, Any]:
    """Move every drawer whose ``expires_ms`` has passed to the trash (kept ``keep_ms``; 0:
    deleted at once), with its vectors; audited as the daemon's ``upkeep.expire``.

    Deletes in batches of SWEEP_BATCH, one transaction each, so a large sweep never holds the
    write lock for long. Takes no write lock when nothing has expired. Returns
    ``{"deleted": [ids]}``.

    Raises:
        StorageError: SQLite failed (the current batch is rolled back).
    """
    ts = clock_ms() if now_ms is None else now_ms
    deleted: list[int] = []
    while True:
        due = await palace.read(lambda c: sql.expired_ids(c, ts, 1))
        if not due:
            return {"deleted": deleted}

        def run() -> list[int]:
            def tx(c: apsw.Connection) -> tuple[list[int], list[int]]:
                ids = sql.expired_ids(c, ts, SWEEP_BATCH)
                return trash.discard_sync(c, ids, reason="expired", actor=EXPIRE, now=ts,
                                          keep_ms=keep_ms)

            ids, vids = palace.store.write(tx)
            trash.drop_vectors(palace, vids)
            return ids

        batch = await palace.write(run)
        deleted.extend(batch)
        if len(batch) < SWEEP_BATCH:
            return {"deleted": deleted}


async def next_expiry_ms(palace: Palace) -> int | None:
    """When the next drawer expires (epoch ms; None: none has an expiry).

    Raises:
        StorageError: SQLite failed.
    """
    return await palace.read(sql.next_expiry)


# -- consolidation ----------------------------------------------------------------------------
async def consolidate(palace: Palace, room: str, summary: str, *, wing: str | None = None,
                      ids: Sequence[int] | None = None,
                      actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
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
    """
    wanted = list(dict.fromkeys(int(i) for i in ids)) if ids else None
    ts = clock_ms()

    def pick(c: apsw.Connection) -> list[tuple[int, str]]:
        if wanted is not None:
            found = sql.drawer_wings(c, wanted)
            missing = [i for i in wanted if i not in found]
            if missing:
                raise MemoryNotFound(f"no drawer {missing[0]} in palace {palace.name!r}",
                                     details={"ids": missing, "palace": palace.name})
            return [(i, found[i]) for i in wanted]
        return sql.consolidation_sources(c, room, wing, ts)

    sources = await palace.read(pick)
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
    new = drawers.NewDrawer(text=summary, wing=target_wing, room=room,
                            importance=SUMMARY_IMPORTANCE, source=SUMMARY_SOURCE,
                            kind=drawers.SUMMARY_KIND, topics=tuple(extract_topics(summary)))
    source_ids = [i for i, _ in sources]
    existing = await palace.read(lambda c: drawers.find_by_hash(c, new.content_hash))
    if existing is not None and existing in source_ids:
        raise InvalidContent(f"the summary repeats drawer {existing} word for word",
                             details={"id": existing})
    # No near-duplicate merge: a summary of one short drawer would be folded into it.
    made = await writes.remember(palace, new, dedup=False, actor=actor)
    summary_id = int(made["id"])

    def mark(c: apsw.Connection) -> tuple[list[int], list[int]]:
        # remember() returns an existing drawer for a known text: it becomes the summary.
        marked, missing = sql.mark_consolidated(c, summary_id, source_ids,
                                                summary_importance=SUMMARY_IMPORTANCE)
        audit.append(c, actor, "consolidated", clock_ms(), drawer_ids=[summary_id, *marked],
                     detail={"sources": len(marked), "missing": len(missing)})
        return marked, missing

    marked, missing = await palace.transact(mark)
    return {"summary_id": summary_id, "created": bool(made["created"]), "wing": target_wing,
            "room": room, "source_ids": marked, "missing": missing}
