"""Configuration file: settings that survive MCP clients stripping the environment."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import msgpack
import pytest

from palaced.wire.protocol import HELLO_OP, frame, hello_args
from tests.conftest import MODEL_DIR, TIKTOKEN_FILE, DaemonProc, base_env

pytestmark = pytest.mark.daemon  # every test here runs palace's processes


def test_config_file_supplies_model_tokenizer_and_limits(home: Path) -> None:
    (home / "config.toml").write_text(
        f'[embedder]\nmodel_path = "{MODEL_DIR}"\n\n'
        f'[tokenizer]\nbpe_file = "{TIKTOKEN_FILE}"\n\n'
        "[limits]\nmax_connections = 2\nreserve_connections = 0\nmax_text_chars = 50\n"
        "idle_close_s = 1\n"
    )
    env = base_env(home, model=True)
    # As an MCP client would spawn it: no model or tokenizer variables at all.
    env.pop("PALACE_EMBED_MODEL_PATH")
    env.pop("PALACE_TIKTOKEN_FILE")
    d = DaemonProc(home, env)
    d.start()
    try:
        r = d.cli("status", "--json", check=True)
        st = json.loads(r.stdout)
        assert st["model"]["state"] == "ready" and st["tokenizer"]["exact"] is True
        assert d.cli("create", "cfg").returncode == 0
        assert d.cli("remember", "x" * 51, "--palace", "cfg").returncode == 5
        # Two connections are allowed and no reserve; the third is refused with BUSY and closed.
        held = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(str(d.socket))
            s.sendall(frame({"id": 1, "op": HELLO_OP, "args": hello_args("t", "0")}))
            n = struct.unpack(">I", s.recv(4))[0]
            s.recv(n)
            held.append(s)
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(10)
        extra.connect(str(d.socket))
        n = struct.unpack(">I", extra.recv(4))[0]
        reply = msgpack.unpackb(extra.recv(n), raw=False)
        assert reply["error"]["name"] == "BUSY" and reply["error"]["retryable"] is True
        extra.close()
        for s in held:
            s.close()
        r = d.cli("list", "--json", check=True)  # capacity is back
        # Idle palaces are closed (files released) and reopened on demand.
        import time

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            palaces = json.loads(d.cli("list", "--json", check=True).stdout)["palaces"]
            if not palaces[0]["open"]:
                break
            time.sleep(0.3)
        assert palaces == [{"name": "cfg", "path": str(home / "palaces" / "cfg"), "open": False}]
        # Status counts a closed palace without opening it (no index load).
        st = json.loads(d.cli("status", "--json", check=True).stdout)
        cfg = st["palaces"][0]
        assert cfg["open"] is False and cfg["index"] is None and cfg["drawers"] == 0
        assert json.loads(d.cli("list", "--json", check=True).stdout)["palaces"][0]["open"] is False
        assert "closed (its index loads on first use)" in d.cli("status", check=True).stdout
        assert d.cli("remember", "short", "--palace", "cfg").returncode == 0
    finally:
        d.stop()


def test_bad_config_file_is_a_clear_error(home: Path) -> None:
    (home / "config.toml").write_text("[limits\nbroken")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "palaced", "run"], env=base_env(home),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "config" in r.stderr
    r = subprocess.run([sys.executable, "-m", "palaced", "print-paths"], env=base_env(home),
                       capture_output=True, text=True, timeout=60, check=True)
    paths = json.loads(r.stdout)
    assert paths["socket"] == str(home / "run" / "palaced.sock")
    assert paths["config_file"] == str(home / "config.toml")


def test_offline_without_model_path_is_keyword_only_at_once(home: Path) -> None:
    """No local model and an unreachable hub: 'unavailable' in seconds, not 'loading'."""
    import time

    env = base_env(home, model=True)
    env.pop("PALACE_EMBED_MODEL_PATH")
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: offline, deterministic
    d = DaemonProc(home, env)
    started = time.monotonic()
    d.start(wait_model=True, timeout=30)
    try:
        assert time.monotonic() - started < 15
        st = json.loads(d.cli("status", "--json", check=True).stdout)
        assert st["model"]["state"] == "unavailable" and st["mode"] == "keyword-only"
        assert "unreachable" in st["model"]["reason"]
        assert "`palace model import PATH`" in st["model"]["reason"]
        d.cli("create", "off", check=True)
        d.cli("remember", "offline notes still work", "--palace", "off", check=True)
        r = d.cli("recall", "offline notes", "--palace", "off", "--json", check=True)
        out = json.loads(r.stdout)
        assert out["mode"] == "keyword" and out["results"][0]["text"] == "offline notes still work"
    finally:
        d.stop()
