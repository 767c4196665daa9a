"""Synchronous queries over drawers: insert, supersede, delete, touch, read and list.

A drawer is one memory: its row in ``drawers``, its full-text row (text, neighbour context,
date words: see ``context``), its closets (topics) and its vectors (see ``vectors``).
``NewDrawer`` is a validated drawer to insert and ``Filters`` the recall/listing filters.

Every function takes an open ``apsw.Connection``. Writers expect to run inside a transaction
opened by the caller (``Store.write``), so a drawer, its FTS row, its closets and its vectors
commit together or not at all.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from palaced.store.conn.dialect import (
    ignore_conflict,
    is_pg,
    json_ids,
    lock_room,
    lock_room_of,
)
from palaced.store.lookup import context_vectors
from palaced.store.lookup.context import (
    CONTEXT_NEIGHBOURS,
    date_words,
    neighbours_of,
    refresh_contexts,
    room_neighbours,
)
from palaced.store.lookup.fts_log import note_changed
from palaced.store.lookup.vectors import CHUNKS_SQL, vector_ids
from palaced.text.reldates import resolved_date_words

DEFAULT_WING = "general"
DEFAULT_ROOM = "general"
SUMMARY_KIND = "summary"  # the kind of a consolidation's summary drawer (else "drawer")


DRAWER_COLUMNS = (
    "id, text, wing, room, tags, importance, source, created_ms, updated_ms, accessed_ms, "
    "access_count, occurred_ms, content_hash, embedded, weight, expires_ms, superseded_by, "
    "consolidated_into, kind, created_by, updated_by"
)
_COLS = [c.strip() for c in DRAWER_COLUMNS.split(",")]

# Active = visible to recall: not superseded and not expired.
LIVE_SQL = "(d.expires_ms IS NULL OR d.expires_ms > :now)"
ACTIVE_SQL = "d.superseded_by IS NULL AND " + LIVE_SQL


@dataclass(frozen=True)
class NewDrawer:
    """A validated drawer to insert."""

    text: str
    wing: str = DEFAULT_WING
    room: str = DEFAULT_ROOM
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    source: str | None = None
    occurred_ms: int | None = None
    expires_ms: int | None = None
    ttl_ms: int | None = None  # the lifetime given (a recall may restart it); see schema v4
    kind: str = "drawer"
    topics: tuple[str, ...] = field(default=())
    supersedes: int | None = None

    @property
    def content_hash(self) -> str:
        return content_hash(self.wing, self.room, self.text)


def normalise_text(text: str) -> str:
    """NFC-normalise and strip surrounding whitespace (what is stored and hashed)."""
    return unicodedata.normalize("NFC", text).strip()


def content_hash(wing: str, room: str, text: str) -> str:
    """SHA-256 over wing, room and text: the same words in another room are another drawer."""
    h = hashlib.sha256()
    for part in (wing, room, text):
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def row_to_drawer(row: Sequence[Any]) -> dict[str, Any]:
    """Turn a DRAWER_COLUMNS row into the wire dict of a drawer."""
    d = dict(zip(_COLS, row, strict=True))
    d["tags"] = json.loads(d["tags"]) if d["tags"] else []
    d["embedded"] = bool(d["embedded"])
    return d


# -- writes ---------------------------------------------------------------------------------
def find_by_hash(conn: apsw.Connection, digest: str) -> int | None:
    """The drawer holding exactly this content (its ``content_hash``), if any."""
    rows = conn.execute("SELECT id FROM drawers WHERE content_hash = ?", (digest,)).fetchall()
    return int(rows[0][0]) if rows else None


def insert_drawer(conn: apsw.Connection, new: NewDrawer, now_ms: int,
                  agent: str | None = None, *, chunks: int | None = None,
                  context: bool = True) -> tuple[int, bool]:
    """Insert a drawer with its FTS row and closets; idempotent by content hash.

    ``agent`` is who stores it; ``chunks`` is how many pieces its text is embedded as, when
    known. Returns ``(id, created)``; ``created`` is False when the same content already
    existed (its ``updated_ms`` and ``updated_by`` are refreshed). ``context`` False leaves
    the room context of it and its neighbours to the caller (``refresh_around`` once for a
    batch, after its vectors are stored), in the same transaction.
    """
    digest = new.content_hash
    lock_room(conn, new.wing, new.room)
    if is_pg(conn):
        return _insert_drawer_pg(conn, new, now_ms, agent, chunks, context)
    existing = find_by_hash(conn, digest)
    if existing is not None:
        conn.execute("UPDATE drawers SET updated_ms = ?, updated_by = coalesce(?, updated_by) "
                     "WHERE id = ?", (now_ms, agent, existing))
        return existing, False
    occurred = new.occurred_ms if new.occurred_ms is not None else now_ms
    # On PostgreSQL another daemon may insert the same content between the lookup and the
    # insert (the room lock covers one room, the hash is palace-wide only in theory): the
    # unique index settles it, and the loser returns the winner's drawer.
    conflict = ignore_conflict(conn, "content_hash")
    rows = conn.execute(
            "INSERT INTO drawers(text, wing, room, tags, importance, source, created_ms, "
            "updated_ms, occurred_ms, content_hash, expires_ms, ttl_ms, kind, chunks, "
            "created_by, updated_by) "
            f"VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?){conflict} RETURNING id",
            (
                new.text,
                new.wing,
                new.room,
                json.dumps(list(new.tags)),
                new.importance,
                new.source,
                now_ms,
                now_ms,
                occurred,
                digest,
                new.expires_ms,
                new.ttl_ms,
                new.kind,
                chunks,
                agent,
                agent,
            ),
        ).fetchall()
    if not rows:
        winner = find_by_hash(conn, digest)
        assert winner is not None  # the conflicting row is committed: visible here
        return winner, False
    drawer_id = int(rows[0][0])
    index_drawer(conn, drawer_id, new.text, occurred, new.topics)
    if context:
        refresh_around(conn, [drawer_id])
    return drawer_id, True


def _insert_drawer_pg(conn: Any, new: NewDrawer, now_ms: int, agent: str | None,
                      chunks: int | None, context: bool) -> tuple[int, bool]:
    """``insert_drawer`` on PostgreSQL: the drawer, its full-text row and its closets in one
    statement (one round trip), inserted only when no drawer holds its content (looked up in
    the same statement; a concurrent insert of the same content loses on the unique index
    and finds the winner's). A duplicate costs a second statement, the refresh of the
    existing drawer's ``updated_ms``."""
    occurred = new.occurred_ms if new.occurred_ms is not None else now_ms
    dates = f"{date_words(occurred)} {resolved_date_words(new.text, occurred)}".rstrip()
    rows = conn.execute(
        "WITH d AS (INSERT INTO drawers(text, wing, room, tags, importance, source, "
        "created_ms, updated_ms, occurred_ms, content_hash, expires_ms, ttl_ms, kind, chunks, "
        "created_by, updated_by) SELECT :text, :wing, :room, :tags, :importance, :source, "
        "CAST(:now AS bigint), CAST(:now AS bigint), CAST(:occurred AS bigint), :hash, "
        "CAST(:expires AS bigint), CAST(:ttl AS bigint), :kind, CAST(:chunks AS integer), "
        ":agent, :agent WHERE NOT EXISTS (SELECT 1 FROM drawers WHERE content_hash = :hash) "
        "ON CONFLICT (content_hash) DO NOTHING RETURNING id), "
        "f AS (INSERT INTO drawers_fts(rowid, text, context, dates) "
        "SELECT id, :text, '', :dates FROM d), "
        "k AS (INSERT INTO closets(topic, drawer_id) SELECT DISTINCT t, d.id FROM d, "
        "unnest(CAST(:topics AS text[])) t ON CONFLICT DO NOTHING) "
        "SELECT id FROM d",
        {"text": new.text, "wing": new.wing, "room": new.room,
         "tags": json.dumps(list(new.tags)), "importance": new.importance,
         "source": new.source, "now": now_ms, "occurred": occurred, "hash": new.content_hash,
         "expires": new.expires_ms, "ttl": new.ttl_ms, "kind": new.kind, "chunks": chunks,
         "agent": agent, "dates": dates, "topics": list(new.topics)}).fetchall()
    if not rows:
        again = conn.execute(
            "UPDATE drawers SET updated_ms = ?, updated_by = coalesce(?, updated_by) "
            "WHERE content_hash = ? RETURNING id", (now_ms, agent, new.content_hash)).fetchall()
        return int(again[0][0]), False
    drawer_id = int(rows[0][0])
    if context:
        refresh_around(conn, [drawer_id])
    return drawer_id, True


def existing_hashes(conn: apsw.Connection, digests: Sequence[str]) -> set[str]:
    """The content hashes of ``digests`` some drawer holds: one statement."""
    if not digests:
        return set()
    if is_pg(conn):
        sql = "SELECT content_hash FROM drawers WHERE content_hash = ANY(CAST(? AS text[]))"
        arg: Any = list(digests)
    else:
        sql = ("SELECT content_hash FROM drawers WHERE content_hash IN "
               "(SELECT value FROM json_each(?))")
        arg = json.dumps(list(digests))
    return {str(r[0]) for r in conn.execute(sql, (arg,))}


def index_drawer(conn: apsw.Connection, drawer_id: int, text: str, occurred_ms: int,
                 topics: Iterable[str]) -> None:
    """File a new drawer row in the full-text index (empty context: see ``refresh_around``)
    and under its closets. Its date words are the day it happened and the months its text's
    relative times ("last month") point at."""
    dates = f"{date_words(occurred_ms)} {resolved_date_words(text, occurred_ms)}".rstrip()
    conn.execute(
        "INSERT INTO drawers_fts(rowid, text, context, dates) VALUES(?,?,?,?)",
        (drawer_id, text, "", dates),
    )
    note_changed(conn, (drawer_id,))
    conn.executemany("INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
                     [(t, drawer_id) for t in topics])


def refresh_around(conn: apsw.Connection, ids: Iterable[int]) -> None:
    """Recompute the FTS context of new drawers ``ids`` and of their room neighbours, once
    each (a batch of drawers in one room shares most neighbours)."""
    new = [int(i) for i in ids]
    affected = set(new)
    for near in neighbours_of(conn, new, CONTEXT_NEIGHBOURS).values():
        affected.update(j for j, _ in near)
    refresh_contexts(conn, affected)


def delete_drawers(conn: apsw.Connection, ids: Sequence[int]) -> list[int] | None:
    """Delete drawers everywhere in the store; returns the vector ids to drop from the index.

    The one deletion path (forget, prune, TTL sweep, consolidation all use it), so every rule
    about what a deleted drawer leaves behind lives here: its FTS row, closets and vectors go;
    its room neighbours' context is refreshed; and drawers that were consolidated into it are
    unconsolidated again (their summary is gone, so they must be recallable, prunable and
    consolidatable again). Returns None when none of ``ids`` exists.

    The neighbours whose context held a deleted drawer (those within CONTEXT_NEIGHBOURS of it
    before any deletion: a window changes only when one of its drawers goes) are refreshed
    once each after the last deletion, and the consolidation links are cleared in one
    statement (``consolidated_into`` has no index: one scan per call, not per drawer); a bulk
    forget of 10,000 drawers was quadratic before.
    """
    vids: list[int] = []
    gone: list[int] = []
    near: set[int] = set()
    for drawer_id in ids:
        if not conn.execute("SELECT 1 FROM drawers WHERE id = ?", (drawer_id,)).fetchall():
            continue
        gone.append(int(drawer_id))
        lock_room_of(conn, drawer_id)
        near.update(room_neighbours(conn, drawer_id, CONTEXT_NEIGHBOURS))
        removed = vector_ids(conn, drawer_id)
        conn.execute("DELETE FROM drawers_fts WHERE rowid = ?", (drawer_id,))
        note_changed(conn, (drawer_id,))
        conn.execute("DELETE FROM drawers WHERE id = ?", (drawer_id,))
        vids.extend(removed)
    if not gone:
        return None
    conn.execute("UPDATE drawers SET consolidated_into = NULL WHERE consolidated_into IN "
                 "(SELECT value FROM json_each(?))", (json_ids(gone),))
    refresh_contexts(conn, near.difference(gone))
    return vids


def supersede(conn: apsw.Connection, old_id: int, new_id: int, now_ms: int,
              agent: str | None = None) -> None:
    """Mark ``old_id`` superseded by ``new_id`` (kept, hidden from recall by default).

    Raises:
        MemoryNotFound: no drawer ``old_id``.
        InvalidContent: it is ``new_id`` itself or already superseded.
    """
    from palaced.wire.errors import InvalidContent, MemoryNotFound

    rows = conn.execute("SELECT superseded_by FROM drawers WHERE id = ?", (old_id,)).fetchall()
    if not rows:
        raise MemoryNotFound(f"cannot supersede drawer {old_id}: no such drawer",
                             details={"id": old_id})
    if old_id == new_id:
        raise InvalidContent("a drawer cannot supersede itself", details={"id": old_id})
    if rows[0][0] is not None:
        raise InvalidContent(f"drawer {old_id} is already superseded by drawer {rows[0][0]}",
                             details={"id": old_id, "superseded_by": rows[0][0]})
    conn.execute("UPDATE drawers SET superseded_by = ?, updated_ms = ?, "
                 "updated_by = coalesce(?, updated_by) WHERE id = ?",
                 (new_id, now_ms, agent, old_id))
    context_vectors.drop(conn, old_id)
    refresh_contexts(conn, room_neighbours(conn, old_id, CONTEXT_NEIGHBOURS))


def touch_rows(conn: apsw.Connection, ids: Sequence[int]
               ) -> list[tuple[int, float, float, int, int | None, int | None, int]]:
    """``(id, importance, weight, access_count, expires_ms, ttl_ms, created_ms)`` of those of
    ``ids`` that exist (what recording a recall of them needs)."""
    return [(int(r[0]), float(r[1]), float(r[2]), int(r[3]), r[4], r[5], int(r[6]))
            for r in conn.execute(
                "SELECT id, importance, weight, access_count, expires_ms, ttl_ms, created_ms "
                "FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
                ("[" + ",".join(str(int(i)) for i in ids) + "]",))]


def store_touches(conn: apsw.Connection,
                  rows: Sequence[tuple[int, float, float, int | None, int]], now_ms: int
                  ) -> None:
    """Record recalls: ``(access_count, importance, weight, expires_ms, id)`` per drawer, and
    ``now_ms`` as its last access."""
    conn.executemany(
        "UPDATE drawers SET accessed_ms = ?, access_count = ?, importance = ?, weight = ?, "
        "expires_ms = ? WHERE id = ?", [(now_ms, *row) for row in rows])


def refresh_duplicate(conn: apsw.Connection, drawer_id: int, importance: float,
                      now_ms: int, agent: str | None = None) -> None:
    """A near-duplicate of ``drawer_id`` was remembered (by ``agent``): refresh it instead of
    adding one (its ``updated_ms``, and its importance raised to the new one's when higher)."""
    conn.execute("UPDATE drawers SET updated_ms = ?, importance = max(importance, ?), "
                 "updated_by = coalesce(?, updated_by) WHERE id = ?",
                 (now_ms, importance, agent, drawer_id))


# -- reads ----------------------------------------------------------------------------------
def get_drawer(conn: apsw.Connection, drawer_id: int) -> dict[str, Any] | None:
    """One drawer as its wire dict, or None."""
    rows = conn.execute(
        f"SELECT {DRAWER_COLUMNS} FROM drawers WHERE id = ?", (drawer_id,)
    ).fetchall()
    return row_to_drawer(rows[0]) if rows else None


def get_drawers(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Hydrate many drawers by id (missing ids are simply absent)."""
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        part = list(ids[start : start + 500])
        marks = ",".join("?" * len(part))
        for row in conn.execute(
            f"SELECT {DRAWER_COLUMNS} FROM drawers WHERE id IN ({marks})", part
        ):
            d = row_to_drawer(row)
            out[int(d["id"])] = d
    return out


@dataclass(frozen=True)
class Filters:
    """Recall / listing filters; None means no constraint."""

    wing: str | None = None
    room: str | None = None
    tags: tuple[str, ...] = ()
    include_superseded: bool = False  # and consolidated: every retired drawer
    include_expired: bool = False
    since_ms: int | None = None  # dated (occurred_ms) at or after
    until_ms: int | None = None  # dated before
    created_by: str | None = None  # remembered by this agent

    @property
    def narrows(self) -> bool:
        """True when the filter restricts by wing, room, tags, dates or author."""
        return (self.wing is not None or self.room is not None or bool(self.tags)
                or self.since_ms is not None or self.until_ms is not None
                or self.created_by is not None)

    def sql(self, now_ms: int) -> tuple[str, dict[str, Any]]:
        """A WHERE fragment over alias ``d`` and its named parameters."""
        parts: list[str] = []
        params: dict[str, Any] = {"now": now_ms}
        if not self.include_superseded:
            # Retired drawers: superseded by a correction, or consolidated into a summary
            # (which takes their place; ``get`` and this flag still reach them).
            parts.append("d.superseded_by IS NULL AND d.consolidated_into IS NULL")
        if not self.include_expired:
            parts.append(LIVE_SQL)
        if self.wing is not None:
            parts.append("d.wing = :wing")
            params["wing"] = self.wing
        if self.room is not None:
            parts.append("d.room = :room")
            params["room"] = self.room
        if self.tags:
            keys = []
            for i, tag in enumerate(self.tags):
                params[f"tag{i}"] = tag
                keys.append(f":tag{i}")
            parts.append(
                f"EXISTS (SELECT 1 FROM json_each(d.tags) WHERE value IN ({','.join(keys)}))"
            )
        for column, op, key, value in (("occurred_ms", ">=", "since", self.since_ms),
                                       ("occurred_ms", "<", "until", self.until_ms),
                                       ("created_by", "=", "created_by", self.created_by)):
            if value is not None:
                parts.append(f"d.{column} {op} :{key}")
                params[key] = value
        return (" AND ".join(parts) or "TRUE"), params


def superseded_ids(conn: apsw.Connection, drawer_id: int) -> list[int]:
    """Ids of the drawers that ``drawer_id`` superseded, oldest first."""
    return [int(r[0]) for r in conn.execute(
        "SELECT id FROM drawers WHERE superseded_by = ? ORDER BY id", (drawer_id,))]


def list_drawers(
    conn: apsw.Connection, filters: Filters, limit: int, offset: int, now_ms: int
) -> tuple[list[dict[str, Any]], int]:
    """Drawers newest first with the total matching count."""
    where, params = filters.sql(now_ms)
    total = int(conn.execute(f"SELECT count(*) FROM drawers d WHERE {where}", params)
                .fetchall()[0][0])
    params.update({"limit": limit, "offset": offset})
    rows = conn.execute(
        f"SELECT {', '.join('d.' + c for c in _COLS)} FROM drawers d WHERE {where} "
        "ORDER BY d.created_ms DESC, d.id DESC LIMIT :limit OFFSET :offset",
        params,
    ).fetchall()
    return [row_to_drawer(r) for r in rows], total


def essential(conn: apsw.Connection, limit: int, now_ms: int) -> list[dict[str, Any]]:
    """Top drawers by importance, then recency (L1); consolidated ones are left to their
    summary."""
    rows = conn.execute(
        f"SELECT {', '.join('d.' + c for c in _COLS)} FROM drawers d WHERE {ACTIVE_SQL} "
        "AND d.consolidated_into IS NULL "
        "ORDER BY d.importance DESC, d.occurred_ms DESC, d.id DESC LIMIT :limit",
        {"now": now_ms, "limit": limit},
    ).fetchall()
    return [row_to_drawer(r) for r in rows]


def counts(conn: apsw.Connection) -> dict[str, int]:
    """Drawer and vector counts, and the drawers and chunks awaiting vectors."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM drawers), (SELECT count(*) FROM vectors), "
        "(SELECT count(*) FROM drawers WHERE embedded = 0), "
        f"(SELECT coalesce(sum({CHUNKS_SQL}), 0) FROM drawers WHERE embedded = 0)"
    ).fetchall()[0]
    return {"drawers": int(row[0]), "vectors": int(row[1]), "pending_embeddings": int(row[2]),
            "pending_chunks": int(row[3])}


def rooms(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Wings and rooms with drawer counts."""
    return [
        {"wing": r[0], "room": r[1], "drawers": int(r[2])}
        for r in conn.execute(
            "SELECT wing, room, count(*) FROM drawers GROUP BY wing, room ORDER BY wing, room"
        )
    ]
