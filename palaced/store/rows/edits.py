"""Synchronous queries of editing a drawer in place and of its earlier versions.

``edit_drawer`` changes a drawer's text, wing, room, tags or importance under the same id:
the version it replaces is copied into ``drawer_history`` first, the full-text row, closets
and the context of its old and new room neighbours follow the new text and room, and a new
text loses its vectors (the caller stores the new ones in the same transaction, or leaves it
to the background embedding). The trigram index follows the text through its triggers
(``schema``). Every function takes an open ``apsw.Connection``; writers run inside the
caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from palaced.store.lookup.context import CONTEXT_NEIGHBOURS, refresh_context, room_neighbours
from palaced.store.lookup.fts_log import note_changed
from palaced.store.lookup.vectors import vector_ids
from palaced.store.rows.drawers import content_hash, find_by_hash, get_drawer, refresh_around
from palaced.wire.errors import InvalidContent


@dataclass(frozen=True)
class Edit:
    """The new values of a drawer's fields; None keeps a field as it is."""

    text: str | None = None
    wing: str | None = None
    room: str | None = None
    tags: tuple[str, ...] | None = None
    importance: float | None = None
    topics: tuple[str, ...] = ()  # the closets of a new text
    chunks: int | None = None  # how many pieces a new text is embedded as

    def applied(self, old: dict[str, Any]) -> dict[str, Any]:
        """``old``'s editable fields with this edit applied."""
        return {
            "text": old["text"] if self.text is None else self.text,
            "wing": old["wing"] if self.wing is None else self.wing,
            "room": old["room"] if self.room is None else self.room,
            "tags": list(old["tags"]) if self.tags is None else list(self.tags),
            "importance": old["importance"] if self.importance is None else self.importance,
        }


EDITABLE = ("text", "wing", "room", "tags", "importance")


def edit_drawer(conn: apsw.Connection, drawer_id: int, edit: Edit, now_ms: int,
                weight: float | None, agent: str | None = None
                ) -> tuple[list[str], list[int]] | None:
    """Apply ``edit`` to drawer ``drawer_id`` for ``agent`` (its ``updated_by``), keeping the
    replaced version as history.

    ``weight`` is the drawer's decayed weight for its new importance (None: unchanged).
    Returns ``(changed field names, vector ids dropped)``, both empty when the edit changes
    nothing (then nothing is written), or None when there is no such drawer.

    Raises:
        InvalidContent: another drawer already holds the new text in the new wing/room.
    """
    old = get_drawer(conn, drawer_id)
    if old is None:
        return None
    new = edit.applied(old)
    changed = [k for k in EDITABLE if new[k] != old[k]]
    if not changed:
        return [], []
    digest = content_hash(new["wing"], new["room"], new["text"])
    other = find_by_hash(conn, digest)
    if other is not None and other != drawer_id:
        raise InvalidContent(
            f"drawer {other} already holds this text in {new['wing']}/{new['room']}",
            details={"id": drawer_id, "existing": other})
    conn.execute(
        "INSERT INTO drawer_history(drawer_id, text, wing, room, tags, importance, "
        "replaced_ms) VALUES(?,?,?,?,?,?,?)",
        (drawer_id, old["text"], old["wing"], old["room"], json.dumps(old["tags"]),
         old["importance"], now_ms))
    moves = "text" in changed or "wing" in changed or "room" in changed
    before = room_neighbours(conn, drawer_id, CONTEXT_NEIGHBOURS) if moves else []
    text_changed = "text" in changed
    conn.execute(
        "UPDATE drawers SET text = ?, wing = ?, room = ?, tags = ?, importance = ?, "
        "weight = coalesce(?, weight), content_hash = ?, updated_ms = ?, "
        "updated_by = coalesce(?, updated_by), "
        "embedded = CASE WHEN ? THEN 0 ELSE embedded END, "
        "chunks = CASE WHEN ? THEN ? ELSE chunks END WHERE id = ?",
        (new["text"], new["wing"], new["room"], json.dumps(new["tags"]), new["importance"],
         weight, digest, now_ms, agent, text_changed, text_changed, edit.chunks, drawer_id))
    dropped: list[int] = []
    if text_changed:
        conn.execute("UPDATE drawers_fts SET text = ? WHERE rowid = ?", (new["text"], drawer_id))
        note_changed(conn, (drawer_id,))
        conn.execute("DELETE FROM closets WHERE drawer_id = ?", (drawer_id,))
        conn.executemany("INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
                         [(t, drawer_id) for t in edit.topics])
        # Vectors built for a model the palace is being re-embedded for are the old text's
        # too: the re-embedding embeds the drawer again (store/lookup/reembed.py).
        conn.execute("DELETE FROM vectors_next WHERE drawer_id = ?", (drawer_id,))
        dropped = vector_ids(conn, drawer_id)
        conn.execute("DELETE FROM vectors WHERE drawer_id = ?", (drawer_id,))
    if moves:
        for nid in before:
            refresh_context(conn, nid)
        refresh_around(conn, [drawer_id])
    return changed, dropped


def history(conn: apsw.Connection, drawer_id: int) -> list[dict[str, Any]]:
    """The earlier versions of a drawer, newest first: ``{version, text, wing, room, tags,
    importance, replaced_ms}`` (version 1 is the text first stored)."""
    rows = conn.execute(
        "SELECT text, wing, room, tags, importance, replaced_ms FROM drawer_history "
        "WHERE drawer_id = ? ORDER BY id", (drawer_id,)).fetchall()
    out = [{"version": n, "text": str(r[0]), "wing": str(r[1]), "room": str(r[2]),
            "tags": json.loads(r[3]), "importance": float(r[4]), "replaced_ms": int(r[5])}
           for n, r in enumerate(rows, 1)]
    return out[::-1]


def history_counts(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, int]:
    """``{drawer_id: earlier versions}`` of those of ``ids`` that were ever edited."""
    return {int(r[0]): int(r[1]) for r in conn.execute(
        "SELECT drawer_id, count(*) FROM drawer_history WHERE drawer_id IN "
        "(SELECT value FROM json_each(?)) GROUP BY drawer_id",
        ("[" + ",".join(str(int(i)) for i in ids) + "]",))}
