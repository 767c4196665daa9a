"""``palace doctor``: check the daemon and every palace, and with ``repair`` mend what is
derivable, then check again.

Daemon checks: the data, palaces and runtime directories and the socket are ours and private,
the model and tokenizer are loaded, the data directory's disk has room. Palace checks
(``palaced.maintenance.checks`` gathers, ``palaced.maintenance.verdicts`` judges): SQLite's
quick_check (or integrity_check with ``full``), the full-text indexes, drawers against their vectors
and the vector index, embedding coverage, closets, the schema and the embedder. The database is
always checked on a connection of its own (see ``checks.read_database`` for why). A palace
that is not open is checked while nobody may open it (``Registry.held``): so a missing or
stale index file is seen before opening would silently rebuild it. An open palace's index is
compared with the database under its write lock. Repairs run on the palace handle
(``palaced.maintenance.repair``). One palace failing to be checked never hides the others.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import apsw

from palaced import __version__
from palaced.config.settings import DaemonConfig
from palaced.engine.services import Services
from palaced.maintenance.backup import restore_hint
from palaced.maintenance.checks import (
    FAIL,
    OK,
    WARN,
    Check,
    PalaceFacts,
    closet_mismatches,
    gather_closed,
    inspect_files,
    read_database,
)
from palaced.maintenance.repair import repair_palace
from palaced.maintenance.verdicts import Context, judge
from palaced.palace import team
from palaced.palace.handle import DB_NAME, Palace
from palaced.palace.layout import validate_name
from palaced.palace.registry import Registry
from palaced.store.conn.db import open_connection, storage_error
from palaced.store.jobs.checks import (
    closet_rows,
    entities_fts_problems,
    vector_key_summary,
    vector_keys,
)
from palaced.store.jobs.transfer import edge_numbers
from palaced.store.lookup.context import stale_contexts
from palaced.store.schema.check import summary
from palaced.wire.errors import PalaceError, PalaceNotFound
from palaced.wire.export_format import MAX_COUNT, MAX_RESTORED_ID
from palaced.wire.private import tighten_install

log = logging.getLogger("palaced.maintenance.doctor")

# Free space is judged against what the palaces need, not as an absolute size: a small
# filesystem with room to spare is fine. Below the floor a write may fail at any moment (a
# batch of remembers grows the WAL by megabytes); a tenth of the largest palace on top is the
# growth a large import or index rebuild of it can take before its next checkpoint.
DISK_FAIL_BYTES = 16 << 20
DISK_FAIL_SHARE = 10
# Warned below room for a copy of the largest palace (a backup into the default root, a
# migration that builds an index of it) plus twice the floor.
DISK_WARN_FLOOR = 2 * DISK_FAIL_BYTES
REPAIR_ROUNDS = 2  # a migrated palace is checked in full, and mended, only after it opened


async def doctor(registry: Registry, config: DaemonConfig, services: Services,
                 name: str | None = None, *, repair: bool = False, full: bool = False
                 ) -> dict[str, Any]:
    """Check the daemon and palace ``name`` (every palace when None); the report.

    Raises:
        InvalidPalaceName, PalaceNotFound: a bad or unknown ``name``.
    """
    if name is not None and not registry.exists(validate_name(name)):
        raise PalaceNotFound(f"no palace named {name!r}", details={"palace": name})
    if name is not None:
        team.refuse(registry, name, "palace doctor", "its server checks itself (PostgreSQL's "
                             "amcheck, pg_dump); `palace info` shows its counts")
    # Team palaces have no files to check: their server does that.
    names = [name] if name is not None else [n for n in registry.names()
                                             if not registry.is_team(n)]
    checks, facts = await _check_all(registry, config, services, names, full)
    first = {(c.palace, c.name): c for c in checks}
    repairs: list[str] = []
    for _ in range(REPAIR_ROUNDS if repair else 0):
        todo = [c for c in checks if c.fixable and c.status != OK]
        if not todo:
            break
        repairs += await _repair(registry, config, services, todo, facts, full)
        checks, facts = await _check_all(registry, config, services, names, full)
    for c in checks:
        before = first.get((c.palace, c.name))
        c.repaired = bool(repair and before is not None and before.status != OK
                          and c.status == OK)
    counts = {s: sum(1 for c in checks if c.status == s) for s in (OK, WARN, FAIL)}
    return {"healthy": counts[FAIL] == 0, "summary": counts, "palaces": names,
            "repair": repair, "full": full, "repairs": repairs,
            "checks": [c.wire() for c in checks]}


async def _check_all(registry: Registry, config: DaemonConfig, services: Services,
                     names: list[str], full: bool
                     ) -> tuple[list[Check], dict[str, PalaceFacts]]:
    checks = await anyio.to_thread.run_sync(daemon_checks, config, services)
    model = services.model.embedder
    facts: dict[str, PalaceFacts] = {}
    for name in names:
        try:
            found = await _gather(registry, name, full)
            ctx = Context(model=model.identity if model is not None else None,
                          keyword_only_by_choice=config.embedder.disabled, full=full,
                          restore_hint=restore_hint(config.backup_dir, name))
            facts[name] = found
            checks += judge(found, ctx)
            checks += schema_objects_check(found, ctx.restore_hint)
            if found.sound:  # not with foreign objects: a view may stand in for a table
                checks += await anyio.to_thread.run_sync(edge_checks, found)
        except Exception as exc:  # one palace must not hide the others
            log.exception("doctor: checking palace %s failed", name)
            checks.append(Check("palace", FAIL, f"could not be checked: {exc}", palace=name))
    return checks, facts


async def _gather(registry: Registry, name: str, full: bool) -> PalaceFacts:
    async with registry.held(name) as palace:
        if palace is None:
            return await anyio.to_thread.run_sync(
                partial(gather_closed, name, registry.path_of(name), full=full))
        palace.begin_work()  # not closed as idle while it is checked
    try:
        return await _gather_open(palace, full)
    finally:
        palace.end_work()


async def _gather_open(palace: Palace, full: bool) -> PalaceFacts:
    facts = PalaceFacts(palace.name, palace.dir, open=True, mismatch=palace.mismatch)
    await anyio.to_thread.run_sync(partial(read_database, facts, full=full, closed=False))
    if facts.error is not None:
        return facts
    try:
        if facts.sound:
            await palace.write(partial(_compare_locked, palace, facts, full), wrote=False)
            if full:
                rows = await palace.read(closet_rows)
                facts.closet_mismatch = await anyio.to_thread.run_sync(closet_mismatches, rows)
                facts.context_stale = await palace.read(stale_contexts)
    except PalaceError as exc:
        facts.error = exc.message
        return facts
    await anyio.to_thread.run_sync(partial(inspect_files, facts, full=full))
    return facts


def _compare_locked(palace: Palace, facts: PalaceFacts, full: bool) -> None:
    """Under the write lock: the entity index check, and the in-memory vector index against
    the database's vectors (no write can fall between the two reads).

    Writes wait meanwhile, so the keys are compared by count, sum and maximum (one
    aggregate query, ~10 ms for 50,000 vectors); ``full`` compares every key.
    """
    facts.entities_fts = palace.store.write(entities_fts_problems, stamp=False)
    if palace.index is not None:
        index = palace.index
        facts.live_index = len(index)
        # Keys of deleted vectors stay in the graph as tombstones the searches skip: the
        # index agrees when its live count is the database's and it holds every vector id.
        if full:
            keys = palace.store.read(vector_keys)
            facts.live_index_agrees = len(keys) == len(index) and index.holds(keys)
        else:
            count, _, top = palace.store.read(vector_key_summary)
            facts.live_index_agrees = count == len(index) and index.holds([top] if top else [])


def edge_checks(facts: PalaceFacts) -> list[Check]:
    """The numbers of a sound palace that an import may have pushed to the edge (worker
    thread, a connection of its own): ids near SQLite's int64 limit (every insert then fails
    with STORAGE_FULL, which no free space mends), access counts beyond ``MAX_COUNT``
    (saturated there on the next recall) and ``superseded_by`` cycles (their drawers hidden
    from every recall). Never raises: a failed read is a check of its own."""
    def check(name: str, status: str, detail: str, advice: str | None = None) -> Check:
        return Check(name, status, detail, palace=facts.name, advice=advice)

    db = facts.directory / DB_NAME
    try:
        conn = open_connection(db, readonly=True, palace=facts.name)
        try:
            found = edge_numbers(conn)
        finally:
            conn.close()
    except PalaceError as exc:
        return [check("numbers", FAIL, f"could not be read: {exc.message}")]
    except apsw.Error as exc:
        return [check("numbers", FAIL,
                      f"could not be read: {storage_error(exc, db, facts.name).message}")]
    high = ", ".join(f"{k} {v}" for k, v in found.items()
                     if k.endswith(("_id", "_seq")) and v > MAX_RESTORED_ID)
    out = [check("ids", FAIL, f"beyond {MAX_RESTORED_ID}: {high} (at 2**63-1 every new row "
                 "fails with STORAGE_FULL, which is not a disk problem)",
                 advice="export the palace, give its records ids below the bound, and "
                 "import it into a new palace") if high else check(
        "ids", OK, f"highest drawer id {found['drawer_seq']}")]
    count = found["access_count"]
    out.append(check("access_counts", WARN, f"an access_count of {count}, beyond {MAX_COUNT} "
                     "(saturated there on its next recall)") if count > MAX_COUNT else check(
                     "access_counts", OK, f"highest {count}"))
    cycles = found["cycles"]
    out.append(check("supersede_cycles", FAIL, f"{cycles} drawers on a superseded_by cycle: "
                     "no recall shows them", advice="palace update one of them to break the "
                     "cycle (or restore the palace from a backup)") if cycles else check(
                     "supersede_cycles", OK, "none"))
    return out


def schema_objects_check(facts: PalaceFacts, restore_hint: str | None) -> list[Check]:
    """The check that the palace's schema objects are exactly palace's own for its version
    (none when they could not be read): a foreign trigger or view would run inside it, so
    the palace refuses to open until ``--repair`` has dropped them."""
    found = facts.deviations
    if found is None:
        return []
    if not found:
        return [Check("schema_objects", OK, "only palace's own tables, indexes and triggers",
                      palace=facts.name)]
    stuck = [d for d in found if not d.fixable]
    advice = None
    if stuck:
        advice = (f"{summary(stuck)} cannot be mended without losing data: restore it from "
                  "a backup: " + (restore_hint or f"palace restore BACKUP_DIR --palace "
                                  f"{facts.name} --force"))
    return [Check("schema_objects", FAIL, f"{summary(found)}: the palace is not opened "
                  "until they are gone", palace=facts.name, fixable=len(stuck) < len(found),
                  advice=advice)]


def _mode_check(name: str, path: Path, *, private: bool = True) -> Check:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Check(name, WARN, f"{path} does not exist yet (made when first needed)")
    except OSError as exc:
        return Check(name, FAIL, f"{path} cannot be examined: {exc.strerror}")
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        return Check(name, FAIL, f"{path} belongs to uid {st.st_uid}, not to you",
                     advice="palace refuses paths of other users; fix the owner")
    if stat.S_ISLNK(st.st_mode):
        return Check(name, OK if name == "data_dir" else WARN, f"{path} is a symlink")
    if private and mode & 0o077:
        return Check(name, WARN, f"{path} is mode {mode:04o}: other users may read it",
                     fixable=True)
    return Check(name, OK, f"{path} ({mode:04o})")


def daemon_checks(config: DaemonConfig, services: Services) -> list[Check]:
    """The checks of the daemon itself (worker thread)."""
    paths = config.paths
    out = [Check("daemon", OK, f"palaced {__version__}, pid {os.getpid()}, serving "
                 f"{paths.data_dir}")]
    out.append(_mode_check("data_dir", paths.data_dir))
    out.append(_mode_check("palaces_dir", paths.palaces_dir))
    out.append(_mode_check("runtime_dir", paths.runtime_dir, private=paths.private_runtime))
    out.append(_mode_check("socket", paths.socket))
    model = services.model
    if model.embedder is not None:
        out.append(Check("model", OK, f"{model.embedder.identity} (hybrid recall)"))
    elif model.state == "loading":
        out.append(Check("model", WARN, "loading: recall is keyword-only until it is ready"))
    elif config.embedder.disabled:
        out.append(Check("model", OK, "embedding off by configuration: keyword-only recall"))
    else:
        out.append(Check("model", WARN, f"unavailable: {model.reason}: keyword-only recall",
                         advice="see docs/configuration.md#offline-operation"))
    tok = services.tokenizer
    out.append(Check("tokenizer", OK, tok.name) if tok.exact else Check(
        "tokenizer", WARN, f"{tok.name}: {tok.reason}",
        advice="set [tokenizer] bpe_file (or PALACE_TIKTOKEN_FILE) to cl100k_base.tiktoken"))
    out.append(_disk_check(paths.palaces_dir))
    return out


def _disk_check(path: Path) -> Check:
    """Free space where the palaces live (``path``), against what the largest one needs
    (``DISK_FAIL_BYTES`` and the constants beside it)."""
    probe = path if path.exists() else path.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as exc:
        return Check("disk", FAIL, f"free space of {probe} unknown: {exc.strerror}")
    largest = _largest_palace(path)
    free = (f"{_size(usage.free)} free of {_size(usage.total)} at {probe}; the largest palace "
            f"takes {_size(largest)}")
    if usage.free < DISK_FAIL_BYTES + largest // DISK_FAIL_SHARE:
        return Check("disk", FAIL, f"{free}: writes may fail",
                     advice="free some space (old backups, other files)")
    if usage.free < DISK_WARN_FLOOR + largest:
        return Check("disk", WARN, f"{free}: a backup or rebuild of it would not fit",
                     advice="free some space soon")
    return Check("disk", OK, free)


def _largest_palace(palaces_dir: Path) -> int:
    """Bytes of the largest palace's database and WAL under ``palaces_dir`` (0: none).
    Links are not followed; what cannot be read counts as nothing."""
    largest = 0
    try:
        entries = list(os.scandir(palaces_dir))
    except OSError:
        return 0
    for entry in entries:
        total = 0
        for name in (DB_NAME, f"{DB_NAME}-wal"):
            try:
                st = os.lstat(Path(entry.path) / name)
            except OSError:
                continue
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        largest = max(largest, total)
    return largest


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


async def _repair(registry: Registry, config: DaemonConfig, services: Services,
                  todo: list[Check], facts: dict[str, PalaceFacts], full: bool) -> list[str]:
    done: list[str] = []
    if any(c.palace is None for c in todo):
        done += await anyio.to_thread.run_sync(_repair_paths, config, todo)
    for name in sorted({c.palace for c in todo if c.palace is not None}):
        mine = [c for c in todo if c.palace == name]
        try:
            done += [f"{name}: {d}" for d in await repair_palace(
                registry, services, facts[name], mine, full=full)]
        except Exception as exc:  # reported; the checks that follow show what remains
            log.exception("doctor: repairing palace %s failed", name)
            done.append(f"{name}: repair failed: {exc}")
    return done


def _repair_paths(config: DaemonConfig, todo: list[Check]) -> list[str]:
    done = [f"made {note} private" for note in tighten_install(config.paths)]
    if any(c.name == "socket" for c in todo):
        os.chmod(config.paths.socket, 0o600)
        done.append(f"made {config.paths.socket} 0600")
    if any(c.name == "runtime_dir" for c in todo) and config.paths.private_runtime:
        os.chmod(config.paths.runtime_dir, 0o700)
        done.append(f"made {config.paths.runtime_dir} 0700")
    return done
