"""Synchronous queries of conflicting drawers: record, list, look up and resolve.

A conflict pairs a newer drawer with an older one it contradicts (``text.conflicts`` decides
at remember time; a single-valued fact replacing one cited from another drawer is one too).
It stays open until resolved: ``supersede`` (the older is retired: the caller supersedes
it), ``keep_both`` (both hold, e.g. two services with one owner each), ``merge`` (a merged
drawer replaces both). Recall ranks the newer of an open pair first and marks the older.
The table is ``schema.tables.CONFLICTS_DDL``; writers expect the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from palaced.wire.errors import InvalidArgs

RESOLUTIONS = ("supersede", "keep_both", "merge")
_COLS = ("id", "newer_id", "older_id", "kind", "reason", "similarity", "found_ms",
         "resolved_ms", "resolution", "resolved_by")


def record(conn: apsw.Connection, newer: int, older: int, *, kind: str, reason: str,
           similarity: float | None, ts: int) -> int | None:
    """Record that drawer ``newer`` conflicts with ``older``; its id, or None when the pair
    was already recorded (open or resolved: a resolved pair is not raised again)."""
    rows = conn.execute(
        "INSERT INTO conflicts(newer_id, older_id, kind, reason, similarity, found_ms) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (newer_id, older_id) DO NOTHING RETURNING id",
        (newer, older, kind, reason, similarity, ts)).fetchall()
    return int(rows[0][0]) if rows else None


def _dict(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_COLS, row, strict=True))


def get(conn: apsw.Connection, conflict_id: int) -> dict[str, Any] | None:
    """The conflict with that id, or None."""
    rows = conn.execute(f"SELECT {', '.join(_COLS)} FROM conflicts WHERE id = ?",
                        (conflict_id,)).fetchall()
    return _dict(rows[0]) if rows else None


def listing(conn: apsw.Connection, *, include_resolved: bool, limit: int
            ) -> tuple[list[dict[str, Any]], int]:
    """Conflicts newest first (open ones only unless ``include_resolved``) with the two
    drawers' texts, wings and rooms, and how many match."""
    where = "TRUE" if include_resolved else "c.resolved_ms IS NULL"
    total = int(conn.execute(f"SELECT count(*) FROM conflicts c WHERE {where}")
                .fetchall()[0][0])
    rows = conn.execute(
        f"SELECT {', '.join('c.' + c for c in _COLS)}, n.text, o.text, n.wing, n.room, "
        "o.superseded_by FROM conflicts c JOIN drawers n ON n.id = c.newer_id "
        f"JOIN drawers o ON o.id = c.older_id WHERE {where} ORDER BY c.id DESC LIMIT ?",
        (limit,)).fetchall()
    out = []
    for row in rows:
        item = _dict(row[:len(_COLS)])
        newer_text, older_text, wing, room, superseded_by = row[len(_COLS):]
        item.update(newer_text=newer_text, older_text=older_text, wing=wing, room=room,
                    older_superseded_by=superseded_by)
        out.append(item)
    return out, total


def any_open(conn: apsw.Connection) -> bool:
    """Whether the palace has an open conflict (one index seek)."""
    return bool(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM conflicts WHERE resolved_ms IS NULL)").fetchall()[0][0])


MAX_HOPS = 4  # conflicts followed from a drawer to the newest that replaced it


def _newer_step(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, int]:
    if not ids:
        return {}
    marks = ",".join(str(int(i)) for i in ids)
    return {int(older): int(newer) for older, newer in conn.execute(
        f"SELECT older_id, max(newer_id) FROM conflicts WHERE older_id IN ({marks}) "
        "AND resolved_ms IS NULL GROUP BY older_id")}


def newer_of(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, int]:
    """``{older id: newest newer id}`` for the drawers among ``ids`` that an open conflict
    names as the older side, following the newer side's own conflicts (A replaced by B,
    B by C: A's newest is C) up to ``MAX_HOPS``."""
    out = _newer_step(conn, ids)
    for _ in range(MAX_HOPS - 1):
        further = _newer_step(conn, sorted(set(out.values())))
        moved = {o: further[n] for o, n in out.items()
                 if n in further and further[n] != o}
        if not moved:
            break
        out.update(moved)
    return out


def resolve(conn: apsw.Connection, conflict_id: int, resolution: str, ts: int,
            agent: str | None) -> None:
    """Close conflict ``conflict_id`` with ``resolution`` (one of ``RESOLUTIONS``).

    Raises:
        InvalidArgs: an unknown resolution.
    """
    if resolution not in RESOLUTIONS:
        raise InvalidArgs(f"resolution must be one of {', '.join(RESOLUTIONS)}",
                          details={"resolution": resolution})
    conn.execute("UPDATE conflicts SET resolved_ms = ?, resolution = ?, resolved_by = ? "
                 "WHERE id = ?", (ts, resolution, agent, conflict_id))


def resolve_between(conn: apsw.Connection, ids: Sequence[int], resolution: str, ts: int,
                    agent: str | None) -> None:
    """Close every open conflict whose both drawers are among ``ids`` (a supersede or merge
    settled them)."""
    if not ids:
        return
    marks = ",".join(str(int(i)) for i in ids)
    conn.execute(
        "UPDATE conflicts SET resolved_ms = ?, resolution = ?, resolved_by = ? "
        f"WHERE resolved_ms IS NULL AND newer_id IN ({marks}) AND older_id IN ({marks})",
        (ts, resolution, agent))


def _flipped(reason: str | None) -> str | None:
    """``reason`` read from the other side ("bob vs alice" -> "alice vs bob")."""
    if reason is None:
        return None
    if reason in ("negated", "no longer negated"):
        return "no longer negated" if reason == "negated" else "negated"
    new, sep, old = reason.partition(" vs ")
    return f"{old} vs {new}" if sep else reason


def move(conn: apsw.Connection, old: int, new: int, ts: int, agent: str | None) -> list[int]:
    """Drawer ``old`` was just superseded by ``new`` (which restates it with more detail, or
    replaces it): its open conflicts name ``new`` instead, each pair ordered by id (write
    order: the later-written drawer is the newer), the reason read from the new order. A
    conflict that would pair ``new`` with itself, or a pair already recorded, is closed as
    ``supersede`` instead. Returns the ids of the conflicts moved."""
    moved = []
    for cid, newer, older, reason in conn.execute(
            "SELECT id, newer_id, older_id, reason FROM conflicts WHERE resolved_ms IS NULL "
            "AND (newer_id = ? OR older_id = ?)", (old, old)).fetchall():
        other = int(older) if int(newer) == old else int(newer)
        pair = (max(new, other), min(new, other))
        taken = other == new or conn.execute(
            "SELECT 1 FROM conflicts WHERE newer_id = ? AND older_id = ?", pair).fetchall()
        if taken:
            resolve(conn, int(cid), "supersede", ts, agent)
            continue
        # The other side was the newer and is now the older, or the other way round.
        flip = (int(newer) == other) != (pair[0] == other)
        conn.execute("UPDATE conflicts SET newer_id = ?, older_id = ?, reason = ? WHERE id = ?",
                     (*pair, _flipped(reason) if flip else reason, cid))
        moved.append(int(cid))
    return moved


def fact_replaced(conn: apsw.Connection, fact: dict[str, Any], ts: int) -> list[int]:
    """Record a conflict between the source drawer of ``fact`` (just asserted, single-valued)
    and the source drawer of each fact of the same subject and predicate it closed: the
    knowledge graph says the older drawer's value no longer holds. The conflict ids."""
    src = (fact.get("source") or {}).get("drawer")
    if src is None or fact.get("created_ms") != ts:
        return []
    found = []
    for old_src, old_obj in conn.execute(
            "SELECT f.source_drawer, coalesce(o.name, f.object_value) FROM facts f "
            "LEFT JOIN entities o ON o.id = f.object_id "
            "WHERE f.subject_id = (SELECT subject_id FROM facts WHERE id = ?) "
            "AND f.predicate = ? AND f.id != ? AND f.valid_to_ms = ? "
            "AND f.source_drawer IS NOT NULL AND f.source_drawer != ?",
            (fact["id"], fact["predicate"], fact["id"], fact["valid_from_ms"], src)).fetchall():
        cid = record(conn, int(src), int(old_src), kind="fact",
                     reason=f"{fact['predicate']}: {fact['object']} vs {old_obj}",
                     similarity=None, ts=ts)
        if cid is not None:
            found.append(cid)
    return found
