"""Export of large palaces in bounded memory: time and peak RSS of the client and the daemon.

    python bench/export.py                          # 10,000 and 100,000 drawers
    python bench/export.py --drawers 1000000        # any sizes

For each size it builds a palace directly with the store (synthetic texts of ~150
characters in 500 rooms, each drawer with a fake 384-d vector, so the database has its real
size), starts a private keyword-only daemon on it, and runs ``palace export FILE`` as a
subprocess. Printed per size: the export's wall time and rate, the file size, the client's
peak RSS (next to the peak of a bare ``palace status`` for scale), and the
daemon's resident memory before the export and its peak during it (``VmHWM`` after
resetting it through ``/proc/PID/clear_refs``). The palace is decayed first (the daemon
does it when a palace first goes idle, weighing every drawer), so that the decay does not
run during the export; its peak is printed apart. Bounded memory shows as export peaks that
do not grow with the number of drawers. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _daemon import launch, private_env, stop_daemon, wait_ready

from palace_client import Client
from palaced.index.vectors import to_blob
from palaced.store import Store
from palaced.store.lookup.vectors import store_vectors
from palaced.store.rows.drawers import NewDrawer, insert_drawer

WORDS = ("deploy staging postgres port api gateway alice bob payment invoice cache redis "
         "kafka retry timeout schema migration review release tuesday approval budget "
         "incident rollback canary metrics latency cluster node certificate vpn").split()


def build(directory: Path, n: int, seed: int = 7) -> None:
    """A palace of ``n`` synthetic drawers with fake vectors, written by the store itself."""
    directory.mkdir(parents=True)
    rng = random.Random(seed)
    vec_rng = np.random.default_rng(seed)
    store = Store(directory / "palace.db")
    try:
        for start in range(0, n, 5000):
            def tx(c: object, start: int = start) -> None:
                vecs = vec_rng.standard_normal((min(5000, n - start), 384)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                for i in range(start, min(start + 5000, n)):
                    text = f"memory {i}: " + " ".join(rng.choice(WORDS) for _ in range(20))
                    new = NewDrawer(text=text, room=f"room-{i % 500}",
                                    occurred_ms=1_700_000_000_000 + i * 60_000)
                    did, _ = insert_drawer(c, new, 1_700_000_000_000 + i)  # type: ignore[arg-type]
                    store_vectors(c, did, [to_blob(vecs[i - start])])  # type: ignore[arg-type]

            store.write(tx)
    finally:
        store.close()


def _reset_peak(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) to its current RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


# Runs a command and reports its peak RSS: the command is forked from this small process,
# not from the bench (a child's peak counts the pages of the process it was forked from).
_WRAP = ("import resource, subprocess, sys\n"
         "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
         "sys.exit(rc)\n")


def _run_peak_kb(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one ``palace`` command."""
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", _WRAP, sys.executable, "-m", "palace_client",
                          *args], env=env, capture_output=True, text=True)
    secs = time.monotonic() - t0
    if res.returncode != 0:
        raise RuntimeError(f"palace {args} failed: {res.stderr}")
    return secs, int(res.stderr.strip().splitlines()[-1])


def measure(n: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="pal-exp-", dir="/tmp"))
    try:
        t0 = time.monotonic()
        build(home / "palaces" / "big", n)
        built_s = time.monotonic() - t0
        env = private_env(home, None, None)
        daemon = launch(env, home / "daemon.log")
        sock = home / "run" / "palaced.sock"
        try:
            wait_ready(daemon, sock, 60)
            with Client(sock, autostart=False) as c:  # opens the palace (index load...)
                assert c.palace_info("big")["drawers"] == n
                # The daemon decays a palace when it first goes idle (weighing every drawer):
                # done here, measured apart, so that it does not run during the export.
                _reset_peak(daemon.pid)
                c.decay("big")
                decay_peak = _status_kb(daemon.pid, "VmHWM")
            time.sleep(1.0)
            _reset_peak(daemon.pid)
            before = _status_kb(daemon.pid, "VmRSS")
            _, base_client = _run_peak_kb(["status"], env)
            out = home / "big.jsonl"
            secs, client_peak = _run_peak_kb(["export", "--palace", "big", str(out)], env)
            daemon_peak = _status_kb(daemon.pid, "VmHWM")
            with out.open("rb") as fh:
                lines = sum(1 for _ in fh)
            assert lines == n + 3, (lines, n)
            return {"drawers": n, "build_s": built_s, "export_s": secs,
                    "records_per_s": lines / secs, "file_mb": out.stat().st_size / 2**20,
                    "client_peak_mb": client_peak / 1024, "client_status_mb": base_client / 1024,
                    "daemon_before_mb": before / 1024, "daemon_peak_mb": daemon_peak / 1024,
                    "daemon_decay_peak_mb": decay_peak / 1024,
                    "db_mb": (home / "palaces" / "big" / "palace.db").stat().st_size / 2**20}
        finally:
            stop_daemon(daemon, sock)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drawers", type=int, nargs="+", default=[10_000, 100_000])
    args = ap.parse_args()
    cols = ("drawers", "db_mb", "export_s", "records_per_s", "file_mb", "client_peak_mb",
            "client_status_mb", "daemon_before_mb", "daemon_peak_mb", "daemon_decay_peak_mb")
    print(" ".join(f"{c:>16}" for c in cols))
    for n in args.drawers:
        row = measure(n)
        print(" ".join(f"{row[c]:>16.1f}" if isinstance(row[c], float) else f"{row[c]:>16}"
                       for c in cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
