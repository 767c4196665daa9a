"""Crafted backups and palace files against a real (keyword-only) daemon: schema objects palace
did not make are refused by restore and by every open, and ``doctor --repair`` removes them."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import time
from pathlib import Path

import apsw
import pytest

from palaced.store.conn.db import APPLICATION_ID
from palaced.store.schema.check import refuse_foreign, schema_deviations
from palaced.store.schema.sqlite import MIGRATIONS, SCHEMA_VERSION, migrate
from palaced.wire.errors import BackupInvalid, StorageError
from tests.conftest import DaemonProc
from tests.palaced.maintenance.test_doctor import _sql

WIPE_DRAWERS = ("CREATE TRIGGER w AFTER INSERT ON drawers BEGIN "
                "DELETE FROM drawers WHERE id <> NEW.id; END")
WIPE_AUDIT = "CREATE TRIGGER wa AFTER INSERT ON drawers BEGIN DELETE FROM audit; END"
# Objects a crafted file may carry, each with the name the refusal must give.
PLANTED = {
    "trigger": ([WIPE_DRAWERS, WIPE_AUDIT], "'w'"),
    "view": (["CREATE VIEW v AS SELECT * FROM drawers"], "'v'"),
    "index": (["CREATE INDEX extra ON drawers(text)"], "'extra'"),
    "table": (["CREATE TABLE stash(x)"], "'stash'"),
    "fts5": (["CREATE VIRTUAL TABLE evil USING fts5(x)"], "'evil'"),
    # palace's own trigger, same name, another body: a changed definition
    "changed-trigger": (["DROP TRIGGER drawers_ttl",
                         "CREATE TRIGGER drawers_ttl AFTER INSERT ON drawers BEGIN "
                         "DELETE FROM trash; END"], "'drawers_ttl'"),
    "missing-trigger": (["DROP TRIGGER drawers_trigram_insert"], "'drawers_trigram_insert'"),
}


def _plant(db: Path, statements: list[str]) -> None:
    _sql(db, *statements)


def _resign(backup: Path) -> None:
    """Make the manifest say what the (altered) database now is, as an attacker would."""
    manifest = json.loads((backup / "manifest.json").read_text())
    data = (backup / "palace.db").read_bytes()
    manifest["files"]["palace.db"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                      "bytes": len(data)}
    (backup / "manifest.json").write_text(json.dumps(manifest))


def _crafted(made: Path, dst: Path, statements: list[str]) -> Path:
    shutil.copytree(made, dst)
    dst.chmod(0o700)
    _plant(dst / "palace.db", statements)
    _resign(dst)
    return dst


def test_a_palace_made_at_any_older_version_and_migrated_has_exactly_palaces_schema(
        tmp_path: Path) -> None:
    for start in range(SCHEMA_VERSION + 1):
        conn = apsw.Connection(str(tmp_path / f"v{start}.db"))
        try:
            for step in range(start):
                with conn:
                    MIGRATIONS[step](conn)
                    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version={step + 1}")
            refuse_foreign(conn)  # as an older palaced left it
            migrate(conn)
            assert schema_deviations(conn) == [], start
            conn.execute(WIPE_DRAWERS)
            with pytest.raises(StorageError, match="foreign trigger 'w' on drawers"):
                refuse_foreign(conn, "p")
        finally:
            conn.close()


def test_restore_refuses_a_backup_with_foreign_schema_objects(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("victim")
        for i in range(3):
            c.remember("victim", f"restored drawer number {i}")
        made = Path(c.backup("victim", to=tmp_path / "bk")["backups"][0]["path"])
        for how, (statements, named) in PLANTED.items():
            bad = _crafted(made, tmp_path / how, statements)
            with pytest.raises(BackupInvalid) as err:
                c.restore(bad, palace=f"fresh-{how}")
            assert named in err.value.message and "schema" in err.value.message, how
            assert not (d.home / "palaces" / f"fresh-{how}").exists()
        with pytest.raises(BackupInvalid):
            c.restore(tmp_path / "trigger", force=True)  # the palace itself is untouched
        c.remember("victim", "a later drawer")
        assert c.palace_info("victim")["drawers"] == 4
        assert c.restore(made, palace="clean")["counts"]["drawers"] == 3  # the real one works
    assert not [p for p in (d.home / "palaces").iterdir() if p.name.startswith(".")]


def test_open_refuses_foreign_objects_and_doctor_repair_removes_them(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("planted")
        for i in range(3):
            c.remember("planted", f"planted palace drawer {i}")
        c.create_palace("bystander")
        c.remember("bystander", "the bystander keeps working")
    d.stop()
    db = d.home / "palaces" / "planted" / "palace.db"
    _plant(db, [*PLANTED["trigger"][0], *PLANTED["view"][0], *PLANTED["fts5"][0],
                *PLANTED["changed-trigger"][0], *PLANTED["missing-trigger"][0]])
    d.start()
    with d.client() as c:
        with pytest.raises(StorageError) as err:  # refused: the trigger never ran
            c.remember("planted", "a write that would have wiped the others")
        assert "'w'" in err.value.message and "palace doctor" in err.value.message
        assert err.value.details["condition"] == "foreign_schema"
        c.remember("bystander", "still writable")
        report = c.doctor("planted")
        check = next(x for x in report["checks"] if x["name"] == "schema_objects")
        assert check["status"] == "fail" and check["fixable"], check
        assert "'w'" in check["detail"] and "'evil'" in check["detail"]
        fixed = c.doctor("planted", repair=True)
        assert fixed["healthy"], fixed
        assert any("dropped the foreign trigger 'w'" in r for r in fixed["repairs"])
        c.remember("planted", "a write after the repair")
        assert c.palace_info("planted")["drawers"] == 4  # nothing was wiped
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema")}
        ttl = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'drawers_ttl'"
                           ).fetchall()[0][0]
    finally:
        conn.close()
    assert not names & {"w", "wa", "v", "evil", "evil_data"}
    assert "drawers_trigram_insert" in names and "trash" not in ttl


def test_a_changed_table_is_refused_and_not_mended(keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("altered")
        c.remember("altered", "one drawer")
    d.stop()
    db = d.home / "palaces" / "altered" / "palace.db"
    _plant(db, ["PRAGMA writable_schema=ON",
                "UPDATE sqlite_schema SET sql = replace(sql, 'importance <= 1', "
                "'importance <= 9') WHERE name = 'drawers'",
                "PRAGMA writable_schema=OFF"])
    d.start()
    with d.client() as c:
        with pytest.raises(StorageError, match="table 'drawers'"):
            c.palace_info("altered")
        report = c.doctor("altered", repair=True)
        check = next(x for x in report["checks"] if x["name"] == "schema_objects")
        assert check["status"] == "fail" and not check["fixable"]
        assert "restore" in check["advice"]


def test_restore_refuses_a_database_larger_than_declared_before_copying_it(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("small")
        c.remember("small", "a palace of one drawer")
        made = Path(c.backup("small", to=tmp_path / "bk")["backups"][0]["path"])
    bad = tmp_path / "huge"
    shutil.copytree(made, bad)
    bad.chmod(0o700)
    os.truncate(bad / "palace.db", 300 << 20)  # sparse: 300 MB that take no disk here
    # Stands in for a small disk: a daemon that copied the file whole would fail to write
    # past 32 MiB (a storage error) instead of refusing the backup.
    resource.prlimit(d.pid(), resource.RLIMIT_FSIZE, (32 << 20, resource.RLIM_INFINITY))
    try:
        with d.client() as c:
            with pytest.raises(BackupInvalid, match="nothing was copied"):
                c.restore(bad, palace="restored")
            assert c.remember("small", "writes elsewhere still work") == 2
    finally:
        resource.prlimit(d.pid(), resource.RLIMIT_FSIZE,
                         (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert not (d.home / "palaces" / "restored").exists()
    assert not [p for p in (d.home / "palaces").iterdir() if p.name.startswith(".")]


def _created_ms(backup: Path) -> int:
    return int(json.loads((backup / "manifest.json").read_text())["created_ms"])


def _copy_as(made: Path, name: str, created_ms: int) -> Path:
    """A copy of backup ``made`` under directory name ``name``, its manifest saying
    ``created_ms`` (a backup copied in, or made under a clock that was off)."""
    dst = made.parent / name
    shutil.copytree(made, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["created_ms"] = created_ms
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_pruning_orders_by_manifest_time_and_never_deletes_the_new_backup(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    d = keyword_daemon
    root = tmp_path / "bk"
    with d.client() as c:
        c.create_palace("kept")
        c.remember("kept", "worth keeping")
        first = c.backup("kept", to=root, keep=5)["backups"][0]
        made = Path(first["path"])
        # Named as if taken in 2999, yet its manifest says it is older than the real one.
        renamed = _copy_as(made, "29991231T235959.000Z", _created_ms(made) - 60_000)
        second = c.backup("kept", to=root, keep=2)["backups"][0]
        assert second["removed"] == [str(renamed)]
        assert Path(second["path"]).is_dir() and made.is_dir()
        # A backup stamped in the future (clock skew) in name and manifest alike.
        future = _copy_as(made, "29991231T235959.001Z", _created_ms(made) + 10 ** 12)
        for _ in range(2):
            third = c.backup("kept", to=root, keep=1)["backups"][0]
            assert Path(third["path"]).is_dir(), third  # what it reports is there
        assert not future.exists()
        assert [p.name for p in (root / "kept").iterdir()] == [Path(third["path"]).name]


def test_daemon_start_sweeps_old_partial_copies_of_killed_backups(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("swept")
        c.backup("swept")
    d.stop()
    base = d.home / "backups" / "swept"
    old, fresh, other = base / ".partial-1000", base / ".partial-2000", base / ".partial-x"
    for path in (old, fresh, other):
        path.mkdir(mode=0o700)
        (path / "palace.db").write_bytes(b"half a copy")
    hours_ago = time.time() - 2 * 3600
    for path in (old / "palace.db", old, other):
        os.utime(path, (hours_ago, hours_ago))
    d.start()
    assert not old.exists()  # a killed backup's copy, untouched for hours
    assert fresh.exists()  # may be a backup another daemon is writing into this root
    assert other.exists()  # not a name palace gives


def test_doctor_never_reads_a_view_standing_in_for_a_palace_table(
        keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("wedge")
        c.remember("wedge", "one drawer")
    d.stop()
    _plant(d.home / "palaces" / "wedge" / "palace.db", [
        "DROP TABLE context_vectors",  # read by doctor's counts: endless if it were
        "CREATE VIEW context_vectors(drawer_id, vec) AS WITH RECURSIVE n(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x, x FROM n"])
    d.start()
    from palace_client import Client

    with Client(d.socket, autostart=False, request_timeout=30) as c:
        report = c.doctor("wedge", repair=True)
    checks = {x["name"]: x for x in report["checks"] if x["palace"] == "wedge"}
    found = checks["schema_objects"]
    assert found["status"] == "fail" and not found["fixable"], found
    assert "missing table 'context_vectors'" in found["detail"]  # that takes a backup
    assert any("dropped the foreign view 'context_vectors'" in r for r in report["repairs"])
    assert "fts" not in checks  # nothing that reads the tables ran


def test_status_never_reads_a_closed_palace_with_foreign_objects(
        keyword_daemon: DaemonProc) -> None:
    """``palace status`` counts a closed palace's rows without opening it: a view standing in
    for one of its tables must not run (a recursive one would spin forever), so the palace
    is listed with the refusal and the others with their counts."""
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("peeked")
        c.remember("peeked", "one drawer")
        c.create_palace("fine")
        c.remember("fine", "another drawer")
    d.stop()
    _plant(d.home / "palaces" / "peeked" / "palace.db", [
        "DROP TABLE vectors",
        "CREATE VIEW vectors(id) AS WITH RECURSIVE n(x) AS "
        "(SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n"])
    d.start()
    from palace_client import Client

    started = time.monotonic()
    with Client(d.socket, autostart=False, request_timeout=20) as c:
        listed = {p["name"]: p for p in c.status()["palaces"]}
    assert time.monotonic() - started < 10
    assert "foreign view 'vectors'" in listed["peeked"]["error"], listed["peeked"]
    assert "palace doctor --palace peeked --repair" in listed["peeked"]["error"]
    assert listed["fine"]["drawers"] == 1 and "error" not in listed["fine"]


def test_repair_drops_objects_planted_in_an_open_palace(keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("live")
        for i in range(3):
            c.remember("live", f"live palace drawer {i}")
        _plant(d.home / "palaces" / "live" / "palace.db", PLANTED["trigger"][0])
        check = next(x for x in c.doctor("live")["checks"] if x["name"] == "schema_objects")
        assert check["status"] == "fail" and "'w'" in check["detail"], check
        fixed = c.doctor("live", repair=True)
        assert fixed["healthy"], fixed
        c.remember("live", "a write after the repair")
        assert c.palace_info("live")["drawers"] == 4
