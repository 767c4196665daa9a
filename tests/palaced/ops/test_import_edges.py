"""Imported numbers at the edge (issue "Hardening II", item 9): ids and counters at SQLite's
int64 limit and ``superseded_by`` cycles are refused at import (naming the field and the
bound), counters saturate instead of overflowing, and ``palace doctor`` sees a palace that
got there anyway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palaced.ops import transfer as ops_transfer
from palaced.store.jobs import transfer as store_transfer
from palaced.wire.errors import InvalidArgs, InvalidContent
from palaced.wire.export_format import MAX_COUNT, MAX_RESTORED_ID
from tests.conftest import DaemonProc
from tests.palaced.maintenance.test_doctor import _sql
from tests.support.inproc import InProcDaemon

INT64_MAX = 2**63 - 1


def _export(d: DaemonProc, palace: str, path: Path, n: int = 3) -> list[dict[str, Any]]:
    with d.client() as c:
        c.create_palace(palace)
        for i in range(n):
            c.remember(palace, f"fact number {i} about zebras", room="r")
    d.cli("export", "--palace", palace, str(path), check=True)
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_ids_and_counts_at_the_int64_limit_are_refused(keyword_daemon: DaemonProc,
                                                       tmp_path: Path) -> None:
    d = keyword_daemon
    path = tmp_path / "x.jsonl"
    records = _export(d, "edge-orig", path)
    drawers = [r for r in records if r["record"] == "drawer"]
    drawers[0]["id"] = INT64_MAX
    drawers[1]["access_count"] = INT64_MAX
    _write(path, records)
    res = d.cli("import", "jsonl", str(path), "--palace", "edge-copy")
    assert res.returncode == 10, res.stdout + res.stderr
    assert f"'id' must be between 1 and {MAX_RESTORED_ID}" in res.stderr, res.stderr
    assert f"'access_count' must be between 0 and {MAX_COUNT}" in res.stderr, res.stderr
    assert "1 stored" in res.stdout or "2 stored" in res.stdout  # the third drawer (+identity)
    with d.client() as c:
        assert c.remember("edge-copy", "a new fact after the import") > 0  # was STORAGE_FULL

    # The header's drawer_seq, refused by the client's check and by the daemon's own.
    header = dict(records[0], drawer_seq=INT64_MAX)
    _write(path, [header, *records[1:]])
    res = d.cli("import", "jsonl", str(path), "--palace", "edge-seq")
    assert f"'drawer_seq' must be between 0 and {MAX_RESTORED_ID}" in res.stderr, res.stderr
    with d.client() as c:
        c.create_palace("edge-seq2")
        with pytest.raises(InvalidArgs, match="drawer_seq") as err:
            c.import_records("edge-seq2", [header])
        assert err.value.details["index"] == 0
        for late in ({"decayed_ms": INT64_MAX}, {"exported_ms": -INT64_MAX}):
            with pytest.raises(InvalidContent, match="outside years 1-9999"):
                c.import_records("edge-seq2", [dict(records[0], **late)])
        c.create_palace("edge-seq", exist_ok=True)
        assert c.remember("edge-seq", "a new fact") > 0


def test_a_superseded_by_cycle_is_refused_at_import(keyword_daemon: DaemonProc,
                                                    tmp_path: Path) -> None:
    d = keyword_daemon
    path = tmp_path / "c.jsonl"
    records = _export(d, "cyc-orig", path, n=2)
    a, b = (r for r in records if r["record"] == "drawer")
    a["superseded_by"], b["superseded_by"] = b["id"], a["id"]
    _write(path, records)
    res = d.cli("import", "jsonl", str(path), "--palace", "cyc-copy", "--json")
    out = json.loads(res.stdout)
    assert out["skipped"] == 1, res.stdout
    assert "a cycle would hide every drawer in it" in out["problems"][0]["message"]
    with d.client() as c:
        hits = c.recall("cyc-copy", "zebras")
        assert [h["id"] for h in hits] == [a["id"]]  # its link to the refused one dropped


def test_doctor_sees_ids_counts_and_cycles_at_the_edge(keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("edgy")
        ids = [c.remember("edgy", f"fact number {i} about zebras", room="r") for i in range(3)]
        assert c.doctor("edgy")["healthy"]
    d.stop()
    _sql(d.home / "palaces" / "edgy" / "palace.db",
         f"UPDATE drawers SET access_count = {INT64_MAX} WHERE id = {ids[0]}",
         f"UPDATE sqlite_sequence SET seq = {INT64_MAX} WHERE name = 'drawers'",
         f"UPDATE drawers SET superseded_by = {ids[2]} WHERE id = {ids[1]}",
         f"UPDATE drawers SET superseded_by = {ids[1]} WHERE id = {ids[2]}")
    d.start()
    with d.client() as c:
        report = c.doctor("edgy")
    found = {ch["name"]: ch for ch in report["checks"] if ch["palace"] == "edgy"}
    assert not report["healthy"]
    assert found["ids"]["status"] == "fail" and str(INT64_MAX) in found["ids"]["detail"]
    assert found["access_counts"]["status"] == "warn"
    assert found["supersede_cycles"]["status"] == "fail"
    assert found["supersede_cycles"]["detail"].startswith("2 drawers")


def test_an_access_count_at_the_limit_saturates(keyword_daemon: DaemonProc) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("sat")
        did = c.remember("sat", "the zebra crossing is on Main Street")
    d.stop()
    _sql(d.home / "palaces" / "sat" / "palace.db",
         f"UPDATE drawers SET access_count = {INT64_MAX} WHERE id = {did}")
    d.start()
    with d.client() as c:
        assert [h["id"] for h in c.recall("sat", "zebra crossing")] == [did]
        c.decay("sat")  # writes the recall's touches: was OverflowError, every checkpoint
        assert c.get("sat", did)["access_count"] == MAX_COUNT


def test_a_record_that_fails_unforeseen_is_refused_alone(inproc: InProcDaemon,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real_topics, real_restore = ops_transfer.extract_topics, store_transfer.restore_drawer

    def topics(text: str) -> Any:
        if "poison-check" in text:
            raise RecursionError("a text no check foresaw")
        return real_topics(text)

    def restore(conn: Any, rec: Any, *args: Any) -> Any:
        if "poison-write" in rec["text"]:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return real_restore(conn, rec, *args)

    monkeypatch.setattr(ops_transfer, "extract_topics", topics)
    monkeypatch.setattr(store_transfer, "restore_drawer", restore)
    ms = 1_714_500_000_000
    drawers = [{"record": "drawer", "id": i, "text": f"fact {i} {mark}", "wing": "w",
                "room": "r", "importance": 0.5, "created_ms": ms, "updated_ms": ms,
                "occurred_ms": ms}
               for i, mark in enumerate(["fine", "poison-check", "poison-write", "fine"], 1)]
    with inproc.client() as c:
        c.create_palace("unforeseen")
        res = c.import_records("unforeseen", [
            {"record": "header", "format": "palace-export", "version": 1, "palace": "x",
             "exported_ms": ms}, *drawers, {"record": "end"}])
        assert res["stored"] == 2 and res["finished"], res
        assert [(r["index"], r["name"]) for r in res["rejected"]] == [
            (2, "INVALID_CONTENT"), (3, "INVALID_CONTENT")]
        assert "RecursionError" in res["rejected"][0]["message"]
        assert c.palace_info("unforeseen")["drawers"] == 2
