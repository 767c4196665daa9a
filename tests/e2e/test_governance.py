"""Agents, the trash, the audit log and the policy, against real daemons (the real model where
vectors matter): identities from MCP ``initialize``, ``--agent`` and ``PALACE_AGENT`` land on
drawers and in the log; forget/restore keeps text and vectors; purge; the scheduler empties an
expired trash and expiry lands in it; the log never holds a memory's text; a policy refusal is
typed and changes nothing. The op-level tests run on both backends (``store`` of conftest: a
local SQLite palace, then a team palace in a real PostgreSQL)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from palaced.wire import errors as E
from tests.conftest import DaemonProc, base_env
from tests.support.transcripts import Session

BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]
SECRET = "zebracorn"  # in every memory text of the audit test, never in the log


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class McpBridge:
    """One ``palace mcp`` process that introduced itself as ``client_info``."""

    def __init__(self, env: dict[str, str], palace: str, client_info: dict[str, Any]) -> None:
        self.p = subprocess.Popen([*BRIDGE, "--palace", palace], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self._id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": client_info})

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        assert self.p.stdin is not None and self.p.stdout is not None
        self._id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self._id, "method": method,
                           "params": params})
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        answer = json.loads(self.p.stdout.readline())
        assert "result" in answer, answer
        return answer["result"]

    def tool(self, name: str, **arguments: Any) -> str:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        assert not result["isError"], result
        return str(result["content"][0]["text"])

    def close(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()
            self.p.stdin = None
        self.p.communicate(timeout=30)


def stored_id(text: str) -> int:
    return int(text.split("#", 1)[1].split()[0])


def db_rows(d: DaemonProc, palace: str, store: str | None, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` read straight from the palace's database: its SQLite file, or its
    schema in PostgreSQL (a team palace)."""
    if store is None:
        db = d.home / "palaces" / palace / "palace.db"
        read_only = "?mode=ro" if sql.startswith("SELECT") else ""
        with sqlite3.connect(f"file:{db}{read_only}", uri=True, timeout=30) as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    schema = "palace_" + palace.replace("-", "_")
    with psycopg.connect(store, options=f"-c search_path={schema}") as conn:
        return conn.execute(sql).fetchall()


def cli_json(d: DaemonProc, *args: str, env: dict[str, str] | None = None,
             code: int = 0) -> Any:
    res = subprocess.run([sys.executable, "-m", "palace_client", *args, "--json"],
                         env=env or d.env, capture_output=True, text=True, timeout=120)
    assert res.returncode == code, (args, res.returncode, res.stdout, res.stderr)
    return json.loads(res.stdout)


# -- identity -------------------------------------------------------------------------------------
def test_mcp_initialize_names_the_agent_of_what_it_stores(shared_daemon: DaemonProc) -> None:
    palace = unique("mcp-agent")
    bridge = McpBridge(shared_daemon.env, palace, {"name": "claude-code", "version": "2.0.14"})
    try:
        did = stored_id(bridge.tool("remember", text="The build cache lives on the NAS"))
        forgot = bridge.tool("forget", id=did)
    finally:
        bridge.close()
    assert "trash" in forgot and f"palace restore-drawer {did} --palace {palace}" in forgot
    # PALACE_AGENT names the agent whatever the client says it is.
    env = {**shared_daemon.env, "PALACE_AGENT": "reviewer"}
    bridge = McpBridge(env, palace, {"name": "claude-code", "version": "2.0.14"})
    try:
        other = stored_id(bridge.tool("remember", text="Releases are cut on Thursdays"))
    finally:
        bridge.close()
    with shared_daemon.client() as c:
        c.agent = "user:checker"
        restored = c.restore_drawer(palace, did)
        assert restored == {"id": did, "restored": True, "embedded": True}
        drawer = c.get(palace, did)
        assert drawer["created_by"] == "mcp:claude-code/2.0.14"
        assert drawer["updated_by"] == "user:checker"
        assert c.get(palace, other)["created_by"] == "reviewer"
        log = c.audit(palace, op="memory.*")["entries"]
    assert [(e["agent"], e["op"], e["outcome"], e["drawer_ids"]) for e in log] == [
        ("user:checker", "memory.restore", "restored", [did]),
        ("reviewer", "memory.remember", "created", [other]),
        ("mcp:claude-code/2.0.14", "memory.forget", "trashed", [did]),
        ("mcp:claude-code/2.0.14", "memory.remember", "created", [did]),
    ]


def test_cli_agent_option_environment_and_default(shared_daemon: DaemonProc) -> None:
    d, palace = shared_daemon, unique("cli-agent")
    d.cli("create", palace, check=True)
    by_option = cli_json(d, "--agent", "ci-bot", "remember", "Nightly builds run at 02:00",
                         "--palace", palace)["id"]
    by_env = cli_json(d, "remember", "Flaky tests are quarantined", "--palace", palace,
                      env={**d.env, "PALACE_AGENT": "env-bot"})["id"]
    by_default = cli_json(d, "remember", "Coverage must stay above 80%", "--palace",
                          palace)["id"]
    shown = d.cli("get", str(by_option), "--palace", palace, check=True).stdout
    assert "stored by ci-bot" in shown
    got = {i: cli_json(d, "get", str(i), "--palace", palace)["created_by"]
           for i in (by_option, by_env, by_default)}
    import getpass

    assert got == {by_option: "ci-bot", by_env: "env-bot",
                   by_default: f"user:{getpass.getuser()}"}
    # A name the daemon would refuse is refused before anything is sent.
    bad = cli_json(d, "--agent", "tab\there", "remember", "x", "--palace", palace, code=5)
    assert bad["error"]["name"] == "INVALID_ARGS" and "agent" in bad["error"]["message"]
    assert cli_json(d, "info", "--palace", palace)["drawers"] == 3


# -- trash ----------------------------------------------------------------------------------------
def _hit(c: Any, palace: str, query: str, did: int) -> dict[str, Any] | None:
    return next((r for r in c.recall(palace, query, top_k=5) if r["id"] == did), None)


def test_forget_trash_restore_keeps_text_and_vector(shared_daemon: DaemonProc,
                                                    store: str | None) -> None:
    d, palace = shared_daemon, unique("trash")
    text = "The staging database is Postgres 16 listening on port 5433"
    query = "which SQL server do we test releases against?"  # no word in common
    with d.client() as c:
        c.create_palace(palace, store=store)
        did = c.remember(palace, text, room="infra", tags=["db"], importance=0.8)
        c.remember(palace, "Alice owns the payment gateway", room="people")
        before = _hit(c, palace, query, did)
        assert before is not None and before["lexical"] is None and before["vector"] > 0
        forgot = c.forget(palace, did)
        assert forgot["trashed"] and not forgot["purged"] and forgot["keep_days"] == 30
        assert _hit(c, palace, query, did) is None
        assert all(x["id"] != did for x in c.drawers(palace)["drawers"])
        with pytest.raises(E.MemoryNotFound) as gone:
            c.get(palace, did)
        assert gone.value.details["in_trash"] is True and "restore-drawer" in gone.value.message
        with pytest.raises(E.MemoryNotFound) as again:
            c.forget(palace, did)  # already in the trash: it stays there
        assert again.value.details["in_trash"] is True
        listed = c.trash(palace)
        assert [x["id"] for x in listed["drawers"]] == [did] and listed["total"] == 1
        assert listed["drawers"][0]["text"] == text and listed["drawers"][0]["reason"] == "forget"
        info = c.palace_info(palace)
        assert info["drawers"] == info["vectors"] == 1  # its vector left with it
        assert info["index"] in (info["vectors"], None)  # None: pgvector, no local index
    shown = d.cli("restore-drawer", str(did), "--palace", palace, check=True).stdout
    assert shown.strip() == f"restored drawer {did}"
    with d.client() as c:
        back = c.get(palace, did)
        assert (back["text"], back["room"], back["tags"], back["importance"], back["embedded"]
                ) == (text, "infra", ["db"], 0.8, True)
        after = _hit(c, palace, query, did)
        assert after is not None and after["vector"] == pytest.approx(before["vector"])
        info = c.palace_info(palace)
        assert info["drawers"] == info["vectors"] == 2 and info["index"] in (2, None)
        assert c.trash(palace)["total"] == 0
        # A second restore converges: the drawer is active.
        assert c.restore_drawer(palace, did)["restored"] is False


def test_purge_and_dedup_never_meet_the_trash(shared_daemon: DaemonProc,
                                              store: str | None) -> None:
    d, palace = shared_daemon, unique("purge")
    with d.client() as c:
        c.create_palace(palace, store=store)
        a = c.remember(palace, "Deploys happen on Tuesdays after the standup")
        b = c.remember(palace, "The on-call rotation changes every Monday")
        assert c.forget(palace, a, purge=True)["purged"] is True
        with pytest.raises(E.MemoryNotFound) as gone:
            c.get(palace, a)
        assert "in_trash" not in gone.value.details
        with pytest.raises(E.MemoryNotFound):
            c.restore_drawer(palace, a)
        c.forget(palace, b)
        # The same text again is a new drawer, not the trashed one (exact or near).
        again = c.remember_ex(palace, "The on-call rotation changes every Monday")
        assert again["created"] and again["id"] != b
        near = c.remember_ex(palace, "The on-call rotation changes each Monday")
        assert near["id"] != b
        with pytest.raises(E.InvalidContent) as clash:
            c.restore_drawer(palace, b)
        assert clash.value.details["conflict"] == again["id"]
        # Purging a trash entry deletes it for good.
        assert c.forget(palace, b, purge=True)["purged"] is True
        assert c.trash(palace)["total"] == 0
    res = d.cli("restore-drawer", str(b), "--palace", palace)
    assert res.returncode == 4 and "MEMORY_NOT_FOUND" in res.stderr


@pytest.fixture(scope="module")
def short_keep() -> Iterator[DaemonProc]:
    """A keyword-only palaced whose trash keeps drawers ~4 s and whose upkeep runs quickly."""
    import shutil

    from tests.conftest import short_home

    home = short_home()
    (home / "config.toml").write_text(
        "[trash]\nkeep_days = 0.00005\n\n[limits]\ncheckpoint_idle_s = 0.2\n")
    env = {**base_env(home, model=False), "PALACE_CONFIG": str(home / "config.toml")}
    d = DaemonProc(home, env)
    d.start(wait_model=False)
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def wait_for(check: Any, timeout: float = 40) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_the_scheduler_empties_an_expired_trash(short_keep: DaemonProc, store: str | None) -> None:
    palace = unique("expiry")
    with short_keep.client() as c:
        c.create_palace(palace, store=store)
        did = c.remember(palace, "a memory to forget soon")
        keep = c.forget(palace, did)
        assert keep["keep_days"] == 0.00005
        assert c.trash(palace)["total"] == 1
        purged = wait_for(lambda: [e for e in c.audit(palace, op="upkeep.empty_trash")[
            "entries"] if did in e["drawer_ids"]])
        assert purged[0]["agent"] == "palaced" and purged[0]["outcome"] == "purged"
        assert time.time() * 1000 - keep["restorable_until_ms"] >= 0
        assert c.trash(palace)["total"] == 0
        with pytest.raises(E.MemoryNotFound):
            c.restore_drawer(palace, did)
    assert db_rows(short_keep, palace, store, "SELECT count(*) FROM trash") == [(0,)]


def test_ttl_expiry_lands_in_the_trash(short_keep: DaemonProc, store: str | None) -> None:
    palace = unique("ttl")
    with short_keep.client() as c:
        c.create_palace(palace, store=store)
        did = c.remember(palace, "a short-lived note about the demo",
                         expires_at="2020-01-01T00:00:00Z")
        assert c.recall(palace, "short-lived demo note") == []
        entry = wait_for(lambda: [x for x in c.trash(palace)["drawers"] if x["id"] == did])[0]
        assert (entry["reason"], entry["trashed_by"]) == ("expired", "palaced")
        log = c.audit(palace, agent="palaced", op="upkeep.expire")["entries"]
        assert log[0]["drawer_ids"] == [did] and log[0]["outcome"] == "trashed"
        # Restored, it comes back without its (passed) expiry.
        c.restore_drawer(palace, did)
        assert c.get(palace, did)["expires_ms"] is None
        assert [r["id"] for r in c.recall(palace, "short-lived demo note")] == [did]


# -- audit ----------------------------------------------------------------------------------------
def test_every_change_is_audited_without_its_text(shared_daemon: DaemonProc,
                                                  store: str | None) -> None:
    d, palace = shared_daemon, unique("audit")
    with d.client() as c:
        c.agent = "auditor"
        c.create_palace(palace, store=store)
        one = c.remember(palace, f"{SECRET} one: the vault code is 4471", room="r",
                         importance="low")
        many = c.remember_many(palace, [{"text": f"{SECRET} two", "room": "r"},
                                        {"text": f"{SECRET} three", "room": "r"}])
        fixed = c.remember(palace, f"{SECRET} one: the vault code is 4472", room="r",
                           supersedes=one)
        summary = c.consolidate(palace, "r", f"{SECRET} summary of the room",
                                ids=many)["summary_id"]
        fact = c.kg_assert(palace, "Vault", "code", f"{SECRET} 4472", literal=True)["id"]
        c.kg_invalidate(palace, fact)
        c.forget(palace, many[0])
        c.restore_drawer(palace, many[0])
        c.forget(palace, many[1])
        c.empty_trash(palace)
        c.prune(palace, threshold=1.0)
        c.set_policy(palace, "write", ["*"])
        entries = c.audit(palace, limit=100)["entries"]
        assert c.audit(palace, since="1h", agent="aud*", op="graph.*")["total"] == 2
        assert c.audit(palace, since="2999-01-01")["total"] == 0
    ops = [(e["op"], e["outcome"]) for e in reversed(entries)]
    assert ops[:12] == [
        ("palace.create", "created"), ("memory.remember", "created"),
        ("memory.remember_many", "stored"), ("memory.remember", "created"),
        ("memory.consolidate", "created"), ("memory.consolidate", "consolidated"),
        ("graph.assert", "asserted"), ("graph.invalidate", "invalidated"),
        ("memory.forget", "trashed"), ("memory.restore", "restored"),
        ("memory.forget", "trashed"), ("memory.empty_trash", "purged")]
    assert ops[-1] == ("palace.policy_set", "set")
    assert {e["agent"] for e in entries} == {"auditor"}
    by_op = {e["op"]: e for e in entries}
    assert by_op["memory.remember_many"]["drawer_ids"] == many
    assert entries[-4]["drawer_ids"] == [fixed, one]  # the correction and what it superseded
    assert by_op["graph.invalidate"]["fact_ids"] == [fact]
    assert summary in by_op["memory.consolidate"]["drawer_ids"]
    # Not a word of any memory or fact, in the answer or anywhere in the table.
    assert SECRET not in json.dumps(entries) and "4471" not in json.dumps(entries)
    rows = db_rows(d, palace, store, "SELECT * FROM audit")
    assert len(rows) == len(entries)
    assert not [r for r in rows if SECRET in repr(r) or "4471" in repr(r)]
    import psycopg

    with pytest.raises((sqlite3.DatabaseError, psycopg.Error), match="append-only"):
        db_rows(d, palace, store, "UPDATE audit SET agent = 'x'")
    shown = d.cli("audit", "--palace", palace, "--op", "memory.forget", check=True).stdout
    assert shown.count("memory.forget  trashed") == 2 and SECRET not in shown


def test_updates_record_their_agent(shared_daemon: DaemonProc, store: str | None) -> None:
    """memory.update names its agent on the drawer and in the log, and follows the write
    permission."""
    d, palace = shared_daemon, unique("edits")
    with d.client() as c:
        c.agent = "owner"
        c.create_palace(palace, store=store)
        did = c.remember(palace, f"{SECRET} the api listens on 8080")
        c.agent = "editor"
        assert c.update(palace, did, text=f"{SECRET} the api listens on 8088")["version"] == 2
        drawer = c.get(palace, did)
        assert (drawer["created_by"], drawer["updated_by"]) == ("owner", "editor")
        log = c.audit(palace, limit=10)["entries"]
        assert [(e["agent"], e["op"], e["outcome"]) for e in log[:2]] == [
            ("editor", "memory.update", "updated"), ("owner", "memory.remember", "created")]
        assert log[0]["drawer_ids"] == [did] and log[0]["detail"] == {"changed": "text"}
        assert SECRET not in json.dumps(log)
        c.agent = "owner"
        c.set_policy(palace, "write", ["owner"])
        c.agent = "editor"
        with pytest.raises(E.Forbidden):
            c.update(palace, did, text="not allowed any more")
        assert c.get(palace, did)["text"] == f"{SECRET} the api listens on 8088"
        assert c.audit(palace, limit=1)["entries"][0]["outcome"] == "denied"


def test_captures_record_their_agent(shared_daemon: DaemonProc, tmp_path: Path) -> None:
    """capture.transcript names its agent on the drawers and in the log, and follows the write
    permission (local palaces: a team palace refuses captures, TEAM_UNSUPPORTED)."""
    d, palace = shared_daemon, unique("captures")
    session = Session(tmp_path / "t.jsonl")
    session.exchange(f"{SECRET}: which port does the api use?", "It listens on 8088.")
    session.exchange("and the worker?", f"{SECRET}: the worker listens on 9099.")
    with d.client() as c:
        c.agent = "owner"
        c.create_palace(palace)
        c.agent = "capturer"
        session.prompt("deploy the api")
        session.say("Starting the deploy.")  # an open exchange: replaced as it grows
        assert c.capture_transcript(palace, session.path, wait=True)["drawers"] == 3
        opened = c.audit(palace, limit=1)["entries"][0]["drawer_ids"][-1]
        session.say(f"{SECRET}: deployed.")
        assert c.capture_transcript(palace, session.path, wait=True)["replaced"] == 1
        captured = c.drawers(palace, wing="sessions")["drawers"]
        assert len(captured) == 3 and {x["created_by"] for x in captured} == {"capturer"}
        log = c.audit(palace, limit=10)["entries"]
        assert [(e["agent"], e["op"], e["outcome"]) for e in log[:3]] == [
            ("capturer", "capture.transcript", "created"),  # the grown exchange alone
            ("capturer", "capture.transcript", "replaced"),
            ("capturer", "capture.transcript", "stored")]
        assert log[1]["drawer_ids"] == [opened] and log[1]["detail"] == {"reason": "capture"}
        assert sorted(log[0]["drawer_ids"] + log[2]["drawer_ids"][:2]) == sorted(
            x["id"] for x in captured)
        assert SECRET not in json.dumps(log)
        c.agent = "owner"
        c.set_policy(palace, "write", ["owner"])
        c.agent = "capturer"
        session.exchange("one more?", "yes")
        with pytest.raises(E.Forbidden):
            c.capture_transcript(palace, session.path, wait=True)
        assert len(c.drawers(palace, wing="sessions")["drawers"]) == 3


# -- policy ---------------------------------------------------------------------------------------
def test_a_refused_request_is_typed_and_changes_nothing(shared_daemon: DaemonProc,
                                                        store: str | None) -> None:
    d, palace = shared_daemon, unique("policy")
    with d.client() as c:
        c.agent = "user:owner"
        c.create_palace(palace, store=store)
        kept = c.remember(palace, "Only the owner may delete this")
        c.set_policy(palace, "delete", ["user:*"])
        c.set_policy(palace, "admin", ["user:owner"])
        shown = c.policy(palace)
        assert shown["policy"] == {"write": ["*"], "delete": ["user:*"],
                                   "admin": ["user:owner"]}
        # Nobody can take admin from themselves.
        with pytest.raises(E.InvalidArgs):
            c.set_policy(palace, "admin", ["someone-else"])
        assert c.policy(palace)["policy"]["admin"] == ["user:owner"]
    before = cli_json(d, "info", "--palace", palace)
    refused = cli_json(d, "--agent", "mcp:rogue/1", "forget", str(kept), "--palace", palace,
                       code=12)["error"]
    assert (refused["name"], refused["code"]) == ("FORBIDDEN", 208)
    assert refused["details"]["permission"] == "delete"
    assert refused["details"]["allowed"] == ["user:*"]
    assert cli_json(d, "--agent", "mcp:rogue/1", "policy", "set", "delete", "*",
                    "--palace", palace, code=12)["error"]["name"] == "FORBIDDEN"
    # Writes stay open to everyone; --nobody closes them.
    cli_json(d, "--agent", "mcp:rogue/1", "remember", "writes are open", "--palace", palace)
    cli_json(d, "--agent", "user:owner", "policy", "set", "write", "--nobody", "--palace",
             palace)
    err = cli_json(d, "--agent", "user:owner", "remember", "no more writes", "--palace", palace,
                   code=12)["error"]
    assert err["details"]["permission"] == "write" and err["details"]["allowed"] == []
    with d.client() as c:
        assert c.get(palace, kept)["text"] == "Only the owner may delete this"
        assert c.palace_info(palace)["drawers"] == before["drawers"] + 1
        assert c.trash(palace)["total"] == 0
        denied = c.audit(palace, op="*")["entries"]
    outcomes = [(e["agent"], e["op"], e["outcome"], e["detail"]) for e in denied[:4]]
    assert outcomes == [
        ("user:owner", "memory.remember", "denied", {"permission": "write"}),
        ("user:owner", "palace.policy_set", "set", {"write": 0}),
        ("mcp:rogue/1", "memory.remember", "created", outcomes[2][3]),
        ("mcp:rogue/1", "palace.policy_set", "denied", {"permission": "admin"}),
    ]
    assert ("mcp:rogue/1", "memory.forget", "denied") == (
        denied[4]["agent"], denied[4]["op"], denied[4]["outcome"])
    assert denied[4]["detail"] == {"permission": "delete", "id": kept}


def test_the_agent_envelope_is_checked_and_announced(shared_daemon: DaemonProc) -> None:
    from tests.support.wire import Raw

    raw = Raw.connect(shared_daemon.socket, hello=False)
    try:
        hello = raw.call("daemon.hello", {"protocol": 1, "client": {"name": "raw",
                                                                     "version": "0"}})
        assert hello["result"]["request_keys"] == ["agent"]
        for bad in ("", " ", "x" * 201, "new\nline", 7):
            reply = raw.request({"id": 2, "op": "palace.list", "palace": None, "args": {},
                                 "agent": bad})
            assert reply["error"]["name"] == "BAD_FRAME", bad
            assert reply["error"]["details"]["field"] == "agent"
        # The connection is still good, and a request without an agent is "unknown"'s.
        palace = unique("raw")
        for op, args in (("palace.create", {}), ("memory.remember", {"text": "anonymous"})):
            assert raw.request({"id": 3, "op": op, "palace": palace, "args": args})["ok"]
    finally:
        raw.close()
    with shared_daemon.client() as c:
        assert c.get(palace, 1)["created_by"] == "unknown"


def test_retention_config_is_checked(tmp_path: Path) -> None:
    from palaced.config.settings import check

    text = "[trash]\nkeep_days = -1\n\n[audit]\nmax_entries = 0\nkeep = 3\n"
    with pytest.raises(E.InvalidArgs) as bad:
        import tomllib

        check(tomllib.loads(text), text, tmp_path / "config.toml")
    lines = bad.value.message.splitlines()
    assert any(":2: [trash] keep_days must be >= 0" in ln for ln in lines), lines
    assert any(":5: [audit] max_entries must be > 0" in ln for ln in lines), lines
    assert any("unknown key 'keep' in [audit]" in ln for ln in lines), lines
