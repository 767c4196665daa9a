"""Drawers by their own date (``occurred_ms``): the candidates of a span a query names.

"What did we decide yesterday?" is about yesterday's drawers whatever words they hold, so
``search.rank`` takes the newest drawers dated in the span (``palaced.text.periods``) into its
candidate pool beside the keyword and vector hits. Schema (SQLite v13, PostgreSQL v3): an
index on ``occurred_ms``, so a span is a range seek at any size.
"""

from __future__ import annotations

import apsw

from palaced.store.rows.drawers import Filters


def drawers_in_period(conn: apsw.Connection, start_ms: int, end_ms: int, filters: Filters,
                      now_ms: int, limit: int) -> list[int]:
    """The ids of at most ``limit`` drawers matching ``filters`` that happened in
    ``[start_ms, end_ms)``, newest first."""
    where, params = filters.sql(now_ms)
    return [int(r[0]) for r in conn.execute(
        f"SELECT d.id FROM drawers d WHERE d.occurred_ms >= :start AND d.occurred_ms < :end "
        f"AND {where} ORDER BY d.occurred_ms DESC, d.id DESC LIMIT :limit",
        {**params, "start": start_ms, "end": end_ms, "limit": limit})]
