"""Fifty processes at once against one daemon: CLI calls, Client API scripts and MCP bridges
(``palace mcp`` speaking JSON-RPC on stdio), reading and writing several palaces and racing
to create the same ones.

Nothing may fail: no error of any kind (no "database is locked"), every write acknowledged
and present afterwards with its text, each racing ``create --exist-ok`` group answers
``created: true`` exactly once, and every database passes ``PRAGMA quick_check`` opened
read-only once the daemon stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import DaemonProc
from tests.support.dbcheck import integrity, texts

PALACES = ("conc-a", "conc-b", "conc-c")
RACES = ("race-one", "race-two")
MCP_PALACE = "conc-mcp"  # created by the bridges themselves, racing each other
# One distinct fact per bridge (near-duplicates would be merged by design).
FACTS = ("the lighthouse lamp was replaced", "the harbour crane failed its inspection",
         "Maria prefers tea over coffee", "the build server runs Debian 12",
         "invoices are due on the fifth", "the cat is allergic to fish",
         "staging deploys happen on Tuesdays", "the roof leaks above the kitchen",
         "Tom owns the payment gateway", "the garden hose is in the shed",
         "the VPN certificate expires in May", "the piano needs tuning twice a year")

# Imports first, then waits for the go file, so that the processes really start together.
PRELUDE = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    go = Path(sys.argv[1])
    {imports}
    while not go.exists():
        time.sleep(0.005)
""")

CLI = PRELUDE.format(imports="from palace_client.cli import main") + textwrap.dedent("""
    sys.argv = ["palace", *sys.argv[2:]]
    main()
""")

CLIENT = PRELUDE.format(imports="from palace_client import Client") + textwrap.dedent("""
    role, idx = sys.argv[2], int(sys.argv[3])
    out = {"role": role, "idx": idx}
    with Client(client_name=f"conc-{idx}") as c:
        if role == "race":
            out["name"] = sys.argv[4]
            out["created"] = c.create_palace(sys.argv[4], exist_ok=True)["created"]
        elif role == "writer":
            out["acked"] = {}
            for i in range(4):
                palace = ("conc-a", "conc-b", "conc-c")[(idx + i) % 3]
                text = f"client {idx} note {i}: the ferry timetable changes in spring"
                # dedup off: these texts differ only in their numbers (not what is tested here)
                did = c.remember(palace, text, room=f"r{idx % 3}", dedup=False)
                out["acked"][f"{palace}:{did}"] = text
                assert c.get(palace, did)["text"] == text
                c.recall(palace, "ferry timetable", top_k=3)
                c.kg_assert(palace, f"ferry {idx}", "runs_on", f"route {i}")
        else:
            for palace in ("conc-a", "conc-b", "conc-c"):
                c.recall(palace, "when does the timetable change?", top_k=5)
                c.drawers(palace, limit=20)
                c.palace_info(palace)
            c.status()
            c.recall_all("ferry timetable", top_k=5)
    print(json.dumps(out))
""")


def _proc(script: str, go: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, str(go), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Bridge:
    """A ``palace mcp`` process and its JSON-RPC conversation."""

    def __init__(self, env: dict[str, str]) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "palace_client", "mcp", "--palace",
                                   MCP_PALACE], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.next_id = 0
        self.answers: list[dict[str, Any]] = []

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        answer: dict[str, Any] = json.loads(self.p.stdout.readline())
        self.answers.append(answer)
        return answer

    def converse(self, idx: int, start: threading.Barrier) -> None:
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": f"conc-{idx}", "version": "1"}})
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0",
                                       "method": "notifications/initialized"}) + "\n")
        start.wait()
        text = f"bridge {idx} remembers: {FACTS[idx]}"
        self.rpc("tools/call", {"name": "remember", "arguments": {"text": text}})
        self.rpc("tools/call", {"name": "recall", "arguments": {"query": FACTS[idx - 1]}})
        self.rpc("tools/call", {"name": "list_drawers", "arguments": {"limit": 5}})
        self.rpc("tools/call", {"name": "wake_up", "arguments": {}})

    def close(self) -> str:
        assert self.p.stdin and self.p.stdout and self.p.stderr
        self.p.stdin.close()
        self.p.stdout.read()
        err = self.p.stderr.read()
        assert self.p.wait(timeout=60) == 0, err
        return err


def test_fifty_processes_at_once(daemon: DaemonProc, tmp_path: Path) -> None:
    env = daemon.env
    with daemon.client() as c:
        for name in PALACES:
            c.create_palace(name)
    go = tmp_path / "go"
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    for race in RACES:  # 6 racers per name: 3 CLI, 3 Client
        for i in range(3):
            procs.append(("race-cli", _proc(CLI, go, "create", race, "--exist-ok", "--json",
                                            env=env)))
            procs.append(("race-client", _proc(CLIENT, go, "race", str(i), race, env=env)))
    for i in range(4):
        text = f"cli {i} note: the bakery opens at seven"
        procs.append(("cli-remember", _proc(CLI, go, "remember", text, "--palace",
                                            PALACES[i % 3], "--json", env=env)))
        procs.append(("cli-recall", _proc(CLI, go, "recall", "bakery opening hours",
                                          "--palace", PALACES[i % 3], "--json", env=env)))
    for i in range(12):
        procs.append(("client-writer", _proc(CLIENT, go, "writer", str(i), env=env)))
    for i in range(6):
        procs.append(("client-reader", _proc(CLIENT, go, "reader", str(100 + i), env=env)))
    bridges = [Bridge(env) for _ in range(12)]
    try:
        _run_all(daemon, go, procs, bridges)
    finally:
        go.touch()
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
        for b in bridges:
            if b.p.poll() is None:
                b.p.kill()
                b.p.wait()


def _run_all(daemon: DaemonProc, go: Path, procs: list[tuple[str, subprocess.Popen[str]]],
             bridges: list[Bridge]) -> None:
    assert len(procs) + len(bridges) == 50
    start = threading.Barrier(len(bridges) + 1)
    failures: list[str] = []

    def talk(i: int, b: Bridge) -> None:
        try:
            b.converse(i, start)
        except Exception as exc:  # reported below with the bridge's stderr
            failures.append(f"bridge {i}: {exc!r}")
            start.abort()

    threads = [threading.Thread(target=talk, args=(i, b)) for i, b in enumerate(bridges)]
    for t in threads:
        t.start()
    start.wait(timeout=60)
    go.touch()  # everyone at once
    t0 = time.monotonic()
    outputs: list[tuple[str, dict[str, Any] | None, str]] = []
    for kind, p in procs:
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            failures.append(f"{kind} exited {p.returncode}: {err[-500:]}")
        outputs.append((kind, json.loads(out) if out.strip() else None, err))
    for t in threads:
        t.join(120)
    errs = [b.close() for b in bridges]
    elapsed = time.monotonic() - t0
    assert not failures, failures
    every_err = "\n".join([*errs, *(e for _, _, e in outputs)])
    assert "locked" not in every_err and "Traceback" not in every_err, every_err[-2000:]
    for b in bridges:
        for answer in b.answers:
            assert "error" not in answer, answer
            assert not answer["result"].get("isError"), answer
    with daemon.client() as c:
        stored = {p: {int(d["id"]): d["text"] for d in c.drawers(p, limit=1000)["drawers"]}
                  for p in (*PALACES, MCP_PALACE)}
    acked: dict[str, dict[int, str]] = {p: {} for p in PALACES}
    for kind, o, _ in outputs:
        if kind == "client-writer" and o:
            for key, text in o["acked"].items():
                palace, did = key.split(":")
                acked[palace][int(did)] = text
        if kind == "cli-remember" and o:
            assert o["created"] is True
    for palace in PALACES:
        for did, text in acked[palace].items():
            assert stored[palace].get(did) == text, (palace, did)
    assert sum(len(v) for v in acked.values()) == 48
    assert sum(1 for p in PALACES for t in stored[p].values() if t.startswith("cli ")) == 4
    assert sorted(stored[MCP_PALACE].values()) == sorted(
        f"bridge {i} remembers: {FACTS[i]}" for i in range(12))
    daemon.stop()
    for name in (*PALACES, *RACES, MCP_PALACE):
        db = daemon.home / "palaces" / name / "palace.db"
        assert integrity(db, quick=True) == "ok", name
    assert texts(daemon.home / "palaces" / "conc-a" / "palace.db") == stored["conc-a"]
    print(f"50 processes done in {elapsed:.1f} s")
    # Each racing group of creates: exactly one says it created the palace.
    for race in RACES:
        created = [o["created"] for k, o, _ in outputs
                   if k.startswith("race") and o and o["name"] == race]
        assert len(created) == 6 and created.count(True) == 1, (race, created)


