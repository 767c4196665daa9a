"""Building the keyword engine (``keyword_engine``) from a palace's full-text rows, and its
file: one header (JSON: the arrays' layout, the row count, avgdl, the log sequence number the
build saw, a random build id and the BM25 column weights of its impacts) and the arrays,
64-byte aligned, memory-mapped at load.

A build runs in a child process (``python -m palaced.index.keyword_file DB OUT``, started by
``keywords.KeywordState``) on a connection of its own, in one read snapshot; the file is
written atomically (temp file, fsync, rename, directory fsync).
"""

from __future__ import annotations

import json
import mmap
import os
import secrets
import sys
import threading
from array import array
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from palaced.index.keyword_engine import K1, B, Base, term_key, tokens
from palaced.store.lookup.fts_log import all_rows, in_snapshot, last_seq
from palaced.store.lookup.search import BM25_WEIGHTS
from palaced.wire.safe_files import sync_dir

MAGIC = b"PALKW001"
BATCH_ROWS = 20_000  # rows tokenised per numpy pass while building (bounded memory)
_ALIGN = 64


class Unusable(Exception):
    """The engine file cannot serve (the message says why): rebuild."""


class Stopped(Exception):
    """A build was stopped (its palace is closing)."""


def build(conn: apsw.Connection, stop: threading.Event | None = None) -> Base:
    """Build the engine from every ``drawers_fts`` row of this snapshot (a read transaction).

    Raises:
        Stopped: ``stop`` was set meanwhile.
    """
    seq = last_seq(conn)
    vocab: dict[str, int] = {}
    tid_of = vocab.setdefault
    parts: list[list[np.ndarray]] = []  # per batch: term ids, drawer ids, frequencies
    doc_ids: list[int] = []
    doc_lens: list[int] = []
    tids, cols = array("i"), array("b")
    rows_in_batch: list[int] = []
    lens_in_batch: list[int] = []

    def flush() -> None:
        if not rows_in_batch:
            return
        t = np.frombuffer(tids, dtype=np.int32).astype(np.int64)
        w = np.asarray(BM25_WEIGHTS, dtype=np.float64)[np.frombuffer(cols, dtype=np.int8)]
        d = np.repeat(np.asarray(rows_in_batch, dtype=np.int64),
                      np.asarray(lens_in_batch, dtype=np.int64))
        key = (t << 32) | d
        order = np.argsort(key, kind="stable")
        key, w = key[order], w[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        freq = np.add.reduceat(w, first) if len(first) else np.zeros(0)
        k = key[first]
        parts.append([(k >> 32).astype(np.int32), (k & 0xFFFFFFFF).astype(np.uint32),
                      freq.astype(np.float32)])
        del tids[:], cols[:]
        rows_in_batch.clear()
        lens_in_batch.clear()

    for rowid, text, context, dates in all_rows(conn):
        n = 0
        for c, col in enumerate((text, context, dates)):
            toks = tokens(str(col or ""))
            if toks:
                tids.extend([tid_of(x, len(vocab)) for x in toks])
                cols.extend(bytes([c]) * len(toks))
                n += len(toks)
        rows_in_batch.append(int(rowid))
        lens_in_batch.append(n)
        doc_ids.append(int(rowid))
        doc_lens.append(n)
        if len(rows_in_batch) >= BATCH_ROWS:
            if stop is not None and stop.is_set():
                raise Stopped
            flush()
    flush()
    n_rows = len(doc_ids)
    span = (max(doc_ids) + 1) if doc_ids else 1
    dl = np.zeros(span, dtype=np.uint32)
    if doc_ids:
        dl[np.asarray(doc_ids, dtype=np.int64)] = np.asarray(doc_lens, dtype=np.uint32)
    total = int(sum(doc_lens))
    avgdl = total / n_rows if n_rows else 1.0
    # One column at a time, each batch's piece freed as it is joined: the peak stays near
    # 24 bytes per posting (~1.5 GB at a million drawers), in the build process.
    tid = _joined(parts, 0, np.int32)
    # Each batch is sorted by (term, drawer) and the batches by drawer: a stable sort by term
    # (timsort merges the runs) gives every term's drawers in ascending order.
    order = np.argsort(tid, kind="stable")
    tid = tid[order]
    n_terms = len(vocab)
    count = np.bincount(tid, minlength=n_terms).astype(np.int64)
    del tid
    docs = _joined(parts, 1, np.uint32)[order]
    freq = _joined(parts, 2, np.float32)[order]
    del order
    imps = np.empty(len(docs), dtype=np.float32)
    scale = B / max(avgdl, 1e-9)
    for s in range(0, len(docs), 1 << 22):  # float64 in slices: exact, bounded memory
        f = freq[s:s + (1 << 22)].astype(np.float64)
        norm = K1 * (1 - B + scale * dl[docs[s:s + (1 << 22)]].astype(np.float64))
        imps[s:s + len(f)] = f * (K1 + 1) / (f + norm)
    del freq
    start = np.zeros(n_terms, dtype=np.int64)
    if n_terms:
        start[1:] = np.cumsum(count)[:-1]
    maxi = (np.maximum.reduceat(imps, start) if len(imps) else np.zeros(n_terms)
            ).astype(np.float32)
    keys = np.fromiter((term_key(t) for t in vocab), dtype=np.uint64, count=n_terms)
    perm = np.argsort(keys, kind="stable")
    return Base(keys=keys[perm], start=start[perm], count=count[perm], maxi=maxi[perm],
                docs=docs, imps=imps, dl=dl, n_rows=n_rows, avgdl=float(avgdl), seq=seq,
                build_id=secrets.token_hex(8))


def _joined(parts: list[list[np.ndarray]], column: int, dtype: Any) -> np.ndarray:
    """Column ``column`` of every batch, joined; the batches' pieces are dropped."""
    pieces = [p[column] for p in parts]
    for p in parts:
        p[column] = np.zeros(0, dtype=dtype)
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    del pieces
    return out.astype(dtype, copy=False)


# -- the file ---------------------------------------------------------------------------------
_ARRAYS = ("keys", "start", "count", "maxi", "docs", "imps", "dl")


def save(base: Base, path: Path) -> int:
    """Write ``base`` to ``path`` atomically (temp file, fsync, rename, directory fsync);
    returns the file's size. Raises OSError."""
    arrays = {name: np.ascontiguousarray(getattr(base, name)) for name in _ARRAYS}
    layout: dict[str, list[Any]] = {}
    offset = 0
    for name, arr in arrays.items():
        layout[name] = [offset, arr.dtype.str, int(arr.shape[0])]
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"layout": layout, "n_rows": base.n_rows, "avgdl": base.avgdl,
                         "seq": base.seq, "build_id": base.build_id, "data": offset,
                         "weights": list(BM25_WEIGHTS)}).encode()
    head_len = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    # One temp file per process: a build left running by a killed daemon must not write into
    # the new daemon's (each rename then installs one whole file).
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(header).to_bytes(8, "little") + header)
            f.write(b"\0" * (head_len - len(MAGIC) - 8 - len(header)))
            for arr in arrays.values():
                f.write(arr.tobytes())
                f.write(b"\0" * (-arr.nbytes % _ALIGN))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        sync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return head_len + offset


def drop_stale_temps(path: Path) -> None:
    """Delete the temp files of ``path`` left by builds whose process is gone."""
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 1:-len(".tmp")]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # alive, another user's: not ours to delete
            pass


def load(path: Path) -> Base:
    """The base saved in ``path``, its arrays memory-mapped (pages read on first use).

    Raises:
        Unusable: missing, truncated, malformed or built with other column weights
            (``search.BM25_WEIGHTS``: its owner rebuilds it).
    """
    try:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise Unusable(f"cannot read {path.name}: {exc}") from exc
    try:
        if data[:len(MAGIC)] != MAGIC:
            raise Unusable(f"{path.name} is not a keyword engine file")
        hlen = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
        header = json.loads(bytes(data[len(MAGIC) + 8:len(MAGIC) + 8 + hlen]))
        head_len = -(-(len(MAGIC) + 8 + hlen) // _ALIGN) * _ALIGN
        if len(data) != head_len + int(header["data"]):
            raise Unusable(f"{path.name} is truncated or padded ({len(data)} bytes)")
        if header.get("weights") != list(BM25_WEIGHTS):
            # The impacts hold the column weights (and so BM25's k1) of their build: a file
            # of other weights would rank unlike FTS5 and the overlay's rows.
            raise Unusable(f"{path.name} was built with other BM25 weights")
        arrays = {}
        for name in _ARRAYS:
            off, dtype, n = header["layout"][name]
            arrays[name] = np.frombuffer(data, dtype=np.dtype(dtype), count=int(n),
                                         offset=head_len + int(off))
        base = Base(**arrays, n_rows=int(header["n_rows"]), avgdl=float(header["avgdl"]),
                    seq=int(header["seq"]), build_id=str(header["build_id"]))
    except Unusable:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise Unusable(f"{path.name} is malformed: {exc}") from exc
    n_keys = len(base.keys)
    if not (len(base.start) == len(base.count) == len(base.maxi) == n_keys
            and len(base.docs) == len(base.imps)
            and (n_keys == 0 or int(base.start[-1] + base.count[-1]) <= len(base.docs))):
        raise Unusable(f"{path.name} is inconsistent")
    return base




def build_file(db: Path, out: Path) -> Base:
    """Build the engine of the palace database ``db`` (one read snapshot) and save it to
    ``out``: what the child process of ``KeywordState`` runs. Raises apsw.Error, OSError."""
    base = in_snapshot(db, build)
    save(base, out)
    return base



if __name__ == "__main__":  # KeywordState's build process
    build_file(Path(sys.argv[1]), Path(sys.argv[2]))
