"""Reads of an open palace: one drawer, a page of drawers, the palace's info and identity.

Each is an async function taking the ``Palace`` handle and making one ``Palace.read`` hop
(or one worker-thread call for the identity file). ``read_identity`` is the one place that
reads a palace's L0 identity file; recall calls it inside its own hop.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from typing import Any

import anyio.to_thread
import apsw

from palaced.palace.directory import IDENTITY_NAME
from palaced.palace.handle import Palace, now_ms
from palaced.store import drawers, edits
from palaced.store import reembed as next_vectors
from palaced.wire.errors import MemoryNotFound

log = logging.getLogger("palaced.palace.reads")

# L0 opens every recall and wake-up; a bigger file is a mistake, not an identity.
IDENTITY_MAX_BYTES = 64 * 1024
# The last problem reported per identity file: every recall reads the file, so the same
# warning is logged once, not once per request.
_reported: dict[Path, str] = {}


def _report(path: Path, problem: str | None) -> None:
    if problem is None:
        _reported.pop(path, None)
    elif _reported.get(path) != problem:
        if len(_reported) > 1024:
            _reported.clear()
        _reported[path] = problem
        log.warning("%s: %s", path, problem)


def read_identity(path: Path, *, keep_comments: bool = False) -> str:
    """L0: the identity file's text without ``#`` comment lines ("" when there is none);
    with ``keep_comments``, the whole text as the file holds it (for an export).

    The file is user-edited, so nothing in it may break a recall: only a regular file is read
    (a FIFO or device would block the worker thread forever; a symlink is not followed), at
    most ``IDENTITY_MAX_BYTES`` of it (then cut with a marker), and bytes that are not UTF-8
    are replaced. Never raises; each new problem is logged once as a warning.
    """
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        _report(path, None)
        return ""
    except OSError as exc:
        _report(path, "is a symlink; ignored (L0 stays empty)" if exc.errno == errno.ELOOP
                else f"cannot be read ({exc.strerror}); L0 stays empty")
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _report(path, "is not a regular file; ignored (L0 stays empty)")
            return ""
        raw = bytearray()
        while len(raw) <= IDENTITY_MAX_BYTES:
            chunk = os.read(fd, IDENTITY_MAX_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        _report(path, f"cannot be read ({exc.strerror}); L0 stays empty")
        return ""
    finally:
        os.close(fd)
    cut = len(raw) > IDENTITY_MAX_BYTES
    _report(path, f"is larger than {IDENTITY_MAX_BYTES} bytes; L0 is cut there" if cut
            else None)
    text = bytes(raw[:IDENTITY_MAX_BYTES]).decode("utf-8", errors="replace")
    if keep_comments:
        return text
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    out = "\n".join(lines).strip()
    if cut:
        out += f"\n[{path.name} truncated at {IDENTITY_MAX_BYTES} bytes]"
    return out


async def get(palace: Palace, drawer_id: int, *, history: bool = False) -> dict[str, Any]:
    """Return one drawer, with ``supersedes`` (the ids of the drawers it replaced) and
    ``versions`` (1 + how often it was edited in place); with ``history`` also its earlier
    versions, newest first (``store.edits.history``).

    Raises:
        MemoryNotFound: no such drawer.
    """
    def read(c: apsw.Connection) -> dict[str, Any] | None:
        d = drawers.get_drawer(c, drawer_id)
        if d is not None:
            d["supersedes"] = drawers.superseded_ids(c, drawer_id)
            earlier = edits.history(c, drawer_id) if history else None
            d["versions"] = 1 + (len(earlier) if earlier is not None else
                                 edits.history_counts(c, [drawer_id]).get(drawer_id, 0))
            if earlier is not None:
                d["history"] = earlier
        return d

    drawer = await palace.read(read)
    if drawer is None:
        raise MemoryNotFound(f"no drawer {drawer_id} in palace {palace.name!r}",
                             details={"id": drawer_id, "palace": palace.name})
    return drawer


async def list_drawers(palace: Palace, filters: drawers.Filters, limit: int, offset: int
                       ) -> dict[str, Any]:
    """A page of drawers, newest first: ``{drawers, total, next_offset}``."""
    found, total = await palace.read(
        lambda c: drawers.list_drawers(c, filters, limit, offset, now_ms()))
    nxt = offset + len(found)
    return {"drawers": found, "total": total,
            "next_offset": nxt if nxt < total else None}


def reembedding(stored: str | None, moving: tuple[str | None, int, int], current: str | None
                ) -> dict[str, Any] | None:
    """A palace's re-embedding for another model, ``{"model", "done", "total", "paused"}``
    (drawers), from its recorded model, ``store.reembed.progress`` and the daemon's model;
    None if none runs or is due. ``paused``: its model is not the one loaded now."""
    target, done, total = moving
    if current is not None and stored not in (None, current) and target != current:
        return {"model": current, "done": 0, "total": total, "paused": False}  # not started
    if target is None:
        return None
    return {"model": target, "done": done, "total": total, "paused": target != current}


async def info(palace: Palace) -> dict[str, Any]:
    """Counts, embedder identity, index agreement and any re-embedding's progress."""
    from palaced.palace.team import TeamPalace

    team = isinstance(palace, TeamPalace)
    counts = await palace.read(drawers.counts)
    rooms = await palace.read(drawers.rooms)
    # A team palace is never re-embedded and has no local index (pgvector serves it).
    moving = (None, 0, 0) if team else await palace.read(next_vectors.progress)
    current = palace.services.model.embedder
    index_count = len(palace.index) if palace.index is not None and not team else None
    if index_count is not None and index_count != counts["vectors"]:
        # A write between its commit and its index update looks like disagreement: count
        # again behind the write lock, where no write is half done.
        async with palace.write_lock:
            counts = await palace.read(drawers.counts)
            index_count = len(palace.index) if palace.index is not None else None
    info_team: Any = palace if team else None
    return {
        "name": palace.name,
        "path": str(palace.dir),
        **counts,
        "index": index_count,
        "consistent": index_count == counts["vectors"] if index_count is not None else None,
        "index_load": palace.index_load.as_dict() if palace.index_load is not None else None,
        # Vectors a kill -9 now would have to replay at the next open.
        "index_unsaved": palace.index.unsaved if palace.index is not None else None,
        # The keyword engine of large palaces (palaced/palace/keywords.py); none on a team palace.
        "keywords": None if team else palace.keywords.state(),
        "embedder": palace.embedder_identity,
        "mismatch": palace.mismatch,
        "reembedding": reembedding(palace.embedder_identity, moving,
                                   current.identity if current else None),
        "rooms": rooms,
        "identity": await identity_text(palace),
        **({"store": info_team.pg.server, "schema": info_team.ref.schema} if team else {}),
    }


async def identity_text(palace: Palace) -> str:
    """L0: identity.txt without comment lines (a team palace's is in its database)."""
    from palaced.palace.team import TeamPalace

    if isinstance(palace, TeamPalace):
        return await palace.identity()
    return await anyio.to_thread.run_sync(read_identity, palace.dir / IDENTITY_NAME)
