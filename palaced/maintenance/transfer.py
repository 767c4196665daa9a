"""Export and restore of an open palace (the format: ``palaced.wire.export_format``).

``export_page`` is one read hop: a page of records after a cursor, bounded in count and
bytes, so a client loops over pages and neither side holds more than one page whatever the
palace's size. ``restore`` is one write hop per batch: records keep their ids, times and
counters; drawers are stored without vectors and embedded in the background by the
scheduler's backfill (``writes.embed_pending``), like drawers stored while no model is loaded.
A restore goes into an empty palace, or into one the same export was restored into before
(a re-run or a resumed restore, which skips what is there), never into other memories.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import apsw

from palaced import __version__
from palaced.palace.handle import Palace, now_ms
from palaced.store.conn.meta import meta_get, meta_set
from palaced.store.jobs import transfer as sql
from palaced.store.rows import audit
from palaced.store.rows.drawers import refresh_around
from palaced.store.schema.sqlite import SCHEMA_VERSION
from palaced.wire.errors import InvalidArgs, InvalidContent, PalaceError, PalaceNotEmpty, quote
from palaced.wire.export_format import FORMAT, KIND_KEY, VERSION

log = logging.getLogger("palaced.maintenance.transfer")

# What one record may still raise that its checks did not foresee: it is refused alone
# (``unforeseen``), never the batch around it.
UNFORESEEN = (ValueError, OverflowError, TypeError, RecursionError)
RESTORED_FROM = "restored_from"  # meta key: which export this palace was restored from
DECAY_KEY = "decay_ms"  # meta key: when the palace last decayed (``upkeep.decay``)
_RECORD_OVERHEAD = 200  # bytes of keys and numbers of one record, roughly


# -- export -----------------------------------------------------------------------------------
def _parse_cursor(cursor: str | None) -> tuple[str, int]:
    """``(kind, after id)`` of a cursor (``"drawer:120"``); ``("start", 0)`` for none.

    Raises:
        InvalidArgs: not a cursor an export page returned.
    """
    if cursor is None:
        return "start", 0
    kind, _, after = cursor.partition(":")
    if kind in (*sql.EXPORTED_KINDS, "end") and after.isdigit() and len(after) < 20:
        return kind, int(after)
    raise InvalidArgs(f"bad export cursor {quote(cursor, 64)}: pass the `next` of the "
                      "previous page", details={"arg": "cursor"})


def _size(record: dict[str, Any]) -> int:
    listed = record.get("drawers")  # a source's drawer ids
    return (_RECORD_OVERHEAD + 9 * (len(listed) if isinstance(listed, list) else 0)
            + sum(len(v.encode("utf-8", "replace")) for v in record.values()
                  if isinstance(v, str)))


def _header(palace: Palace, c: apsw.Connection) -> dict[str, Any]:
    ms = now_ms()
    return {KIND_KEY: "header", "format": FORMAT, "version": VERSION, "palace": palace.name,
            "exported_at": datetime.fromtimestamp(ms / 1000, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "exported_ms": ms, "schema": int(meta_get(c, "schema") or SCHEMA_VERSION),
            "embedder": palace.embedder_identity, "drawer_seq": sql.drawer_seq(c),
            "decayed_ms": _decayed_ms(c),
            "palace_version": __version__, "counts": sql.counts(c)}


def _decayed_ms(c: apsw.Connection) -> int | None:
    stored = meta_get(c, DECAY_KEY)
    return int(stored) if stored is not None and stored.strip().isdigit() else None


async def export_page(palace: Palace, cursor: str | None, limit: int, max_bytes: int
                      ) -> dict[str, Any]:
    """Up to ``limit`` records (about ``max_bytes`` at most, one record at least) after
    ``cursor``: ``{records, next}``, ``next`` None after the ``end`` record.

    Raises:
        InvalidArgs: a cursor no page returned.
    """
    kind, after = _parse_cursor(cursor)
    identity = None
    if kind == "start":
        identity = await palace.identity(keep_comments=True)

    def read(c: apsw.Connection) -> tuple[list[dict[str, Any]], str | None]:
        nonlocal kind, after
        records: list[dict[str, Any]] = []
        if kind == "start":
            records += [_header(palace, c), {KIND_KEY: "identity", "text": identity}]
            kind, after = sql.EXPORTED_KINDS[0], 0
        size = sum(map(_size, records))
        while kind != "end":
            for row_id, record in sql.rows_after(c, kind, after):
                if len(records) >= limit or size >= max_bytes:
                    return records, f"{kind}:{after}"
                records.append(record)
                size += _size(record)
                after = row_id
            at = sql.EXPORTED_KINDS.index(kind) + 1
            kind, after = (*sql.EXPORTED_KINDS, "end")[at], 0
        if len(records) >= limit:
            return records, "end:0"
        records.append({KIND_KEY: "end"})
        return records, None

    records, nxt = await palace.read(read)
    return {"records": records, "next": nxt}


# -- restore ----------------------------------------------------------------------------------
@dataclass
class Prepared:
    """One record of a restore batch, its fields checked: ``rec`` (the decoded record) and,
    for a drawer, its content hash and closets."""

    index: int
    kind: str
    rec: dict[str, Any]
    digest: str = ""
    topics: tuple[str, ...] = ()


@dataclass
class RestoreResult:
    """What a restore batch did."""

    stored: int = 0
    unchanged: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    dropped_links: int = 0
    resumed: bool | None = None
    finished: bool = False

    def reject(self, index: int, exc: PalaceError) -> None:
        self.rejected.append({"index": index, "code": exc.code, "name": exc.name,
                              "message": exc.message})

    def to_wire(self) -> dict[str, Any]:
        return {"stored": self.stored, "unchanged": self.unchanged, "rejected": self.rejected,
                "dropped_links": self.dropped_links, "resumed": self.resumed,
                "finished": self.finished}


def unforeseen(index: int, exc: BaseException) -> InvalidContent:
    """The refusal of record ``index`` for an exception its checks did not foresee (logged,
    a check is missing, by its type only: its message may quote memory text)."""
    log.warning("restore: record %d refused: %s", index, type(exc).__name__)
    return InvalidContent(f"record cannot be restored: {type(exc).__name__}: {exc}",
                          details={"index": index})


def _fingerprint(header: dict[str, Any]) -> str:
    return f"{header['palace']}@{header['exported_ms']}"


def _check_target(palace: Palace, c: apsw.Connection, header: Prepared | None
                  ) -> bool | None:
    """Whether this restore resumes an earlier one (None: no header in this batch).

    Raises:
        PalaceNotEmpty: the header's export goes into a palace holding other memories.
        InvalidContent: a batch without header into a palace no restore started in.
    """
    restored = meta_get(c, RESTORED_FROM)
    if header is None:
        if restored is None:
            raise InvalidContent(
                f"palace {palace.name!r} is not being restored: a restore starts with the "
                "export's header record", details={"palace": palace.name})
        return None
    mark = _fingerprint(header.rec)
    resumed = restored == mark
    if not resumed:
        counts = sql.counts(c)
        if any(counts.values()):
            held = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            raise PalaceNotEmpty(
                f"palace {palace.name!r} already holds memories ({held}): restore into a new "
                "palace (`palace import jsonl FILE --palace NEW`)",
                details={"palace": palace.name, **counts})
        meta_set(c, RESTORED_FROM, mark)
        # The weights come as the export's last decay left them: the next decay is due when
        # it would have been there (a day after it; a day from now if it never decayed).
        decayed = header.rec["decayed_ms"]
        meta_set(c, DECAY_KEY, str(now_ms() if decayed is None else decayed))
    if header.rec["drawer_seq"] is not None:
        sql.raise_drawer_seq(c, int(header.rec["drawer_seq"]))
    return resumed


def _apply(c: apsw.Connection, item: Prepared, result: RestoreResult, new: list[int]) -> None:
    rec, stored = item.rec, False
    if item.kind == "drawer":
        stored = sql.restore_drawer(c, rec, item.digest, item.topics)
        if stored:
            new.append(int(rec["id"]))
    elif item.kind == "entity":
        stored = sql.restore_entity(c, rec)
    elif item.kind == "fact":
        stored, dropped = sql.restore_fact(c, rec)
        result.dropped_links += dropped
    elif item.kind == "source":
        stored, missing = sql.restore_source(c, rec)
        result.dropped_links += missing
    elif item.kind == "memoir":
        stored = sql.restore_memoir(c, rec)
    elif item.kind == "concept":
        stored, missing = sql.restore_concept(c, rec)
        result.dropped_links += missing
    elif item.kind == "concept_link":
        stored = sql.restore_concept_link(c, rec)
    if stored:
        result.stored += 1
    else:
        result.unchanged += 1


def _restore_sync(palace: Palace, batch: list[Prepared], result: RestoreResult,
                  actor: audit.Actor) -> None:
    """The write half of a restore (worker thread, under ``write_lock``): audited as one
    ``imported`` entry per batch that stored anything (the new drawers' ids, the counts)."""
    header = next((p for p in batch if p.kind == "header"), None)
    new: list[int] = []

    def tx(c: apsw.Connection) -> None:
        result.resumed = _check_target(palace, c, header)
        for item in batch:
            if item.kind in ("header", "identity", "end"):
                continue
            try:
                with c:  # a savepoint: a refused record leaves nothing behind
                    _apply(c, item, result, new)
            except PalaceError as exc:
                result.reject(item.index, exc)
            except apsw.ConstraintError as exc:
                result.reject(item.index, InvalidContent(f"refused by the database: {exc}"))
            except UNFORESEEN as exc:
                result.reject(item.index, unforeseen(item.index, exc))
        refresh_around(c, new)
        if any(p.kind == "end" for p in batch):
            result.dropped_links += sql.clear_dangling(c)
            result.finished = True
        if result.stored:
            audit.append(c, actor, "imported", now_ms(), drawer_ids=new,
                         detail={"stored": result.stored, "unchanged": result.unchanged,
                                 "rejected": len(result.rejected)})
        palace.storage.after_import(c)  # records came with their ids

    palace.store.write(tx)
    for item in batch:
        if item.kind == "identity":
            _restore_identity(palace, item.rec["text"], result)
    if new:
        palace.note_unembedded()  # the scheduler embeds them once the palace is idle


def _restore_identity(palace: Palace, text: str, result: RestoreResult) -> None:
    if palace.storage.replace_identity_sync(palace, text):
        result.stored += 1
    else:
        result.unchanged += 1


async def restore(palace: Palace, batch: list[Prepared], rejected: list[dict[str, Any]],
                  actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Restore a batch of checked records (``rejected``: those refused by their checks).

    Raises:
        PalaceNotEmpty: the batch's header goes into a palace holding other memories.
        InvalidContent: no header, and no restore started in this palace.
    """
    result = RestoreResult(rejected=list(rejected))
    await palace.write(lambda: _restore_sync(palace, batch, result, actor))
    result.rejected.sort(key=lambda r: int(r["index"]))
    return result.to_wire()
