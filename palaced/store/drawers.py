"""Synchronous queries over drawers, their full-text rows, vectors and closets.

Every function takes an open ``apsw.Connection``. Writers expect to run inside a transaction
opened by the caller (``Store.write``), so a drawer, its FTS row, its closets and its vectors
commit together or not at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import apsw

DEFAULT_WING = "general"
DEFAULT_ROOM = "general"
# Drawers on each side (room, time order) whose text joins a drawer's FTS context column.
# LoCoMo dev turn R@5/R@10: ±1 .712/.807, ±2 .731/.825 (context weight 0.5).
CONTEXT_NEIGHBOURS = 2

DRAWER_COLUMNS = (
    "id, text, wing, room, tags, importance, source, created_ms, updated_ms, accessed_ms, "
    "access_count, occurred_ms, content_hash, embedded, weight, expires_ms, superseded_by, "
    "consolidated_into, kind"
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


def date_words(ms: int) -> str:
    """Render a timestamp the ways people write dates, so dates are searchable by keyword."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return (
        f"{dt.day} {dt:%B} {dt.year} {dt:%B} {dt.year} {dt:%Y-%m-%d} {dt:%A} "
        f"{dt:%b} {dt.day}"
    )


# -- meta -----------------------------------------------------------------------------------
def meta_get(conn: apsw.Connection, key: str) -> str | None:
    rows = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return str(rows[0][0]) if rows else None


def meta_set(conn: apsw.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES(?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def bump_vec_epoch(conn: apsw.Connection) -> int:
    epoch = int(meta_get(conn, "vec_epoch") or 0) + 1
    meta_set(conn, "vec_epoch", str(epoch))
    return epoch


# -- writes ---------------------------------------------------------------------------------
def find_by_hash(conn: apsw.Connection, digest: str) -> int | None:
    rows = conn.execute("SELECT id FROM drawers WHERE content_hash = ?", (digest,)).fetchall()
    return int(rows[0][0]) if rows else None


def insert_drawer(conn: apsw.Connection, new: NewDrawer, now_ms: int) -> tuple[int, bool]:
    """Insert a drawer with its FTS row and closets; idempotent by content hash.

    Returns ``(id, created)``; ``created`` is False when the same content already existed
    (its ``updated_ms`` is refreshed).
    """
    digest = new.content_hash
    existing = find_by_hash(conn, digest)
    if existing is not None:
        conn.execute("UPDATE drawers SET updated_ms = ? WHERE id = ?", (now_ms, existing))
        return existing, False
    occurred = new.occurred_ms if new.occurred_ms is not None else now_ms
    drawer_id = int(
        conn.execute(
            "INSERT INTO drawers(text, wing, room, tags, importance, source, created_ms, "
            "updated_ms, occurred_ms, content_hash, expires_ms, kind) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
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
                new.kind,
            ),
        ).fetchall()[0][0]
    )
    conn.execute(
        "INSERT INTO drawers_fts(rowid, text, context, dates) VALUES(?,?,?,?)",
        (drawer_id, new.text, "", date_words(occurred)),
    )
    affected = {drawer_id, *room_neighbours(conn, drawer_id, CONTEXT_NEIGHBOURS)}
    for did in affected:
        refresh_context(conn, did)
    if new.topics:
        conn.executemany(
            "INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
            [(t, drawer_id) for t in new.topics],
        )
    return drawer_id, True


def _neighbour_rows(conn: apsw.Connection, drawer_id: int, n: int) -> list[tuple[int, str]]:
    """The n drawers before and after ``drawer_id`` in its room's time order."""
    rows = conn.execute(
        "SELECT wing, room, occurred_ms FROM drawers WHERE id = ?", (drawer_id,)
    ).fetchall()
    if not rows:
        return []
    wing, room, occ = rows[0]
    before = conn.execute(
        "SELECT id, text FROM drawers WHERE wing = ? AND room = ? AND "
        "(occurred_ms < ? OR (occurred_ms = ? AND id < ?)) AND superseded_by IS NULL "
        "ORDER BY occurred_ms DESC, id DESC LIMIT ?",
        (wing, room, occ, occ, drawer_id, n),
    ).fetchall()
    after = conn.execute(
        "SELECT id, text FROM drawers WHERE wing = ? AND room = ? AND "
        "(occurred_ms > ? OR (occurred_ms = ? AND id > ?)) AND superseded_by IS NULL "
        "ORDER BY occurred_ms ASC, id ASC LIMIT ?",
        (wing, room, occ, occ, drawer_id, n),
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in reversed(before)] + [
        (int(r[0]), str(r[1])) for r in after
    ]


def room_neighbours(conn: apsw.Connection, drawer_id: int, n: int) -> list[int]:
    """Ids of the n drawers on each side of ``drawer_id`` in its room."""
    return [i for i, _ in _neighbour_rows(conn, drawer_id, n)]


def refresh_context(conn: apsw.Connection, drawer_id: int) -> None:
    """Recompute the FTS context column of one drawer from its current neighbours."""
    context = "\n".join(t for _, t in _neighbour_rows(conn, drawer_id, CONTEXT_NEIGHBOURS))
    conn.execute("UPDATE drawers_fts SET context = ? WHERE rowid = ?", (context, drawer_id))


def store_vectors(conn: apsw.Connection, drawer_id: int, vectors: Sequence[bytes]) -> list[int]:
    """Replace a drawer's vectors (one per chunk); returns the new vector ids.

    The caller removes the ids returned by ``vector_ids`` beforehand from the index.
    """
    conn.execute("DELETE FROM vectors WHERE drawer_id = ?", (drawer_id,))
    ids = [
        int(
            conn.execute(
                "INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?,?,?) RETURNING id",
                (drawer_id, chunk, blob),
            ).fetchall()[0][0]
        )
        for chunk, blob in enumerate(vectors)
    ]
    conn.execute("UPDATE drawers SET embedded = 1 WHERE id = ?", (drawer_id,))
    bump_vec_epoch(conn)
    return ids


def vector_ids(conn: apsw.Connection, drawer_id: int) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute("SELECT id FROM vectors WHERE drawer_id = ?", (drawer_id,))
    ]


def delete_drawers(conn: apsw.Connection, ids: Sequence[int]) -> list[int] | None:
    """Delete drawers everywhere in the store; returns the vector ids to drop from the index.

    The one deletion path (forget, prune, TTL sweep, consolidation all use it), so every rule
    about what a deleted drawer leaves behind lives here: its FTS row, closets and vectors go;
    its room neighbours' context is refreshed; and drawers that were consolidated into it are
    unconsolidated again (their summary is gone, so they must be recallable, prunable and
    consolidatable again). Returns None when none of ``ids`` exists.
    """
    vids: list[int] = []
    found = False
    for drawer_id in ids:
        if not conn.execute("SELECT 1 FROM drawers WHERE id = ?", (drawer_id,)).fetchall():
            continue
        found = True
        neighbours = room_neighbours(conn, drawer_id, CONTEXT_NEIGHBOURS)
        removed = vector_ids(conn, drawer_id)
        conn.execute("DELETE FROM drawers_fts WHERE rowid = ?", (drawer_id,))
        conn.execute("DELETE FROM drawers WHERE id = ?", (drawer_id,))
        conn.execute("UPDATE drawers SET consolidated_into = NULL WHERE consolidated_into = ?",
                     (drawer_id,))
        if removed:
            vids.extend(removed)
            bump_vec_epoch(conn)
        for nid in neighbours:
            refresh_context(conn, nid)
    return vids if found else None


def supersede(conn: apsw.Connection, old_id: int, new_id: int, now_ms: int) -> None:
    """Mark ``old_id`` superseded by ``new_id`` (kept, hidden from recall by default).

    Raises:
        MemoryNotFound: no drawer ``old_id``.
        InvalidContent: it is ``new_id`` itself or already superseded.
    """
    from palaced.errors import InvalidContent, MemoryNotFound

    rows = conn.execute("SELECT superseded_by FROM drawers WHERE id = ?", (old_id,)).fetchall()
    if not rows:
        raise MemoryNotFound(f"cannot supersede drawer {old_id}: no such drawer",
                             details={"id": old_id})
    if old_id == new_id:
        raise InvalidContent("a drawer cannot supersede itself", details={"id": old_id})
    if rows[0][0] is not None:
        raise InvalidContent(f"drawer {old_id} is already superseded by drawer {rows[0][0]}",
                             details={"id": old_id, "superseded_by": rows[0][0]})
    conn.execute("UPDATE drawers SET superseded_by = ?, updated_ms = ? WHERE id = ?",
                 (new_id, now_ms, old_id))
    for nid in room_neighbours(conn, old_id, CONTEXT_NEIGHBOURS):
        refresh_context(conn, nid)


def touch(conn: apsw.Connection, ids: Iterable[int], now_ms: int) -> None:
    """Record that drawers were recalled (last access time and access count)."""
    conn.executemany(
        "UPDATE drawers SET accessed_ms = ?, access_count = access_count + 1 WHERE id = ?",
        [(now_ms, i) for i in ids],
    )


# -- reads ----------------------------------------------------------------------------------
def get_drawer(conn: apsw.Connection, drawer_id: int) -> dict[str, Any] | None:
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
    include_superseded: bool = False
    include_expired: bool = False

    @property
    def narrows(self) -> bool:
        """True when the filter restricts by wing, room or tags."""
        return self.wing is not None or self.room is not None or bool(self.tags)

    def sql(self, now_ms: int) -> tuple[str, dict[str, Any]]:
        """A WHERE fragment over alias ``d`` and its named parameters."""
        parts: list[str] = []
        params: dict[str, Any] = {"now": now_ms}
        if not self.include_superseded:
            parts.append("d.superseded_by IS NULL")
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
        return (" AND ".join(parts) or "1"), params


_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her
    hers him his how i if in into is it its me my of on or our she so than that the their them
    then there these they this to was we were what when where which who whom why will with
    would you your yours""".split()
)


def fts_terms(query: str) -> list[str]:
    """The searchable words of a query, stopwords removed unless nothing else is left."""
    words = [w.lower() for w in _WORD.findall(query.replace("\x00", " "))]
    kept = [w for w in words if w not in STOPWORDS]
    seen: dict[str, None] = dict.fromkeys(kept or words)
    return list(seen)[:64]


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms: user syntax is never interpreted."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# bm25 column weights: drawer text, neighbour context, date words. Measured on LoCoMo dev
# (turn R@5, context ±1): no context .653, context 0.35 .706, 0.5 .712; dates 0 -> 0.6:
# .689 -> .706. With context ±2, 0.4 balances R@1 (.401) against R@5/R@10 (.730/.823).
BM25_WEIGHTS = (1.0, 0.4, 0.6)


class TermStats:
    """Document frequencies of query terms, cached per palace.

    Cheap to keep roughly current: a df only decides whether a term is informative, so the
    cache is dropped when the palace grew or shrank by more than a tenth since it was built.
    """

    MAX_TERMS = 50_000
    MIN_DOCS = 2_000

    def __init__(self) -> None:
        self.df: dict[str, int] = {}
        self.built_for = 0

    def informative(self, conn: apsw.Connection, terms: Sequence[str], n_docs: int
                    ) -> list[str]:
        """``terms`` without those in more than half of the drawers.

        BM25's IDF, log((N - n + 0.5) / (n + 0.5)), is <= 0 for such a term and FTS5 clamps
        it to 1e-6: it cannot change the ranking, yet its posting list is the costliest to
        score (measured: a Zipfian 10k palace, 6.5 -> 1.9 ms per query). Keeps all terms
        if none is informative, and all terms in palaces under MIN_DOCS drawers: there the
        full query is cheap, and the near-zero hits it adds steady the z-score fusion
        (LoCoMo dev, ~600-drawer palaces: turn R@1 .401 with them, .399 without).
        """
        if n_docs < self.MIN_DOCS or not terms:
            return list(terms)
        if abs(n_docs - self.built_for) * 10 > self.built_for or len(self.df) > self.MAX_TERMS:
            self.df, self.built_for = {}, n_docs
        keep = []
        for term in terms:
            df = self.df.get(term)
            if df is None:
                df = int(conn.execute("SELECT count(*) FROM drawers_fts WHERE drawers_fts MATCH ?",
                                      (fts_match([term]),)).fetchall()[0][0])
                self.df[term] = df
            if df * 2 <= n_docs:
                keep.append(term)
        return keep or list(terms)


def fts_search(
    conn: apsw.Connection, query: str, filters: Filters, limit: int, now_ms: int,
    stats: TermStats | None = None, n_docs: int = 0,
) -> list[tuple[int, float]]:
    """BM25 search; returns ``(drawer_id, score)`` best first, score higher = better.

    With ``stats`` (and the palace's drawer count), terms in more than half of the drawers
    are left out of the query: they carry no BM25 weight.
    """
    terms = fts_terms(query)
    if stats is not None:
        terms = stats.informative(conn, terms, n_docs)
    match = fts_match(terms)
    if match is None:
        return []
    where, params = filters.sql(now_ms)
    params.update({"match": match, "limit": limit, "inner": limit * 2})
    w = BM25_WEIGHTS
    bm25 = f"bm25(drawers_fts, {w[0]}, {w[1]}, {w[2]})"
    if filters.narrows:
        sql = (
            f"SELECT f.rowid, {bm25} AS s FROM drawers_fts f "
            f"JOIN drawers d ON d.id = f.rowid WHERE drawers_fts MATCH :match AND {where} "
            "ORDER BY s LIMIT :limit"
        )
    else:
        # Rank in FTS alone first (joining every match costs ~40 %), then drop the few
        # superseded or expired drawers from an over-fetched top.
        sql = (
            f"SELECT f.rowid, f.s FROM (SELECT rowid, {bm25} AS s FROM drawers_fts "
            "WHERE drawers_fts MATCH :match ORDER BY s LIMIT :inner) f "
            f"JOIN drawers d ON d.id = f.rowid WHERE {where} ORDER BY f.s LIMIT :limit"
        )
    # FTS5's bm25() is negative with lower = better; negate so higher = better everywhere.
    return [(int(r[0]), -float(r[1])) for r in conn.execute(sql, params)]


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
    """Top drawers by importance, then recency (L1)."""
    rows = conn.execute(
        f"SELECT {', '.join('d.' + c for c in _COLS)} FROM drawers d WHERE {ACTIVE_SQL} "
        "ORDER BY d.importance DESC, d.occurred_ms DESC, d.id DESC LIMIT :limit",
        {"now": now_ms, "limit": limit},
    ).fetchall()
    return [row_to_drawer(r) for r in rows]


def pending_embeddings(conn: apsw.Connection, limit: int) -> list[tuple[int, str]]:
    """Drawers stored without vectors (e.g. while no model was loaded)."""
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, text FROM drawers WHERE embedded = 0 ORDER BY id LIMIT ?", (limit,)
        )
    ]


def iter_vectors(conn: apsw.Connection) -> Iterator[tuple[int, bytes]]:
    """Every stored ``(vector_id, blob)``, for index rebuilds."""
    for row in conn.execute("SELECT id, vec FROM vectors ORDER BY id"):
        yield int(row[0]), bytes(row[1])


def vector_drawers(conn: apsw.Connection, vids: Sequence[int]) -> dict[int, int]:
    """Map vector ids to their drawer ids."""
    out: dict[int, int] = {}
    for start in range(0, len(vids), 500):
        part = list(vids[start : start + 500])
        marks = ",".join("?" * len(part))
        for vid, did in conn.execute(
            f"SELECT id, drawer_id FROM vectors WHERE id IN ({marks})", part
        ):
            out[int(vid)] = int(did)
    return out


def counts(conn: apsw.Connection) -> dict[str, int]:
    """Drawer, vector and pending-embedding counts."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM drawers), (SELECT count(*) FROM vectors), "
        "(SELECT count(*) FROM drawers WHERE embedded = 0)"
    ).fetchall()[0]
    return {"drawers": int(row[0]), "vectors": int(row[1]), "pending_embeddings": int(row[2])}


def rooms(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Wings and rooms with drawer counts."""
    return [
        {"wing": r[0], "room": r[1], "drawers": int(r[2])}
        for r in conn.execute(
            "SELECT wing, room, count(*) FROM drawers GROUP BY wing, room ORDER BY wing, room"
        )
    ]
