"""``palace backup`` and ``palace restore`` against a real daemon: consistent online copies
while a writer keeps writing, verified restores, and refusals that change nothing."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from palaced.wire.errors import BackupInvalid, InvalidArgs, PalaceExists, PalaceNotFound
from tests.conftest import DaemonProc


def _backup(d: DaemonProc, *args: str) -> dict[str, Any]:
    r = d.cli("backup", *args, "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def _ids_in(db: Path) -> set[int]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return {int(r[0]) for r in conn.execute("SELECT id FROM drawers")}
    finally:
        conn.close()


def test_backup_while_a_writer_remembers_holds_every_acknowledged_drawer(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("busy")
        c.remember_many("busy", [{"text": f"seed note {i} about topic {i % 37} and more words "
                                  f"to fill the page {i * 13}", "room": f"r{i % 9}"}
                                 for i in range(3000)])
        c.kg_assert("busy", "alice", "works_at", "acme")
    acked: list[tuple[float, int]] = []
    stop = threading.Event()

    def writer() -> None:
        with d.client() as w:
            i = 0
            while not stop.is_set():
                did = w.remember("busy", f"live note {i} written during the backup")
                acked.append((time.monotonic(), did))
                i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(acked) < 20:
            time.sleep(0.01)
        started = time.monotonic()
        before = {did for t, did in list(acked) if t < started}
        made = _backup(d, "--palace", "busy")["backups"][0]
    finally:
        stop.set()
        thread.join(30)
    path = Path(made["path"])
    assert path.parent == d.home / "backups" / "busy"
    assert sorted(p.name for p in path.iterdir()) == ["identity.txt", "manifest.json",
                                                      "palace.db"]
    ids = _ids_in(path / "palace.db")
    assert before <= ids, f"acknowledged drawers missing: {sorted(before - ids)[:5]}"
    assert len(ids) >= 3000 + len(before)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["palace"] == "busy" and manifest["counts"]["drawers"] == len(ids)
    assert manifest["counts"]["facts"] == 1
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert "index.usearch" in manifest["not_included"]
    # The palace kept serving: the writer's later drawers are all there.
    with d.client() as c:
        assert c.palace_info("busy")["drawers"] == 3000 + len(acked)


def test_restore_round_trip_and_refusals(daemon: DaemonProc) -> None:
    d = daemon
    with d.client() as c:
        c.create_palace("proj")
        keep = c.remember("proj", "The staging database is Postgres 16 on port 5433")
        gone = c.remember("proj", "Deploys happen on Tuesdays after the standup")
        c.kg_assert("proj", "alice", "owns", "payments")
    (d.home / "palaces" / "proj" / "identity.txt").write_text("Project proj, restored.\n")
    path = _backup(d, "--palace", "proj")["backups"][0]["path"]
    with d.client() as c:
        # Unchanged since the backup: a restore needs no --force.
        assert c.restore(path)["replaced"] is True
        c.forget("proj", gone)
        later = c.remember("proj", "A drawer written after the backup")
        with pytest.raises(PalaceExists, match="written at .* after the backup"):
            c.restore(path)
        assert c.get("proj", later)["id"] == later  # the refusal changed nothing
        copy = c.restore(path, palace="proj-copy")
        assert copy["replaced"] is False and copy["counts"]["drawers"] == 2
        res = c.restore(path, force=True)
        assert res["replaced"] and res["index"] == 2, res  # the index is rebuilt on open
        ids = {x["id"] for x in c.drawers("proj")["drawers"]}
        assert ids == {keep, gone}
        hit = c.recall_ex("proj", "which port does the staging Postgres use?")
        assert hit["mode"] == "hybrid" and hit["results"][0]["id"] == keep
        assert c.kg_query("proj", "alice")["facts"][0]["object"] == "payments"
        assert c.wake_up("proj")["sections"][0]["items"][0]["text"] == "Project proj, restored."
        info = c.palace_info("proj")
        assert info["consistent"] is True and info["vectors"] == 2
    r = d.cli("restore", path, "--palace", "proj-copy")
    assert r.returncode == 0, r.stderr  # the CLI path, unchanged since its restore
    assert "restored palace proj-copy" in r.stdout


def _tamper(src: Path, dst: Path, how: str) -> Path:
    dst.mkdir(mode=0o700)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    manifest = json.loads((dst / "manifest.json").read_text())
    if how == "checksum":
        manifest["files"]["palace.db"]["sha256"] = "0" * 64
    elif how == "bytes":
        data = bytearray((dst / "palace.db").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (dst / "palace.db").write_bytes(bytes(data))
    elif how == "counts":
        manifest["counts"]["drawers"] += 1
    elif how == "hostile-file":
        manifest["files"]["../../palaces/victim/palace.db"] = manifest["files"]["palace.db"]
    elif how == "symlink":
        (dst / "palace.db").unlink()
        (dst / "palace.db").symlink_to(src / "palace.db")
    elif how == "not-json":
        (dst / "manifest.json").write_text("{not json")
        return dst
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.mark.parametrize("how", ["checksum", "bytes", "counts", "hostile-file", "symlink",
                                 "not-json"])
def test_restore_refuses_a_tampered_backup_and_changes_nothing(
        keyword_daemon: DaemonProc, tmp_path: Path, how: str) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("victim")
        c.remember("victim", "original drawer")
    path = Path(_backup(d, "--palace", "victim")["backups"][0]["path"])
    bad = _tamper(path, tmp_path / "bad", how)
    with d.client() as c:
        c.remember("victim", "a later drawer")
        with pytest.raises(BackupInvalid):
            c.restore(bad, force=True)
        assert c.palace_info("victim")["drawers"] == 2
    r = d.cli("restore", str(bad), "--palace", "fresh", "--force")
    assert r.returncode == 5 and "[BACKUP_INVALID]" in r.stderr
    assert not (d.home / "palaces" / "fresh").exists()
    assert not [p for p in (d.home / "palaces").iterdir() if p.name.startswith(".")]


def test_backup_keeps_the_newest_and_refuses_bad_destinations(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("kept")
        c.create_palace("other")
        c.remember("kept", "something worth keeping")
        made = [c.backup("kept", to=tmp_path / "bk", keep=2)["backups"][0] for _ in range(3)]
        assert made[2]["removed"] == [made[0]["path"]]
        left = sorted(p.name for p in (tmp_path / "bk" / "kept").iterdir())
        assert left == sorted(Path(m["path"]).name for m in made[1:])
        every = c.backup(to=tmp_path / "all")  # every palace by default
        assert sorted(b["palace"] for b in every["backups"]) == ["kept", "other"]
        with pytest.raises(InvalidArgs, match="palaces directory"):
            c.backup("kept", to=d.home / "palaces")
        with pytest.raises(InvalidArgs, match="absolute"):
            c.call("palace.backup", "kept", {"to": "relative/dir"})
        with pytest.raises(InvalidArgs):
            c.call("palace.backup", "kept", {"keep": 0})
        with pytest.raises(PalaceNotFound):
            c.backup("nope")
        with pytest.raises(InvalidArgs, match="absolute"):
            c.call("palace.restore", None, {"path": "kept/20250101T000000.000Z"})
        with pytest.raises(InvalidArgs):
            c.call("palace.restore", None, {"path": "/tmp/x\x00y"})
        with pytest.raises(BackupInvalid, match="no backup directory"):
            c.restore(tmp_path / "missing")
        assert c.palace_info("kept")["drawers"] == 1  # and the daemon is still up
    stat = os.stat(tmp_path / "bk" / "kept")
    assert stat.st_mode & 0o077 == 0


def test_a_restore_killed_between_its_renames_is_undone_at_start(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("moved")
        c.remember("moved", "I was moved aside by a restore that never finished")
        c.create_palace("done")
    d.stop()
    root = d.home / "palaces"
    (root / "moved").rename(root / ".replaced-moved-1700000000000000000")
    (root / ".creating-moved-1700000000000000001").mkdir()  # its half-made copy
    (root / ".replaced-done-1700000000000000002").mkdir()  # a restore that did finish
    d.start()
    with d.client() as c:
        assert c.palace_info("moved")["drawers"] == 1
        assert sorted(p["name"] for p in c.list_palaces()) == ["done", "moved"]
    assert sorted(p.name for p in root.iterdir()) == ["done", "moved"]
