"""Bulk upkeep of an open palace: forgetting every drawer a selection names, restoring such a
batch, and merging duplicate drawers into one.

A bulk forget or a merge goes through the trash like ``forget`` (``trash.discard_sync``,
audited in the same transaction), all its drawers under one batch id (their trash
``reason``), so ``restore_batch`` brings the whole batch back. The selection is made once, in
one read; a dry run returns what the real run would trash from the same read and changes
nothing. The real run trashes in transactions of ``CHUNK`` drawers, so the write lock is
never held long whatever the batch's size (a drawer gone meanwhile is skipped).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np

from palaced.index.vectors import from_blob
from palaced.memory import trash
from palaced.palace.handle import Palace, now_ms
from palaced.store.lookup.search import fts_terms
from palaced.store.rows import audit
from palaced.store.rows import trash as trash_sql
from palaced.store.rows import upkeep as sql
from palaced.store.rows.drawers import get_drawer
from palaced.store.rows.edits import Edit, edit_drawer
from palaced.text import rules
from palaced.wire.errors import InvalidArgs, InvalidContent, MemoryNotFound

CHUNK = 500  # drawers per transaction of a bulk forget or restore
BATCH_KINDS = ("forget", "merge")
_BATCH = re.compile(r"(forget|merge)-[0-9a-z]{1,16}-[0-9a-f]{6}")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Selection:
    """What a bulk forget selects: drawers matching every selector given (None: any)."""

    wing: str | None = None
    room: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None  # a glob
    before_ms: int | None = None  # stored before this time
    query: str | None = None  # every searchable word of it in the text

    @property
    def empty(self) -> bool:
        """True when no selector is given (every drawer would match)."""
        return (self.wing is None and self.room is None and not self.tags
                and self.source is None and self.before_ms is None and not self.query)


def new_batch(kind: str, ts: int) -> str:
    """A fresh batch id: ``forget-<time base 36>-<6 hex>``."""
    digits, n = "", ts
    while True:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if not n:
            break
    return f"{kind}-{digits}-{secrets.token_hex(3)}"


def check_batch(batch: str) -> str:
    """``batch`` when it is a batch id as ``new_batch`` makes them.

    Raises:
        InvalidArgs: otherwise.
    """
    if not _BATCH.fullmatch(batch):
        raise InvalidArgs("not a batch id (a bulk forget or a merge says it, e.g. "
                          "forget-m3x9k2-a1b2c3)", details={"arg": "batch"})
    return batch


def _select(c: apsw.Connection, sel: Selection) -> list[tuple[int, str, str, str, int]]:
    rows = sql.bulk_rows(c, wing=sel.wing, room=sel.room, tags=sel.tags, source=sel.source,
                         before_ms=sel.before_ms)
    if sel.query:
        terms = fts_terms(sel.query)
        rows = [r for r in rows if _holds_all(r[3], terms)]
    return rows


def _holds_all(text: str, terms: Sequence[str]) -> bool:
    words = {w.lower() for w in _WORD.findall(text)}
    return all(t in words for t in terms)


def _listed(rows: Sequence[tuple[int, str, str, str, int]], show: int) -> list[dict[str, Any]]:
    return [{"id": r[0], "wing": r[1], "room": r[2], "preview": rules.preview(r[3]),
             "created_ms": r[4]} for r in rows[:show]]


def selection_token(ids: Sequence[int]) -> str:
    """The token naming exactly the set ``ids`` (order aside): what a dry run answers and a
    real run's ``expect`` must equal."""
    joined = ",".join(str(i) for i in sorted(ids))
    return "sel-" + hashlib.sha256(joined.encode()).hexdigest()[:24]


def _discard(palace: Palace, ids: Sequence[int], *, batch: str, actor: audit.Actor,
             keep_ms: int, ts: int) -> list[int]:
    """Trash ``ids`` under ``batch`` in transactions of CHUNK (worker thread, write lock)."""
    done: list[int] = []
    for at in range(0, len(ids), CHUNK):
        part = ids[at:at + CHUNK]

        def tx(c: apsw.Connection, part: Sequence[int] = part) -> tuple[list[int], list[int]]:
            present, vids = trash.discard_sync(c, part, reason=batch, actor=actor, now=ts,
                                               keep_ms=keep_ms)
            return present, vids

        present, vids = palace.store.write(tx)
        trash.drop_vectors(palace, vids)
        done += present
    return done


async def forget_many(palace: Palace, sel: Selection, actor: audit.Actor, *, keep_ms: int,
                      max_drawers: int, dry_run: bool = False, show: int = 20,
                      expect: str | None = None) -> dict[str, Any]:
    """Move every drawer ``sel`` selects to the trash as one batch (``dry_run``: only say
    which).

    Returns ``{"dry_run", "matched", "forgotten", "batch", "drawers", "restorable_until_ms",
    "max_drawers", "selection"}``: ``drawers`` the first ``show`` selected (id, wing, room,
    preview), ``batch`` the id ``restore_batch`` takes (None in a dry run or when nothing
    matched), ``selection`` the token of the selected set (``selection_token``). With
    ``expect`` (a dry run's ``selection``) the real run forgets only that very set: the
    selection is read once, so nothing added later can join it.

    Raises:
        InvalidArgs: no selector (a bulk forget of the whole palace is ``palace delete``),
            more than ``max_drawers`` match outside a dry run, or the selection is not the
            set ``expect`` names (nothing is forgotten).
    """
    if sel.empty:
        raise InvalidArgs("a bulk forget needs a selector: wing, room, tags, source, "
                          "older_than or query (forget a whole palace with `palace delete`)",
                          details={"arg": "selector"})
    if sel.query is not None and not fts_terms(sel.query):
        raise InvalidArgs("the query holds no searchable word", details={"arg": "query"})
    rows = await palace.read(lambda c: _select(c, sel))
    token = selection_token([r[0] for r in rows])
    result: dict[str, Any] = {"dry_run": dry_run, "matched": len(rows), "forgotten": 0,
                              "batch": None, "drawers": _listed(rows, show),
                              "restorable_until_ms": None, "max_drawers": max_drawers,
                              "selection": token}
    if expect is not None and expect != token and not dry_run:
        # A preview's promise: what is forgotten is what was shown, never more or other.
        raise InvalidArgs(
            f"the selection changed since its preview ({len(rows)} drawers match now, "
            "another set): preview it again", details={"arg": "expect", "matched": len(rows)})
    if len(rows) > max_drawers and not dry_run:
        raise InvalidArgs(
            f"{len(rows)} drawers match, more than max_drawers ({max_drawers}): narrow the "
            f"selection, or pass max_drawers {len(rows)} (`--max {len(rows)}`) to forget them "
            "all", details={"arg": "max_drawers", "matched": len(rows)})
    if dry_run or not rows:
        return result
    ts = now_ms()
    batch = new_batch("forget", ts)
    ids = [r[0] for r in rows]
    done = await palace.write(lambda: _discard(palace, ids, batch=batch, actor=actor,
                                               keep_ms=keep_ms, ts=ts))
    kept = keep_ms > 0
    return {**result, "forgotten": len(done), "batch": batch if kept else None,
            "restorable_until_ms": ts + keep_ms if kept else None}


async def restore_batch(palace: Palace, batch: str, actor: audit.Actor, *, keep_ms: int
                        ) -> dict[str, Any]:
    """Bring back every drawer still in the trash under ``batch``.

    Returns ``{"batch", "restored", "conflicts"}``: the ids restored, and
    ``{"id", "conflict"}`` of those left in the trash because a drawer with the same text is
    active now. A resent restore finds nothing left and restores nothing.

    Raises:
        InvalidArgs: not a batch id.
        MemoryNotFound: nothing of that batch is in the trash, and nothing ever was restored
            from it (an unknown or expired batch).
    """
    check_batch(batch)
    restored: list[int] = []
    conflicts: list[dict[str, Any]] = []

    def run() -> None:
        ts = now_ms()
        ids = palace.store.read(lambda c: trash_sql.batch_ids(c, batch, ts - keep_ms))
        for at in range(0, len(ids), CHUNK):
            part = ids[at:at + CHUNK]

            def tx(c: apsw.Connection, part: Sequence[int] = part
                   ) -> tuple[list[int], list[bytes], list[int], bool]:
                back: list[int] = []
                waiting = False  # a drawer back without vectors (another embedder's)
                blobs: list[bytes] = []
                vids: list[int] = []
                for did in part:
                    try:
                        with c:  # a savepoint: a conflict leaves nothing behind
                            got = trash_sql.restore(c, did, agent=actor.agent, now_ms=ts,
                                                    kept_since_ms=ts - keep_ms, around=False)
                    except InvalidContent as exc:
                        conflicts.append({"id": did, "conflict": exc.details.get("conflict")})
                        continue
                    if got is not None:
                        back.append(did)
                        blobs += got[0]
                        vids += got[1]
                        waiting = waiting or not got[1]
                if back:
                    trash_sql.restore_around(c, back)  # each room neighbour once
                    audit.append(c, actor, "restored", ts, drawer_ids=back,
                                 detail={"batch": batch, "vectors": len(vids)})
                return back, blobs, vids, waiting

            back, blobs, vids, waiting = palace.store.write(tx)
            restored.extend(back)
            if vids and palace.index is not None:
                palace.index.add(vids, np.stack([from_blob(b) for b in blobs]))
            if waiting:  # embedded in the background, at once when a model is ready
                palace.note_unembedded(soon=True)

    await palace.write(run)
    if not restored and not conflicts:
        raise MemoryNotFound(f"nothing of batch {batch} is in the trash of palace "
                             f"{palace.name!r} (restored already, or past the keep period)",
                             details={"batch": batch, "palace": palace.name})
    return {"batch": batch, "restored": restored, "conflicts": conflicts}


def pick_keeper(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The drawer a merge keeps: the longest text, then the newest (created, then id)."""
    return max(rows, key=lambda d: (len(d["text"]), d["created_ms"], d["id"]))


async def merge(palace: Palace, ids: Sequence[int], actor: audit.Actor, *, keep_ms: int,
                dry_run: bool = False) -> dict[str, Any]:
    """Merge duplicate drawers into one: the keeper (``pick_keeper``) gets the union of
    their tags and the highest importance (an edit: its old version is kept as history), the
    concepts citing the others cite it too, and the others go to the trash as one batch.

    Returns ``{"dry_run", "kept", "merged", "tags", "importance", "batch",
    "restorable_until_ms"}``.

    Raises:
        InvalidArgs: fewer than two distinct ids.
        MemoryNotFound: one of them is no active drawer (nothing is changed).
    """
    wanted = list(dict.fromkeys(int(i) for i in ids))
    if len(wanted) < 2:
        raise InvalidArgs("a merge needs at least two distinct drawer ids",
                          details={"arg": "ids"})

    def plan(c: apsw.Connection) -> tuple[dict[str, Any], list[int], list[str], float]:
        rows = []
        for did in wanted:
            d = get_drawer(c, did)
            if d is None:
                raise MemoryNotFound(f"no drawer {did} in palace {palace.name!r}",
                                     details={"id": did, "palace": palace.name})
            rows.append(d)
        keeper = pick_keeper(rows)
        tags = list(dict.fromkeys(t for d in [keeper, *rows] for t in d["tags"]))
        importance = max(float(d["importance"]) for d in rows)
        return keeper, [d["id"] for d in rows if d["id"] != keeper["id"]], tags, importance

    if dry_run:
        keeper, others, tags, importance = await palace.read(plan)
        return {"dry_run": True, "kept": keeper["id"], "merged": others, "tags": tags,
                "importance": importance, "batch": None, "restorable_until_ms": None}
    ts = now_ms()
    batch = new_batch("merge", ts)

    def write() -> dict[str, Any]:
        def tx(c: apsw.Connection) -> tuple[dict[str, Any], list[int]]:
            # Planned under the write lock: what is merged is what was read.
            keeper, others, tags, importance = plan(c)
            weight = None
            if importance != float(keeper["importance"]):
                weight = rules.drawer_weight({**keeper, "importance": importance}, now_ms=ts)
            done = edit_drawer(c, keeper["id"], Edit(tags=tuple(tags), importance=importance),
                               ts, weight, actor.agent)
            if done is not None and done[0]:
                audit.append(c, actor, "updated", ts, drawer_ids=[keeper["id"]],
                             detail={"changed": ",".join(done[0]), "batch": batch})
            sql.move_concept_sources(c, others, keeper["id"])
            _, vids = trash.discard_sync(c, others, reason=batch, actor=actor, now=ts,
                                         keep_ms=keep_ms)
            kept = keep_ms > 0
            return {"dry_run": False, "kept": keeper["id"], "merged": others, "tags": tags,
                    "importance": importance, "batch": batch if kept else None,
                    "restorable_until_ms": ts + keep_ms if kept else None}, vids

        result, vids = palace.store.write(tx)
        trash.drop_vectors(palace, vids)
        return result

    return await palace.write(write)
