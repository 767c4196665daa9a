"""``palace backup``: consistent online copies of palaces, with a manifest, kept N deep.

A backup of palace ``P`` is a directory ``<root>/P/<UTC time>/`` (root: ``--to``, else
``[backup] dir``, else ``<data_dir>/backups``) holding ``palace.db`` (a copy of one
snapshot of the database, made through SQLite's backup API while the palace keeps serving),
``identity.txt`` and ``manifest.json`` (what was copied: counts, schema, model, the sha256 of
each file). The vector index is left out: it is a cache, rebuilt from the database when the
restored palace opens. The copy is made under a hidden ``.partial-`` name and renamed into
place once complete and verified, so a listed backup is always whole; older ones beyond
``keep`` (by the time in their manifests) are then deleted, never the one just made (only
directories this module made).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from palaced import __version__
from palaced.config.settings import DaemonConfig
from palaced.palace import team
from palaced.palace.directory import KEYWORDS_NAME
from palaced.palace.handle import DB_NAME, IDENTITY_NAME, INDEX_NAME
from palaced.palace.layout import validate_name
from palaced.palace.registry import Registry
from palaced.store.conn.db import storage_errors
from palaced.store.jobs.backup import SnapshotCopy, inspect_copy
from palaced.store.schema.check import summary
from palaced.wire.errors import InvalidArgs, PalaceNotFound, StorageError, UnsafePath
from palaced.wire.private import make_private_dirs
from palaced.wire.safe_files import sync_dir

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20  # larger manifests are refused (a real one is ~1 KB)
FORMAT = "palace-backup"
FORMAT_VERSION = 1
PARTIAL_PREFIX = ".partial-"
PARTIAL_RE = re.compile(re.escape(PARTIAL_PREFIX) + r"\d+")  # exactly what ``backup`` names
# A staging copy untouched this long belongs to a killed backup (a running one writes its
# copy every step, and finishes within minutes even for large palaces).
STALE_PARTIAL_S = 3600
STAMP_RE = re.compile(r"\d{8}T\d{6}\.\d{3}Z(?:-\d+)?")
# Pages copied per step of the backup API (4 MiB at SQLite's default 4 KiB pages); between
# steps the worker thread is handed back, so a deadline can stop the copy.
STEP_PAGES = 1024
NOT_INCLUDED = {INDEX_NAME: "a cache of the database's vectors, rebuilt when the palace opens",
                KEYWORDS_NAME: "a cache of the database's keyword rows, rebuilt when needed"}


def stamp(ms: int) -> str:
    """The directory name of a backup taken at ``ms``: ``20250102T030405.678Z`` (UTC)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def iso(ms: int) -> str:
    """``ms`` as ISO 8601 UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def backups_of(root: Path, name: str) -> list[Path]:
    """The complete backups of palace ``name`` under ``root``, newest first (none: []).

    Newest by the time in each manifest, not by directory name: a directory's name can say
    anything (a backup copied in, one made under a clock that was ahead).
    """
    base = root / name
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    found = [Path(e.path) for e in entries if STAMP_RE.fullmatch(e.name)
             and e.is_dir(follow_symlinks=False) and os.path.isfile(Path(e.path) / MANIFEST)]
    return sorted(found, key=lambda p: (_created_ms(p), p.name), reverse=True)


def _created_ms(backup_dir: Path) -> int:
    """The creation time (ms) in a backup's manifest; -1 when it cannot be read (such a
    backup counts as the oldest)."""
    try:
        fd = os.open(backup_dir / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return -1
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
        found = json.loads(raw) if len(raw) <= MAX_MANIFEST_BYTES else None
    except (OSError, ValueError):
        return -1
    created = found.get("created_ms") if isinstance(found, dict) else None
    return created if type(created) is int else -1


def restore_hint(root: Path, name: str) -> str | None:
    """The command that restores palace ``name`` from its newest backup, if there is one."""
    found = backups_of(root, name)
    return f"palace restore {found[0]} --palace {name} --force" if found else None


TEAM_BACKUP_HINT = ("back it up with PostgreSQL's tools (pg_dump --schema=palace_<name>, or "
                    "the server's own backups), or export it with `palace export`")


def resolve_root(config: DaemonConfig, to: str | None) -> Path:
    """The backup root to write to, created (0700) when missing.

    Raises:
        InvalidArgs: ``to`` is not an absolute path, or lies inside the palaces directory.
        UnsafePath: the root is not a directory of ours, or others may write to it.
        StorageError: it cannot be created.
    """
    if to is not None and ("\x00" in to or not os.path.isabs(to)):
        raise InvalidArgs("the backup directory must be an absolute path",
                          details={"arg": "to", "value": to[:200]})
    root = Path(os.path.realpath(to if to is not None else config.backup_dir))
    palaces = Path(os.path.realpath(config.paths.palaces_dir))
    if root == palaces or palaces in root.parents:
        raise InvalidArgs(f"refusing to write backups inside the palaces directory {palaces}",
                          details={"arg": "to", "value": str(root)})
    with storage_errors(root):
        make_private_dirs(root)
    _own_dir(root)
    return root


def _own_dir(path: Path) -> None:
    """Raises UnsafePath unless ``path`` is a real directory of ours others cannot write."""
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePath(f"refusing {path}: not a directory of yours (uid {st.st_uid})",
                         details={"path": str(path)})
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise UnsafePath(f"refusing {path}: other users may write to it (mode {mode:04o}); "
                         "choose a private directory", details={"path": str(path)})


def sha256_file(path: Path) -> tuple[str, int]:
    """``(sha256 hex, size)`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_identity(source: Path, dest: Path) -> bool:
    """Copy the identity file if it is a regular file; False when there is none to copy."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with os.fdopen(os.dup(fd), "rb") as f:
            _write_synced(dest, f.read())
        return True
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _copy_database(source: Path, dest: Path, name: str) -> SnapshotCopy:
    copy = await anyio.to_thread.run_sync(lambda: SnapshotCopy(source, dest, palace=name))
    try:
        while not await anyio.to_thread.run_sync(copy.step, STEP_PAGES):
            pass  # each step is one worker-thread hop: the event loop and deadlines run between
        await anyio.to_thread.run_sync(copy.finish)
    finally:
        await anyio.to_thread.run_sync(copy.close)
    return copy


async def backup(registry: Registry, config: DaemonConfig, name: str, *,
                 to: str | None = None, keep: int | None = None) -> dict[str, Any]:
    """Back up palace ``name``; returns what was written and which old backups were removed.

    Raises:
        PalaceNotFound: no such palace; StorageError: a damaged palace, a copy SQLite finds
        damaged, or storage that failed; InvalidArgs, UnsafePath: a bad ``to``.
    """
    validate_name(name)
    if not registry.exists(name):
        raise PalaceNotFound(f"no palace named {name!r}", details={"palace": name})
    team.refuse(registry, name, "palace backup", TEAM_BACKUP_HINT)
    damage = registry.damage(name)
    if damage is not None:
        raise damage
    keep = config.backup.keep if keep is None else keep
    root = await anyio.to_thread.run_sync(resolve_root, config, to)
    source = registry.path_of(name)
    base = root / name
    started = time.monotonic()
    async with registry.guard(name):
        def prepare() -> Path:
            with storage_errors(base, name):
                make_private_dirs(base)
                _own_dir(base)
                for leftover in base.glob(f"{PARTIAL_PREFIX}*"):  # of a killed backup
                    shutil.rmtree(leftover, ignore_errors=True)
                staging = base / f"{PARTIAL_PREFIX}{time.time_ns()}"
                os.mkdir(staging, 0o700)
            return staging

        staging = await anyio.to_thread.run_sync(prepare)
        try:
            copy = await _copy_database(source / DB_NAME, staging / DB_NAME, name)
            written = await anyio.to_thread.run_sync(
                _seal, staging, source, name, copy)
        finally:
            if staging.exists():
                await anyio.to_thread.run_sync(shutil.rmtree, staging, True)
        removed = await anyio.to_thread.run_sync(
            prune_backups, root, name, keep, Path(written["path"]))
    manifest = written["manifest"]
    return {"palace": name, "path": written["path"], "created_at": manifest["created_at"],
            "seconds": round(time.monotonic() - started, 3), "bytes": written["bytes"],
            "counts": manifest["counts"], "kept": keep, "removed": [str(p) for p in removed]}


def _seal(staging: Path, source: Path, name: str, copy: SnapshotCopy) -> dict[str, Any]:
    """Verify the copied database, add the identity file and the manifest, and rename the
    backup into place (worker thread). Returns its path, size and manifest.

    Raises:
        StorageError: SQLite finds the copy damaged (then so is the palace), or I/O failed.
    """
    db = staging / DB_NAME
    facts = inspect_copy(db)
    if facts.problems:
        raise StorageError(
            f"palace {name!r} is damaged, so no backup was made: {facts.problems[0]}; run "
            f"`palace doctor --palace {name}`", details={"palace": name, "condition": "corrupt"})
    if facts.deviations:
        raise StorageError(
            f"palace {name!r} holds schema objects palace did not make "
            f"({summary(list(facts.deviations))}), so no backup was made; run "
            f"`palace doctor --palace {name} --repair`",
            details={"palace": name, "condition": "foreign_schema"})
    with storage_errors(staging, name):
        _fsync(db)
        files = [DB_NAME]
        if _copy_identity(source / IDENTITY_NAME, staging / IDENTITY_NAME):
            files.append(IDENTITY_NAME)
        sums = {f: sha256_file(staging / f) for f in files}
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "palace": name,
            "created_at": iso(copy.taken_ms), "created_ms": copy.taken_ms,
            "last_write_ms": copy.snapshot.last_write_ms,
            "schema_version": facts.schema, "embedder": facts.embedder,
            "counts": facts.counts, "palaced_version": __version__,
            "files": {f: {"sha256": digest, "bytes": size} for f, (digest, size) in sums.items()},
            "not_included": NOT_INCLUDED,
        }
        _write_synced(staging / MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
        sync_dir(staging)
        final = staging.parent / stamp(copy.taken_ms)
        n = 1
        while os.path.lexists(final):
            final = staging.parent / f"{stamp(copy.taken_ms)}-{n}"
            n += 1
        staging.rename(final)
        sync_dir(final.parent)
    return {"path": str(final), "bytes": sum(size for _, size in sums.values()),
            "manifest": manifest}


def prune_backups(root: Path, name: str, keep: int, made: Path) -> list[Path]:
    """Delete the backups of ``name`` beyond the newest ``keep`` (``backups_of``), never
    ``made``, the one just written, which counts as one of them; returns what was deleted.
    """
    others = [p for p in backups_of(root, name) if p != made]
    gone = others[max(keep - 1, 0):]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def sweep_partials(root: Path, *, older_than: float = STALE_PARTIAL_S) -> list[Path]:
    """Delete the staging copies killed backups left under the backup root ``root`` (at
    daemon start, worker thread); returns what was deleted. Never raises.

    Only what this module makes: directories named ``.partial-<digits>`` in a palace's
    directory of a root that is ours and private (``_own_dir``), ours themselves and not
    links, and untouched (they and what they hold) for ``older_than`` seconds, so that a
    backup another daemon is writing into a shared root is left alone.
    """
    try:
        _own_dir(root)
        palaces = [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except (OSError, UnsafePath):
        return []  # no root yet, or one palace must not delete in
    now = time.time()
    gone: list[Path] = []
    for palace in palaces:
        try:
            entries = list(os.scandir(palace.path))
        except OSError:
            continue
        for entry in entries:
            if not PARTIAL_RE.fullmatch(entry.name):
                continue
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
                if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                        or now - _last_touched(path, st.st_mtime) < older_than):
                    continue
                shutil.rmtree(path)
            except OSError as exc:
                log.warning("cannot remove the leftover backup copy %s: %s", path, exc)
                continue
            log.info("removed %s, the copy of a backup that did not finish", path)
            gone.append(path)
    return gone


def _last_touched(path: Path, mtime: float) -> float:
    """The newest modification time of directory ``path`` (``mtime``) and its entries."""
    with os.scandir(path) as entries:
        for entry in entries:
            mtime = max(mtime, entry.stat(follow_symlinks=False).st_mtime)
    return mtime
