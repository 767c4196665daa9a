"""The trash, the audit log, the policy and their migration in-process (hashing embedder):
what a restore relinks, restores after a model switch, a keep period of 0, the bounds of the
log, glob matching, edits, long texts and lifetimes through the trash, and palaces of earlier
schema versions opening under this one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import apsw
import pytest

from palaced.config.settings import Retention, load
from palaced.engine.embedder import HashEmbedder
from palaced.engine.services import ModelState, Services
from palaced.engine.tokens import Tokenizer
from palaced.maintenance import reembed
from palaced.memory import audit, edits, graph, policy, trash, upkeep, writes
from palaced.ops.governance import since_ms
from palaced.palace import reads
from palaced.palace.handle import Palace, now_ms
from palaced.store import Store
from palaced.store.conn.db import open_connection
from palaced.store.rows import audit as audit_sql
from palaced.store.rows import drawers as m
from palaced.store.rows.edits import Edit
from palaced.store.schema.sqlite import MIGRATIONS, SCHEMA_VERSION
from palaced.wire.errors import Forbidden, InvalidArgs, InvalidContent, MemoryNotFound
from palaced.wire.paths import Paths

pytestmark = pytest.mark.anyio
DAY = 86_400_000
ME = audit_sql.Actor("tester", "test")


def _services(tmp_path: Path, dims: int = 64) -> Services:
    paths = Paths(tmp_path, tmp_path / "state", tmp_path / "config.toml", tmp_path / "run",
                  tmp_path / "run" / "s.sock")
    return Services(config=load(paths), model=ModelState(state="ready",
                                                         embedder=HashEmbedder(dims)),
                    tokenizer=Tokenizer.fallback("test"))


@pytest.fixture
async def palace(tmp_path: Path) -> AsyncIterator[Palace]:
    p = await Palace.open("unit", tmp_path / "palaces" / "unit", _services(tmp_path))
    yield p
    await p.aclose()


async def _put(p: Palace, text: str, **kw: Any) -> int:
    return int((await writes.remember(p, m.NewDrawer(text=text, **kw), dedup=False,
                                      actor=ME))["id"])


async def test_restoring_a_summary_relinks_its_sources_and_facts(palace: Palace) -> None:
    a = await _put(palace, "the cat naps on the red sofa", room="home")
    b = await _put(palace, "the dog sleeps by the door", room="home")
    made = await upkeep.consolidate(palace, "home", "pets rest around the house", actor=ME)
    summary = made["summary_id"]
    fact = await graph.kg_assert(palace, "Cat", "naps_on", "Sofa", source_drawer=summary,
                                 actor=ME)
    await trash.forget(palace, summary, ME, keep_ms=DAY)
    # The summary is gone: its sources are free again, the fact cites nothing.
    assert (await reads.get(palace, a))["consolidated_into"] is None
    facts = (await graph.kg_query(palace, "Cat"))["facts"]
    assert facts[0]["source"]["drawer"] is None
    assert (await trash.restore(palace, summary, ME, keep_ms=DAY))["restored"] is True
    assert [(await reads.get(palace, i))["consolidated_into"] for i in (a, b)] == [summary] * 2
    facts = (await graph.kg_query(palace, "Cat"))["facts"]
    assert [f["source"]["drawer"] for f in facts] == [summary] and facts[0]["id"] == fact["id"]
    back = await reads.get(palace, summary)
    assert back["kind"] == "summary" and back["embedded"] is True
    assert palace.index is not None and len(palace.index) == 3


async def test_a_restore_after_a_model_switch_reembeds_in_the_background(
        tmp_path: Path) -> None:
    pdir = tmp_path / "palaces" / "switch"
    p = await Palace.open("switch", pdir, _services(tmp_path, 64))
    did = await _put(p, "otters hold hands while they sleep")
    await trash.forget(p, did, ME, keep_ms=DAY)
    await p.aclose()
    other = _services(tmp_path, 32)  # another model: the palace needs a reembed
    p = await Palace.open("switch", pdir, other)
    try:
        assert other.model.embedder is not None
        await reembed.reembed_now(p, other.model.embedder)
        done = await trash.restore(p, did, ME, keep_ms=DAY)
        assert done == {"id": did, "restored": True, "embedded": False}
        assert (await reads.get(p, did))["embedded"] is False and p.maybe_pending
        assert await writes.embed_pending(p) == 1
        assert (await reads.get(p, did))["embedded"] is True
        info = await reads.info(p)
        assert info["consistent"] is True and info["vectors"] == 1
    finally:
        await p.aclose()


async def test_a_keep_period_of_zero_keeps_nothing(palace: Palace) -> None:
    did = await _put(palace, "a note nobody may bring back")
    done = await trash.forget(palace, did, ME, keep_ms=0)
    assert (done["trashed"], done["purged"]) == (False, True)
    assert (await trash.list_trash(palace, keep_ms=0, limit=10, offset=0))["total"] == 0
    with pytest.raises(MemoryNotFound):
        await trash.restore(palace, did, ME, keep_ms=0)
    # An entry past its keep period is neither listed nor restorable, even before the purge.
    other = await _put(palace, "a note kept one day")
    await trash.forget(palace, other, ME, keep_ms=DAY)
    await anyio.sleep(0.01)  # past a keep period of 1 ms
    assert await trash.in_trash(palace, other, keep_ms=1) is None
    with pytest.raises(MemoryNotFound):
        await trash.restore(palace, other, ME, keep_ms=1)
    assert await trash.in_trash(palace, other, keep_ms=DAY) is not None


async def test_prune_trashes_and_restore_refuses_a_clash(palace: Palace) -> None:
    low = await _put(palace, "a faint memory", importance=0.2)
    pruned = await upkeep.prune(palace, threshold=1.0, actor=ME, keep_ms=DAY)
    assert low in pruned["ids"]
    entry = await trash.in_trash(palace, low, keep_ms=DAY)
    assert entry is not None and entry["reason"] == "prune" and entry["trashed_by"] == "tester"
    again = await _put(palace, "a faint memory", importance=0.2)
    assert again != low
    with pytest.raises(InvalidContent) as clash:
        await trash.restore(palace, low, ME, keep_ms=DAY)
    assert clash.value.details == {"id": low, "conflict": again}
    assert await trash.in_trash(palace, low, keep_ms=DAY) is not None  # nothing changed


async def test_the_log_is_bounded_by_age_and_count(palace: Palace) -> None:
    for i in range(12):
        await _put(palace, f"note number {i}")
    now = int((await audit.entries(palace, limit=1))["entries"][0]["at_ms"])
    keep = Retention(audit_max_entries=5)
    assert await audit.retention(palace, keep) is not None
    left = await audit.entries(palace, limit=100)
    assert left["total"] == 5 and left["entries"][-1]["drawer_ids"] == [8]
    # A year and a day later, everything is past its keep period (and the trash too).
    await trash.forget(palace, 12, ME, keep_ms=DAY)
    due = await audit.retention(palace, Retention(), now=now + 366 * DAY)
    assert due is not None  # the purge of the trash is itself an entry, kept a year
    left = (await audit.entries(palace, limit=100))["entries"]
    assert [(e["agent"], e["op"], e["outcome"]) for e in left] == [
        ("palaced", "upkeep.empty_trash", "purged")]
    assert (await trash.list_trash(palace, keep_ms=DAY, limit=5, offset=0))["total"] == 0


def test_audit_details_never_take_text() -> None:
    conn = apsw.Connection(":memory:")
    for step in MIGRATIONS:
        step(conn)
    audit_sql.append(conn, ME, "ok", 1, detail={"count": 3, "reason": "forget", "flag": True})
    with pytest.raises(ValueError, match="short word"):
        audit_sql.append(conn, ME, "ok", 2, detail={"text": "x" * 65})
    with pytest.raises(ValueError):
        audit_sql.append(conn, ME, "ok", 3, detail={"items": ["a"]})
    rows, total = audit_sql.entries(conn)
    assert total == 1 and rows[0]["detail"] == {"count": 3, "flag": True, "reason": "forget"}


async def test_policy_globs_and_refusals(palace: Palace) -> None:
    assert policy.Policy().allows("anyone", "delete")
    rules = policy.Policy({"delete": ("user:*", "mcp:claude-code/*"), "write": ()})
    assert rules.allows("user:alice", "delete") and rules.allows("mcp:claude-code/2", "delete")
    assert not rules.allows("mcp:cursor/1", "delete") and not rules.allows("User:x", "delete")
    assert not rules.allows("user:alice", "write") and rules.allows("x", "admin")
    with pytest.raises(InvalidArgs, match="unknown permission"):
        await policy.set_policy(palace, ME, {"read": ["*"]})
    with pytest.raises(InvalidArgs):
        await policy.set_policy(palace, ME, {"write": ["ok", "bad\tglob"]})
    await policy.set_policy(palace, ME, {"write": ["test*", "test*"]})
    assert (await policy.current(palace)).globs("write") == ("test*",)
    bot = audit_sql.Actor("bot", "memory.remember")
    with pytest.raises(Forbidden) as refused:
        await policy.require(palace, bot, "write", target=7)
    assert refused.value.details["allowed"] == ["test*"]
    last = (await audit.entries(palace, limit=1))["entries"][0]
    assert (last["agent"], last["outcome"], last["detail"]) == (
        "bot", "denied", {"id": 7, "permission": "write"})
    await policy.require(palace, ME, "write")  # passes


def test_since_takes_times_and_durations() -> None:
    now = 10 * DAY
    assert since_ms(None, now) is None
    assert since_ms("2h", now) == now - 7_200_000 and since_ms("7d", now) == 3 * DAY
    assert since_ms("1970-01-02", now) == DAY and since_ms(DAY, now) == DAY
    with pytest.raises(InvalidArgs):
        since_ms("soon-ish", now)


def _database_at(path: Path, version: int) -> apsw.Connection:
    """A palace database as the daemon of schema ``version`` made it."""
    conn = open_connection(path)
    for done, step in enumerate(MIGRATIONS[:version], start=1):
        with conn:
            step(conn)
            conn.execute("PRAGMA application_id=1346456643")
            conn.execute(f"PRAGMA user_version={done}")
    return conn


def test_a_palace_of_the_previous_version_migrates_and_keeps_its_drawers(
        tmp_path: Path) -> None:
    path = tmp_path / "palace.db"
    conn = _database_at(path, SCHEMA_VERSION - 1)
    with conn:
        conn.execute("INSERT INTO drawers(text, wing, room, created_ms, updated_ms, "
                     "occurred_ms, content_hash) VALUES('old memory', 'w', 'r', 1, 1, 1, 'h')")
    conn.close()
    store = Store(path)
    try:
        drawer = store.read(lambda c: m.get_drawer(c, 1))
        assert drawer is not None and drawer["text"] == "old memory"
        assert (drawer["created_by"], drawer["updated_by"]) == (None, None)
        version = store.read(lambda c: c.execute("PRAGMA user_version").fetchall()[0][0])
        assert version == SCHEMA_VERSION == len(MIGRATIONS)
        assert store.read(audit_sql.entries) == ([], 0)
    finally:
        store.close()


def test_every_change_of_a_palace_needs_a_permission() -> None:
    """A new op that changes a palace must say what the policy guards it with.

    Exempt (docs/concepts.md): creating a palace (no policy yet), and doctor and backup,
    which change no memory and run on every palace at once.
    """
    from palaced.wire.specs import SPECS
    from palaced.wire.vocab import PERMISSIONS

    exempt = {"palace.create", "palace.doctor", "palace.backup"}
    for spec in SPECS.values():
        if spec.read_only:
            assert not spec.permission, spec.name
        elif spec.palace in ("required", "optional") and spec.name not in exempt:
            assert spec.permission in PERMISSIONS, spec.name
    assert SPECS["palace.restore"].permission == "admin"
    assert SPECS["palace.export"].read_only and not SPECS["model.load"].permission


@pytest.mark.parametrize("keys", [None, ["agent"]], ids=["old daemon", "new daemon"])
def test_the_agent_goes_only_to_a_daemon_that_takes_it(keys: list[str] | None) -> None:
    """A daemon that predates ``agent`` refuses envelopes carrying it: its hello lists no
    ``request_keys``, and the client then leaves the agent out."""
    import contextlib
    import shutil
    import socket
    import threading
    import time

    from palace_client.transport.connection import Connection
    from tests.conftest import short_home
    from tests.palace_client.transport.test_client_deadlines import HELLO, FakeDaemon

    home = short_home()
    hello = HELLO if keys is None else {**HELLO, "request_keys": keys}
    fake = FakeDaemon(home / "d.sock", hello=hello)
    try:
        conn = Connection.open(home / "d.sock", "t", timeout=10)

        def call() -> None:
            with contextlib.suppress(Exception):  # the fake never answers: closed below
                conn.call("palace.list", agent="bot")

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 10
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        conn._sock.shutdown(socket.SHUT_RDWR)  # the fake never answers: end the call now
        caller.join(10)
        conn.close()
        assert fake.requests[1]["op"] == "palace.list"
        assert fake.requests[1].get("agent") == (None if keys is None else "bot")
    finally:
        fake.close()
        shutil.rmtree(home, ignore_errors=True)


def _substring_hits(p: Palace, word: str) -> list[int]:
    """Drawer ids the trigram (substring) index finds ``word`` in."""
    return p.store.read(lambda c: [int(r[0]) for r in c.execute(
        "SELECT rowid FROM drawers_trigram WHERE drawers_trigram MATCH ?", (f'"{word}"',))])


def _vector_count(p: Palace, drawer_id: int) -> int:
    return int(p.store.read(lambda c: c.execute(
        "SELECT count(*) FROM vectors WHERE drawer_id = ?", (drawer_id,)).fetchall()[0][0]))


async def test_an_edited_drawer_keeps_its_history_and_substrings_through_the_trash(
        palace: Palace) -> None:
    did = await _put(palace, "the deploy key lives in vaultwarden", room="ops")
    editor = audit_sql.Actor("editor", "memory.update")
    done = await edits.update(palace, did, Edit(text="the deploy key lives in keepassxc",
                                                 tags=("secrets",)), actor=editor)
    assert done["changed"] == ["text", "tags"] and done["version"] == 2
    edited = await reads.get(palace, did, history=True)
    assert edited["updated_by"] == "editor" and edited["created_by"] == "tester"
    last = (await audit.entries(palace, limit=1))["entries"][0]
    assert (last["agent"], last["op"], last["outcome"], last["drawer_ids"], last["detail"]) == (
        "editor", "memory.update", "updated", [did], {"changed": "text,tags"})
    # An edit that changes nothing writes, and audits, nothing.
    assert (await edits.update(palace, did, Edit(tags=("secrets",)), actor=editor))[
        "changed"] == []
    assert (await audit.entries(palace, limit=1))["entries"][0]["id"] == last["id"]
    assert _substring_hits(palace, "assxc") == [did]

    await trash.forget(palace, did, ME, keep_ms=DAY)
    assert _substring_hits(palace, "assxc") == [] and _vector_count(palace, did) == 0
    assert palace.store.read(lambda c: c.execute(
        "SELECT count(*) FROM drawer_history").fetchall()[0][0]) == 0
    with pytest.raises(MemoryNotFound):
        await edits.update(palace, did, Edit(text="nope"), actor=editor)

    assert (await trash.restore(palace, did, ME, keep_ms=DAY))["embedded"] is True
    back = await reads.get(palace, did, history=True)
    assert back["versions"] == 2 and back["tags"] == ["secrets"]
    assert [(v["version"], v["text"], v["tags"]) for v in back["history"]] == [
        (1, "the deploy key lives in vaultwarden", [])]
    assert _substring_hits(palace, "assxc") == [did]
    assert _substring_hits(palace, "vaultw") == []  # earlier versions are not searched

    # A purge takes the history with the drawer for good.
    await trash.forget(palace, did, ME, keep_ms=DAY, purge=True)
    assert palace.store.read(lambda c: c.execute(
        "SELECT count(*) FROM drawer_history").fetchall()[0][0]) == 0


async def test_a_long_text_embedded_in_the_background_goes_to_the_trash_whole(
        palace: Palace) -> None:
    """A trashed drawer's chunk vectors leave the index; a drawer trashed before its
    background embedding is not embedded in the trash, and is embedded once restored."""
    words = " ".join(f"word{i} topic{i % 7}" for i in range(2_500))
    assert len(writes.chunk_text(words)) > writes.INLINE_MAX_CHUNKS
    early = (await writes.remember(palace, m.NewDrawer(text="early " + words), actor=ME))
    assert early["embedded"] is False and early["pending_chunks"] > writes.INLINE_MAX_CHUNKS
    late = await _put(palace, "late " + words)
    await trash.forget(palace, early["id"], ME, keep_ms=DAY)
    assert await writes.embed_pending(palace) == 1  # the late one only
    chunks = _vector_count(palace, late)
    assert chunks == early["pending_chunks"] and _vector_count(palace, early["id"]) == 0
    assert palace.index is not None and len(palace.index) == chunks

    await trash.forget(palace, late, ME, keep_ms=DAY)
    assert len(palace.index) == 0 and _vector_count(palace, late) == 0
    assert (await trash.restore(palace, late, ME, keep_ms=DAY))["embedded"] is True
    assert len(palace.index) == chunks == _vector_count(palace, late)

    assert (await trash.restore(palace, early["id"], ME, keep_ms=DAY))["embedded"] is False
    assert palace.embed_soon and palace.maybe_pending
    assert await writes.embed_pending(palace) == 1
    assert len(palace.index) == 2 * chunks
    assert (await reads.get(palace, early["id"]))["embedded"] is True


async def test_an_expired_lifetime_goes_through_the_trash(palace: Palace) -> None:
    """TTL expiry (a lifetime a recall may renew) ends in the trash, like a forget."""
    def lifetime() -> tuple[int | None, int | None]:
        return palace.store.read(lambda c: c.execute(
            "SELECT expires_ms, ttl_ms FROM drawers WHERE id = ?", (did,)).fetchall()[0])

    did = await _put(palace, "the standup moved to ten", ttl_ms=50, expires_ms=now_ms() + 50)
    assert lifetime()[1] == 50
    await anyio.sleep(0.1)
    swept = await upkeep.sweep_expired(palace, keep_ms=DAY)
    assert swept["deleted"] == [did]
    entry = (await trash.list_trash(palace, keep_ms=DAY, limit=5, offset=0))["drawers"][0]
    assert (entry["id"], entry["reason"], entry["trashed_by"]) == (did, "expired", "palaced")
    await trash.restore(palace, did, ME, keep_ms=DAY)
    assert lifetime() == (None, 50)  # back for good: it would expire again at once


def test_a_v8_palace_of_main_migrates_to_v9(tmp_path: Path) -> None:
    """The governance schema is the step after upkeep's v8: a palace main made at v8, with an
    edited drawer, a lifetime and chunk counts, opens at the current version (v9 and on) with
    all of them intact."""
    assert SCHEMA_VERSION >= 9
    path = tmp_path / "palace.db"
    conn = _database_at(path, 8)
    with conn:
        conn.execute("INSERT INTO drawers(text, wing, room, created_ms, updated_ms, occurred_ms, "
                     "content_hash, expires_ms, chunks) VALUES('the runbook lives in confluence',"
                     " 'w', 'r', 1000, 1000, 1000, 'h', 61000, 1)")
        conn.execute("INSERT INTO drawer_history(drawer_id, text, wing, room, tags, importance, "
                     "replaced_ms) VALUES(1, 'the runbook lives in the wiki', 'w', 'r', '[]', "
                     "0.5, 900)")
    assert [r[1] for r in conn.execute("PRAGMA table_info(trash)")] == []
    conn.close()
    store = Store(path)
    try:
        version = store.read(lambda c: c.execute("PRAGMA user_version").fetchall()[0][0])
        assert version == SCHEMA_VERSION
        drawer = store.read(lambda c: c.execute(
            "SELECT ttl_ms, chunks, created_by, updated_by FROM drawers WHERE id = 1"
        ).fetchall()[0])
        assert drawer == (60000, 1, None, None)
        assert store.read(lambda c: c.execute(
            "SELECT count(*) FROM drawer_history WHERE drawer_id = 1").fetchall()[0][0]) == 1
        assert store.read(lambda c: [r[0] for r in c.execute(
            "SELECT rowid FROM drawers_trigram WHERE drawers_trigram MATCH '\"fluenc\"'")]) == [1]
        assert store.read(lambda c: c.execute("SELECT count(*) FROM trash").fetchall()[0][0]) == 0
        assert store.read(audit_sql.entries) == ([], 0)
    finally:
        store.close()
