"""Storage and model faults under a running daemon: a typed error for the palace affected,
nothing corrupted, the other palaces unaffected, and recovery without a restart.

* Full disk: a 16 MiB tmpfs over one palace's directory, in a mount namespace of the daemon's
  own (``tests/support/mounts.py``), filled to the last byte: real ENOSPC, exactly what a full disk
  gives SQLite and usearch. Where mounting is impossible (not root), a per-process file-size
  limit (RLIMIT_FSIZE) stands in: it proves the typed error, no corruption and recovery, but
  SQLite sees EFBIG there (a write error, not "disk full"), so it proves less about the exact
  code. The RLIMIT test runs everywhere; the tmpfs test wherever it can mount (root, as in CI).
* Read-only storage is ``test_recovery.py``'s read-only mount test (other palaces included).
* Truncated and corrupt index and database files, a palace directory deleted under the
  daemon, and the model directory missing, coming back, then vanishing.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import (
    PalaceError,
    PalaceNotFound,
    StorageCorrupt,
    StorageError,
    StorageFull,
)
from tests.conftest import MODEL_DIR, DaemonProc, base_env
from tests.support import mounts
from tests.support.dbcheck import index_problems, integrity, texts

pytestmark = pytest.mark.daemon  # every test here runs palace's processes


def raises(fn: Callable[[], Any]) -> PalaceError:
    with pytest.raises(PalaceError) as info:
        fn()
    return info.value


def wait_for(cond: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def is_open(c: Any, name: str) -> bool:
    return any(p["open"] for p in c.list_palaces() if p["name"] == name)


def deleted_fds(pid: int, under: Path) -> list[str]:
    """Files below ``under`` that process ``pid`` holds open although they were deleted."""
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(under)) and target.endswith("(deleted)"):
            out.append(target)
    return out


# -- a full disk ---------------------------------------------------------------------------------
def test_full_disk_is_storage_full_for_that_palace_and_recovers(home: Path) -> None:
    why = mounts.why_not()
    if why is not None:
        pytest.skip(f"cannot mount a private tmpfs here ({why}); "
                    "test_file_size_limit_... covers the same path with RLIMIT_FSIZE")
    d = DaemonProc(home, base_env(home))
    d.start()
    with d.client() as c:
        c.create_palace("full")
        c.create_palace("ok")
        before = c.remember_many("full", [{"text": f"otter fact {i}: otters hold hands "
                                                   f"while sleeping in kelp bed {i}"}
                                          for i in range(60)])
        wait_for(lambda: (home / "palaces" / "full" / "index.usearch").exists(), 20, "index")
        before.append(c.remember("full", "beavers build dams from sticks and river mud"))
    d.kill9()  # the saved index is now stale: the next open must rebuild it
    pdir = home / "palaces" / "full"
    with mounts.PrivateTmpfs(pdir, "16m") as fs:
        fs.start_daemon(d)
        filler = fs.fill()
        try:
            with d.client() as c:
                pid = c.status()["pid"]
                # Reads still work: the rebuilt index cannot be saved, so it is served from
                # memory instead of failing every read with INDEX_ERROR.
                res = c.recall_ex("full", "which animal constructs dams?", top_k=3)
                assert res["mode"] == "hybrid" and res["results"][0]["id"] == before[-1]
                info = c.palace_info("full")
                assert info["drawers"] == info["vectors"] == info["index"] == 61
                # Writes get a typed, actionable error and change nothing.
                for write in (lambda: c.remember("full", "written while the disk is full " * 50),
                              lambda: c.remember_many("full", [{"text": f"batch {i} " * 40}
                                                               for i in range(5)]),
                              lambda: c.kg_assert("full", "otters", "eat", "urchins")):
                    err = raises(write)
                    assert isinstance(err, StorageFull) and isinstance(err, StorageError)
                    assert (err.code, err.name, err.retryable) == (505, "STORAGE_FULL", False)
                    assert err.details["condition"] == "full" and "free some space" in err.message
                    assert str(pdir) in err.message
                assert c.palace_info("full")["drawers"] == 61
                # Another palace on other storage is untouched by it.
                ok_id = c.remember("ok", "the other palace still takes writes")
                assert c.recall("ok", "other palace writes")[0]["id"] == ok_id
                # Space returns: the very next write works, no restart.
                filler.unlink()
                after = c.remember("full", "written once space returned: salmon swim upstream")
                assert c.recall("full", "salmon upstream", top_k=1)[0]["id"] == after
                assert c.status()["pid"] == pid
                index = fs.view() / "index.usearch"
                wait_for(lambda: index.exists() and index.stat().st_size > 0, 20, "index saved")
            d.stop()
            copy = fs.copy_out(home / "after")
            assert integrity(copy / "palace.db") == "ok"
            stored = texts(copy / "palace.db")
            assert set(before) | {after} == set(stored)
            assert not [t for t in stored.values() if "disk is full" in t or "batch" in t]
            assert index_problems(copy) == []
            log = (home / "state" / "palaced.log").read_text()
            # A failure that repeats is logged once per condition, not on every retry.
            assert log.count("checkpoint failed") <= 2, log
        finally:
            d.stop()


def test_file_size_limit_is_a_storage_error_and_recovers(home: Path) -> None:
    """RLIMIT_FSIZE on the daemon (any user can do it): writes that would grow a file past
    the limit fail; the palace stays intact and works again once the limit is lifted."""
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    with d.client() as c:
        c.create_palace("big")
        c.create_palace("ok")
        c.remember("big", "the first memory, before the limit")
    d.stop()
    limit = 1 << 20

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    d.proc = subprocess.Popen([sys.executable, "-m", "palaced", "run", "--quiet"], env=d.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, preexec_fn=limited)
    try:
        d.wait_ready(wait_model=False)
        acked: list[int] = []
        with d.client() as c:
            err: PalaceError | None = None
            for i in range(40):  # ~100 KB each: the WAL passes 1 MiB within ~10
                try:
                    acked.append(c.remember("big", f"large memory {i} " + "lorem " * 16_000))
                except PalaceError as exc:
                    err = exc
                    break
            assert isinstance(err, StorageError), err
            assert err.details["condition"] in ("full", "io_error"), err.details
            assert c.remember("ok", "a small write elsewhere fits") == 1
            resource.prlimit(d.pid(), resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            acked.append(c.remember("big", "written after the limit was lifted"))
            assert c.recall("big", "lifted", top_k=1)[0]["id"] == acked[-1]
        d.stop()
        db = home / "palaces" / "big" / "palace.db"
        assert integrity(db) == "ok"
        stored = texts(db)
        assert set(acked) <= set(stored) and len(stored) == len(acked) + 1
    finally:
        d.stop()


# -- damaged files ---------------------------------------------------------------------------------
def test_truncated_or_garbled_index_file_is_rebuilt_on_open(home: Path) -> None:
    (home / "config.toml").write_text("[limits]\nidle_close_s = 0.3\n")
    d = DaemonProc(home, base_env(home))
    d.start()
    try:
        with d.client() as c:
            c.create_palace("idx")
            ids = c.remember_many("idx", [{"text": f"invoice {i} for office chairs was paid"}
                                          for i in range(40)])
            ids.append(c.remember("idx", "a kingfisher dives for minnows"))
            index = home / "palaces" / "idx" / "index.usearch"
            for damage in ("truncate", "garble"):
                # Wait until the idle palace was closed (and its index saved at close).
                wait_for(lambda: not is_open(c, "idx"), 20, "idle close")
                data = index.read_bytes()
                if damage == "truncate":
                    index.write_bytes(data[: len(data) // 2])
                elif damage == "garble":
                    index.write_bytes(os.urandom(len(data)))
                else:
                    index.write_bytes(b"")
                res = c.recall_ex("idx", "which bird catches fish?", top_k=1)
                assert res["mode"] == "hybrid" and res["results"][0]["id"] == ids[-1], damage
                info = c.palace_info("idx")
                assert info["index"] == info["vectors"] == 41 and info["consistent"], damage
        d.stop()
        assert index_problems(home / "palaces" / "idx") == []
    finally:
        d.stop()


def test_corrupt_database_refuses_writes_and_other_palaces_work(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        with d.client() as c:
            for name in ("trunc", "garbled", "ok"):
                c.create_palace(name)
                c.remember_many(name, [{"text": f"{name} otter note {i} " + "stones " * 60}
                                       for i in range(300)])
            # Truncated under the open palace.
            db = home / "palaces" / "trunc" / "palace.db"
            with open(db, "r+b") as f:
                f.truncate(os.path.getsize(db) // 3)
            err = raises(lambda: c.recall("trunc", "otter stones"))
            assert isinstance(err, StorageCorrupt) and err.code == 507, err
            assert str(db) in err.message and "restore it from a backup" in err.message
            # Once SQLite said corrupt, writes are refused: nothing is acknowledged into it.
            err = raises(lambda: c.remember("trunc", "must not be acknowledged"))
            assert isinstance(err, StorageCorrupt) and "writes are refused" in err.message
        d.stop()
        # A garbled header of a palace that is not open: the open itself says corrupt.
        garbled = home / "palaces" / "garbled" / "palace.db"
        with open(garbled, "r+b") as f:
            f.write(os.urandom(100))
        d.start(wait_model=False)
        with d.client() as c:
            err = raises(lambda: c.palace_info("garbled"))
            assert isinstance(err, StorageCorrupt), err
            # The rest of the daemon does not care.
            assert c.recall("ok", "otter note 7", top_k=1)[0]["text"].startswith("ok otter")
            assert c.remember("ok", "still writable") == 301
            # The way out needs no restart: delete, create anew.
            for name in ("trunc", "garbled"):
                c.delete_palace(name)
                c.create_palace(name)
                assert c.remember(name, "a fresh start") == 1
        d.stop()
        assert integrity(home / "palaces" / "ok" / "palace.db") == "ok"
    finally:
        d.stop()


# -- a palace directory deleted under the daemon ------------------------------------------------
def test_palace_deleted_under_the_daemon_takes_no_writes_into_the_void(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    try:
        with d.client() as c:
            c.create_palace("gone")
            c.create_palace("ok")
            c.remember_many("gone", [{"text": f"gone note {i}"} for i in range(50)])
            pid = c.status()["pid"]
            shutil.rmtree(home / "palaces" / "gone")
            # Before: acknowledged (id 51) into a file no path reached any more: lost.
            err = raises(lambda: c.remember("gone", "a write after the directory vanished"))
            assert isinstance(err, PalaceNotFound) and "deleted while it was open" in err.message
            assert isinstance(raises(lambda: c.recall("gone", "note")), PalaceNotFound)
            assert "gone" not in [p["name"] for p in c.list_palaces()]
            assert c.remember("ok", "the other palace is fine") == 1
            # Its files are let go (no descriptor of a deleted file is kept).
            wait_for(lambda: not deleted_fds(pid, home / "palaces"), 10, "fds released")
            # The name is free again, for a palace of its own.
            assert c.create_palace("gone")["drawers"] == 0
            assert c.remember("gone", "a new palace under the old name") == 1
            assert [r["text"] for r in c.recall("gone", "palace name")] == [
                "a new palace under the old name"]
            assert c.status()["pid"] == pid
        d.stop()
        assert texts(home / "palaces" / "gone" / "palace.db") == {
            1: "a new palace under the old name"}
        assert integrity(home / "palaces" / "gone" / "palace.db") == "ok"
    finally:
        d.stop()


# -- the model directory -----------------------------------------------------------------------
def test_model_directory_missing_then_back_then_vanishing(home: Path) -> None:
    model = home / "model"
    (home / "config.toml").write_text("[limits]\ncheckpoint_idle_s = 0.3\n")  # prompt backfill
    env = base_env(home)
    env["PALACE_EMBED_MODEL_PATH"] = str(model)  # not there yet (an unmounted disk...)
    d = DaemonProc(home, env)
    d.start()
    try:
        with d.client() as c:
            st = c.status()["model"]
            assert st["state"] == "unavailable" and str(model) in st["reason"]
            c.create_palace("m")
            salmon = c.remember("m", "salmon swim upstream to spawn")
            res = c.recall_ex("m", "salmon", top_k=1)
            assert res["mode"] == "keyword" and str(model) in res["notice"]
            assert c.palace_info("m")["pending_embeddings"] == 1
            # The directory appears: the daemon loads it and embeds what waited, no restart.
            shutil.copytree(MODEL_DIR, model)
            wait_for(lambda: c.status()["model"]["state"] == "ready", 30, "model loaded")
            wait_for(lambda: c.palace_info("m")["pending_embeddings"] == 0, 30, "backfill")
            res = c.recall_ex("m", "which fish migrate against the current to breed?",
                              top_k=1)
            assert res["mode"] == "hybrid" and res["results"][0]["id"] == salmon
            # Then it vanishes: the model is in memory, nothing changes for the daemon.
            shutil.rmtree(model)
            dam = c.remember("m", "beavers build dams out of sticks")
            res = c.recall_ex("m", "which animal constructs river barriers?", top_k=1)
            assert res["mode"] == "hybrid" and res["results"][0]["id"] == dam
            assert c.status()["model"]["state"] == "ready"
    finally:
        d.stop()
