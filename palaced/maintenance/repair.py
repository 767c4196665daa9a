"""``palace doctor --repair`` for one palace: mend what can be derived again from its drawers.

Opening the palace already mends three things (``Palace.open``): an older schema is
migrated, a missing identity file is written, and a missing or stale vector index file is
rebuilt from the database. Schema objects palace did not make are dropped first, before
anything opens the palace (which refuses to open with them). The rest runs on the open
palace's write hop: full-text rows and indexes are rebuilt, vectors of deleted drawers
dropped, drawers that lost their vectors queued for embedding, closets refiled, room
contexts recomputed; then the in-memory vector index is rebuilt if the vectors changed and
waiting drawers are embedded. Damage SQLite finds in the database itself is not touched:
that takes a backup (``palace restore``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread
import apsw

from palaced.engine.services import Services
from palaced.maintenance import compaction
from palaced.maintenance.checks import OK, Check, PalaceFacts
from palaced.memory import writes
from palaced.palace.handle import DB_NAME, Palace
from palaced.palace.registry import Registry
from palaced.store.conn.db import open_connection, storage_error
from palaced.store.jobs import repairs
from palaced.store.rows.drawers import get_drawers
from palaced.store.schema import check as schema_check
from palaced.text.topics import extract_topics

T = TypeVar("T")

# What opening the palace mends by itself.
MENDED_BY_OPEN = {"schema": "migrated its schema", "identity": "wrote a new identity.txt",
                  "index": "rebuilt its vector index file from the database"}


async def repair_palace(registry: Registry, services: Services, facts: PalaceFacts,
                        checks: Sequence[Check], *, full: bool) -> list[str]:
    """Repair the fixable, failing ``checks`` of one palace; what was done, in words.

    Raises:
        PalaceError: the palace cannot be opened (then nothing here can mend it).
    """
    todo = {c.name for c in checks if c.fixable and c.status != OK}
    done: list[str] = []
    if "schema_objects" in todo:
        dropped, stuck = await _mend_schema(registry, facts)
        done += dropped
        if stuck:
            return done  # it cannot be opened: nothing else here can run
    was_open = facts.open
    palace = await registry.get(facts.name)
    if not was_open:
        mended = todo & set(MENDED_BY_OPEN)
        if palace.index is None:  # no model (yet): the index is built when one is loaded
            mended.discard("index")
        done += [MENDED_BY_OPEN[n] for n in sorted(mended)]
    palace.begin_work()  # not closed as idle while it is repaired
    try:
        if "directory" in todo:
            await anyio.to_thread.run_sync(os.chmod, palace.dir, 0o700)
            done.append(f"made {palace.dir} 0700")
        topics: dict[int, list[str]] = {}
        if "closets" in todo and facts.closet_mismatch:
            ids = list(facts.closet_mismatch)
            texts = await palace.read(lambda c: get_drawers(c, ids))
            topics = await anyio.to_thread.run_sync(
                lambda: {i: extract_topics(str(d["text"])) for i, d in texts.items()})
        if todo & {"fts", "vectors", "closets", "context"}:
            stale = list(facts.context_stale or ())
            done += await palace.write(partial(_mend_tables, palace, todo, topics, stale))
        if was_open and "index" in todo:
            palace.index_lacks_vectors()
        if palace.index_stale:
            await compaction.compact(palace)
            count = len(palace.index) if palace.index is not None else 0
            done.append(f"rebuilt the vector index in memory ({count} vectors)")
        if todo & {"vectors", "embeddings"} and palace.vector_embedder() is not None:
            embedded = await writes.embed_pending(palace)
            done.append(f"embedded {embedded} drawer(s) that had no vectors")
    finally:
        palace.end_work()
    return done


async def _mend_schema(registry: Registry, facts: PalaceFacts) -> tuple[list[str], bool]:
    """Drop the schema objects palace did not make and remake its own changed or missing
    indexes, triggers and views (``schema_check.mend``), before anything opens the palace
    (which refuses it meanwhile); ``(what was done, whether deviations remain)``.

    Works on a connection of its own while the palace stays closed, or on the open palace's
    writer under its write lock; the objects are read again there, so what is dropped is
    what is in the file now.

    Raises:
        StorageError: SQLite refused (e.g. a virtual table of a module it does not have).
    """
    def tx(conn: apsw.Connection) -> tuple[list[str], bool]:
        found = schema_check.schema_deviations(conn)
        done = schema_check.mend(conn, found)
        return done, any(not d.fixable for d in found)

    async with registry.held(facts.name) as palace:
        if palace is None:
            return await anyio.to_thread.run_sync(_mend_closed, facts, tx)
    return await palace.write(lambda: palace.store.write(tx, stamp=False), wrote=False)


def _mend_closed(facts: PalaceFacts, tx: Callable[[apsw.Connection], T]) -> T:
    """Run ``tx`` in one transaction on a connection of its own to the palace's database
    (worker thread; the caller keeps the palace closed)."""
    path = facts.directory / DB_NAME
    conn = open_connection(path, palace=facts.name)
    try:
        with conn:
            return tx(conn)
    except apsw.Error as exc:
        raise storage_error(exc, path, facts.name) from exc
    finally:
        conn.close()


def _mend_tables(palace: Palace, todo: set[str], topics: dict[int, list[str]],
                 stale: list[int]) -> list[str]:
    """The table repairs, in one transaction under the write lock (worker thread)."""
    def tx(c: apsw.Connection) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "fts" in todo:
            out["fts"] = repairs.refill_fts(c)
            repairs.rebuild_entities_fts(c)
        if "vectors" in todo:
            out["orphans"] = repairs.drop_orphan_vectors(c)
            out["requeued"] = repairs.requeue_unembedded(c)
        if "closets" in todo:
            out["closets"] = repairs.drop_orphan_closets(c)
            for did, found in topics.items():
                repairs.refile_closets(c, did, found)
        if "context" in todo:
            out["context"] = repairs.refresh_contexts(c, stale)
        return out

    # Derived data only: a backup taken before this repair lacks no content.
    result = palace.store.write(tx, stamp=False)
    done = []
    if "fts" in result:
        done.append(f"rebuilt the full-text indexes ({result['fts']} drawer row(s) rewritten)")
        if palace.keywords.engine is not None or palace.keywords.building:
            # The rewritten rows are logged (the engine would follow them), but a repaired
            # full-text index is reason enough to rebuild its cache from scratch.
            palace.keywords.start(rebuild=True)
            done.append("rebuilding the keyword engine in the background")
    if result.get("orphans"):
        palace.index_lacks_vectors()  # rebuilt from the remaining vectors by the checkpoint
        done.append(f"dropped {len(result['orphans'])} vector(s) of deleted drawers")
    if result.get("requeued"):
        palace.note_unembedded()
        done.append(f"queued {result['requeued']} drawer(s) without vectors for embedding")
    if "closets" in result:
        done.append(f"dropped {result['closets']} orphan topic entries, refiled "
                    f"{len(topics)} drawer(s)")
    if "context" in result:
        done.append(f"recomputed the room context of {len(stale)} drawer(s) "
                    f"({result['context']} row(s) fixed)")
    return done
