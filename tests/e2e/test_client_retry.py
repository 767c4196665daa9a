"""The client's retry after a broken connection, and the handshake's edge cases.

A lost reply is simulated by a relay between the client and a real daemon: it forwards the
request, waits until the daemon has answered (so the write is committed), then drops the
answer and closes the client's connection. One test also kills the daemon with SIGKILL at
that moment and starts a new one, so the resent request lands on a fresh process.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from palaced.wire import errors as E
from palaced.wire.protocol import HELLO_OP, frame, hello_args, unpack
from palaced.wire.specs import NEVER, SAFE, SPECS, Retry, retry_rule
from tests.conftest import TIKTOKEN_FILE, DaemonProc


def _read_frame(sock: socket.socket) -> bytes | None:
    buf = b""
    need = 4
    while len(buf) < need:
        try:
            chunk = sock.recv(need - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
        if need == 4 and len(buf) == 4:
            need = 4 + struct.unpack(">I", buf)[0]
    return buf


class LossyRelay:
    """A Unix-socket relay to the daemon that loses the reply of chosen ops (once each)."""

    def __init__(self, path: Path, upstream: Path) -> None:
        self.path = path
        self.upstream = upstream
        self.drop: list[str] = []  # ops whose next reply is lost
        self.on_drop: Callable[[], None] | None = None  # runs after the daemon answered
        self.forwarded: list[str] = []  # every op the daemon received through the relay
        self._clients: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(str(self.upstream))
            while (req := _read_frame(client)) is not None:
                op = unpack(req[4:]).get("op")
                up.sendall(req)
                self.forwarded.append(op)
                reply = _read_frame(up)
                if reply is None:
                    return
                if op in self.drop:
                    self.drop.remove(op)
                    if self.on_drop is not None:
                        self.on_drop()
                    return  # the answer is lost with the connection
                client.sendall(reply)
        finally:
            up.close()
            client.close()

    def sever(self) -> None:
        """Close every client connection, as a daemon restart does to idle clients."""
        for c in self._clients:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()
        self.sever()


@pytest.fixture
def relay(keyword_daemon: DaemonProc) -> Iterator[LossyRelay]:
    r = LossyRelay(keyword_daemon.home / "relay.sock", keyword_daemon.socket)
    yield r
    r.close()


def _client(relay: LossyRelay) -> Any:
    from palace_client import Client

    return Client(relay.path, autostart=False, client_name="tests")


def test_retry_rules_are_consistent() -> None:
    # Every spec must name its rule (no default); only CONVERGE rules carry resend details.
    assert retry_rule(HELLO_OP) is SAFE and retry_rule("no.such.op") is NEVER
    for name, spec in SPECS.items():
        rule = spec.retry
        assert retry_rule(name) is rule
        if rule.kind is not Retry.CONVERGE:
            assert rule.done_code is None and not rule.retry_args, name
        if spec.read_only:
            assert rule is SAFE, name


def test_forget_succeeds_when_the_daemon_dies_after_committing(
        keyword_daemon: DaemonProc, relay: LossyRelay) -> None:
    d = keyword_daemon
    with d.client() as direct:
        direct.create_palace("p")
        did = direct.remember("p", "a drawer to forget before the crash")
        old_pid = direct.status()["pid"]

    def crash_and_restart() -> None:
        d.kill9()  # after the commit, before the client hears of it
        d.start(wait_model=False)

    relay.drop.append("memory.forget")
    relay.on_drop = crash_and_restart
    with _client(relay) as c:
        c.forget("p", did)  # the resend meets MEMORY_NOT_FOUND: that is our success
        assert c.status()["pid"] != old_pid
    assert relay.forwarded.count("memory.forget") == 2
    with d.client() as direct, pytest.raises(E.MemoryNotFound):
        direct.get("p", did)


def test_create_and_delete_succeed_when_the_reply_is_lost(relay: LossyRelay) -> None:
    with _client(relay) as c:
        relay.drop.append("palace.create")
        info = c.create_palace("born")
        assert info["name"] == "born"
        assert relay.forwarded.count("palace.create") == 2
        relay.drop.append("palace.delete")
        out = c.call("palace.delete", "born")
        assert out == {"deleted": "born", "already_done": True}
        assert "born" not in {p["name"] for p in c.list_palaces()}
        # A plain miss is still an error: only a resend turns it into success.
        with pytest.raises(E.PalaceNotFound):
            c.delete_palace("born")


def test_non_idempotent_op_is_not_resent_after_a_lost_reply(relay: LossyRelay) -> None:
    with _client(relay) as c:
        c.create_palace("p")
        # Idempotent by content hash: resent, and stored once.
        relay.drop.append("memory.remember")
        first = c.remember("p", "the first note about otters", room="notes")
        assert relay.forwarded.count("memory.remember") == 2
        c.remember("p", "the second note about beavers", room="notes")
        assert c.drawers("p")["total"] == 2
        # A request that never left (the daemon dropped the idle connection) is resent.
        relay.sever()
        out = c.consolidate("p", "notes", "otters and beavers", ids=[first])
        assert out["source_ids"] == [first]
        # One whose reply is lost is not: a rerun would report something else.
        relay.drop.append("memory.consolidate")
        with pytest.raises(E.OutcomeUnknown) as info:
            c.consolidate("p", "notes", "notes about rivers")
        assert info.value.code == 602 and not info.value.retryable
        assert relay.forwarded.count("memory.consolidate") == 2  # once each, never twice
        summaries = [x for x in c.drawers("p", limit=100)["drawers"]
                     if x["text"] == "notes about rivers"]
        assert len(summaries) == 1  # it did run, exactly once


# -- handshake ------------------------------------------------------------------------------
def _raw(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(path))
    return s


def _ask(s: socket.socket, env: dict[str, Any]) -> dict[str, Any] | None:
    s.sendall(frame(env))
    data = _read_frame(s)
    return None if data is None else unpack(data[4:])


@pytest.mark.parametrize("proto", [1.0, True])
def test_hello_wants_the_integer_protocol(keyword_daemon: DaemonProc, proto: Any) -> None:
    with _raw(keyword_daemon.socket) as s:
        reply = _ask(s, {"id": 1, "op": HELLO_OP, "args": {"protocol": proto}})
        assert reply is not None and not reply["ok"]
        assert reply["error"]["name"] == "UNSUPPORTED_PROTOCOL"
        assert _read_frame(s) is None  # and the connection is closed


def test_a_second_hello_is_answered(keyword_daemon: DaemonProc) -> None:
    with _raw(keyword_daemon.socket) as s:
        first = _ask(s, {"id": 1, "op": HELLO_OP, "args": hello_args("t", "0")})
        again = _ask(s, {"id": 2, "op": HELLO_OP, "args": hello_args("t", "0")})
        assert first is not None and again is not None
        assert again["ok"], again
        assert again["result"] == first["result"] and HELLO_OP in again["result"]["ops"]
        status = _ask(s, {"id": 3, "op": "daemon.status", "args": {}})
        assert status is not None and status["ok"]


@pytest.mark.anyio
async def test_reembed_while_the_model_loads_says_so(tmp_path: Path) -> None:
    from palaced.config import settings as config_mod
    from palaced.daemon.core import Daemon
    from palaced.ops.table import dispatch
    from palaced.wire.paths import Paths

    paths = Paths(tmp_path, tmp_path / "state", tmp_path / "config.toml", tmp_path / "run",
                  tmp_path / "run" / "palaced.sock")
    cfg = config_mod.load(paths)
    d = Daemon(replace(cfg, tokenizer_file=TIKTOKEN_FILE))
    paths.palaces_dir.mkdir(parents=True)
    try:
        assert d.services.model.state == "loading"  # the loader task is not running
        await dispatch(d.ctx, "palace.create", "p", {})
        with pytest.raises(E.EmbedderUnavailable) as info:
            await dispatch(d.ctx, "palace.reembed", "p", {})
        assert "still loading" in info.value.message and "None" not in info.value.message
        assert info.value.retryable
        d.services.model.state = "unavailable"
        d.services.model.reason = "the model files are missing"
        with pytest.raises(E.EmbedderUnavailable, match="the model files are missing"):
            await dispatch(d.ctx, "palace.reembed", "p", {})
    finally:
        await d.registry.aclose()
