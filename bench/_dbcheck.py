"""Checks of a palace's files from outside the daemon (after it stopped or was killed).

The database is opened read-only with the stdlib ``sqlite3``; the vector index file is loaded
with usearch and compared with the database's ``vectors`` table, the truth it caches. Used by
the bench checks (``crash.py``) and by the tests (``tests/dbcheck.py`` loads this file).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np


@contextmanager
def read_only(db: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the SQLite file ``db`` (WAL frames included)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        yield conn
    finally:
        conn.close()


def integrity(db: Path, *, quick: bool = False) -> str:
    """``PRAGMA integrity_check`` (or ``quick_check``): ``"ok"`` when clean."""
    with read_only(db) as conn:
        rows = conn.execute(f"PRAGMA {'quick_check' if quick else 'integrity_check'}").fetchall()
    return "\n".join(str(r[0]) for r in rows)


def texts(db: Path) -> dict[int, str]:
    """Every drawer's text by id."""
    with read_only(db) as conn:
        return {int(i): str(t) for i, t in conn.execute("SELECT id, text FROM drawers")}


def index_problems(palace_dir: Path) -> list[str]:
    """How the saved vector index disagrees with the database ([] when it agrees).

    The daemon trusts the file only when the database records its digest and the vector epoch
    it holds; a file it would not trust is rebuilt at the next open, so it is no problem. A
    trusted file must hold exactly the ``vectors`` ids, each with its stored vector.
    """
    from usearch.index import Index

    with read_only(palace_dir / "palace.db") as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        rows = conn.execute("SELECT id, vec FROM vectors").fetchall()
        dims = int(meta.get("dims") or 0)
    path = palace_dir / "index.usearch"
    trusted = (path.is_file() and meta.get("index_digest") is not None
               and (meta.get("vec_epoch") or "0") == (meta.get("index_saved_epoch") or "0")
               and hashlib.sha256(path.read_bytes()).hexdigest() == meta["index_digest"])
    if not trusted:
        return []
    index = Index.restore(str(path))
    if index is None:
        return [f"{path} is trusted but does not load"]
    problems = []
    if len(index) != len(rows):
        problems.append(f"index holds {len(index)} vectors, the database {len(rows)}")
    for vid, blob in rows[:: max(1, len(rows) // 200)]:
        got = index.get(int(vid))
        want = np.frombuffer(blob, dtype="<f4")
        if got is None or got.shape[-1] != dims or not np.allclose(got.reshape(-1), want,
                                                                   atol=1e-3):
            problems.append(f"vector {vid} differs between the index and the database")
            break
    return problems
