"""Memoirs complete (issue 31) through a real keyword-only daemon and the CLI: an export ->
import round trip and a backup -> restore carry memoirs, concepts (labels, sources) and links;
memoir writes and `import jsonl` are audited; a crafted export is refused record by record with
typed errors and changes nothing else."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from palace_client import Client
from tests.conftest import DaemonProc
from tests.support.cli_inproc import InProcCliDaemonProc

pytestmark = pytest.mark.daemon


def _name(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:6]}"


def _memoir_state(c: Client, palace: str) -> list[dict[str, Any]]:
    """Every memoir with its concepts (labels, sources) and their links, times included."""
    out = []
    for m in c.memoir_list(palace):
        shown = c.memoir_show(palace, m["name"], limit=1000)
        concepts = shown["concepts"]
        links = []
        for concept in concepts:
            near = c.memoir_inspect(palace, m["name"], concept["name"], depth=1)
            links += [(x["id"], x["from"], x["relation"], x["to"], x["weight"], x["created_ms"])
                      for x in near["links"]]
        out.append({"memoir": m, "concepts": concepts, "links": sorted(set(links))})
    return out


def _rich(d: DaemonProc, palace: str) -> list[int]:
    with d.client() as c:
        c.create_palace(palace)
        ids = [c.remember(palace, f"Auth note {i}: tokens rotate every {i + 1} hours",
                          room="auth") for i in range(4)]
        c.memoir_create(palace, "auth", description="How auth works here",
                        consolidation_threshold=3)
        c.memoir_create(palace, "empty one")
        c.memoir_add_concept(palace, "auth", "token rotation", "Tokens rotate hourly.",
                             labels=["domain:auth", "urgent"], confidence=0.7,
                             sources=ids[:2])
        c.memoir_add_concept(palace, "auth", "session", "A login's lifetime.",
                             sources=[ids[3]])
        c.memoir_add_concept(palace, "auth", "refresh token", "Renews a session.")
        c.memoir_refine(palace, "auth", "session", "A login's lifetime, 30 minutes idle.",
                        labels=["domain:auth"], sources=[ids[2]])
        c.memoir_link(palace, "auth", "refresh token", "part_of", "session")
        c.memoir_link(palace, "auth", "session", "depends_on", "token rotation", weight=0.5)
        c.memoir_link(palace, "auth", "token rotation", "related_to", "refresh token")
    return ids


def test_export_import_round_trip_keeps_memoirs(shared_keyword_daemon: DaemonProc,
                                                tmp_path: Path) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    src, dst = _name("memo-src"), _name("memo-dst")
    _rich(d, src)
    path = tmp_path / "export.jsonl"
    d.cli("export", "--palace", src, str(path), check=True)
    res = json.loads(d.cli("import", "jsonl", str(path), "--palace", dst, "--json",
                           check=True).stdout)
    assert res["rejected"] == 0 if isinstance(res.get("rejected"), int) else not res.get(
        "rejected"), res
    with d.client() as c:
        before, after = _memoir_state(c, src), _memoir_state(c, dst)
        assert [m["memoir"]["name"] for m in after] == ["auth", "empty one"]
        assert after == before
        # Recall's L2 and memoir search find the imported concepts (their index is rebuilt).
        found = c.memoir_search(dst, query="rotate hourly")
        assert [x["name"] for x in found] == ["token rotation"]
        assert sorted(x["name"] for x in c.memoir_search(dst, label="domain:auth")) == [
            "session", "token rotation"]
    # Exported again, the copy says the same (header fields about the export aside).
    again = tmp_path / "again.jsonl"
    d.cli("export", "--palace", dst, str(again), check=True)
    first = [json.loads(x) for x in path.read_text().splitlines()][1:]
    second = [json.loads(x) for x in again.read_text().splitlines()][1:]
    assert first == second


def test_backup_restore_keeps_memoirs(shared_keyword_daemon: DaemonProc, tmp_path: Path
                                      ) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    src, dst = _name("memo-bk"), _name("memo-rs")
    _rich(d, src)
    with d.client() as c:
        made = c.backup(src, to=tmp_path)["backups"][0]["path"]
        c.restore(made, palace=dst)
        assert _memoir_state(c, dst) == _memoir_state(c, src)


def test_memoir_writes_and_imports_are_audited(shared_keyword_daemon: DaemonProc,
                                               tmp_path: Path) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    src, dst = _name("memo-au"), _name("memo-ai")
    ids = _rich(d, src)
    with d.client() as c:
        c.memoir_unlink(src, "auth", "refresh token", "part_of", "session")
        c.memoir_update(src, "auth", consolidation_threshold=9)
        c.memoir_rename_concept(src, "auth", "session", "login session")
        c.memoir_delete_concept(src, "auth", "refresh token")
        c.memoir_delete(src, "empty one")
        log = [(e["op"], e["outcome"])
               for e in c.audit(src, op="memoir.*", limit=100)["entries"]]
        added = list(c.audit(src, op="memoir.add_concept")["entries"])
    assert sorted(log) == sorted([
        ("memoir.create", "created"), ("memoir.create", "created"),
        ("memoir.add_concept", "created"), ("memoir.add_concept", "created"),
        ("memoir.add_concept", "created"), ("memoir.refine", "updated"),
        ("memoir.link", "linked"), ("memoir.link", "linked"), ("memoir.link", "linked"),
        ("memoir.unlink", "unlinked"), ("memoir.update", "updated"),
        ("memoir.rename_concept", "renamed"), ("memoir.delete_concept", "deleted"),
        ("memoir.delete", "deleted")])
    assert sorted(i for e in added for i in e["drawer_ids"]) == sorted([*ids[:2], ids[3]])
    path = tmp_path / "e.jsonl"
    d.cli("export", "--palace", src, str(path), check=True)
    d.cli("import", "jsonl", str(path), "--palace", dst, check=True)
    with d.client() as c:
        entries = c.audit(dst, op="palace.import_records")["entries"]
    assert entries and {e["outcome"] for e in entries} == {"imported"}
    assert sorted(i for e in entries for i in e["drawer_ids"]) == sorted(ids)


def test_update_rename_and_delete_through_the_cli_and_mcp(shared_keyword_daemon: DaemonProc
                                                         ) -> None:
    from tests.palace_client.mcp.test_mcp_knowledge import Bridge

    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _name("memo-ed")
    _rich(d, p)
    out = d.cli("memoir", "update", "auth", "--description", "Auth, revised",
                "--consolidation-threshold", "2", "--palace", p, check=True).stdout
    assert "updated (description, consolidation_threshold)" in out
    d.cli("memoir", "rename-concept", "session", "login session", "-m", "auth", "--palace", p,
          check=True)
    res = d.cli("memoir", "rename-concept", "token rotation", "login session", "-m", "auth",
                "--palace", p)
    assert res.returncode == 6  # CONCEPT_EXISTS
    assert d.cli("memoir", "delete-concept", "refresh token", "-m", "auth", "--palace", p
                 ).returncode == 5  # needs --yes
    d.cli("memoir", "delete-concept", "refresh token", "-m", "auth", "--yes", "--palace", p,
          check=True)
    with d.client() as c:
        shown = c.memoir_show(p, "auth")
        assert shown["memoir"]["description"] == "Auth, revised"
        assert shown["memoir"]["consolidation_threshold"] == 2
        assert [x["name"] for x in shown["concepts"]] == ["login session", "token rotation"]
        assert shown["concepts"][0]["consolidate"]  # 2 sources, threshold 2
        near = c.memoir_inspect(p, "auth", "login session")
        assert [(x["from"], x["relation"], x["to"]) for x in near["links"]] == [
            ("login session", "depends_on", "token rotation")]  # refresh token's links went
    b = Bridge(d.env, p)

    def memoir_tool(**arguments: Any) -> str:  # `name` is a tool argument here
        result = b.request("tools/call", {"name": "memoir", "arguments": arguments})
        assert not result["isError"], result
        return str(result["content"][0]["text"])

    try:
        assert "Renamed" in memoir_tool(action="rename_concept", memoir="auth",
                                        name="login session", new_name="session")
        assert "(description)" in memoir_tool(action="update", memoir="auth",
                                              description="Auth again")
        assert "Deleted concept" in memoir_tool(action="delete_concept", memoir="auth",
                                                name="session")
    finally:
        b.close()
    with d.client() as c:
        assert [x["name"] for x in c.memoir_show(p, "auth")["concepts"]] == ["token rotation"]


def _crafted(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_crafted_export_is_refused_record_by_record(shared_keyword_daemon: DaemonProc,
                                                      tmp_path: Path) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    src = _name("memo-cr")
    _rich(d, src)
    path = tmp_path / "good.jsonl"
    d.cli("export", "--palace", src, str(path), check=True)
    records = [json.loads(x) for x in path.read_text().splitlines()]
    end = records.pop()
    memoir = next(r for r in records if r["record"] == "memoir")
    concept = next(r for r in records if r["record"] == "concept")
    bad = [
        {**concept, "id": 900, "memoir": 777, "name": "orphan"},  # dangling memoir
        {"record": "concept_link", "id": 901, "source": concept["id"], "target": 555,
         "relation": "part_of", "created_ms": 1},  # dangling concept
        {"record": "concept_link", "id": 902, "source": concept["id"],
         "target": concept["id"], "relation": "part_of", "created_ms": 1},  # self-link
        {"record": "concept_link", "id": 903, "source": concept["id"], "target": concept["id"],
         "relation": "owns", "created_ms": 1},  # no typed relation
        {**concept, "id": 904, "name": "x" * 5000},  # huge field
        {**concept, "id": 905, "name": "big", "labels": ["bad label!:x" * 20]},
        {**memoir, "id": 906},  # the same name under another id
        {**concept, "id": -1, "name": "neg"},  # bad id
    ]
    dst = _name("memo-cr2")
    res = d.cli("import", "jsonl", str(_crafted(tmp_path / "bad.jsonl", [*records, *bad, end])),
                "--palace", dst, "--json")
    assert res.returncode == 10, res.stderr  # EXIT_SKIPPED: the bad records only
    with d.client() as c:
        assert _memoir_state(c, dst) == _memoir_state(c, src)  # nothing of the bad ones
        assert not c.memoir_search(dst, query="orphan") and not c.memoir_search(dst, query="big")


def test_entity_type_definition_and_labels_are_set_and_searched(
        shared_keyword_daemon: DaemonProc, store: str | None) -> None:
    from tests.palace_client.mcp.test_mcp_knowledge import Bridge

    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = _name("ent")
    with d.client() as c:
        c.create_palace(p, store=store)
        c.kg_assert(p, "billing", "depends_on", "ledger")
    out = d.cli("kg", "describe", "billing", "--type", "service", "--definition",
                "Charges cards every month", "--label", "pci", "--label", "core",
                "--palace", p, check=True).stdout
    assert "billing (service)  [pci, core]" in out and "(type, definition, labels set)" in out
    again = d.cli("kg", "describe", "billing", "--type", "service", "--palace", p, check=True)
    assert "(unchanged)" in again.stdout
    assert d.cli("kg", "describe", "billing", "--palace", p).returncode == 5  # nothing to set
    with d.client() as c:
        assert [e["name"] for e in c.kg_search(p, "charges cards")] == ["billing"]
        assert [e["name"] for e in c.kg_search(p, "pci")] == ["billing"]
        assert [e["name"] for e in c.kg_search(p, "billing", type="SERVICE")] == ["billing"]
        assert c.kg_search(p, "billing", type="person") == []
        described = list(c.audit(p, op="graph.describe")["entries"])
        assert [e["outcome"] for e in described] == ["described"]
    res = json.loads(d.cli("kg", "search", "cards", "--type", "service", "--json", "--palace",
                           p, check=True).stdout)
    assert res["entities"][0]["labels"] == ["pci", "core"]
    b = Bridge(d.env, p)
    try:
        text = b.ok("kg_assert", subject="Alice", predicate="works_at", object="Acme",
                    type="person", definition="Leads the payments team", labels=["staff"])
        assert "Alice is described: a person; Leads the payments team; labels staff" in text
        assert "(a person; Leads the payments team; labels staff)" in b.ok(
            "kg_query", subject="alice")
    finally:
        b.close()
    with d.client() as c:
        assert [e["name"] for e in c.kg_search(p, "payments team", type="person")] == ["Alice"]
