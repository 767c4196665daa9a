"""MCP bridge latency: cold start to a usable server, and per-call overhead over the client API.

1. spawn -> initialize -> tools/list wall time (median of --spawns runs; aim <= 100 ms).
   Neither step touches the daemon, so this is pure bridge start-up. The client advertises
   roots, as VS Code does: the "roots" variant (no --palace) asks for them after
   ``initialized``, which must not delay ``tools/list``.
2. the size of the ``tools/list`` answer in cl100k tokens (every agent session pays it).
3. per-call overhead: the median of --calls ``wake_up`` and ``recall`` tool calls through the
   bridge minus the median of the same daemon ops through ``palace_client.Client`` directly
   (target <= 1 ms). Uses a private daemon under a temp PALACE_HOME, stopped at the end.

Usage: python bench/mcp_latency.py [--spawns 20] [--calls 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"roots": {"listChanged": True}},
                   "clientInfo": {"name": "bench", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
QUERY = "how do we deploy the service"


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def roundtrip(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    """Send one request line to the bridge and read its answer line.

    A request of the bridge's own (``roots/list``) met on the way is answered with no roots.
    """
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line(message))
    proc.stdin.flush()
    while True:
        raw = proc.stdout.readline()
        if not raw:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"the bridge exited ({proc.wait()}): {err.strip()}")
        answer: dict[str, Any] = json.loads(raw)
        if "method" not in answer:
            return answer
        proc.stdin.write(line({"jsonrpc": "2.0", "id": answer["id"],
                               "result": {"roots": []}}))
        proc.stdin.flush()


def start_bridge(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def spawn_once(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn until the tools/list answer arrived."""
    start = time.perf_counter()
    proc = start_bridge(cmd, env)
    roundtrip(proc, INIT)
    assert proc.stdin is not None
    proc.stdin.write(line(INITIALIZED))
    tools = roundtrip(proc, TOOLS_LIST)
    elapsed = time.perf_counter() - start
    assert len(tools["result"]["tools"]) >= 9
    proc.communicate(timeout=10)
    return elapsed


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def timed(fn: Any, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    ns = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="pal-bench-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALACE")}
    env["PALACE_HOME"] = str(home)
    model = SHARED / "models" / "all-MiniLM-L6-v2-onnx-int8"
    if model.is_dir():
        env["PALACE_EMBED_MODEL_PATH"] = str(model)
    bpe = SHARED / "data" / "tiktoken" / "cl100k_base.tiktoken"
    if bpe.is_file():
        env["PALACE_TIKTOKEN_FILE"] = str(bpe)
    os.environ.update(env)
    palace_exe = shutil.which("palace") or str(Path(sys.executable).parent / "palace")
    variants = {
        "palace mcp": [palace_exe, "mcp", "--palace", "bench"],
        "python -m palace_client mcp": [sys.executable, "-m", "palace_client", "mcp",
                                        "--palace", "bench"],
        "python -m palace_client.mcp": [sys.executable, "-m", "palace_client.mcp",
                                        "--palace", "bench"],
        "python -m palace_client.mcp (roots)": [sys.executable, "-m", "palace_client.mcp"],
    }
    results: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        spawn: dict[str, float] = {}
        for name, cmd in variants.items():
            if not Path(cmd[0]).exists():
                continue
            spawn_once(cmd, env)  # warm the page cache
            spawn[name] = median_ms([spawn_once(cmd, env) for _ in range(ns.spawns)])
        results["spawn_to_tools_list_ms"] = spawn
        results["tools_list"] = tools_list_size(bpe)
        results["python_startup_ms"] = median_ms(
            [spawn_python(env) for _ in range(ns.spawns)])
        calls = measure_calls(variants["python -m palace_client mcp"], env, ns.calls, results)
    finally:
        stop_daemon()
        shutil.rmtree(home, ignore_errors=True)

    if ns.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"python {results['python']}; bare interpreter start "
          f"{results['python_startup_ms']:.1f} ms (median of {ns.spawns})")
    print(f"spawn -> initialize -> tools/list (median of {ns.spawns}; aim <= 100 ms):")
    for name, ms in spawn.items():
        print(f"  {name:<36} {ms:8.1f} ms")
    size = results["tools_list"]
    print(f"tools/list: {size['tools']} tools, {size['tokens']} {size['tokenizer']} tokens, "
          f"{size['bytes']} bytes")
    print(f"per-call (median of {ns.calls}; overhead target <= 1 ms; daemon mode "
          f"{results['mode']}):")
    for name, row in calls.items():
        print(f"  {name:<8} client {row['client_ms']:7.3f} ms   bridge {row['bridge_ms']:7.3f} ms"
              f"   overhead {row['overhead_ms']:6.3f} ms")
    return 0


def measure_calls(cmd: list[str], env: dict[str, str], n: int,
                  results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Median latency of status and recall, directly through Client and through the bridge."""
    from palace_client import Client

    client = Client(client_name="bench")
    deadline = time.monotonic() + 60
    while client.status()["model"]["state"] == "loading" and time.monotonic() < deadline:
        time.sleep(0.1)
    client.create_palace("bench", exist_ok=True)
    client.remember_many("bench", [
        {"text": f"Note {i}: we deploy service {i % 7} with blue-green rollouts on "
                 f"{['monday', 'tuesday', 'friday'][i % 3]}", "room": f"room-{i % 5}"}
        for i in range(200)])
    bridge = start_bridge(cmd, env)
    try:
        roundtrip(bridge, INIT)
        assert bridge.stdin is not None
        bridge.stdin.write(line(INITIALIZED))

        def tool(name: str, arguments: dict[str, Any]) -> None:
            answer = roundtrip(bridge, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                        "params": {"name": name, "arguments": arguments}})
            assert answer["result"]["isError"] is False, answer

        calls: dict[str, dict[str, float]] = {}
        pairs = {
            "wake_up": (lambda: client.wake_up("bench"), lambda: tool("wake_up", {})),
            "recall": (lambda: client.recall_ex("bench", QUERY, top_k=5),
                       lambda: tool("recall", {"query": QUERY, "top_k": 5})),
        }
        for name, (direct, via_bridge) in pairs.items():
            timed(direct, 20)
            timed(via_bridge, 20)
            # Interleave rounds so drift (caches, CPU frequency) hits both sides alike.
            d_samples: list[float] = []
            b_samples: list[float] = []
            for _ in range(4):
                d_samples += timed(direct, n // 4)
                b_samples += timed(via_bridge, n // 4)
            d_ms, b_ms = median_ms(d_samples), median_ms(b_samples)
            calls[name] = {"client_ms": d_ms, "bridge_ms": b_ms,
                           "overhead_ms": round(b_ms - d_ms, 3)}
        results["per_call"] = calls
        results["calls"] = n
        results["mode"] = client.status()["mode"]
        return calls
    finally:
        bridge.communicate(timeout=10)
        client.close()


def tools_list_size(bpe: Path) -> dict[str, Any]:
    """The tools/list answer as the bridge sends it: tools, bytes and cl100k tokens."""
    from palace_client.mcp.bridge import Bridge
    from palace_client.mcp.toolbox import Toolbox
    from palaced.engine.tokens import Tokenizer

    def no_daemon() -> Any:
        raise AssertionError("tools/list needs no daemon")

    raw = Bridge(Toolbox(no_daemon, "bench")).handle_line(line(TOOLS_LIST)) or b""
    result = json.loads(raw)["result"]
    tokenizer = Tokenizer.load(bpe if bpe.is_file() else None)
    return {"tools": len(result["tools"]), "bytes": len(raw), "tokenizer": tokenizer.name,
            "tokens": tokenizer.count(json.dumps(result, separators=(",", ":")))}


def stop_daemon() -> None:
    """Stop the bench daemon (if one runs) and wait until its socket stops answering."""
    from palace_client import Client
    from palaced.wire.errors import PalaceError

    probe = Client(autostart=False)
    try:
        probe.stop_daemon()
    except (PalaceError, OSError):
        pass  # not running, or it closed the connection before answering
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            probe.status()
        except (PalaceError, OSError):
            return
        finally:
            probe.close()
        time.sleep(0.1)


def spawn_python(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
