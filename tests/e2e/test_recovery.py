"""Recovery from storage trouble: failed opens, damaged palace directories, hostile identity
files, corrupt and read-only storage, and a scheduler whose checkpoint fails on every run.

Read-only storage: the tests run as root (here and in CI), and root ignores permission bits,
so ``chmod`` cannot make a palace read-only for it; an unprivileged uid cannot run the
interpreter either (it lives under ``/root``). As root the daemon therefore runs in a private
mount namespace (``unshare -m``) in which the palace directory is bind-mounted read-only:
real EROFS, the very thing a read-only mount gives, and nothing outside the daemon sees it.
``nsenter`` into that namespace remounts it read-write to show the palace recovers without a
restart. As any other user, ``chmod`` does the job.
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from palaced.wire.errors import PalaceError, StorageError
from tests.conftest import DaemonProc, base_env, short_home


def palace_error(fn: Callable[[], Any]) -> PalaceError:
    """The PalaceError that ``fn`` raises (fails the test if it returns)."""
    with pytest.raises(PalaceError) as info:
        fn()
    return info.value


def open_paths(pid: int, under: Path) -> list[str]:
    """Files below ``under`` that process ``pid`` holds open."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(under)):
            found.append(target)
    return found


# -- item 4: a failed open releases everything and the next request retries ---------------------
@pytest.mark.daemon
def test_failed_open_releases_the_lock_and_the_next_request_retries(home: Path) -> None:
    keyword = DaemonProc(home, base_env(home, model=False))
    keyword.start(wait_model=False)
    with keyword.client() as c:
        c.create_palace("idx")
        ids = c.remember_many("idx", [{"text": f"otters keep note {i} in their pockets"}
                                      for i in range(3)])
    keyword.stop()
    pdir = home / "palaces" / "idx"
    # The index file is replaced by a directory: the rebuild cannot be saved, so opening the
    # palace with the model fails after the lock and the database were taken.
    (pdir / "index.usearch").mkdir()

    d = DaemonProc(home, base_env(home))
    d.start()
    try:
        with d.client() as c:
            errors = [palace_error(lambda: c.palace_info("idx")) for _ in range(3)]
            assert [e.name for e in errors] == ["INDEX_ERROR"] * 3, [e.message for e in errors]
            assert "index.usearch" in errors[0].message
            if Path("/proc/self/fd").is_dir():
                assert open_paths(d.pid(), pdir) == []  # no lock, no SQLite connection leaked
            (pdir / "index.usearch").rmdir()
            info = c.palace_info("idx")  # the cause is gone: the next request opens it
            assert info["drawers"] == 3 and info["index"] is not None
            assert c.get("idx", ids[0])["text"] == "otters keep note 0 in their pockets"
    finally:
        d.stop()


# -- item 5: an empty or missing palace.db is an error, never a fresh palace ---------------------
def test_empty_or_missing_database_is_a_storage_error_and_nothing_is_touched(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    root = d.home / "palaces"
    index_bytes = b"an index the old database pointed at"
    damaged = {}
    for name, db in (("zero", b""), ("nodb", None)):
        pdir = root / name
        pdir.mkdir(parents=True)
        (pdir / "identity.txt").write_text("I am a palace with memories\n")
        (pdir / "index.usearch").write_bytes(index_bytes)
        if db is not None:
            (pdir / "palace.db").write_bytes(db)
        damaged[name] = pdir
    # A directory left with nothing but a lock (a create that died early) is no palace.
    (root / "bare").mkdir()
    (root / "bare" / ".lock").touch()
    stamps = {n: sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size)
                        for f in p.iterdir()) for n, p in damaged.items()}

    with d.client() as c:
        for name, pdir in damaged.items():
            db = str(pdir / "palace.db")
            ops: list[Callable[[], Any]] = [
                lambda n=name: c.palace_info(n),
                lambda n=name: c.recall(n, "memories"),
                lambda n=name: c.remember(n, "a new memory"),
                lambda n=name: c.wake_up(n),
                lambda n=name: c.create_palace(n),
                lambda n=name: c.create_palace(n, exist_ok=True),
            ]
            for op in ops:
                err = palace_error(op)
                assert err.name == "STORAGE_ERROR", (name, err.name, err.message)
                assert db in err.message and "damaged" in err.message
        status = {p["name"]: p for p in c.status()["palaces"]}
        assert "damaged" in status["zero"]["error"] and "damaged" in status["nodb"]["error"]
        assert "bare" not in status
        assert palace_error(lambda: c.palace_info("bare")).name == "PALACE_NOT_FOUND"
        # Nothing was created, rewritten or replaced: not the db, not the index.
        for name, pdir in damaged.items():
            assert sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size)
                          for f in pdir.iterdir()) == stamps[name]
            assert (pdir / "index.usearch").read_bytes() == index_bytes
        # The way out is explicit: delete, then create anew.
        c.delete_palace("zero")
        assert c.create_palace("zero")["drawers"] == 0
        assert c.create_palace("bare")["drawers"] == 0


# -- item 6: identity.txt with bad bytes, huge, or not a regular file ----------------------------
@pytest.fixture(scope="module")
def shared_keyword() -> Iterator[DaemonProc]:
    """One keyword-only palaced for the identity tests (each uses its own palace)."""
    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    d.start(wait_model=False)
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


def _identity_palace(d: DaemonProc, name: str) -> Path:
    with d.client() as c:
        c.create_palace(name)
        c.remember(name, "otters sleep holding hands", importance=0.9)
    return d.home / "palaces" / name / "identity.txt"


def test_identity_file_that_is_not_utf8_is_read_with_replacement(
        shared_keyword: DaemonProc) -> None:
    identity = _identity_palace(shared_keyword, "bytes")
    identity.write_bytes(b"# comment\nI am \xff\xfe the otter keeper\n")
    with shared_keyword.client() as c:
        assert c.palace_info("bytes")["identity"] == "I am \ufffd\ufffd the otter keeper"
        wake = c.wake_up("bytes")
        assert wake["sections"][0]["level"] == 0
        assert wake["sections"][0]["items"][0]["text"] == "I am \ufffd\ufffd the otter keeper"
        assert c.recall("bytes", "otters")[0]["text"] == "otters sleep holding hands"


def test_huge_identity_file_is_cut_with_a_marker(shared_keyword: DaemonProc) -> None:
    identity = _identity_palace(shared_keyword, "huge")
    identity.write_bytes(b"x" * (50 << 20))
    with shared_keyword.client() as c:
        text = c.palace_info("huge")["identity"]
        assert len(text) < 70_000 and text.endswith("[identity.txt truncated at 65536 bytes]")
        assert c.wake_up("huge")["sections"][0]["items"][0]["text"].startswith("xxxx")
        assert c.recall("huge", "otters")[0]["text"] == "otters sleep holding hands"


def test_identity_fifo_is_ignored_instead_of_hanging(shared_keyword: DaemonProc) -> None:
    identity = _identity_palace(shared_keyword, "fifo")
    identity.unlink()
    os.mkfifo(identity)
    with shared_keyword.client() as c:
        # The old code blocked a worker thread forever opening the FIFO: bound the wait.
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            wake = pool.submit(lambda: c.wake_up("fifo")).result(timeout=15)
        finally:
            pool.shutdown(wait=False)
        assert not [s for s in wake["sections"] if s["level"] == 0 and s["items"]]
        assert wake["sections"][-1]["items"][0]["text"] == "otters sleep holding hands"
        assert c.palace_info("fifo")["identity"] == ""
        assert c.recall("fifo", "otters")[0]["text"] == "otters sleep holding hands"


# -- item 9: recall reports a corrupt database as STORAGE_CORRUPT (a StorageError) --------
@pytest.mark.daemon
def test_recall_on_a_corrupt_database_is_storage_error_like_other_ops(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        with d.client() as c:
            c.create_palace("rot")
            c.remember_many("rot", [{"text": f"otter note {i} " + "river stones " * 40}
                                    for i in range(200)])
        d.stop()
        db = home / "palaces" / "rot" / "palace.db"
        # Overwrite the full-text index's root page: recall's first read (BM25) meets it.
        with sqlite3.connect(db) as conn:
            root = conn.execute("SELECT rootpage FROM sqlite_master "
                                "WHERE name = 'drawers_fts_data'").fetchone()[0]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.close()
        with open(db, "r+b") as f:
            f.seek((root - 1) * page)
            f.write(b"\xa5" * page)
        d.start(wait_model=False)
        with d.client() as c:
            assert c.palace_info("rot")["drawers"] == 200  # the palace opens
            err = palace_error(lambda: c.recall("rot", "otter river"))
            assert err.name == "STORAGE_CORRUPT" and isinstance(err, StorageError), err.message
            assert "is corrupt" in err.message and str(db) in err.message
            assert err.details["condition"] == "corrupt"
    finally:
        d.stop()


def _can_make_read_only_mount() -> str | None:
    """None if ``unshare -m`` + a read-only bind mount work here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return "unshare/nsenter not installed"
    probe = Path(tempfile.mkdtemp(prefix="pal-ro-", dir="/tmp"))
    try:
        res = subprocess.run(
            ["unshare", "-m", "sh", "-c",
             'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && ! touch "$1/x"',
             "sh", str(probe)], capture_output=True, text=True, timeout=30)
        return None if res.returncode == 0 else f"read-only bind mount refused: {res.stderr}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)


@pytest.mark.daemon
def test_read_only_palace_storage_is_a_clear_storage_error_and_recovers(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    with d.client() as c:
        c.create_palace("ro")
        c.create_palace("rw")
        did = c.remember("ro", "otters float on their backs")
    d.stop()
    pdir = home / "palaces" / "ro"
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(pdir)], check=True)
        make_writable = ["chmod", "-R", "u+w", str(pdir)]
        d.start(wait_model=False)
    else:
        why = _can_make_read_only_mount()
        if why is not None:
            pytest.skip(f"root ignores permission bits, and a read-only mount is impossible "
                        f"here ({why})")
        script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
                  '&& exec "$2" -m palaced run --quiet')
        d.proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", script, "sh", str(pdir), sys.executable],
            env=d.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        d.wait_ready(wait_model=False)
        make_writable = ["nsenter", "-t", str(d.pid()), "-m",
                         "mount", "-o", "remount,bind,rw", str(pdir)]
    try:
        with d.client() as c:
            for op in (lambda: c.palace_info("ro"), lambda: c.recall("ro", "otters"),
                       lambda: c.remember("ro", "a new memory"), lambda: c.wake_up("ro"),
                       lambda: c.get("ro", did)):
                err = palace_error(op)
                assert err.name == "STORAGE_READ_ONLY", (err.name, err.message)
                assert err.code == 506 and isinstance(err, StorageError)
                assert "palace 'ro''s storage is read-only" in err.message
                assert str(pdir) in err.message and err.details["condition"] == "read_only"
            status = {p["name"]: p for p in c.status()["palaces"]}
            assert "read-only" in status["ro"]["error"] and not status["rw"].get("error")
            # The other palace, on writable storage, does not notice.
            assert c.remember("rw", "the writable palace still takes writes") == 1
            subprocess.run(make_writable, check=True)
            # Writable again: the very next request opens the palace, no restart needed.
            assert c.get("ro", did)["text"] == "otters float on their backs"
            c.remember("ro", "a new memory after the remount")
    finally:
        d.stop()


@pytest.mark.anyio
async def test_scheduler_logs_a_persistent_checkpoint_failure_once_per_condition(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A mount that turns read-only under a running daemon cannot be reproduced literally:
    the real scheduler runs against a real palace whose WAL checkpoint fails the way it
    fails on such a mount, then on a full disk, then works again."""
    from palaced.config import settings as config_mod
    from palaced.daemon import core as daemon_mod
    from palaced.daemon import scheduler as scheduler_mod
    from palaced.wire.paths import resolve

    monkeypatch.setenv("PALACE_HOME", str(tmp_path))
    monkeypatch.setenv("PALACE_EMBED_MODEL", "none")
    monkeypatch.setattr(scheduler_mod, "RETRY_S", 0.005)
    dmn = daemon_mod.Daemon(config_mod.load(resolve()))
    palace, _ = await dmn.registry.create("tick")
    palace.index_lacks_vectors()  # asks the scheduler to checkpoint on every run
    real_checkpoint = palace.store.checkpoint
    failure: list[int | None] = [errno.EROFS]
    calls = [0]

    def checkpoint() -> None:
        calls[0] += 1
        code = failure[0]
        if code is not None:
            what = "is read-only" if code == errno.EROFS else "is full"
            raise StorageError(f"palace 'tick''s storage {what}: {os.strerror(code)}",
                               details={"condition": errno.errorcode[code]})
        real_checkpoint()

    monkeypatch.setattr(palace.store, "checkpoint", checkpoint)

    async def ticks(n: int) -> None:
        start = calls[0]
        with anyio.fail_after(10):
            while calls[0] < start + n:  # noqa: ASYNC110 - the scheduler is the driver
                await anyio.sleep(0.005)

    caplog.set_level(logging.DEBUG, logger="palaced")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(dmn.scheduler.run)
            await ticks(20)  # read-only, tick after tick
            failure[0] = errno.ENOSPC
            await ticks(20)  # then the disk is full
            failure[0] = None
            await ticks(5)  # and then it works again
            failure[0] = errno.EROFS
            await ticks(5)
            tg.cancel_scope.cancel()
    finally:
        await dmn.registry.aclose()
    seen = [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "palaced" and r.levelno >= logging.INFO]
    assert seen == [
        ("ERROR", "palace tick: checkpoint failed (logged once until it changes or clears)"),
        ("ERROR", "palace tick: checkpoint failed (logged once until it changes or clears)"),
        ("INFO", "palace tick: checkpoint works again"),
        ("ERROR", "palace tick: checkpoint failed (logged once until it changes or clears)"),
    ], seen
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "is read-only" in str(errors[0].exc_info[1]) and "is full" in str(
        errors[1].exc_info[1])



@pytest.mark.anyio
async def test_failed_create_is_undone_and_a_failed_open_keeps_no_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: a create that fails after the database was made leaves only the lock
    file (so the next create starts over), and neither failure keeps the flock."""
    from palaced.config import settings as config_mod
    from palaced.engine.embedder import HashEmbedder
    from palaced.engine.services import ModelState, Services
    from palaced.engine.tokens import Tokenizer
    from palaced.memory import writes
    from palaced.palace import handle as palace_mod
    from palaced.palace import reads
    from palaced.palace import storage as storage_mod
    from palaced.store.rows.drawers import NewDrawer
    from palaced.wire.errors import IndexError_
    from palaced.wire.paths import resolve

    monkeypatch.setenv("PALACE_HOME", str(tmp_path))
    model = ModelState()
    model.embedder, model.state = HashEmbedder(16), "ready"
    svc = Services(config=config_mod.load(resolve()), model=model,
                   tokenizer=Tokenizer.fallback("unit test"))
    pdir = tmp_path / "p"
    real_open_index = storage_mod.open_index

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise IndexError_("index save failed: no space left")

    monkeypatch.setattr(storage_mod, "open_index", broken)
    with pytest.raises(IndexError_):
        await palace_mod.Palace.open("p", pdir, svc, create=True)
    assert sorted(f.name for f in pdir.iterdir()) == [".lock"]

    monkeypatch.setattr(storage_mod, "open_index", real_open_index)
    p = await palace_mod.Palace.open("p", pdir, svc, create=True)  # not PALACE_LOCKED
    await writes.remember(p, NewDrawer(text="otters"))
    await p.aclose()
    monkeypatch.setattr(storage_mod, "open_index", broken)
    with pytest.raises(IndexError_):  # an existing palace: nothing is undone
        await palace_mod.Palace.open("p", pdir, svc, create=False)
    assert (pdir / "palace.db").stat().st_size > 0
    monkeypatch.setattr(storage_mod, "open_index", real_open_index)
    p = await palace_mod.Palace.open("p", pdir, svc, create=False)
    assert (await reads.info(p))["drawers"] == 1
    await p.aclose()


@pytest.mark.daemon
def test_interrupted_create_and_delete_leave_nothing_behind(home: Path) -> None:
    # A kill -9 inside a create or delete leaves its staging or trash directory: never a
    # half-made palace under the palace's name (which would read as damaged and block the
    # next create). The next daemon removes those leftovers before it serves.
    palaces = home / "palaces"
    for leftover in (".creating-demo-123", ".deleting-old-456"):
        (palaces / leftover).mkdir(parents=True)
        (palaces / leftover / "palace.db").write_bytes(b"")  # half-written
    (palaces / "demo").mkdir()
    (palaces / "demo" / ".lock").write_bytes(b"")  # a create killed before its rename
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        assert sorted(p.name for p in palaces.iterdir()) == ["demo"]
        with d.client() as c:
            assert c.list_palaces() == []
            c.create_palace("demo")
            assert c.remember("demo", "created over a killed create's lock file") == 1
            assert [p["name"] for p in c.list_palaces()] == ["demo"]
        assert not [p for p in palaces.iterdir() if p.name.startswith(".")]
    finally:
        d.stop()
