"""Synchronous upkeep of a drawer's keyword-index context: its room neighbours and dates.

Each drawer's full-text row holds its own text, the text of its ``CONTEXT_NEIGHBOURS``
neighbours on each side (same wing and room, time order, superseded drawers skipped) as
down-weighted context, and the date it happened in words. Whenever a drawer is added,
superseded or deleted, the context of the drawers around it is recomputed here. Every
function takes an open ``apsw.Connection``; writers run inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import apsw

from palaced.store.conn.dialect import json_ids
from palaced.store.lookup import context_vectors
from palaced.store.lookup.fts_log import note_changed

# Drawers on each side (room, time order) whose text joins a drawer's FTS context column.
# LoCoMo dev turn R@5/R@10: ±1 .712/.807, ±2 .731/.825 (context weight 0.5).
CONTEXT_NEIGHBOURS = 2


def date_words(ms: int) -> str:
    """Render a timestamp the ways people write dates, so dates are searchable by keyword."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return (
        f"{dt.day} {dt:%B} {dt.year} {dt:%B} {dt.year} {dt:%Y-%m-%d} {dt:%A} "
        f"{dt:%b} {dt.day}"
    )


def _neighbour_rows(conn: apsw.Connection, drawer_id: int, n: int) -> list[tuple[int, str]]:
    """The n drawers before and after ``drawer_id`` in its room's time order."""
    rows = conn.execute(
        "SELECT wing, room, occurred_ms FROM drawers WHERE id = ?", (drawer_id,)
    ).fetchall()
    if not rows:
        return []
    wing, room, occ = rows[0]
    before = _side(conn, wing, room, occ, drawer_id, n, "<", "DESC")
    after = _side(conn, wing, room, occ, drawer_id, n, ">", "ASC")
    return [(int(r[0]), str(r[1])) for r in reversed(before)] + [
        (int(r[0]), str(r[1])) for r in after
    ]


def _side(conn: apsw.Connection, wing: str, room: str, occ: int, drawer_id: int, n: int,
          cmp: str, order: str) -> list[tuple[Any, ...]]:
    """The ``n`` drawers on one side of ``drawer_id`` (``cmp`` ``<`` and ``order`` DESC:
    before it; ``>`` and ASC: after it): those of its own time first, then the others.

    Two index seeks, not one ``(occurred_ms > ? OR (occurred_ms = ? AND id > ?))``: SQLite
    runs that as a range on ``occurred_ms`` alone and steps through every drawer of the same
    time (a ``remember_many`` batch shares one), 0.3 ms in a run of 5,000 against 0.004 ms.
    """
    rows = conn.execute(
        f"SELECT id, text FROM drawers WHERE wing = ? AND room = ? AND occurred_ms = ? AND "
        f"id {cmp} ? AND superseded_by IS NULL ORDER BY id {order} LIMIT ?",
        (wing, room, occ, drawer_id, n)).fetchall()
    if len(rows) < n:
        rows += conn.execute(
            f"SELECT id, text FROM drawers WHERE wing = ? AND room = ? AND occurred_ms {cmp} ? "
            f"AND superseded_by IS NULL ORDER BY occurred_ms {order}, id {order} LIMIT ?",
            (wing, room, occ, n - len(rows))).fetchall()
    return list(rows)


def room_neighbours(conn: apsw.Connection, drawer_id: int, n: int) -> list[int]:
    """Ids of the n drawers on each side of ``drawer_id`` in its room."""
    return [i for i, _ in _neighbour_rows(conn, drawer_id, n)]


def refresh_context(conn: apsw.Connection, drawer_id: int) -> None:
    """Recompute the FTS context column and the context vector (``context_vectors``) of one
    drawer from its current neighbours."""
    refresh_contexts(conn, [drawer_id])


def refresh_contexts(conn: apsw.Connection, ids: Iterable[int]) -> None:
    """``refresh_context`` of every drawer of ``ids``, in a fixed number of statements
    however many there are (their neighbours, the neighbours' texts and vectors, the
    updates as batches): a ``remember_many`` refreshes a hundred drawers' context in a few
    round trips to a team palace's server, not ten per drawer."""
    targets = sorted({int(i) for i in ids})
    if not targets:
        return
    near = neighbours_of(conn, targets, CONTEXT_NEIGHBOURS)
    # Time order within the room: the drawers before (farthest first), then after.
    windows = {i: [j for j, _ in sorted(near.get(i, ()), key=lambda p: p[1])]
               for i in targets}
    wanted = sorted({j for js in windows.values() for j in js} | set(targets))
    texts: dict[int, str] = {}
    live: set[int] = set()
    for did, text, current in conn.execute(
            "SELECT id, text, CASE WHEN superseded_by IS NULL THEN 1 ELSE 0 END FROM drawers "
            "WHERE id IN (SELECT value FROM json_each(?))", (json_ids(wanted),)):
        texts[int(did)] = str(text)
        if current:
            live.add(int(did))
    conn.executemany("UPDATE drawers_fts SET context = ? WHERE rowid = ?", [
        ("\n".join(texts[j] for j in windows[i] if j in texts), i) for i in targets])
    note_changed(conn, targets)
    context_vectors.refresh_many(conn, windows, live)


def fill_context_vectors(conn: apsw.Connection) -> None:
    """Schema step (SQLite v12, PostgreSQL v2), after the table's DDL: the ``context_vectors``
    of the palace's drawers, from their stored vectors."""
    context_vectors.rebuild(conn, CONTEXT_NEIGHBOURS)


def rebuild_context_vectors(conn: apsw.Connection) -> int:
    """Recompute every drawer's context vector (after a model switch); returns how many."""
    return context_vectors.rebuild(conn, CONTEXT_NEIGHBOURS)


def stale_contexts(conn: apsw.Connection) -> list[int]:
    """Live drawers whose keyword context or context vector is not what their room
    neighbours give now (the definitions ``refresh_context`` writes), for ``palace doctor
    --full``. Reads every drawer's text and vectors, a batch at a time.
    """
    stale: list[int] = []
    for window, batch in context_vectors.expected(conn, CONTEXT_NEIGHBOURS):
        texts = {int(i): str(t) for i, t in conn.execute(
            "SELECT id, text FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
            (json_ids(window),))}
        ids = [did for did, _, _ in batch]
        context = {int(i): str(t) for i, t in conn.execute(
            "SELECT rowid, context FROM drawers_fts "
            "WHERE rowid IN (SELECT value FROM json_each(?))", (json_ids(ids),))}
        rows = context_vectors.stored(conn, ids)
        for did, near, mean in batch:
            if (context.get(did) != "\n".join(texts[j] for j in near)
                    or not context_vectors.agrees(rows.get(did), mean)):
                stale.append(did)
    return stale


def vectors_changed(conn: apsw.Connection, drawer_ids: Iterable[int]) -> None:
    """Recompute the context vectors the vectors of ``drawer_ids`` are part of: their room
    neighbours', each once (a batch of one room shares most of them)."""
    near = {n for did in drawer_ids for n in room_neighbours(conn, did, CONTEXT_NEIGHBOURS)}
    for nid in sorted(near):
        context_vectors.refresh(conn, nid, room_neighbours(conn, nid, CONTEXT_NEIGHBOURS))


_SIDES = (("<", "DESC", -1), (">", "ASC", 1))  # before, after: comparison, order, sign


def neighbour_sql(alias: str, *, after: bool = False, k: int = 0) -> str:
    """The scalar subquery of the id of the drawer ``k + 1`` places before (``after``: after)
    drawer ``alias`` in its room's time order, superseded drawers skipped: a seek in
    ``drawers_room_time`` (row values, so the seek starts at the drawer; an OR would scan
    the room). The one definition of a drawer's room neighbour (``neighbours_of``,
    ``search.pool_rows``)."""
    op, order, _ = _SIDES[1 if after else 0]
    return (f"(SELECT x.id FROM drawers x WHERE x.wing = {alias}.wing AND x.room = "
            f"{alias}.room AND (x.occurred_ms, x.id) {op} ({alias}.occurred_ms, {alias}.id) "
            f"AND x.superseded_by IS NULL ORDER BY x.occurred_ms {order}, x.id {order} "
            f"LIMIT 1 OFFSET {int(k)})")


def neighbours_of(conn: apsw.Connection, ids: Sequence[int], n: int, *, after: bool = True
                  ) -> dict[int, list[tuple[int, int]]]:
    """``{id: [(neighbour_id, offset), ...]}``: the ``n`` drawers on each side of each of
    ``ids`` in its room's time order (offsets -n..-1 before, 1..n after; superseded drawers
    skipped), the drawers whose text is its keyword context; without ``after``, the drawers
    before only (half the statement's work). Drawers of ``ids`` that do not exist or have no
    neighbour are left out.

    One statement, a scalar subquery per side and distance: each is a seek in
    ``drawers_room_time`` (row values, so the seek starts at the candidate; an OR would
    scan the room), so the cost is the candidates', not the rooms' (100 candidates, ±2:
    ~0.9 ms).
    """
    out: dict[int, list[tuple[int, int]]] = {}
    if not ids or n <= 0:
        return out
    sides = _SIDES if after else _SIDES[:1]
    cols = ", ".join(neighbour_sql("c", after=sign > 0, k=k)
                     for _, _, sign in sides for k in range(n))
    offsets = [sign * (k + 1) for _, _, sign in sides for k in range(n)]
    for cid, *near in conn.execute(
            f"SELECT c.id, {cols} FROM drawers c WHERE c.id IN (SELECT value FROM json_each(?))",
            (json_ids(ids),)):
        got = [(int(j), off) for j, off in zip(near, offsets, strict=True) if j is not None]
        if got:
            out[int(cid)] = got
    return out
