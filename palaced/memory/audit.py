"""The audit log of an open palace: reading it, recording a lone entry, and the retention
upkeep that bounds both the log and the trash.

Changes record their own entries in their own transactions (``store.rows.audit.append``); this
module records only what changes no memory (a refused request) and keeps the log and the trash
within the configured ``config.Retention``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw

from palaced.config.settings import Retention
from palaced.palace.handle import Palace, now_ms
from palaced.store.rows import audit as sql
from palaced.store.rows import trash as trash_sql

PURGE_BATCH = 500  # expired trash entries per transaction: the write lock is never held long
EMPTY_TRASH = sql.Actor(sql.SYSTEM_AGENT, "upkeep.empty_trash")


async def entries(palace: Palace, *, since_ms: int | None = None, agent: str | None = None,
                  op: str | None = None, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """A page of the log, newest first: ``{"entries", "total", "next_offset"}``.

    ``agent`` and ``op`` are globs (``*``, ``?``, ``[...]``).
    """
    found, total = await palace.read(lambda c: sql.entries(
        c, since_ms=since_ms, agent=agent, op=op, limit=limit, offset=offset))
    nxt = offset + len(found)
    return {"entries": found, "total": total, "next_offset": nxt if nxt < total else None}


async def record(palace: Palace, actor: sql.Actor, outcome: str, *,
                 drawer_ids: Iterable[int] = (), detail: dict[str, Any] | None = None) -> None:
    """Append one entry in a transaction of its own (for what changes nothing else)."""
    ids = list(drawer_ids)
    await palace.write(lambda: palace.store.write(lambda c: sql.append(
        c, actor, outcome, now_ms(), drawer_ids=ids, detail=detail)), wrote=False)


async def retention(palace: Palace, keep: Retention, *, now: int | None = None) -> int | None:
    """Purge the trash entries past ``keep.trash_keep_days`` (audited as the daemon's) and drop
    the audit entries past ``keep.audit_keep_days`` or ``keep.audit_max_entries``.

    Takes no write lock when nothing is due. Returns when it is next due (epoch ms), None when
    only a new write can make it due.

    Raises:
        StorageError: SQLite failed (the current batch is rolled back).
    """
    ts = now_ms() if now is None else now
    trash_before = ts - keep.trash_keep_ms
    audit_before = ts - keep.audit_keep_ms

    oldest_trash, _ = await palace.read(_oldest)
    while oldest_trash is not None and oldest_trash < trash_before:
        def purge(c: apsw.Connection) -> list[int]:
            gone = trash_sql.purge_before(c, trash_before, PURGE_BATCH)
            if gone:
                sql.append(c, EMPTY_TRASH, "purged", ts, drawer_ids=gone,
                           detail={"reason": "expired"})
            return gone

        # wrote=False: no drawer changed, so nothing cached on write_counter is stale.
        gone = await palace.write(lambda: palace.store.write(purge), wrote=False)
        if len(gone) < PURGE_BATCH:
            break
    if await palace.read(lambda c: sql.over(c, before_ms=audit_before,
                                            keep=keep.audit_max_entries)):
        await palace.write(lambda: palace.store.write(lambda c: sql.trim(
            c, before_ms=audit_before, keep=keep.audit_max_entries)), wrote=False)
    oldest_trash, oldest_audit = await palace.read(_oldest)
    deadlines = [t + keep.trash_keep_ms for t in (oldest_trash,) if t is not None]
    deadlines += [t + keep.audit_keep_ms for t in (oldest_audit,) if t is not None]
    return min(deadlines) if deadlines else None


def _oldest(c: apsw.Connection) -> tuple[int | None, int | None]:
    """When the oldest trash entry and the oldest audit entry were written."""
    return trash_sql.oldest_ms(c), sql.oldest_ms(c)
