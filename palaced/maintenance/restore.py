"""``palace restore``: bring a palace back from a backup made by ``palace backup``.

Nothing is trusted before it is checked: the manifest must be palace's and name only the
files a backup holds; each file is copied into a staging directory beside the palaces and
checked against the manifest's size and sha256 as it is copied (so what is checked is what
is restored); the copied database must pass SQLite's quick_check, be a palace database of a
schema this palaced knows, hold exactly palace's schema objects for that version (no planted
trigger, view, index or table, none of palace's redefined) and hold the counts the manifest
lists. Only then is the palace
closed and its directory swapped for the staging one (``Registry.replace``), refusing to
replace a palace written after the backup unless forced. The palace is opened again at the
end, which rebuilds its vector index from the restored database.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from palaced.maintenance.backup import FORMAT, FORMAT_VERSION, MANIFEST, MAX_MANIFEST_BYTES
from palaced.palace.handle import DB_NAME, IDENTITY_NAME, has_database
from palaced.palace.layout import STAGING_PREFIX, validate_name
from palaced.palace.registry import Registry
from palaced.store.conn.db import APPLICATION_ID, open_connection, storage_errors
from palaced.store.jobs.backup import inspect_copy
from palaced.store.jobs.checks import holds_nothing, last_write
from palaced.store.schema.check import summary
from palaced.store.schema.sqlite import SCHEMA_VERSION
from palaced.wire.errors import (
    BackupInvalid,
    InvalidArgs,
    PalaceExists,
    SchemaTooNew,
    StorageError,
    UnsafePath,
)

RESTORED_FILES = (DB_NAME, IDENTITY_NAME)  # what a manifest may name; nothing else is copied
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _invalid(source: Path, problem: str, **details: Any) -> BackupInvalid:
    return BackupInvalid(f"not a usable backup: {source}: {problem}",
                         details={"path": str(source), **details})


def _open_own(path: Path, source: Path) -> int:
    """Open a file of the backup for reading: a regular file of ours, never through a link.

    Raises:
        BackupInvalid: it is missing or not a regular file; UnsafePath: another uid owns it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _invalid(source, f"{path.name} is missing") from None
    except OSError as exc:
        raise _invalid(source, f"{path.name} cannot be read ({exc.strerror}; a symlink is "
                       "never followed)") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _invalid(source, f"{path.name} is not a regular file")
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise UnsafePath(f"refusing {path}: it belongs to uid {st.st_uid}, not to you; copy "
                         "the backup with your own account first", details={"path": str(path)})
    return fd


def read_manifest(source: Path) -> dict[str, Any]:
    """The backup's manifest, checked field by field (worker thread).

    Raises:
        BackupInvalid: missing, too large, not JSON, not palace's, or naming other files;
        UnsafePath: another uid owns it.
    """
    fd = _open_own(source / MANIFEST, source)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise _invalid(source, f"{MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid(source, f"{MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _invalid(source, f"{MANIFEST} is not a palace backup manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise _invalid(source, f"manifest format {manifest.get('format_version')!r} is not "
                       f"{FORMAT_VERSION}: made by another palace version")
    files, counts = manifest.get("files"), manifest.get("counts")
    if not isinstance(files, dict) or DB_NAME not in files or not set(files) <= set(
            RESTORED_FILES):
        raise _invalid(source, f"the manifest must list {DB_NAME} and may list "
                       f"{IDENTITY_NAME}, nothing else", files=sorted(map(str, files or {})))
    for fname, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                and _HEX64.fullmatch(entry["sha256"]) and type(entry.get("bytes")) is int
                and entry["bytes"] >= 0):
            raise _invalid(source, f"the manifest entry of {fname} is malformed")
    if not isinstance(counts, dict) or not all(type(v) is int for v in counts.values()):
        raise _invalid(source, "the manifest's counts are malformed")
    for key in ("created_ms", "last_write_ms"):
        if manifest.get(key) is not None and type(manifest[key]) is not int:
            raise _invalid(source, f"the manifest's {key} is not an integer")
    if type(manifest.get("created_ms")) is not int or not isinstance(manifest.get("palace"), str):
        raise _invalid(source, "the manifest lacks its palace name or creation time")
    return manifest


def _copy_checked(source: Path, staging: Path, fname: str, entry: dict[str, Any]) -> None:
    """Copy one file of the backup, hashing what is copied; raises BackupInvalid when its
    size or sha256 is not the manifest's.

    A file larger than the manifest says is refused before anything is copied, and the copy
    stops one byte past the declared size whatever the file does meanwhile: a crafted
    backup (a huge sparse file) must not fill the disk the palaces share.
    """
    fd = _open_own(source / fname, source)
    declared = int(entry["bytes"])
    on_disk = os.fstat(fd).st_size
    if on_disk > declared:
        os.close(fd)
        raise _invalid(source, f"{fname} does not match the manifest ({on_disk} bytes; "
                       f"expected {declared}): the backup is damaged or was changed; "
                       "nothing was copied", file=fname)
    h = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as src, open(staging / fname, "xb") as dst:
        while size <= declared:
            chunk = src.read(min(1 << 20, declared + 1 - size))
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
            if size > declared:
                break  # grew while being copied: never write past the declared size
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    if size != declared or h.hexdigest() != entry["sha256"]:
        raise _invalid(source, f"{fname} does not match the manifest ({size} bytes, sha256 "
                       f"{h.hexdigest()[:12]}…; expected {entry['bytes']} bytes, "
                       f"{entry['sha256'][:12]}…): the backup is damaged or was changed",
                       file=fname)


def _stage(source: Path, staging: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Copy and verify the backup into ``staging`` (worker thread); returns its counts.

    Raises:
        BackupInvalid, UnsafePath, SchemaTooNew, StorageError.
    """
    with storage_errors(staging):
        os.mkdir(staging, 0o700)
    for fname, entry in manifest["files"].items():
        with storage_errors(staging):
            _copy_checked(source, staging, fname, entry)
    try:
        facts = inspect_copy(staging / DB_NAME)
    except StorageError as exc:
        raise _invalid(source, f"its database cannot be opened: {exc.message}") from None
    if facts.problems:
        raise _invalid(source, f"SQLite finds its database damaged: {facts.problems[0]}")
    if facts.application_id != APPLICATION_ID:
        raise _invalid(source, "its database is not a palace database")
    if facts.schema > SCHEMA_VERSION:
        raise SchemaTooNew(f"the backup's schema v{facts.schema} is newer than this palaced "
                           f"(v{SCHEMA_VERSION}); upgrade palace",
                           details={"found": facts.schema, "supported": SCHEMA_VERSION})
    if facts.deviations:
        found = list(facts.deviations)
        raise _invalid(source, f"its database's schema is not palace's: {summary(found)}; "
                       "such objects would run inside the restored palace",
                       objects=[d.wire() for d in found])
    wrong = {k: [v, facts.counts.get(k)] for k, v in manifest["counts"].items()
             if facts.counts.get(k) != v}
    if wrong:
        raise _invalid(source, "its database does not hold what the manifest lists: "
                       + ", ".join(f"{k} {got} instead of {want}" for k, (want, got)
                                   in wrong.items()), counts=wrong)
    return facts.counts


def _palace_last_write(path: Path, name: str) -> int | None:
    """When palace ``name`` at ``path`` was last written (ms), None when unknown.

    Its recorded last write; for a database that never recorded one, nothing when it holds
    no drawers and no facts (an empty palace loses nothing), else its files' modification
    time. Unknown (None) when the database cannot be read.
    """
    try:
        conn = open_connection(path / DB_NAME, readonly=True, palace=name)
    except StorageError:
        return None
    try:
        with conn:
            stamp = last_write(conn)
            if stamp is not None:
                return stamp
            empty = holds_nothing(conn)
    except Exception:  # apsw.Error on a damaged or foreign file: the last write is unknown
        return None
    finally:
        conn.close()
    if empty:
        return 0
    times = [os.stat(f).st_mtime_ns for f in (path / DB_NAME, path / f"{DB_NAME}-wal")
             if f.exists()]
    return max(times) // 1_000_000 if times else None


def refuse_newer(manifest: dict[str, Any], force: bool, path: Path) -> None:
    """Refuse to replace the palace at ``path`` when it may hold writes the backup lacks.

    The backup's time is the last write its snapshot holds (else when it was taken); the
    palace may be replaced when its own last write is not later. Runs in a worker thread
    once the palace is closed (``Registry.replace``).

    Raises:
        PalaceExists: the palace was written after the backup, or its last write cannot be
            read (damaged), and ``force`` is false.
    """
    name = path.name
    if force:
        return
    try:
        if not has_database(name, path):
            return  # nothing of a palace there: nothing to lose
    except StorageError:
        written = None
    else:
        written = _palace_last_write(path, name)
    taken = manifest.get("last_write_ms") or manifest["created_ms"]
    if written is not None and written <= taken:
        return
    why = ("its last write cannot be read (the palace is damaged)" if written is None else
           f"it was written at {_iso(written)}, after the backup's {_iso(taken)}")
    raise PalaceExists(f"refusing to replace palace {name!r}: {why}, so restoring would lose "
                       "those writes; pass --force to replace it anyway",
                       details={"palace": name, "condition": "newer",
                                "palace_written_ms": written, "backup_ms": taken})


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def check_source(path: str) -> Path:
    """The backup directory named by the client: an absolute path to a directory.

    Raises:
        InvalidArgs: not an absolute path; BackupInvalid: no directory there.
    """
    if "\x00" in path or not os.path.isabs(path):
        raise InvalidArgs("the backup must be given as an absolute path",
                          details={"arg": "path", "value": path[:200]})
    source = Path(os.path.realpath(path))
    if not source.is_dir():
        raise _invalid(source, "no backup directory there")
    return source


async def restore(registry: Registry, path: str, name: str | None = None, *,
                  force: bool = False) -> dict[str, Any]:
    """Restore the backup at ``path`` as palace ``name`` (default: the backed-up palace).

    Returns the palace restored, whether an existing one was replaced, the counts and the
    reopened palace's index and embedder state.

    Raises:
        InvalidArgs, InvalidPalaceName: a bad path or name; BackupInvalid: the backup fails
        verification; UnsafePath: a file of it belongs to another uid; SchemaTooNew: made by
        a newer palaced; PalaceExists: the palace is newer than the backup (see
        ``refuse_newer``); StorageError: storage failed. Nothing is changed on any of them.
    """
    source = check_source(path)
    manifest = await anyio.to_thread.run_sync(read_manifest, source)
    target = validate_name(name if name is not None else manifest["palace"])
    started = time.monotonic()
    staging = registry.root / f"{STAGING_PREFIX}{target}-{time.time_ns()}"
    async with registry.guard(target):
        try:
            counts = await anyio.to_thread.run_sync(_stage, source, staging, manifest)
            replaced = await registry.replace(target, staging,
                                              partial(refuse_newer, manifest, force))
        finally:
            if staging.exists():
                await anyio.to_thread.run_sync(shutil.rmtree, staging, True)
        palace = await registry.get(target)
    return {"palace": target, "from": str(source), "replaced": replaced, "forced": force,
            "backup_created_at": manifest.get("created_at"), "counts": counts,
            "index": len(palace.index) if palace.index is not None else None,
            "embedder": palace.embedder_identity, "mismatch": palace.mismatch,
            "seconds": round(time.monotonic() - started, 3)}
