"""What a closed palace's database says, read without opening the palace (no index load, no
lock, no caches): ``palace status`` lists every palace, and opening them all would load every
vector index into memory just to count rows. The schema is checked first, as an open does: a
view planted in place of one of palace's tables would run (a recursive one forever).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import apsw

from palaced.palace import reads
from palaced.palace.directory import DB_NAME
from palaced.store.conn.db import open_connection
from palaced.store.conn.meta import meta_get
from palaced.store.lookup.reembed import progress
from palaced.store.rows.drawers import counts
from palaced.store.schema.check import refuse_foreign

T = TypeVar("T")


def _read(path: Path, name: str, read: Callable[[apsw.Connection], T]) -> T:
    """``read`` in one read transaction on the closed palace's database, once its schema is
    palace's own.

    Raises:
        StorageError: the database cannot be read, or holds schema objects palace did not
            make (condition ``foreign_schema``).
    """
    conn = open_connection(path / DB_NAME, readonly=True, palace=name)
    try:
        refuse_foreign(conn, name)
        with conn:
            return read(conn)
    finally:
        conn.close()


def recorded_models(path: Path, name: str) -> tuple[str | None, str | None]:
    """The model identity the palace at ``path`` records, and the one it is being
    re-embedded for (None when no switch is under way).

    Raises:
        StorageError: as :func:`_read`.
    """
    return _read(path, name, lambda c: (meta_get(c, "embedder"), progress(c)[0]))


def closed_info(path: Path, name: str, current: str | None) -> dict[str, Any]:
    """The counts and model of the closed palace at ``path``, shaped like ``reads.info``
    (``current``: the identity of the daemon's model, for the re-embedding progress).

    Raises:
        StorageError: as :func:`_read`.
    """
    found, embedder, moving = _read(
        path, name, lambda c: (counts(c), meta_get(c, "embedder"), progress(c)))
    return {"name": name, "path": str(path), **found, "index": None,
            "consistent": None, "embedder": embedder, "mismatch": None, "open": False,
            "reembedding": reads.reembedding(embedder, moving, current)}
