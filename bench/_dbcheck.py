"""Checks of a palace's files from outside the daemon (after it stopped or was killed).

The database is opened read-only with the stdlib ``sqlite3``; the vector index file is loaded
with usearch and compared with the database's ``vectors`` table, the truth it caches. Used by
the bench checks (``crash.py``) and by the tests (``tests/support/dbcheck.py`` loads this file).
"""

from __future__ import annotations

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

    The daemon trusts the file only when the database records a save of it (``index_saves``:
    its CRC-32 and size, and its watermark, the highest vector id it holds); a file it would
    not trust is rebuilt at the next open, so it is no problem. A trusted file must hold every
    ``vectors`` row up to its watermark, each with its stored vector (the rows above it are
    replayed at the next open; keys of vectors deleted since are tombstones it skips).
    """
    import json
    import zlib

    from usearch.index import Index

    with read_only(palace_dir / "palace.db") as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        rows = conn.execute("SELECT id, vec FROM vectors").fetchall()
        dims = int(meta.get("dims") or 0)
    path = palace_dir / "index.usearch"
    if not path.is_file():
        return []
    data = path.read_bytes()
    crc = zlib.crc32(data)
    record = next((r for r in json.loads(meta.get("index_saves") or "[]")
                   if r.get("crc") == crc and r.get("bytes") == len(data)), None)
    if record is None:
        return []
    index = Index.restore(str(path))
    if index is None:
        return [f"{path} is trusted but does not load"]
    mark = int(record["watermark"])
    held = [(vid, blob) for vid, blob in rows if vid <= mark]
    problems = []
    if len(index) < len(held):
        problems.append(f"index holds {len(index)} vectors, the database {len(held)} up to "
                        f"its watermark {mark}")
    for vid, blob in held[:: max(1, len(held) // 200)]:
        got = index.get(int(vid))
        want = np.frombuffer(blob, dtype="<f4")
        if got is None or got.shape[-1] != dims or not np.allclose(
                np.asarray(got, dtype=np.float32).reshape(-1), want, atol=2e-3):
            problems.append(f"vector {vid} differs between the index and the database")
            break
    return problems
