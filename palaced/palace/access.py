"""What a recall does to the drawers it returns: access counts, promotion, TTL renewal.

Recall never writes: it queues the ids of its top results on the palace handle
(``Palace.note_touched``), and the checkpointer (or a decay or prune, which must see them)
writes the queue in one transaction with ``apply_touches``. Per drawer that is:

* ``access_count`` grows by the number of recalls that returned it, ``accessed_ms`` is the
  flush time (decay counts unused days from it; ranking's access boost reads the count);
* promotion: every ``promote_after`` recalls raise its importance one preset step (low 0.2
  -> medium 0.5 -> high 0.8), never beyond ``promote_max`` and never down (``promoted``);
  its stored decay weight is recomputed for the new importance;
* TTL renewal: a drawer with a lifetime (``ttl_ms``) that has not expired gets its expiry
  pushed to flush time + that lifetime (``renewed_expiry``), with ``recall_extends_ttl``.

``promoted`` and ``renewed_expiry`` are pure; ``apply_touches`` takes an open connection in
the caller's write transaction (the queries are ``store.rows.drawers.touch_rows`` and
``store_touches``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import apsw

from palaced.config.settings import Upkeep
from palaced.store.rows.drawers import store_touches, touch_rows
from palaced.text import rules
from palaced.wire.export_format import MAX_COUNT
from palaced.wire.vocab import IMPORTANCE_PRESETS

# Touched per recall: the first results at most (what an agent reads), not a deep top_k.
TOUCH_TOP = 10
_STEPS = sorted(IMPORTANCE_PRESETS.values())  # 0.2, 0.5, 0.8, 1.0


def read_ids(results: Sequence[Mapping[str, Any]]) -> list[int]:
    """The ids of the recall results an agent reads: the first TOUCH_TOP not under the
    relevance floor (``below_floor``)."""
    return [int(r["id"]) for r in results[:TOUCH_TOP] if not r.get("below_floor")]


def promoted(importance: float, before: int, after: int, policy: Upkeep) -> float:
    """The importance of a drawer whose access count went from ``before`` to ``after``.

    One preset step up for each multiple of ``promote_after`` crossed, capped at
    ``promote_max``; an importance at or above the cap, or ``promote_after`` 0, is kept.
    """
    every = policy.promote_after
    if every <= 0 or importance >= policy.promote_max:
        return importance
    steps = after // every - before // every
    for _ in range(max(steps, 0)):
        above = [s for s in _STEPS if s > importance + 1e-9]
        if not above:
            break
        importance = min(above[0], policy.promote_max)
    return max(importance, 0.0)


def renewed_expiry(expires_ms: int | None, ttl_ms: int | None, now_ms: int,
                   policy: Upkeep) -> int | None:
    """The expiry of a drawer recalled at ``now_ms``: at least ``now_ms + ttl_ms`` while it
    is alive and has a lifetime (and ``recall_extends_ttl``); else unchanged."""
    if (not policy.recall_extends_ttl or expires_ms is None or ttl_ms is None
            or ttl_ms <= 0 or expires_ms <= now_ms):
        return expires_ms
    return max(expires_ms, now_ms + ttl_ms)


def apply_touches(conn: apsw.Connection, counts: Mapping[int, int], now_ms: int,
                  policy: Upkeep) -> bool:
    """Record that each drawer of ``counts`` was returned by that many recalls.

    Runs in the caller's write transaction. Drawers deleted meanwhile are skipped. Returns
    whether an importance changed (recall caches that order by importance are then stale).
    """
    changed = False
    updates: list[tuple[int, float, float, int | None, int]] = []
    for did, imp, weight, count, expires, ttl, created in touch_rows(conn, list(counts)):
        # Saturated: an imported count at the edge must not overflow SQLite's int64 and fail
        # every checkpoint (the write of the touches) from then on.
        after = min(count + counts[did], MAX_COUNT)
        new_imp = promoted(imp, count, after, policy)
        if new_imp != imp:
            changed = True
            weight = rules.drawer_weight({"importance": new_imp, "created_ms": created,
                                          "accessed_ms": now_ms, "access_count": after},
                                         now_ms=now_ms)
        updates.append((after, new_imp, weight,
                        renewed_expiry(expires, ttl, now_ms, policy), did))
    store_touches(conn, updates, now_ms)
    return changed
