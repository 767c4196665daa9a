"""Concurrency, crash safety and auto-start of a real palaced."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import DaemonProc, _wait_gone, base_env

pytestmark = pytest.mark.daemon  # every test here runs palace's processes

WRITER = textwrap.dedent("""
    import json, sys
    from palace_client import Client
    n, worker = int(sys.argv[1]), int(sys.argv[2])
    ids = []
    with Client(client_name=f"w{worker}") as c:
        for i in range(n):
            ids.append(c.remember("conc", f"worker {worker} note {i} about subject {i * 7}",
                                  room=f"r{worker % 4}"))
    print(json.dumps(ids))
""")


def _daemons_of(home: Path) -> list[str]:
    """Live ``palaced run`` processes whose environment names ``home``."""
    pids = subprocess.run(["pgrep", "-f", "palaced run"], capture_output=True, text=True
                          ).stdout.split()
    mine = []
    for pid in pids:
        try:
            if str(home).encode() in Path(f"/proc/{pid}/environ").read_bytes():
                mine.append(pid)
        except OSError:  # exited meanwhile
            pass
    return mine


def test_sixteen_clients_remember_at_once_and_autostart_one_daemon(home: Path) -> None:
    env = base_env(home)
    d = DaemonProc(home, env)
    # Nobody started the daemon: 16 clients race to auto-start it.
    r = d.cli("create", "conc", "--json")
    assert r.returncode == 0, r.stderr
    d.stop()
    _wait_gone(d.pid())
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, "12", str(w)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(16)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    try:
        # Daemons spawned by clients that lost the race exit once they see the lock taken;
        # on a loaded machine some are still importing when the clients are done: wait.
        deadline = time.monotonic() + 60
        while True:
            mine = _daemons_of(home)
            if len(mine) <= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(mine) == 1, f"expected exactly one daemon, found {mine}"
        all_ids = [i for ids in results for i in ids]
        assert len(set(all_ids)) == 16 * 12
        with d.client() as c:
            # Writes that raced the model load were stored keyword-only; they get embedded
            # in the background once the model is ready.
            deadline = time.monotonic() + 60
            info = c.palace_info("conc")
            while info["pending_embeddings"] and time.monotonic() < deadline:
                time.sleep(0.2)
                info = c.palace_info("conc")
            assert info["drawers"] == 16 * 12
            assert info["vectors"] == info["index"] == 16 * 12
            for w, ids in enumerate(results):
                for i, did in enumerate(ids):
                    if i % 5 == 0:
                        assert c.get("conc", did)["text"] == (
                            f"worker {w} note {i} about subject {i * 7}")
    finally:
        d.stop()


@pytest.mark.parametrize("damage", ["none", "delete", "corrupt"])
def test_kill_9_keeps_acknowledged_writes_and_index_recovers(home: Path, damage: str) -> None:
    # The index is saved once the palace has been idle this long (5 s by default): long
    # enough still that the five writes below are all unsaved when the daemon is killed.
    (home / "config.toml").write_text("[limits]\ncheckpoint_idle_s = 1.5\n")
    d = DaemonProc(home, {**base_env(home), "PALACE_CONFIG": str(home / "config.toml")})
    d.start()
    with d.client() as c:
        c.create_palace("crash")
        ids = c.remember_many("crash", [{"text": f"durable fact number {i} about otters"}
                                        for i in range(40)])
        ids.append(c.remember("crash", "the last acknowledged write before the crash"))
        # Let the scheduler save the index (once idle), then write more after that save.
        deadline = time.monotonic() + 20
        index_file = home / "palaces" / "crash" / "index.usearch"
        while c.palace_info("crash")["index_unsaved"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.palace_info("crash")["index_unsaved"] == 0 and index_file.exists()
        for i in range(4):
            ids.append(c.remember("crash", f"heron census {i}: nests counted by the mill"))
        ids.append(c.remember("crash", "written after the index was saved"))
        assert c.palace_info("crash")["index_unsaved"] == 5
    d.kill9()
    if damage == "delete":
        index_file.unlink()
    elif damage == "corrupt":
        data = bytearray(index_file.read_bytes())
        for off in range(64, len(data), 97):
            data[off] ^= 0xFF
        index_file.write_bytes(bytes(data))
    # Next command auto-starts a fresh daemon (the socket file left behind is stale).
    try:
        r = d.cli("info", "--palace", "crash", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["drawers"] == 46
        d.wait_ready(wait_model=True)
        with d.client() as c:
            info = c.palace_info("crash")
            assert info["vectors"] == info["index"] == 46 and info["consistent"] is True
            # Only the writes after the last save were replayed; a lost or damaged file is
            # rebuilt from SQLite.
            load = info["index_load"]
            if damage == "none":
                assert load["how"] == "replayed" and load["replayed"] == 5, load
            else:
                assert load["how"] == "rebuilt", load
            for did in ids:
                c.get("crash", did)
            for i in range(4):
                hits = c.recall("crash", f"heron census {i}: nests counted by the mill")
                assert ids[-5 + i] in [h["id"] for h in hits]
            top = c.recall("crash", "what was written after the index was saved?", top_k=1)
            assert top[0]["id"] == ids[-1]
    finally:
        d.stop()


def test_keyword_only_then_model_arrives(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    try:
        with d.client() as c:
            st = c.status()
            assert st["model"]["state"] == "unavailable" and st["mode"] == "keyword-only"
            assert "disabled" in st["model"]["reason"]
            c.create_palace("kw")
            a = c.remember("kw", "The staging database password rotates every ninety days")
            c.remember("kw", "Lunch is at noon on Thursdays")
            res = c.recall_ex("kw", "staging database", top_k=5)
            assert res["mode"] == "keyword" and "keyword-only" in res["notice"]
            assert res["results"][0]["id"] == a
            assert c.palace_info("kw")["pending_embeddings"] == 2
        r = d.cli("status")
        assert "UNAVAILABLE - keyword-only" in r.stdout
    finally:
        d.stop()
    # Restart with the model: drawers stored meanwhile get embedded.
    d2 = DaemonProc(home, base_env(home))
    d2.start()
    try:
        with d2.client() as c:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                info = c.palace_info("kw")
                if info["pending_embeddings"] == 0:
                    break
                time.sleep(0.2)
            assert info["pending_embeddings"] == 0 and info["vectors"] == 2
            res = c.recall_ex("kw", "how often are credentials changed?", top_k=1)
            assert res["mode"] == "hybrid" and res["results"][0]["id"] == a
    finally:
        d2.stop()


def test_sigterm_saves_index_and_second_daemon_refuses(home: Path) -> None:
    d = DaemonProc(home, base_env(home))
    d.start()
    with d.client() as c:
        c.create_palace("term")
        c.remember("term", "saved at shutdown")
    # A second daemon on the same root exits at once without touching the socket.
    second = subprocess.run([sys.executable, "-m", "palaced", "run", "--quiet"],
                            env=d.env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0 and "already running" in second.stderr
    # ... before importing the heavy libraries: after a crash every client starts a daemon,
    # and the losers of that race must cost next to nothing.
    probe = ("import runpy, sys\nsys.argv = ['palaced', 'run', '--quiet']\n"
             "try:\n    runpy.run_module('palaced', run_name='__main__')\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print(code, sorted(m for m in ('anyio', 'apsw', 'numpy', 'usearch') "
             "if m in sys.modules))")
    third = subprocess.run([sys.executable, "-c", probe], env=d.env, capture_output=True,
                           text=True, timeout=60)
    assert third.stdout.split("\n")[0] == "0 []", third.stdout + third.stderr
    with d.client() as c:
        assert c.status()["pid"] == d.pid()
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 0
    assert not d.socket.exists()
    assert (home / "palaces" / "term" / "index.usearch").exists()
    mode = (home / "run").stat().st_mode & 0o777
    assert mode == 0o700
