"""Lone UTF-16 surrogates wherever text enters (issue "Hardening II", item 2): JSON allows
``"\\ud83d"`` (JavaScript writes one when a string is cut inside an emoji) but UTF-8 cannot
encode it. Each entry (transcripts the daemon reads, the importers, the MCP bridge, the hook,
the msgpack boundary both ways) reads it as U+FFFD, and a record that still fails is skipped
alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack
import pytest

from palace_client.hooks.capture import parse_input
from palaced.capture import ingest
from palaced.wire.protocol import HEADER, clean, loads_json
from tests.conftest import DaemonProc
from tests.palace_client.mcp.test_mcp_bridge import make_bridge
from tests.support.inproc import InProcDaemon
from tests.support.transcripts import Session
from tests.support.wire import Raw


@pytest.fixture
def keyword_daemon(shared_keyword_daemon: DaemonProc) -> DaemonProc:
    """The module's keyword-only daemon (``shared_keyword_daemon``), not one per test: each
    test here works in palaces of its own names and never stops, kills or damages it."""
    return shared_keyword_daemon


CUT = "\\ud83d"  # a JSON escape of a lone high surrogate: half of 😀
FFFD = "\ufffd"


def _texts(d: DaemonProc | InProcDaemon, palace: str) -> list[str]:
    with d.client() as c:
        return sorted(x["text"] for x in c.drawers(palace, limit=1000)["drawers"])


def test_the_helper() -> None:
    assert loads_json(b'{"a\\ud83d": ["x\\ude00", 1, {"k": "\\ud83d\\ude00"}]}') == {
        f"a{FFFD}": [f"x{FFFD}", 1, {"k": "😀"}]}
    assert loads_json(b'"b\xed\xa0\xbd"') == f"b{FFFD}"  # the bytes of one (surrogatepass)
    assert clean(("a\udcff", {"k": ["\ud800\udc00"]})) == [f"a{FFFD}", {"k": ["\U00010000"]}]


def test_a_transcript_with_a_lone_surrogate_is_captured_whole(inproc: InProcDaemon,
                                                              tmp_path: Path) -> None:
    s = Session(tmp_path / "cut.jsonl")
    s.exchange("first question", "first answer")
    s.exchange("second question", "placeholder")
    s.exchange("third question", "third answer")
    # Claude Code wrote the second answer cut inside an emoji, once as a JSON escape, and a
    # stray copy of the surrogate's bytes (as a buggy writer would) in the third prompt.
    raw = s.path.read_bytes()
    raw = raw.replace(b"placeholder", f"done {CUT}".encode())
    raw = raw.replace(b"third question", b"third \xed\xa0\xbd question")
    s.path.write_bytes(raw)
    with inproc.client() as c:
        res = c.capture_transcript("surr-cap", s.path, session_id=s.session_id, wait=True,
                                   create=True)
    assert (res["exchanges"], res["drawers"], res["skipped"]) == (3, 3, 0)
    assert _texts(inproc, "surr-cap") == [
        "User: first question\n\nAssistant: first answer",
        f"User: second question\n\nAssistant: done {FFFD}",
        f"User: third {FFFD} question\n\nAssistant: third answer"]


def test_an_exchange_that_still_fails_is_skipped_alone(inproc: InProcDaemon, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = ingest.to_drawer

    def failing(ex: Any, **args: Any) -> Any:
        if "poison" in ex.prompt.text:
            raise ValueError("a text this daemon cannot store")
        return real(ex, **args)

    monkeypatch.setattr(ingest, "to_drawer", failing)
    s = Session(tmp_path / "poison.jsonl")
    s.exchange("before it", "fine")
    s.exchange("the poison one", "never stored")
    s.exchange("after it", "fine too")
    with inproc.client() as c:
        res = c.capture_transcript("surr-skip", s.path, session_id=s.session_id, wait=True,
                                   create=True)
    assert (res["exchanges"], res["skipped"], res["skipped_lines"]) == (2, 1, [3])
    assert [t[:15] for t in _texts(inproc, "surr-skip")] == ["User: after it\n", "User: before it"]


def _conversation(cid: str, title: str, question: str, answer: str,
                  when: Any = 1709290800) -> dict[str, Any]:
    def node(nid: str, parent: str | None, child: str | None, role: str | None,
             text: str) -> dict[str, Any]:
        message = None if role is None else {
            "id": nid, "author": {"role": role}, "create_time": when, "recipient": "all",
            "content": {"content_type": "text", "parts": [text]}}
        return {"id": nid, "message": message, "parent": parent,
                "children": [child] if child else []}
    return {"id": cid, "title": title, "create_time": when, "current_node": "a",
            "mapping": {"root": node("root", None, "q", None, ""),
                        "q": node("q", "root", "a", "user", question),
                        "a": node("a", "q", None, "assistant", answer)}}


def test_chatgpt_import_reads_past_a_cut_emoji_and_skips_one_bad_conversation(
        keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    kw = keyword_daemon
    convs = [_conversation("c1", "Emoji CUT", "what about PLACEHOLDER", "fine"),
             _conversation("c2", "Huge time", "when", "never", when="HUGE"),
             _conversation("c3", "After", "later question", "later answer")]
    text = json.dumps(convs).replace("PLACEHOLDER", f"this {CUT}").replace("CUT", CUT)
    path = tmp_path / "conversations.json"
    path.write_text(text.replace('"HUGE"', "1e999"))
    res = kw.cli("import", "chatgpt", str(path), "--palace", "surr-gpt", "--json")
    out = json.loads(res.stdout)
    assert (out["read"], out["stored"], out["skipped"]) == (2, 2, 1), res.stderr
    assert out["problems"][0]["message"].startswith("conversation 1 cannot be read: Overflow")
    assert _texts(kw, "surr-gpt") == [
        "User: later question\n\nAssistant: later answer",
        f"User: what about this {FFFD}\n\nAssistant: fine"]


def test_jsonl_restore_takes_a_record_with_a_lone_surrogate(keyword_daemon: DaemonProc,
                                                            tmp_path: Path) -> None:
    kw = keyword_daemon
    with kw.client() as c:
        c.create_palace("surr-orig")
        for i in range(3):
            c.remember("surr-orig", f"fact number {i} PLACEHOLDER", room="r")
    path = tmp_path / "x.jsonl"
    kw.cli("export", "--palace", "surr-orig", str(path), check=True)
    lines = path.read_text().replace("PLACEHOLDER", CUT).splitlines()
    lines.insert(3, "[" * 100_000)  # deeper than the decoder's stack: skipped alone
    path.write_text("\n".join(lines) + "\n")
    res = kw.cli("import", "jsonl", str(path), "--palace", "surr-copy", "--json")
    out = json.loads(res.stdout)
    assert (res.returncode, out["skipped"]) == (10, 1), res.stdout + res.stderr
    assert out["problems"][0]["line"] == 4
    assert _texts(kw, "surr-copy") == [f"fact number {i} {FFFD}" for i in range(3)]


def test_the_mcp_bridge_reads_a_lone_surrogate_as_fffd() -> None:
    bridge, fake = make_bridge()
    fake.create_palace("proj")  # a read of a palace not yet written answers without a query
    line = ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
            f'"recall", "arguments": {{"query": "caf{CUT}"}}}}}}').encode()
    raw = bridge.handle_line(line)
    assert raw is not None
    answer = json.loads(raw)
    assert "result" in answer, answer  # before: INTERNAL_ERROR, cannot encode the result
    assert not answer["result"].get("isError"), answer
    assert fake.calls[-1][:2] == ("memory.recall", "proj")
    assert fake.calls[-1][2]["query"] == f"caf{FFFD}"


def test_the_hook_reads_a_lone_surrogate_as_fffd() -> None:
    hook = parse_input(f'{{"transcript_path": "/t/s{CUT}.jsonl", "cwd": "/w{CUT}", '
                       f'"session_id": "x{CUT}"}}'.encode())
    assert (hook["transcript_path"], hook["cwd"], hook["session_id"]) == (
        f"/t/s{FFFD}.jsonl", f"/w{FFFD}", f"x{FFFD}")


def test_the_msgpack_boundary_both_ways(keyword_daemon: DaemonProc) -> None:
    kw = keyword_daemon
    with kw.client() as c:  # a client sending a str with a lone surrogate
        c.create_palace("surr-wire")
        c.remember("surr-wire", "sent by the client \ud83d", room="r")
    raw = Raw.connect(kw.socket)  # a peer sending the bytes of one (not UTF-8)
    env = {"id": 2, "op": "memory.remember", "palace": "surr-wire",
           "args": {"text": "sent raw \ud83d", "room": "r"}}
    body = msgpack.Packer(use_bin_type=True, unicode_errors="surrogatepass").pack(env)
    raw.send_bytes(HEADER.pack(len(body)) + body)
    reply = raw.read()
    assert reply is not None and reply["ok"], reply
    assert _texts(kw, "surr-wire") == [f"sent by the client {FFFD}",
                                       f"sent raw {FFFD * 3}"]
