"""Synchronous queries of the import ledger: which file or conversation filed which drawers.

A source is one imported unit (a markdown file, a ChatGPT conversation) named by its importer
and a key (an absolute path, a conversation id), with the content hash it had when it was
imported. ``source_drawers`` lists the drawers it filed; a drawer may be claimed by several
sources, and is deleted only when none claims it any more. The drawers themselves are
deleted by the caller through ``drawers.delete_drawers`` (the one deletion path).

Every function takes an open ``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw


def list_sources(conn: apsw.Connection, importer: str, prefix: str, after: str | None,
                 limit: int) -> list[dict[str, Any]]:
    """Sources of ``importer`` whose key starts with ``prefix``, after key ``after``, by key:
    ``{key, hash, imported_ms, drawers}`` (``drawers``: how many it claims)."""
    rows = conn.execute(
        "SELECT s.key, s.hash, s.imported_ms, "
        "(SELECT count(*) FROM source_drawers sd WHERE sd.source_id = s.id) FROM sources s "
        "WHERE s.importer = :imp AND s.key > :after AND substr(s.key, 1, :n) = :prefix "
        "ORDER BY s.key LIMIT :limit",
        {"imp": importer, "after": after or "", "n": len(prefix), "prefix": prefix,
         "limit": limit}).fetchall()
    return [{"key": r[0], "hash": r[1], "imported_ms": int(r[2]), "drawers": int(r[3])}
            for r in rows]


def source_state(conn: apsw.Connection, importer: str, key: str) -> tuple[str, int] | None:
    """``(hash, drawers claimed)`` of a recorded source, or None."""
    rows = conn.execute(
        "SELECT s.hash, (SELECT count(*) FROM source_drawers sd WHERE sd.source_id = s.id) "
        "FROM sources s WHERE s.importer = ? AND s.key = ?", (importer, key)).fetchall()
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


def _claimed(conn: apsw.Connection, source_id: int) -> set[int]:
    return {int(r[0]) for r in conn.execute(
        "SELECT drawer_id FROM source_drawers WHERE source_id = ?", (source_id,))}


def _orphans(conn: apsw.Connection, ids: set[int]) -> list[int]:
    """Those of ``ids`` that no source claims."""
    claimed = {int(r[0]) for r in conn.execute(
        "SELECT DISTINCT drawer_id FROM source_drawers WHERE drawer_id IN "
        "(SELECT value FROM json_each(?))", (json.dumps(sorted(ids)),))}
    return sorted(ids - claimed)


def claim(conn: apsw.Connection, importer: str, key: str, digest: str,
          drawer_ids: Sequence[int], now_ms: int) -> list[int]:
    """Record that source ``key`` (content ``digest``) filed exactly ``drawer_ids``.

    Returns the drawers it filed before and no longer does, which no other source claims:
    the caller deletes them.
    """
    rows = conn.execute(
        "INSERT INTO sources(importer, key, hash, imported_ms) VALUES(?,?,?,?) "
        "ON CONFLICT(importer, key) DO UPDATE SET hash = excluded.hash, "
        "imported_ms = excluded.imported_ms RETURNING id",
        (importer, key, digest, now_ms)).fetchall()
    sid = int(rows[0][0])
    before = _claimed(conn, sid)
    wanted = set(drawer_ids)
    conn.execute("DELETE FROM source_drawers WHERE source_id = ?", (sid,))
    # Drawers forgotten meanwhile are simply not claimed.
    conn.execute("INSERT INTO source_drawers(source_id, drawer_id) SELECT ?, d.id FROM drawers d "
                 "WHERE d.id IN (SELECT value FROM json_each(?))",
                 (sid, json.dumps(sorted(wanted))))
    return _orphans(conn, before - wanted)


def drop(conn: apsw.Connection, importer: str, key: str) -> list[int] | None:
    """Forget source ``key``; returns its drawers that no other source claims (the caller
    deletes them), or None when no such source is recorded."""
    rows = conn.execute("SELECT id FROM sources WHERE importer = ? AND key = ?",
                        (importer, key)).fetchall()
    if not rows:
        return None
    sid = int(rows[0][0])
    before = _claimed(conn, sid)
    conn.execute("DELETE FROM sources WHERE id = ?", (sid,))  # claims cascade
    return _orphans(conn, before)
