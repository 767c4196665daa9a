"""Many clients at once: 32 processes mixing recall, remember and forget on four palaces.

Starts a private palaced (real model by default) under a scratch ``PALACE_HOME``, pinned with
``taskset`` to the CPUs each ``--cpus`` value names (default: ``0`` then ``0,1``, one run per
value, so the table shows how throughput scales from one core to two), seeds four palaces
with ``--seed-drawers`` synthetic drawers each (``perf.py``'s vocabulary), then runs
``--clients`` client processes for ``--seconds``. Each client holds one connection and loops:
70 % recall of a query no one else asks (the query vector cache never hits), 20 % remember of
a new text, 10 % forget of a drawer it remembered, each on a palace chosen at random. The
clients themselves are not pinned (they share the machine's cores with the daemon).

Reported per run: the daemon's CPU use (cores: its user + system time over the clock,
every thread), errors (any exception is one; the aim is 0), aggregate recalls/s,
remembers/s and forgets/s, p50/p99 latency per op, and the load average. With ``--profile``
the daemon is sampled with py-spy (``--py-spy PATH``; it lives in its own virtualenv) for the
middle of the run, and the report names where its time goes: inclusive shares of the
embedding (ONNX), SQLite (FTS5/BM25 and writes), vector search (usearch), msgpack, the event
loop and the rest, plus the top self-time frames.

    python bench/concurrency.py [--clients 32] [--seconds 60] [--cpus 0 0,1] [--profile]
                                [--py-spy /work/venv-pyspy/bin/py-spy] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, private_env, stop_daemon, wait_ready
from perf import OBJECTS, QUALIFIERS, SUBJECTS, VERBS, pct, synthetic

PALACES = ("conc-a", "conc-b", "conc-c", "conc-d")
MIX = (("recall", 0.7), ("remember", 0.2), ("forget", 0.1))

# Categories of the py-spy profile, first match wins (so the shares add up to 100 %): a
# sample whose innermost frame is a parked wait is "waiting"; otherwise the first category
# with a marker anywhere in its stack.
WAIT_LEAVES = ("Condition.wait", "EpollSelector.select", "Event.wait", "Thread.join",
               "_worker (concurrent/futures/thread.py")
CATEGORIES = (
    ("embedding (onnxruntime/fastembed)", ("onnxruntime", "fastembed", "embedder.py")),
    ("tokenizer (query/texts)", ("tokenizers", "encode_batch")),
    ("SQLite FTS5 / BM25 query", ("store/lookup/search.py",)),
    ("SQLite writes (remember/forget)", ("store/rows/drawers.py", "store/lookup/vectors.py",
                                         "store/lookup/context.py", "Store.write")),
    ("vector search (usearch)", ("index.py",)),
    ("ranking / fusion / packing", ("fusion.py", "packing.py", "palaced/retrieval/search.py",
                                    "recall.py")),
    ("msgpack (de)serialisation", ("msgpack", "protocol.py")),
    ("event loop / transport (asyncio, anyio)", ("asyncio", "anyio", "server.py")),
)


def _client(idx: int, sock: str, deadline: float, seed: int, out: Any) -> None:
    """One client process: loop the mix until ``deadline``; put its record on ``out``."""
    from palace_client import Client

    rnd = random.Random(seed * 1000 + idx)
    lat: dict[str, list[float]] = collections.defaultdict(list)
    errors: list[str] = []
    mine: dict[str, list[int]] = {p: [] for p in PALACES}
    n = 0
    ops, weights = zip(*MIX, strict=True)
    try:
        c = Client(sock, autostart=False, client_name=f"conc-{idx}")
    except Exception as exc:
        out.put({"idx": idx, "lat": {}, "errors": [f"connect: {exc!r}"]})
        return
    with c:
        while time.time() < deadline:
            op = rnd.choices(ops, weights)[0]
            palace = rnd.choice(PALACES)
            if op == "forget" and not mine[palace]:
                op = "remember"
            n += 1
            t = time.perf_counter()
            try:
                if op == "recall":
                    q = (f"what does {rnd.choice(SUBJECTS)} {rnd.choice(VERBS)} "
                         f"{rnd.choice(QUALIFIERS)} c{idx} q{n}")
                    c.recall(palace, q, top_k=10)
                elif op == "remember":
                    text = (f"{rnd.choice(SUBJECTS)} {rnd.choice(VERBS)} {rnd.choice(OBJECTS)} "
                            f"{rnd.choice(QUALIFIERS)} (client {idx} note {n})")
                    mine[palace].append(c.remember(palace, text, room=f"room-{n % 40}"))
                else:
                    c.forget(palace, mine[palace].pop(rnd.randrange(len(mine[palace]))))
            except Exception as exc:
                errors.append(f"{op}: {exc!r}"[:300])
                continue
            lat[op].append((time.perf_counter() - t) * 1000)
    out.put({"idx": idx, "lat": dict(lat), "errors": errors})


def summarise_profile(raw: Path, top: int = 15) -> dict[str, Any]:
    """Shares of the py-spy collapsed stacks (``--format raw``) by category and by self frame."""
    total = 0
    cats: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in raw.read_text("utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = stack.split(";")
        leaves[frames[-1].strip()[:110]] += k
        leaf = frames[-1]
        if any(w in leaf for w in WAIT_LEAVES):
            cats["waiting (parked threads, epoll)"] += k
            continue
        for name, marks in CATEGORIES:
            if any(m in stack for m in marks):
                cats[name] += k
                break
        else:
            cats["other"] += k
    if total == 0:
        return {"samples": 0}
    return {"samples": total,
            "categories": [(n, round(100 * cats[n] / total, 1))
                           for n in (*(c for c, _ in CATEGORIES), "waiting (parked threads, epoll)",
                                     "other")],
            "top_self": [(f, round(100 * k / total, 1)) for f, k in leaves.most_common(top)]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, every thread (ONNX's native ones too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(args: argparse.Namespace, cpus: str) -> dict[str, Any]:
    model = None if args.keyword_only else args.model
    home = Path(tempfile.mkdtemp(prefix="palconc-", dir="/tmp"))
    env = private_env(home, model, args.tiktoken)
    sock = home / "run" / "palaced.sock"
    cmd = [sys.executable, "-m", "palaced", "run", "--quiet"]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    with open(home / "palaced.stderr", "ab") as err:
        proc = subprocess.Popen(cmd, env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=err,
                                stderr=err)
    rec: dict[str, Any] = {"cpus": cpus or "all", "clients": args.clients,
                           "seconds": args.seconds}
    try:
        status = wait_ready(proc, sock, 180)
        rec["model"] = status["model"]["state"]
        from palace_client import Client
        with Client(sock, autostart=False, client_name="conc-seed") as c:
            t0 = time.perf_counter()
            for i, p in enumerate(PALACES):
                c.create_palace(p)
                items = synthetic(args.seed_drawers, seed=100 + i)
                for s in range(0, len(items), 500):
                    c.remember_many(p, items[s:s + 500])
            rec["seed_s"] = round(time.perf_counter() - t0, 1)
            for p in PALACES:  # warm every palace (open, page cache, lazy imports)
                c.recall(p, "warm up the deploy pipeline", top_k=10)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        start_at = time.time() + 3.0  # spawn and connect before the clock starts
        deadline = start_at + args.seconds
        procs = [ctx.Process(target=_client, args=(i, str(sock), deadline, args.seed, out))
                 for i in range(args.clients)]
        for p_ in procs:
            p_.start()
        spy = None
        raw = home / "profile.txt"
        while time.time() < start_at:
            time.sleep(0.05)
        cpu0 = cpu_seconds(proc.pid)
        if args.profile:
            while time.time() < start_at + args.seconds * 0.2:
                time.sleep(0.1)
            spy = subprocess.Popen(
                [str(args.py_spy), "record", "--pid", str(proc.pid), "--format", "raw",
                 "--output", str(raw), "--duration", str(max(1, int(args.seconds * 0.6))),
                 "--rate", "100", "--nonblocking", "--threads"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while time.time() < deadline:
            time.sleep(0.05)
        rec["daemon_cpu_cores"] = round((cpu_seconds(proc.pid) - cpu0) / args.seconds, 2)
        results = [out.get(timeout=args.seconds + 120) for _ in procs]
        for p_ in procs:
            p_.join(timeout=30)
        rec["loadavg_1m"] = round(os.getloadavg()[0], 1)
        if spy is not None:
            _, spy_err = spy.communicate(timeout=120)
            if raw.exists():
                rec["profile"] = summarise_profile(raw)
                if args.keep_profile:
                    shutil.copy(raw, args.keep_profile.with_suffix(f".{cpus or 'all'}.txt"))
            else:
                rec["profile"] = {"error": spy_err.decode(errors="replace")[-500:]}
        lat: dict[str, list[float]] = collections.defaultdict(list)
        errors: list[str] = []
        for r in results:
            errors.extend(r["errors"])
            for op, v in r["lat"].items():
                lat[op].extend(v)
        rec["errors"] = len(errors)
        rec["error_samples"] = errors[:5]
        for op, _ in MIX:
            v = lat.get(op, [])
            rec[op] = {"count": len(v), "per_s": round(len(v) / args.seconds, 1),
                       "p50_ms": round(statistics.median(v), 1) if v else None,
                       "p99_ms": round(pct(v, 99), 1) if v else None}
        with Client(sock, autostart=False, client_name="conc-check") as c:
            rec["consistent"] = all(c.palace_info(p)["consistent"] for p in PALACES)
    finally:
        rec["stop"] = stop_daemon(proc, sock)
        shutil.rmtree(home, ignore_errors=True)
    return rec


def print_table(runs: list[dict[str, Any]]) -> None:
    print(f"\nconcurrency: {runs[0]['clients']} client processes, {runs[0]['seconds']} s, "
          f"4 palaces; load average shown per run (a shared machine: numbers are noisy)")
    head = (f"{'daemon cpus':<12}{'errors':>7}{'recall/s':>10}{'rem/s':>8}{'fgt/s':>8}"
            f"{'recall p50/p99 ms':>20}{'remember p50/p99':>19}{'forget p50/p99':>17}"
            f"{'daemon cpu':>11}{'load':>6}")
    print(head)
    print("-" * len(head))
    for r in runs:
        def pp(op: str, r: dict[str, Any] = r) -> str:
            return f"{r[op]['p50_ms']}/{r[op]['p99_ms']}"
        print(f"{r['cpus']:<12}{r['errors']:>7}{r['recall']['per_s']:>10}"
              f"{r['remember']['per_s']:>8}{r['forget']['per_s']:>8}{pp('recall'):>20}"
              f"{pp('remember'):>19}{pp('forget'):>17}{r['daemon_cpu_cores']:>11}"
              f"{r['loadavg_1m']:>6}")
    if len(runs) == 2 and runs[0]["recall"]["per_s"]:
        a, b = runs
        ops_a = sum(a[o]["per_s"] for o, _ in MIX)
        ops_b = sum(b[o]["per_s"] for o, _ in MIX)
        gain = b["recall"]["per_s"] / a["recall"]["per_s"]
        print(f"scaling {a['cpus']} -> {b['cpus']}: recalls/s x{gain:.2f}"
              f", all ops/s x{ops_b / max(ops_a, 1e-9):.2f}")
    for r in runs:
        prof = r.get("profile")
        if not prof:
            continue
        print(f"\ndaemon profile, cpus {r['cpus']} ({prof.get('samples', 0)} py-spy samples, "
              "all threads, idle excluded by py-spy; each sample counted once):")
        for name, share in prof.get("categories", []):
            print(f"  {name:<45}{share:>6.1f} %")
        print("  top self frames:")
        for frame, share in prof.get("top_self", []):
            print(f"    {share:>5.1f} %  {frame}")
        if "error" in prof:
            print(f"  py-spy failed: {prof['error']}")
    for r in runs:
        if r["error_samples"]:
            print(f"errors (cpus {r['cpus']}): {r['error_samples']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cpus", nargs="+", default=["0", "0,1"],
                    help="taskset CPU lists for the daemon, one run each ('' = unpinned)")
    ap.add_argument("--seed-drawers", type=int, default=500, help="drawers per palace first")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--profile", action="store_true", help="sample the daemon with py-spy")
    ap.add_argument("--py-spy", type=Path, default=Path("/work/venv-pyspy/bin/py-spy"))
    ap.add_argument("--keep-profile", type=Path, help="copy the raw py-spy stacks here")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = [run_once(args, cpus) for cpus in args.cpus]
    print_table(runs)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    bad = [r for r in runs if r["errors"] or not r["consistent"]]
    print("\nRESULT:", "FAIL" if bad else "PASS")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
