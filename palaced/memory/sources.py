"""The import ledger of an open palace: what each imported file or conversation filed.

Importers (``palace import markdown``, ``chatgpt``...) name every unit they import (a
source: an importer and a key) and send its drawers with a content hash. ``sync`` does
nothing when the hash is the recorded one; otherwise it stores the drawers (idempotent by
content, so the sections that did not change keep their drawers, ids and vectors), records
the new set, and deletes the drawers the source filed before and no longer does, unless
another source claims them too. ``drop`` forgets a source the same way (a deleted file).

The drawers a source no longer files are purged, not moved to the trash: the imported file is
their origin (re-importing its old version brings them back), and a drawer restored from the
trash would be claimed by no source, so the next import could neither replace nor drop it.
Each sync or drop that deletes records the purged ids in the audit log, in the same
transaction, under the caller's agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from palaced.memory import writes
from palaced.palace.handle import Palace, now_ms
from palaced.store.rows import audit, drawers
from palaced.store.rows import sources as sql


async def list_page(palace: Palace, importer: str, prefix: str, after: str | None,
                    limit: int) -> dict[str, Any]:
    """A page of ``importer``'s sources whose key starts with ``prefix``:
    ``{sources, next}`` (``next``: the ``after`` of the next page, None at the end)."""
    found = await palace.read(lambda c: sql.list_sources(c, importer, prefix, after, limit))
    return {"sources": found, "next": found[-1]["key"] if len(found) == limit else None}


async def unchanged(palace: Palace, importer: str, key: str, digest: str
                    ) -> dict[str, Any] | None:
    """The answer of ``sync`` when source ``key`` is recorded with ``digest`` already (it
    changes nothing), else None."""
    state = await palace.read(lambda c: sql.source_state(c, importer, key))
    if state is None or state[0] != digest:
        return None
    return {"changed": False, "stored": 0, "unchanged": state[1], "removed": 0, "ids": []}


def _delete(c: apsw.Connection, ids: Sequence[int]) -> list[int]:
    """Delete drawers ``ids`` in the caller's transaction; their vector ids."""
    return (drawers.delete_drawers(c, ids) or []) if ids else []


def _audit_purge(c: apsw.Connection, actor: audit.Actor, ts: int, importer: str,
                 ids: Sequence[int]) -> None:
    """Record the drawers a source no longer files, purged (see the module docstring)."""
    if ids:
        audit.append(c, actor, "purged", ts, drawer_ids=ids,
                     detail={"importer": importer})


def _drop_vectors(palace: Palace, vector_ids: list[int]) -> None:
    if vector_ids and palace.index is not None:
        palace.index.remove(vector_ids)


async def sync(palace: Palace, importer: str, key: str, digest: str,
               items: Sequence[drawers.NewDrawer], actor: audit.Actor = audit.SYSTEM
               ) -> dict[str, Any]:
    """Make ``items`` the drawers of source ``key``, unless ``digest`` is already recorded:
    ``{changed, stored, unchanged, removed, ids}``.

    Raises:
        MemoryNotFound: an item supersedes no drawer.
    """
    same = await unchanged(palace, importer, key, digest)
    if same is not None:
        return same
    stored = await writes.remember_many(palace, items, dedup=False, actor=actor)
    ids = [int(i) for i in stored["ids"]]

    def write() -> int:
        def tx(c: apsw.Connection) -> tuple[list[int], list[int]]:
            ts = now_ms()
            orphans = sql.claim(c, importer, key, digest, ids, ts)
            _audit_purge(c, actor, ts, importer, orphans)
            return orphans, _delete(c, orphans)

        orphans, vector_ids = palace.store.write(tx)
        _drop_vectors(palace, vector_ids)
        return len(orphans)

    removed = await palace.write(write)
    created = sum(1 for c in stored["created"] if c)
    return {"changed": True, "stored": created, "unchanged": len(ids) - created,
            "removed": removed, "ids": ids}


async def drop(palace: Palace, importer: str, key: str,
               actor: audit.Actor = audit.SYSTEM) -> dict[str, Any]:
    """Forget source ``key`` and delete its drawers that no other source claims:
    ``{found, removed}`` (a source never recorded is ``found: false``, nothing removed)."""
    def write() -> int | None:
        def tx(c: apsw.Connection) -> tuple[list[int] | None, list[int]]:
            orphans = sql.drop(c, importer, key)
            _audit_purge(c, actor, now_ms(), importer, orphans or [])
            return orphans, _delete(c, orphans or [])

        orphans, vector_ids = palace.store.write(tx)
        _drop_vectors(palace, vector_ids)
        return None if orphans is None else len(orphans)

    removed = await palace.write(write)
    return {"found": removed is not None, "removed": removed or 0}
