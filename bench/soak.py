"""Soak test: a private palaced under a bounded mixed multi-client workload, watched for leaks.

Starts its own ``palaced`` under a scratch ``PALACE_HOME`` with the real model and tokenizer
from ``../shared`` (``PALACE_EMBED_MODEL_PATH`` / ``PALACE_TIKTOKEN_FILE``), waits until the
model is no longer loading, creates ``--palaces`` palaces, pre-fills them (``--prefill``
drawers per client per palace) and runs a 2 s burst of concurrent reads on each so the
daemon's SQLite reader pools and worker threads exist before the baseline sample; then for
``--minutes`` it runs ``--clients`` threads, each with its own ``Client(autostart=False)`` (so the
daemon measured is the one started here) and its own wing in every palace. Each thread picks
ops at random: remember (plain, with a long or short ttl, with ``supersedes``, exact repeats
and near-duplicates for dedup), remember_many batches, recall (plain, with budget/levels/deep,
filtered to its wing), get, forget, wake_up, kg_assert/kg_query, drawers, status, reconnects,
a scratch palace create -> fill -> recall -> delete cycle, and deliberately bad requests whose
typed error is expected (unknown ids, missing palaces, bad ttl, ...). The daemon stays up the
whole run (no restart, no daemon.stop). The run stops by itself at the time limit or after
``--max-ops`` ops; palaces stay bounded (``--cap`` drawers per client per palace, then
forgets replace remembers).

Checked while running: recall/wake_up never return a drawer forgotten, superseded or expired
before the request was sent (expired: past the lifetime the client knows, unless a recall sent
before then returned it, since a recall renews a lifetime by default, ``recall_extends_ttl``;
such late reads are counted as ``ttl_renewed_reads``), ``tokens_used <= budget``, wing/room
filters hold, exact repeats return the same id, a new drawer never gets the id of a forgotten
one, kg ``version`` facts keep exactly one active value. Errors are counted by name, expected
(bad input) apart from unexpected. Every ``--sample-every`` s (10) the daemon's VmRSS, open
fds, threads and CPU time are read from ``/proc/PID``. A watchdog stops the run when a request
has had no answer for ``--stall-s`` s (60), then records which daemon threads burn CPU and,
when ``py-spy`` is installed, the daemon's Python stacks. ``--mix op=weight,...`` replaces the
op mix (to focus on one subsystem).

At the end: waits (at most ``--expiry-wait`` s) for the expiry sweep to delete short-ttl
drawers; checks each palace's ``palace_info`` (drawers == vectors == index, consistent, no
pending embeddings, drawer count == what the clients believe exists); every drawer believed
alive is returned by ``get`` with its text, wing, room and ``superseded_by``; every forgotten
or expired one raises MemoryNotFound; no scratch palace is left; the daemon log has no ERROR;
SIGTERM makes the daemon exit 0 within 30 s and remove its socket.

PASS/FAIL: FAIL on any unexpected error, invariant violation, inconsistent palace, failed
end check, stall or hung worker, daemon death, ERROR line in the daemon log, fd growth > 20
(end of workload vs the baseline, both with only the control client connected), more than
one daemon connection left at the end, a leftover scratch palace, a bad shutdown, SQLite's
heap beyond its bound, or an RSS leak. SQLite's heap (``sqlite_mb`` of ``daemon.status``,
read with every sample) is its page caches filling up to 16 MB per open connection (PRAGMA
cache_size, five connections per palace: the writer's fills as the trash of forgotten drawers
grows the file), schemas and statements: bounded (SQLITE_MB_PER_CONNECTION per open
``palace.db``), it is checked against that bound and left out of the leak rule. RSS leak
rule: samples in the first ``max(60 s, 25 % of the run)`` are warm-up (model arenas, palaces
reaching their cap, the 2048-entry query-vector LRU and the 20,000 token counts filling).
Over the remaining samples (at least 6 needed, else the rule is reported as not evaluated),
FAIL only when all three hold for RSS without SQLite's heap: the least-squares slope over
cumulative ops exceeds ``--rss-slope`` MB per 10k ops (0.5), the medians of the first, middle
and last thirds rise strictly, and the last third's median is more than ``--rss-rise`` MB (8)
above the first's. A plateau or a one-off step passes; a steady climb fails. The slope of
RSS itself is reported beside it.

    python bench/soak.py [--minutes 5] [--clients 4] [--palaces 3] [--json out.json]
    python bench/soak.py --minutes 3 --json /tmp/soak.json

Exit status 0 on PASS, 1 on FAIL. The scratch home is deleted on PASS and kept on FAIL (its
path is printed; ``state/palaced.log`` there is the daemon log).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from _daemon import (
    DEFAULT_MODEL,
    DEFAULT_TIKTOKEN,
    launch,
    private_env,
    scan_log,
    stop_daemon,
    wait_ready,
)

from palace_client import Client
from palaced.palace.access import read_ids
from palaced.wire.errors import MemoryNotFound, PalaceError

HUGE_ID = 10**12  # no drawer or fact of a soak ever gets an id this large
ROOMS = ("deploy", "billing", "auth", "search", "mobile", "infra")
EPHEMERAL_ROOM = "ephemeral"  # short-ttl drawers only, so dedup never lands on one
TAGS = ("ops", "db", "team", "security", "perf")
RESERVOIR = 20_000  # latency samples kept per op (reservoir sampling beyond that)
MAX_EXAMPLES = 20  # messages kept per worker for unexpected errors and violations
FD_GROWTH_LIMIT = 20
# SQLite's heap per open connection at most: its page cache (PRAGMA cache_size=-16000, KiB,
# palaced/store/conn/db.py) plus ~1 MB of schema and prepared statements.
SQLITE_MB_PER_CONNECTION = 16000 / 1024 + 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")

SUBJECTS = ("the deploy pipeline", "our billing service", "the staging database", "Alice",
            "the auth middleware", "the search index", "Bob", "the mobile app", "the cache",
            "the nightly backup", "the API gateway", "Carol", "the data warehouse")
VERBS = ("depends on", "was migrated to", "fails when", "is owned by", "talks to",
         "was rewritten in", "is monitored by", "must never touch", "replaced", "scales with")
OBJECTS = ("Postgres", "a Redis cluster", "Kubernetes", "the EU region", "Rust", "Go",
           "a retrying webhook queue", "S3 lifecycle rules", "feature flags", "gRPC",
           "the on-call rotation", "Terraform", "a short TTL", "OAuth device flow")
QUALIFIERS = ("since March", "after the outage", "on Fridays", "for compliance",
              "because of latency", "per the design review", "until Q3", "in production")
QUERY_POOL = tuple(
    f"what {v} {o} {q}" for v in VERBS[:5] for o in OBJECTS[:8] for q in QUALIFIERS[:5]
)  # 200 repeated queries (hit the daemon's query-vector cache); the rest are unique

# op name -> weight (per op, after a palace is picked at random)
WEIGHTS: dict[str, float] = {
    "remember": 14, "remember_ttl": 4, "remember_supersede": 3, "remember_dup": 3,
    "remember_many": 4, "recall": 20, "recall_budget": 10, "recall_wing": 4, "get": 6,
    "forget": 8, "wake_up": 5, "kg_assert": 5, "kg_query": 5, "drawers": 1, "status": 0.5,
    "reconnect": 0.5, "scratch": 0.5, "bad": 5,
}
GROWING = frozenset({"remember", "remember_ttl", "remember_supersede", "remember_dup",
                     "remember_many"})


# -- measurements ---------------------------------------------------------------------------
@dataclass
class Latency:
    """Latency of one op: exact count/failed/max, percentiles from a reservoir sample."""

    count: int = 0
    failed: int = 0
    max_ms: float = 0.0
    samples: list[float] = field(default_factory=list)

    def add(self, ms: float, ok: bool, rnd: random.Random) -> None:
        self.count += 1
        self.failed += 0 if ok else 1
        self.max_ms = max(self.max_ms, ms)
        if len(self.samples) < RESERVOIR:
            self.samples.append(ms)
        else:
            j = rnd.randrange(self.count)
            if j < RESERVOIR:
                self.samples[j] = ms

    def merge(self, other: Latency) -> None:
        self.count += other.count
        self.failed += other.failed
        self.max_ms = max(self.max_ms, other.max_ms)
        self.samples.extend(other.samples)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class Sample:
    """One /proc reading of the daemon."""

    t_s: float
    ops: int
    rss_mb: float
    fds: int
    threads: int
    cpu_s: float  # the daemon's CPU time so far (user + system)
    sqlite_mb: float | None = None  # SQLite's heap (daemon.status): page caches filling up

    @property
    def own_mb(self) -> float:
        """RSS without SQLite's heap (all of RSS when that was not read)."""
        return self.rss_mb - (self.sqlite_mb or 0.0)


def cpu_seconds(stat_path: str) -> float:
    """utime + stime of /proc/PID/stat or /proc/PID/task/TID/stat, in seconds."""
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_sample(pid: int, t_s: float, ops: int, sqlite_mb: float | None = None) -> Sample:
    rss_kb = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return Sample(round(t_s, 1), ops, round(rss_kb / 1024, 1), fds, threads,
                  round(cpu_seconds(f"/proc/{pid}/stat"), 2), sqlite_mb)


class SqliteMemory:
    """Reads SQLite's heap from ``daemon.status`` on the control client; gives up (None from
    then on) when the daemon does not answer in time, so the watchdog still runs."""

    def __init__(self, ctl: Client) -> None:
        self.ctl: Client | None = ctl

    def __call__(self) -> float | None:
        ctl = self.ctl
        if ctl is None:
            return None
        try:
            return float(guarded(lambda: ctl.status()["sqlite_mb"], 20.0, "status"))
        except Unresponsive:
            self.ctl = None
            return None


def busy_threads(pid: int, window_s: float = 2.0) -> list[str]:
    """Daemon threads using more than half a core over ``window_s`` (a spinning thread)."""
    def snapshot() -> dict[str, float]:
        out: dict[str, float] = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                out[tid] = cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
        return out

    before = snapshot()
    time.sleep(window_s)
    after = snapshot()
    return [f"thread {tid}: {100 * (after[tid] - cpu) / window_s:.0f}% CPU"
            for tid, cpu in before.items()
            if tid in after and (after[tid] - cpu) / window_s > 0.5]


def py_spy_dump(pid: int) -> list[str]:
    """The daemon's Python stacks, when py-spy is installed (diagnosis of a stall)."""
    exe = shutil.which("py-spy")
    if exe is None:
        return ["(py-spy not installed: no stack dump)"]
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return ["(py-spy dump timed out)"]
    keep = [ln for ln in done.stdout.splitlines()
            if ln.startswith("Thread") or "palaced/" in ln or "usearch" in ln
            or "apsw" in ln or "onnxruntime" in ln]
    return keep[:60] or done.stderr.splitlines()[:5]


def fd_kinds(pid: int) -> dict[str, int]:
    """The daemon's open fds by kind (palace.db, palace.db-wal, socket, ...), for diagnosis."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kinds[target.split(":")[0] if ":[" in target else Path(target).name] += 1
    return dict(sorted(kinds.items()))


def warm_pools(sock: Path, palaces: list[str], seconds: float) -> int:
    """Concurrent reads on each palace so the daemon's SQLite reader pools (up to 4
    connections per palace) and worker threads exist before the baseline sample; returns
    how many requests ran."""
    done = Counter[str]()
    lock = threading.Lock()

    def hammer(p: str, until: float, i: int) -> None:
        with Client(sock, autostart=False, client_name="soak-warm") as c:
            n = 0
            while time.monotonic() < until:
                c.recall_ex(p, QUERY_POOL[(i * 7 + n) % len(QUERY_POOL)], deep=True)
                c.wake_up(p)
                n += 2
        with lock:
            done["requests"] += n

    for p in palaces:
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=hammer, args=(p, until, i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return done["requests"]


def slope_per_10k(points: list[Sample], own: bool = False) -> float | None:
    """Least-squares slope of RSS (MB; ``own``: without SQLite's heap) over cumulative ops,
    per 10k ops."""
    if len(points) < 2:
        return None
    xs = [float(s.ops) for s in points]
    ys = [s.own_mb if own else s.rss_mb for s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 10_000


def rss_verdict(samples: list[Sample], warmup_s: float, max_slope: float, max_rise: float
                ) -> dict[str, Any]:
    """Apply the documented RSS rule to the post-warm-up samples: to RSS without SQLite's
    heap when every sample has it (``judged`` says which), else to RSS."""
    post = [s for s in samples if s.t_s >= warmup_s]
    own = bool(post) and all(s.sqlite_mb is not None for s in post)
    out: dict[str, Any] = {"warmup_s": warmup_s, "post_warmup_samples": len(post),
                           "judged": "rss - sqlite" if own else "rss",
                           "slope_mb_per_10k_ops": None, "thirds_mb": None, "leak": False,
                           "rss_slope_mb_per_10k_ops": _round(slope_per_10k(post), 3),
                           "evaluated": len(post) >= 6}
    if len(post) < 6:
        return out
    slope = slope_per_10k(post, own)
    n = len(post) // 3
    thirds = [statistics.median(s.own_mb if own else s.rss_mb for s in part)
              for part in (post[:n], post[n:len(post) - n], post[len(post) - n:])]
    out["slope_mb_per_10k_ops"] = None if slope is None else round(slope, 3)
    out["thirds_mb"] = [round(t, 1) for t in thirds]
    out["leak"] = bool(slope is not None and slope > max_slope
                       and thirds[0] < thirds[1] < thirds[2]
                       and thirds[2] - thirds[0] > max_rise)
    return out


# -- what the clients believe ---------------------------------------------------------------
@dataclass
class Event:
    """The latest thing a client saw happen to one drawer id of one palace."""

    kind: str  # "created" or "forgotten"
    at: float  # time.monotonic() when the answer arrived
    text: str
    superseded_at: float | None = None
    expires_sure_ms: int | None = None  # wall ms after which the drawer is surely expired
    # A recall sent before expires_sure_ms returned it: the daemon may have renewed its
    # lifetime (``recall_extends_ttl``, on by default), so that bound no longer holds.
    renewable: bool = False


class Shared:
    """State every worker reads: op budget, stop flag and per-id events."""

    def __init__(self, palaces: Iterable[str], deadline: float, max_ops: int) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, dict[int, Event]] = {p: {} for p in palaces}
        self.ops = 0
        self.deadline = deadline
        self.max_ops = max_ops
        self.stop = threading.Event()

    def next_op(self) -> bool:
        with self.lock:
            if (self.stop.is_set() or self.ops >= self.max_ops
                    or time.monotonic() >= self.deadline):
                self.stop.set()
                return False
            self.ops += 1
            return True

    def record(self, palace: str, did: int, event: Event) -> Event | None:
        """Store ``event`` as the latest of ``did``; returns the previous one."""
        with self.lock:
            prev = self.events[palace].get(did)
            self.events[palace][did] = event
            return prev

    def latest(self, palace: str, did: int) -> Event | None:
        with self.lock:
            return self.events[palace].get(did)

    def mark_recalled(self, palace: str, ids: Iterable[int], sent_wall_ms: int) -> None:
        """A recall sent at ``sent_wall_ms`` returned ``ids`` as read (``access.read_ids``):
        the daemon renews the lifetime of each of them not expired yet when it flushes the
        recall's touches, a moment the client cannot know."""
        with self.lock:
            for did in ids:
                ev = self.events[palace].get(did)
                if (ev is not None and ev.expires_sure_ms is not None
                        and sent_wall_ms < ev.expires_sure_ms):
                    ev.renewable = True

    def mark_superseded(self, palace: str, did: int, at: float) -> None:
        with self.lock:
            ev = self.events[palace].get(did)
            if ev is not None and ev.kind == "created":
                ev.superseded_at = at


@dataclass
class Own:
    """One worker's drawers in one palace (its own wing, so no other worker touches them)."""

    alive: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (room, text)
    superseded: dict[int, int] = field(default_factory=dict)  # old id -> new id (0: new gone)
    forgotten: dict[int, str] = field(default_factory=dict)  # id -> text
    expiring: dict[int, tuple[int, str]] = field(default_factory=dict)  # id -> (sure ms, text)
    versions: dict[str, int] = field(default_factory=dict)  # kg subject -> latest version


# -- the workload ---------------------------------------------------------------------------
class Worker(threading.Thread):
    """One client thread: its own Client, wing, random stream and counters."""

    def __init__(self, idx: int, sock: Path, palaces: list[str], shared: Shared, cap: int,
                 seed: int, weights: dict[str, float]) -> None:
        super().__init__(name=f"soak-{idx}", daemon=True)
        self.idx = idx
        self.client = Client(sock, autostart=False, client_name=f"soak-{idx}")
        self.palaces = palaces
        self.shared = shared
        self.cap = cap
        self.rnd = random.Random(seed)
        self._res_rnd = random.Random(seed + 1)
        self.wing = f"client-{idx}"
        self.own = {p: Own() for p in palaces}
        self.lat: dict[str, Latency] = {}
        self.expected: Counter[str] = Counter()
        self.unexpected: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.examples: list[str] = []
        self._noted: Counter[str] = Counter()
        self.serial = 0
        self.scratch_serial = 0
        self.scratch_left: list[str] = []
        self.crashed: str | None = None
        self._names = list(weights)
        self._weights = [weights[n] for n in self._names]
        self.current: tuple[str, str, float] | None = None  # (op, palace, since) in flight
        # (palace, id, text, where, ms late): returned after the expiry known here; a
        # violation unless a recall may have renewed it (``settle_expired``, at the end).
        self.late_reads: list[tuple[str, int, str, str, int]] = []
        self.recall_times: list[tuple[float, float]] = []  # (monotonic, ms): latency drift
        self._palace = ""
        self._bad: list[tuple[str, str, Callable[[str], object]]] = self._bad_ops()

    # -- plumbing -----------------------------------------------------------------------------
    def note(self, msg: str, kind: str = "") -> None:
        """Keep an example message: at most 3 per kind and MAX_EXAMPLES per worker."""
        self._noted[kind] += 1
        if len(self.examples) < MAX_EXAMPLES and self._noted[kind] <= 3:
            self.examples.append(f"[{self.name}] {msg}")

    def violation(self, kind: str, msg: str) -> None:
        self.violations[kind] += 1
        self.note(f"violation {kind}: {msg}", kind)

    def timed(self, name: str, fn: Callable[[], object], expect: str | None = None) -> None:
        """Run one request (or a short sequence), time it and classify its outcome."""
        t0 = time.perf_counter()
        ok = True
        self.current = (name, self._palace, time.monotonic())
        try:
            fn()
            if expect is not None:
                ok = False
                self.unexpected[f"NO_{expect}"] += 1
                self.note(f"{name}: expected {expect}, got success", f"NO_{expect}")
        except PalaceError as exc:
            if expect is not None and exc.name == expect:
                self.expected[exc.name] += 1
            else:
                ok = False
                self.unexpected[exc.name] += 1
                self.note(f"{name}: {exc.name}: {exc.message[:200]}", exc.name)
        except Exception as exc:
            ok = False
            self.unexpected[f"client:{type(exc).__name__}"] += 1
            self.note(f"{name}: {exc!r}"[:300], type(exc).__name__)
        self.current = None
        ms = (time.perf_counter() - t0) * 1000
        self.lat.setdefault(name, Latency()).add(ms, ok, self._res_rnd)
        if name.startswith("recall") and len(self.recall_times) < 500_000:
            self.recall_times.append((time.monotonic(), ms))

    def text(self) -> str:
        self.serial += 1
        r = self.rnd
        # The unique numbers keep the lexical guard from merging distinct notes by dedup.
        return (f"{r.choice(SUBJECTS)} {r.choice(VERBS)} {r.choice(OBJECTS)} "
                f"{r.choice(QUALIFIERS)} (client {self.idx} note {self.serial})")

    def importance(self) -> float:
        return self.rnd.choice((0.2, 0.5, 0.5, 0.8, 1.0))

    def importance_any(self) -> float | str:
        """An importance as a number or a preset name (remember_many items take both)."""
        return self.rnd.choice((0.2, 0.5, 0.8, 1.0, "low", "medium", "high", "critical"))

    def query(self) -> str:
        if self.rnd.random() < 0.5:
            return self.rnd.choice(QUERY_POOL)
        self.serial += 1
        r = self.rnd
        return f"what {r.choice(VERBS)} {r.choice(OBJECTS)} {r.choice(QUALIFIERS)} #{self.serial}"

    def stored(self, palace: str, did: int, room: str, text: str) -> None:
        """Book a drawer the daemon reported as created."""
        own = self.own[palace]
        prev = self.shared.record(palace, did, Event("created", time.monotonic(), text))
        if prev is not None and prev.kind == "forgotten":
            self.violation("id_reused", f"{palace}: new drawer got id {did}, forgotten "
                                        f"{time.monotonic() - prev.at:.1f}s earlier")
        elif prev is not None and prev.expires_sure_ms is not None:
            self.violation("id_reused", f"{palace}: new drawer got id {did} of an expired "
                                        "(swept) drawer")
        elif prev is not None:
            self.violation("id_duplicate", f"{palace}: created id {did} is already alive")
        own.alive[did] = (room, text)

    def after_remember(self, palace: str, room: str, text: str, res: dict[str, Any]) -> int:
        did = int(res["id"])
        if res.get("created"):
            self.stored(palace, did, room, text)
        elif did not in self.own[palace].alive:
            self.violation("remember_unknown_id",
                           f"{palace}: remember returned id {did} (created=False) that this "
                           f"client does not own: {res}")
        if res.get("deduplicated"):
            self.counts["dedup_hits"] += 1
        return did

    def check_item(self, palace: str, did: int, text: str, sent: float, wall_ms: int,
                   where: str, include_superseded: bool = False) -> None:
        """A drawer a read returned must not be one forgotten/superseded/expired before."""
        ev = self.shared.latest(palace, did)
        if ev is None or ev.text != text:
            return  # unknown, or another drawer now holds the id (counted as id_reused)
        if ev.kind == "forgotten" and ev.at < sent:
            self.violation(f"{where}_forgotten", f"{palace}: drawer {did} returned "
                                                 f"{sent - ev.at:.2f}s after its forget")
        if (not include_superseded and ev.superseded_at is not None
                and ev.superseded_at < sent):
            self.violation(f"{where}_superseded", f"{palace}: drawer {did} returned "
                                                  f"{sent - ev.superseded_at:.2f}s after "
                                                  "it was superseded")
        if ev.expires_sure_ms is not None and ev.expires_sure_ms < wall_ms:
            # Judged at the end: the recall that renewed it may still be on its way back.
            self.late_reads.append((palace, did, text, where, wall_ms - ev.expires_sure_ms))

    def settle_expired(self) -> None:
        """Count the late reads of drawers no recall renewed as violations (every recall
        that could have renewed one was sent before that read, so has been recorded)."""
        for palace, did, text, where, late_ms in self.late_reads:
            ev = self.shared.latest(palace, did)
            if ev is not None and ev.text == text and ev.renewable:
                self.counts["ttl_renewed_reads"] += 1
            else:
                self.violation(f"{where}_expired", f"{palace}: drawer {did} returned "
                                                   f"{late_ms / 1000:.2f}s after it expired")
        self.late_reads.clear()

    def check_sections(self, palace: str, res: dict[str, Any], budget: int, sent: float,
                       wall_ms: int, where: str, include_superseded: bool = False) -> None:
        if int(res["tokens_used"]) > budget:
            self.violation("budget_exceeded", f"{where}: {res['tokens_used']} > {budget}")
        for section in res["sections"]:
            for item in section["items"]:
                if isinstance(item["id"], int):
                    self.check_item(palace, int(item["id"]), str(item["text"]), sent, wall_ms,
                                    f"{where}_L{section['level']}", include_superseded)

    # -- ops ----------------------------------------------------------------------------------
    def op_remember(self, p: str) -> None:
        room, text, imp = self.rnd.choice(ROOMS), self.text(), self.importance()
        tags = self.rnd.sample(TAGS, k=self.rnd.randint(0, 2))

        def run() -> None:
            res = self.client.remember_ex(p, text, wing=self.wing, room=room, tags=tags,
                                          importance=imp)
            self.after_remember(p, room, text, res)

        self.timed("remember", run)

    def op_remember_ttl(self, p: str) -> None:
        text, own = self.text(), self.own[p]
        if self.rnd.random() < 0.5:  # long ttl: alive for the whole run
            room = self.rnd.choice(ROOMS)
            ttl: str | int = self.rnd.choice(("2h", "1d", 86_400))

            def long_ttl() -> None:
                res = self.client.remember_ex(p, text, wing=self.wing, room=room, ttl=ttl,
                                              importance=self.importance())
                self.after_remember(p, room, text, res)

            self.timed("remember_ttl", long_ttl)
            return
        secs = self.rnd.randint(2, 20)

        def short_ttl() -> None:
            res = self.client.remember_ex(p, text, wing=self.wing, room=EPHEMERAL_ROOM,
                                          ttl=f"{secs}s", dedup=False,
                                          importance=self.rnd.choice((0.5, 1.0)))
            sure = int(time.time() * 1000) + secs * 1000 + 1
            did = int(res["id"])
            if not res.get("created"):
                self.violation("ttl_not_created", f"{p}: {res}")
                return
            prev = self.shared.record(p, did, Event("created", time.monotonic(), text,
                                                    expires_sure_ms=sure))
            if prev is not None and (prev.kind == "forgotten" or prev.expires_sure_ms):
                self.violation("id_reused", f"{p}: ttl drawer got the id {did} of a deleted one")
            own.expiring[did] = (sure, text)

        self.timed("remember_ttl_short", short_ttl)

    def op_remember_supersede(self, p: str) -> None:
        own = self.own[p]
        candidates = [i for i in own.alive if i not in own.superseded]
        if not candidates:
            self.op_remember(p)
            return
        old = self.rnd.choice(candidates)
        room = own.alive[old][0]
        text = f"Correction: {self.text()}"

        def run() -> None:
            res = self.client.remember_ex(p, text, wing=self.wing, room=room, supersedes=old,
                                          importance=self.importance())
            if not res.get("created"):
                self.violation("supersede_not_created", f"{p}: {res}")
                return
            new = self.after_remember(p, room, text, res)
            own.superseded[old] = new
            self.shared.mark_superseded(p, old, time.monotonic())

        self.timed("remember_supersede", run)

    def op_remember_dup(self, p: str) -> None:
        own = self.own[p]
        if not own.alive:
            self.op_remember(p)
            return
        did = self.rnd.choice(list(own.alive))
        room, text = own.alive[did]
        if self.rnd.random() < 0.5:
            def same() -> None:
                res = self.client.remember_ex(p, text, wing=self.wing, room=room)
                if int(res["id"]) != did or res.get("created"):
                    self.violation("not_idempotent", f"{p}: repeat of drawer {did} gave {res}")

            self.timed("remember_same", same)
            return
        variant = f"Reminder: {text}"

        def near() -> None:
            res = self.client.remember_ex(p, variant, wing=self.wing, room=room)
            self.after_remember(p, room, variant, res)

        self.timed("remember_dedup", near)

    def op_remember_many(self, p: str) -> None:
        own = self.own[p]
        items: list[dict[str, Any]] = [
            {"text": self.text(), "wing": self.wing, "room": self.rnd.choice(ROOMS),
             "importance": self.importance_any(), "tags": self.rnd.sample(TAGS, k=1)}
            for _ in range(self.rnd.randint(5, 25))]
        repeat: tuple[int, int] | None = None
        if own.alive and self.rnd.random() < 0.3:
            did = self.rnd.choice(list(own.alive))
            room, text = own.alive[did]
            pos = self.rnd.randrange(len(items) + 1)
            items.insert(pos, {"text": text, "wing": self.wing, "room": room})
            repeat = (pos, did)

        def run() -> None:
            ids = self.client.remember_many(p, items)
            if len(ids) != len(items):
                self.violation("batch_ids", f"{p}: {len(ids)} ids for {len(items)} items")
                return
            for i, (item, did) in enumerate(zip(items, ids, strict=True)):
                if repeat is not None and i == repeat[0]:
                    if did != repeat[1]:
                        self.violation("not_idempotent", f"{p}: batch repeat of drawer "
                                                         f"{repeat[1]} got id {did}")
                elif did in own.alive:
                    self.violation("batch_id_collision", f"{p}: new text got live id {did}")
                else:
                    self.stored(p, did, str(item["room"]), str(item["text"]))

        self.timed("remember_many", run)

    def _recall(self, p: str, name: str, **kw: Any) -> None:
        q = self.query()
        top_k = self.rnd.choice((5, 10, 20))
        budget = int(kw.get("budget", 1500))
        wing, room = kw.get("wing"), kw.get("room")
        include_superseded = bool(kw.get("include_superseded", False))

        def run() -> None:
            sent, wall = time.monotonic(), int(time.time() * 1000)
            res = self.client.recall_ex(p, q, top_k=top_k, **kw)
            results = res["results"]
            self.shared.mark_recalled(p, read_ids(results), wall)
            if len(results) > top_k:
                self.violation("top_k", f"{p}: {len(results)} results for top_k {top_k}")
            for r in results:
                did = int(r["id"])
                if wing is not None and r["wing"] != wing:
                    self.violation("wing_filter", f"{p}: wing {r['wing']} for filter {wing}")
                if room is not None and r["room"] != room:
                    self.violation("room_filter", f"{p}: room {r['room']} for filter {room}")
                if r.get("expires_ms") is not None and int(r["expires_ms"]) <= wall:
                    self.violation("recall_expired_row", f"{p}: drawer {did} expired at send")
                self.check_item(p, did, str(r["text"]), sent, wall, "recall",
                                include_superseded)
            self.check_sections(p, res, budget, sent, wall, "recall", include_superseded)

        self.timed(name, run)

    def op_recall(self, p: str) -> None:
        self._recall(p, "recall")

    def op_recall_budget(self, p: str) -> None:
        levels = sorted(self.rnd.sample([0, 1, 2, 3], k=self.rnd.randint(1, 4)))
        self._recall(p, "recall_budget", budget=self.rnd.choice((0, 50, 200, 800, 2000)),
                     levels=levels, deep=self.rnd.random() < 0.3,
                     include_superseded=self.rnd.random() < 0.1)

    def op_recall_wing(self, p: str) -> None:
        kw: dict[str, Any] = {"wing": self.wing}
        if self.rnd.random() < 0.5:
            kw["room"] = self.rnd.choice(ROOMS)
        self._recall(p, "recall_wing", **kw)

    def op_get(self, p: str) -> None:
        own = self.own[p]
        if not own.alive:
            self.op_remember(p)
            return
        did = self.rnd.choice(list(own.alive))

        def run() -> None:
            self.check_drawer(p, did, self.client.get(p, did), "get")

        self.timed("get", run)

    def check_drawer(self, p: str, did: int, d: dict[str, Any], where: str) -> None:
        room, text = self.own[p].alive[did]
        if (d.get("text"), d.get("wing"), d.get("room")) != (text, self.wing, room):
            self.violation(f"{where}_mismatch", f"{p}: drawer {did} is {d.get('wing')}/"
                                                f"{d.get('room')} {str(d.get('text'))[:60]!r}, "
                                                f"expected {self.wing}/{room} {text[:60]!r}")
        new = self.own[p].superseded.get(did)
        if new and d.get("superseded_by") != new:
            self.violation(f"{where}_superseded_by", f"{p}: drawer {did} superseded_by "
                                                     f"{d.get('superseded_by')}, expected {new}")

    def op_forget(self, p: str) -> None:
        own = self.own[p]
        if not own.alive:
            self.op_remember(p)
            return
        ids = list(own.alive)
        # "Forget what I just stored" is common; it also forgets the palace's newest drawer.
        did = ids[-1] if self.rnd.random() < 0.3 else self.rnd.choice(ids)

        def run() -> None:
            self.client.forget(p, did)
            _, text = own.alive.pop(did)
            own.forgotten[did] = text
            own.superseded.pop(did, None)
            for old, new in own.superseded.items():
                if new == did:
                    own.superseded[old] = 0  # its superseded_by now names a deleted drawer
            self.shared.record(p, did, Event("forgotten", time.monotonic(), text))

        self.timed("forget", run)

    def op_wake_up(self, p: str) -> None:
        budget = self.rnd.choice((100, 400, 800, 2000))

        def run() -> None:
            sent, wall = time.monotonic(), int(time.time() * 1000)
            res = self.client.wake_up(p, budget=budget)
            self.check_sections(p, res, budget, sent, wall, "wake_up")

        self.timed("wake_up", run)

    def op_kg_assert(self, p: str) -> None:
        own = self.own[p]
        subject = f"svc-{self.idx}-{self.rnd.randrange(8)}"
        if self.rnd.random() < 0.3:
            target = f"dep-{self.rnd.randrange(20)}"

            def link() -> None:
                fact = self.client.kg_assert(p, subject, "depends_on", target)
                if not fact.get("active"):
                    self.violation("kg_inactive", f"{p}: fresh depends_on fact {fact}")

            self.timed("kg_assert", link)
            return
        version = own.versions.get(subject, 0) + 1
        source = self.rnd.choice(list(own.alive)) if own.alive and self.rnd.random() < 0.3 \
            else None

        def assert_version() -> None:
            fact = self.client.kg_assert(p, subject, "version", str(version), literal=True,
                                         source_drawer=source)
            own.versions[subject] = version
            if fact.get("object") != str(version) or not fact.get("active"):
                self.violation("kg_assert_result", f"{p}: {fact}")

        self.timed("kg_assert", assert_version)

    def op_kg_query(self, p: str) -> None:
        own = self.own[p]
        if not own.versions or self.rnd.random() < 0.1:
            subject = f"nobody-{self.idx}-{self.rnd.randrange(10**6)}"

            def unknown() -> None:
                if self.client.kg_query(p, subject)["facts"]:
                    self.violation("kg_unknown_subject", f"{p}: facts for {subject}")

            self.timed("kg_query", unknown)
            return
        subject = self.rnd.choice(list(own.versions))
        want = str(own.versions[subject])

        def run() -> None:
            facts = [f for f in self.client.kg_query(p, subject)["facts"]
                     if f["predicate"] == "version"]
            if len(facts) != 1 or facts[0]["object"] != want:
                self.violation("kg_version", f"{p}: {subject} active versions "
                                             f"{[f['object'] for f in facts]}, expected {want}")

        self.timed("kg_query", run)

    def op_drawers(self, p: str) -> None:
        def run() -> None:
            page = self.client.drawers(p, wing=self.wing, limit=20)
            if any(d["wing"] != self.wing for d in page["drawers"]):
                self.violation("list_wing_filter", f"{p}: drawers of another wing listed")

        self.timed("drawers", run)

    def op_status(self, p: str) -> None:
        self.timed("status", self.client.status)

    def op_reconnect(self, p: str) -> None:
        self.client.close()  # the next request opens a new connection
        self.timed("reconnect", lambda: self.client.server_info)

    def op_scratch(self, p: str) -> None:
        self.scratch_serial += 1
        name = f"scratch-{self.idx}-{self.scratch_serial}"
        self.scratch_left.append(name)

        def run() -> None:
            c = self.client
            c.create_palace(name)
            items = [{"text": self.text(), "room": self.rnd.choice(ROOMS)} for _ in range(10)]
            c.remember_many(name, items)
            c.recall(name, self.query(), top_k=5)
            info = c.palace_info(name)
            if not (info["drawers"] == info["vectors"] == info["index"] == 10
                    and info["consistent"]):
                self.violation("scratch_inconsistent", f"{name}: {_counts(info)}")
            c.delete_palace(name)
            self.scratch_left.remove(name)

        self.timed("scratch_cycle", run)
        self.timed("scratch_gone", lambda: self.client.palace_info(name),
                   expect="PALACE_NOT_FOUND")

    def _bad_ops(self) -> list[tuple[str, str, Callable[[str], object]]]:
        c = self.client

        def huge() -> int:
            return HUGE_ID + self.rnd.randrange(10**6)

        return [
            ("get", "MEMORY_NOT_FOUND", lambda p: c.get(p, huge())),
            ("forget", "MEMORY_NOT_FOUND", lambda p: c.forget(p, huge())),
            ("supersede", "MEMORY_NOT_FOUND",  # must store nothing (checked by the counts)
             lambda p: c.remember(p, self.text(), wing=self.wing, supersedes=huge())),
            ("ttl", "INVALID_ARGS", lambda p: c.remember(p, self.text(), ttl="soon")),
            ("empty_text", "INVALID_CONTENT", lambda p: c.remember(p, "   ")),
            ("batch_bad_item", "INVALID_CONTENT",  # the valid item must not be stored
             lambda p: c.remember_many(p, [{"text": self.text(), "wing": self.wing},
                                           {"text": ""}])),
            ("levels", "INVALID_ARGS", lambda p: c.recall_ex(p, "x", levels=[7])),
            ("missing_palace", "PALACE_NOT_FOUND", lambda p: c.recall("no-such-palace", "x")),
            ("palace_name", "INVALID_PALACE_NAME", lambda p: c.palace_info("Bad_Name")),
            ("palace_exists", "PALACE_EXISTS", lambda p: c.create_palace(p)),
            ("fact", "FACT_NOT_FOUND", lambda p: c.kg_invalidate(p, huge())),
            ("self_link", "INVALID_CONTENT", lambda p: c.kg_assert(p, "same", "part_of", "same")),
            ("unknown_op", "UNKNOWN_OP", lambda p: c.call("memory.nope", p)),
        ]

    def op_bad(self, p: str) -> None:
        name, expect, fn = self.rnd.choice(self._bad)
        self.timed(f"bad:{name}", lambda: fn(p), expect=expect)

    # -- driver -------------------------------------------------------------------------------
    def prefill(self, n: int) -> None:
        """Give each palace ``n`` drawers of this client before the clock starts."""
        for p in self.palaces:
            items = [{"text": self.text(), "wing": self.wing, "room": self.rnd.choice(ROOMS),
                      "importance": self.importance()} for _ in range(n)]
            for item, did in zip(items, self.client.remember_many(p, items), strict=True):
                self.stored(p, did, str(item["room"]), str(item["text"]))

    def run(self) -> None:
        ops: dict[str, Callable[[str], None]] = {n: getattr(self, f"op_{n}") for n in WEIGHTS}
        ops["forget"] = self.op_forget
        try:
            while self.shared.next_op():
                p = self._palace = self.rnd.choice(self.palaces)
                name = self.rnd.choices(self._names, self._weights)[0]
                if name in GROWING and len(self.own[p].alive) >= self.cap:
                    name = "forget"
                ops[name](p)
        except BaseException as exc:  # a bug in this script, not in the daemon
            self.crashed = repr(exc)
        finally:
            self.client.close()


def _counts(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("drawers", "vectors", "index", "pending_embeddings", "consistent", "mismatch")
    return {k: info.get(k) for k in keys}


# -- the run --------------------------------------------------------------------------------
def wait_expiry(ctl: Client, workers: list[Worker], limit_s: float) -> dict[str, Any]:
    """Poll until every short-ttl drawer is expired and swept, at most ``limit_s``."""
    pending = {(p, did): sure for w in workers for p, own in w.own.items()
               for did, (sure, _) in own.expiring.items()}
    total = len(pending)
    t0 = time.monotonic()
    still: list[str] = []
    while pending:
        now_ms = int(time.time() * 1000)
        for (p, did), sure in list(pending.items()):
            if sure > now_ms:
                continue
            try:
                ctl.get(p, did)
            except MemoryNotFound:
                del pending[(p, did)]
        if not pending or time.monotonic() - t0 > limit_s:
            break
        time.sleep(2.0)
    still = [f"{p}#{did}" for p, did in pending]
    return {"short_ttl_drawers": total, "swept": total - len(pending),
            "wait_s": round(time.monotonic() - t0, 1), "not_swept": still[:20],
            "not_swept_count": len(still)}


def verify(ctl: Client, palaces: list[str], workers: list[Worker], shared: Shared,
           expiry_checked: bool) -> tuple[dict[str, Any], list[str]]:
    """End checks of every palace; returns (details, failure reasons)."""
    fails: list[str] = []
    out: dict[str, Any] = {}
    total_reused = 0
    for p in palaces:
        info = ctl.palace_info(p)
        alive = sum(len(w.own[p].alive) for w in workers)
        expiring = sum(len(w.own[p].expiring) for w in workers)
        row: dict[str, Any] = {**_counts(info), "believed_alive": alive}
        if not (info["drawers"] == info["vectors"] == info["index"]):
            fails.append(f"{p}: drawers {info['drawers']} / vectors {info['vectors']} / "
                         f"index {info['index']} differ")
        if info["consistent"] is not True or info["pending_embeddings"] or info["mismatch"]:
            fails.append(f"{p}: not consistent: {_counts(info)}")
        if expiry_checked and info["drawers"] != alive:
            fails.append(f"{p}: {info['drawers']} drawers, clients believe {alive} exist")
        elif not expiry_checked and not alive <= info["drawers"] <= alive + expiring:
            fails.append(f"{p}: {info['drawers']} drawers, clients believe {alive} "
                         f"(+ up to {expiring} expired) exist")
        bad_alive = bad_forgotten = reused = checked = 0
        for w in workers:
            own = w.own[p]
            for did in list(own.alive):
                checked += 1
                before = sum(w.violations.values())
                try:
                    w.check_drawer(p, did, ctl.get(p, did), "final_get")
                except MemoryNotFound:
                    w.violation("final_alive_missing", f"{p}: drawer {did} is gone")
                bad_alive += sum(w.violations.values()) - before
            for did, text in own.forgotten.items():
                ev = shared.latest(p, did)
                if ev is not None and ev.kind == "created" and ev.text != text:
                    reused += 1  # another drawer holds the id now (counted as id_reused)
                    continue
                try:
                    ctl.get(p, did)
                    bad_forgotten += 1
                    w.violation("final_forgotten_present", f"{p}: forgotten {did} is back")
                except MemoryNotFound:
                    pass
            if expiry_checked:
                for did, (_, text) in own.expiring.items():
                    ev = shared.latest(p, did)
                    if ev is not None and ev.text != text:
                        continue
                    with contextlib.suppress(MemoryNotFound):
                        ctl.get(p, did)
                        w.violation("final_expired_present", f"{p}: expired {did} still there")
        forgotten = sum(len(w.own[p].forgotten) for w in workers)
        row.update(checked_alive=checked, bad_alive=bad_alive, forgotten=forgotten,
                   forgotten_still_present=bad_forgotten, forgotten_ids_reused=reused)
        if bad_alive:
            fails.append(f"{p}: {bad_alive} drawers believed alive are missing or differ")
        if bad_forgotten:
            fails.append(f"{p}: {bad_forgotten} forgotten drawers are still retrievable")
        total_reused += reused
        out[p] = row
    if total_reused:
        fails.append(f"{total_reused} forgotten drawer ids now name other drawers "
                     "(get(id) of a forgotten drawer returns a different memory)")
    return out, fails


class Unresponsive(Exception):
    """The daemon did not answer a control request in time."""


def guarded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run ``fn`` in a helper thread; raise Unresponsive if it takes over ``timeout_s``.

    The client has no socket timeout, and a wedged daemon must not hang the soak.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"guard-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise Unresponsive(f"{what}: no answer within {timeout_s:.0f}s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def parse_mix(text: str | None) -> dict[str, float]:
    """``--mix recall=20,forget=8`` -> weights (replacing the default mix)."""
    if not text:
        return dict(WEIGHTS)
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in WEIGHTS:
            raise SystemExit(f"--mix: unknown op {name!r}; ops: {', '.join(WEIGHTS)}")
        weights[name.strip()] = float(value or 1)
    return weights


@dataclass
class Run:
    """What the workload phase produced."""

    samples: list[Sample]
    elapsed: float
    t0: float
    stall: str | None = None  # why the watchdog stopped the run early
    died: bool = False


def drive(proc: subprocess.Popen[bytes], pid: int, workers: list[Worker], shared: Shared,
          duration: float, sample_every: float, stall_s: float,
          sqlite: Callable[[], float | None]) -> Run:
    """Start the workers, sample the daemon, and stop on time, on death or on a stall."""
    t0 = time.monotonic()
    run = Run([proc_sample(pid, 0.0, 0, sqlite())], 0.0, t0)
    shared.deadline = t0 + duration
    for w in workers:
        w.start()
    next_sample = t0 + sample_every
    while any(w.is_alive() for w in workers):
        time.sleep(max(0.0, min(0.5, next_sample - time.monotonic())))
        now = time.monotonic()
        if proc.poll() is not None:
            run.died = True
            break
        if now >= next_sample:
            run.samples.append(proc_sample(pid, now - t0, shared.ops, sqlite()))
            next_sample += sample_every
        stuck = [f"{w.name}: {c[0]} on {c[1]} for {now - c[2]:.0f}s" for w in workers
                 if (c := w.current) is not None and now - c[2] > stall_s]
        if stuck:
            run.stall = "requests without an answer: " + "; ".join(stuck)
            break
    shared.stop.set()
    run.elapsed = time.monotonic() - t0
    return run


def end_checks(ctl: Client, home: Path, palaces: list[str], workers: list[Worker],
               shared: Shared, expiry_wait: float) -> tuple[dict[str, Any], list[str]]:
    """Connections, expiry sweep, palace consistency and leftovers (control client only)."""
    fails: list[str] = []
    out: dict[str, Any] = {"connections_at_end": int(ctl.status()["connections"])}
    if out["connections_at_end"] != 1:
        fails.append(f"daemon reports {out['connections_at_end']} connections with one "
                     "client left")
    expiry: dict[str, Any] = {"skipped": True}
    if expiry_wait > 0:
        expiry = wait_expiry(ctl, workers, expiry_wait)
        if expiry["not_swept_count"]:
            fails.append(f"{expiry['not_swept_count']} expired drawers not swept "
                         f"{expiry_wait:.0f}s after the workload")
    out["expiry"] = expiry
    checks, verify_fails = verify(ctl, palaces, workers, shared,
                                  expiry_wait > 0 and not expiry.get("not_swept_count"))
    out["palace_checks"] = checks
    fails.extend(verify_fails)
    names = {d["name"] for d in ctl.list_palaces()}
    leftover = sorted(names - set(palaces))
    trash = sorted(p.name for p in (home / "palaces").iterdir() if p.name not in palaces)
    if leftover or trash:
        fails.append(f"scratch palaces left: {leftover} / directories {trash}")
    return out, fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--palaces", type=int, default=3)
    ap.add_argument("--max-ops", type=int, default=2_000_000, help="stop after this many ops")
    ap.add_argument("--cap", type=int, default=300,
                    help="drawers per client per palace before forgets replace remembers")
    ap.add_argument("--prefill", type=int, default=200, help="drawers per client per palace")
    ap.add_argument("--mix", help="op weights replacing the default mix, e.g. "
                                  "recall=20,wake_up=5 (ops: " + ", ".join(WEIGHTS) + ")")
    ap.add_argument("--sample-every", type=float, default=10.0)
    ap.add_argument("--stall-s", type=float, default=60.0,
                    help="stop and FAIL when a request gets no answer for this long")
    ap.add_argument("--expiry-wait", type=float, default=90.0,
                    help="seconds to wait for the expiry sweep after the workload (0: skip)")
    ap.add_argument("--rss-slope", type=float, default=0.5, help="MB per 10k ops")
    ap.add_argument("--rss-rise", type=float, default=8.0, help="MB")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--keep-home", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    weights = parse_mix(args.mix)

    home = Path(tempfile.mkdtemp(prefix="palsoak-", dir="/tmp"))
    env = private_env(home, args.model_dir, args.tiktoken)
    os.environ.clear()
    os.environ.update(env)
    sock = home / "run" / "palaced.sock"
    palaces = [f"soak-{chr(ord('a') + i)}" for i in range(args.palaces)]
    report: dict[str, Any] = {"minutes": args.minutes, "clients": args.clients,
                              "palaces": palaces, "home": str(home), "seed": args.seed,
                              "mix": weights}
    fails: list[str] = []

    proc = launch(env, home / "palaced.stderr")
    ctl: Client | None = None
    try:
        # -- setup: ready model, palaces, prefill, warm reader pools, baseline --
        status = wait_ready(proc, sock, 120)
        report["model"], report["tokenizer"] = status["model"], status["tokenizer"]
        if status["model"]["state"] != "ready":
            fails.append(f"model not ready: {status['model']}")
        pid = int(status["pid"])
        if pid != proc.pid:
            raise RuntimeError(f"status pid {pid} is not the daemon started here ({proc.pid})")
        report["rss_boot_mb"] = proc_sample(pid, 0.0, 0).rss_mb  # model loaded, no palace
        ctl = control = Client(sock, autostart=False, client_name="soak-control")
        for p in palaces:
            control.create_palace(p)
        shared = Shared(palaces, deadline=float("inf"), max_ops=args.max_ops)
        workers = [Worker(i, sock, palaces, shared, args.cap, args.seed * 1000 + i, weights)
                   for i in range(args.clients)]
        t_fill = time.monotonic()
        for w in workers:
            w.prefill(args.prefill)
            w.client.close()
        report["prefill_s"] = round(time.monotonic() - t_fill, 1)
        report["warmup_requests"] = warm_pools(sock, palaces, 2.0)
        time.sleep(1.0)  # let the prefill and warm-up connections close
        fds_start = fd_kinds(pid)

        # -- workload --
        sqlite = SqliteMemory(control)
        run = drive(proc, pid, workers, shared, args.minutes * 60, args.sample_every,
                    args.stall_s, sqlite)
        report.update(elapsed_s=round(run.elapsed, 1), ops=shared.ops,
                      ops_per_s=round(shared.ops / run.elapsed, 1) if run.elapsed else None)
        if run.died:
            fails.append(f"palaced died during the workload (exit {proc.returncode})")
            raise RuntimeError("palaced died")
        hung = [w.name for w in workers if w.is_alive()]
        wedged = run.stall is not None
        if run.stall:
            fails.append(f"daemon stalled after {run.elapsed:.0f}s ({shared.ops} ops): "
                         f"{run.stall}")
        if not wedged:
            for w in workers:
                w.join(timeout=max(0.0, args.stall_s))
            hung = [w.name for w in workers if w.is_alive()]
            if hung:
                fails.append(f"workers stuck in a request after the deadline: {hung}")
            time.sleep(1.0)  # the workers' connections close on the daemon side
        end = proc_sample(pid, run.elapsed, shared.ops, None if run.stall else sqlite())
        samples = [*run.samples, end]
        fds_end = fd_kinds(pid)
        if wedged:
            report["stall_diagnosis"] = busy_threads(pid) + py_spy_dump(pid)
        else:
            try:
                checks, check_fails = guarded(
                    lambda: end_checks(control, home, palaces, workers, shared,
                                       args.expiry_wait),
                    args.expiry_wait + 600, "end checks")
                report.update(checks)
                fails.extend(check_fails)
            except Unresponsive as exc:
                fails.append(f"daemon unresponsive during the end checks: {exc}")
                report["stall_diagnosis"] = busy_threads(pid) + py_spy_dump(pid)
                wedged = True
        final = proc_sample(pid, run.elapsed, shared.ops)
        control.close()
        ctl = None

        # -- verdicts --
        report["shutdown"] = shutdown = stop_daemon(proc, sock)
        if shutdown["exit_code"] != 0 or not shutdown["socket_removed"]:
            fails.append(f"bad shutdown: {shutdown}")
        expected: Counter[str] = Counter()
        unexpected: Counter[str] = Counter()
        violations: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        lat: dict[str, Latency] = {}
        for w in workers:
            w.settle_expired()
            expected.update(w.expected)
            unexpected.update(w.unexpected)
            violations.update(w.violations)
            counts.update(w.counts)
            for name, stats in w.lat.items():
                lat.setdefault(name, Latency()).merge(stats)
            if w.crashed:
                fails.append(f"{w.name} crashed: {w.crashed}")
        times = [x for w in workers for x in w.recall_times]
        fifth = run.elapsed / 5
        first = [ms for t, ms in times if t < run.t0 + fifth]
        last = [ms for t, ms in times if t >= run.t0 + 4 * fifth]
        report["recall_drift_ms"] = {
            "first_fifth": {"n": len(first), "p50": round(pct(first, 50), 2),
                            "p95": round(pct(first, 95), 2)},
            "last_fifth": {"n": len(last), "p50": round(pct(last, 50), 2),
                           "p95": round(pct(last, 95), 2)}}
        warmup = max(60.0, 0.25 * run.elapsed)
        rss = rss_verdict(samples, warmup, args.rss_slope, args.rss_rise)
        rss.update(start_mb=samples[0].rss_mb, end_mb=end.rss_mb, after_checks_mb=final.rss_mb,
                   peak_mb=max(s.rss_mb for s in samples),
                   slope_all_mb_per_10k_ops=_round(slope_per_10k(samples), 3),
                   sqlite_start_mb=samples[0].sqlite_mb, sqlite_end_mb=end.sqlite_mb,
                   sqlite_bound_mb=round(SQLITE_MB_PER_CONNECTION
                                         * fds_end.get("palace.db", 0), 1))
        log_errors = scan_log(home / "state" / "palaced.log")
        if sum(unexpected.values()):
            fails.append(f"unexpected errors: {dict(unexpected)}")
        if sum(violations.values()):
            fails.append(f"invariant violations: {dict(violations)}")
        if end.fds - samples[0].fds > FD_GROWTH_LIMIT:
            fails.append(f"open fds grew {samples[0].fds} -> {end.fds}")
        if rss["leak"]:
            fails.append(f"RSS ({rss['judged']}) keeps rising after warm-up: slope "
                         f"{rss['slope_mb_per_10k_ops']} MB/10k ops, thirds {rss['thirds_mb']}"
                         " MB")
        if end.sqlite_mb is not None and end.sqlite_mb > rss["sqlite_bound_mb"]:
            fails.append(f"SQLite's heap {end.sqlite_mb} MB is beyond its page caches' bound "
                         f"{rss['sqlite_bound_mb']} MB")
        if log_errors:
            fails.append(f"{len(log_errors)} ERROR lines in the daemon log")
        busy = end.cpu_s - samples[0].cpu_s
        report.update(
            latency_ms={n: {"count": s.count, "failed": s.failed,
                            "p50": round(pct(s.samples, 50), 2),
                            "p95": round(pct(s.samples, 95), 2), "max": round(s.max_ms, 1)}
                        for n, s in sorted(lat.items())},
            expected_errors=dict(expected), unexpected_errors=dict(unexpected),
            violations=dict(violations), counters=dict(counts),
            examples=[e for w in workers for e in w.examples][:40], rss=rss,
            daemon_cpu_pct=round(100 * busy / run.elapsed, 1) if run.elapsed else None,
            fds={"start": samples[0].fds, "end": end.fds, "final": final.fds,
                 "start_kinds": fds_start, "end_kinds": fds_end},
            threads={"start": samples[0].threads, "end": end.threads, "final": final.threads},
            samples=[vars(s) for s in samples], log_errors=log_errors[:10],
        )
    except Exception as exc:
        fails.append(f"soak aborted: {exc!r}")
    finally:
        if ctl is not None:
            ctl.close()
        if proc.poll() is None:
            report.setdefault("shutdown", stop_daemon(proc, sock))
    report["result"] = "FAIL" if fails else "PASS"
    report["reasons"] = fails
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    if fails or args.keep_home:
        print(f"scratch home kept: {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 1 if fails else 0


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def print_report(r: dict[str, Any]) -> None:
    """The compact text report (everything is also in --json)."""
    model = r.get("model", {})
    print(f"palace soak: {r['minutes']} min, {r['clients']} clients, {len(r['palaces'])} "
          f"palaces, model {model.get('identity', model.get('state'))}, tokenizer "
          f"{r.get('tokenizer', {}).get('name')}")
    if "ops" in r:
        print(f"ops {r['ops']:,} in {r['elapsed_s']} s = {r['ops_per_s']} ops/s "
              f"(prefill {r['prefill_s']} s); daemon CPU {r.get('daemon_cpu_pct')} % of a core")
    if "latency_ms" in r:
        print(f"errors: expected {sum(r['expected_errors'].values())} "
              f"{r['expected_errors']}")
        print(f"        unexpected {sum(r['unexpected_errors'].values())} "
              f"{r['unexpected_errors']}; violations {r['violations']}")
        print(f"counters {r['counters']}")
        print(f"{'op':<22}{'count':>8}{'fail':>6}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
        for name, s in r["latency_ms"].items():
            print(f"{name:<22}{s['count']:>8}{s['failed']:>6}{s['p50']:>9}{s['p95']:>9}"
                  f"{s['max']:>9}")
        drift = r["recall_drift_ms"]
        print(f"recall (all kinds) p50/p95: first fifth {drift['first_fifth']['p50']}/"
              f"{drift['first_fifth']['p95']} ms, last fifth {drift['last_fifth']['p50']}/"
              f"{drift['last_fifth']['p95']} ms")
        rss = r["rss"]
        print(f"daemon RSS {rss['start_mb']} -> {rss['end_mb']} MB (peak {rss['peak_mb']}, "
              f"{r['rss_boot_mb']} at boot before palaces, {rss['after_checks_mb']} after the "
              f"idle end checks), SQLite's heap in it {rss['sqlite_start_mb']} -> "
              f"{rss['sqlite_end_mb']} MB (bound {rss['sqlite_bound_mb']}); after "
              f"{rss['warmup_s']:.0f} s warm-up: RSS slope {rss['rss_slope_mb_per_10k_ops']} "
              f"MB/10k ops (whole run {rss['slope_all_mb_per_10k_ops']}), judged on "
              f"{rss['judged']}: slope {rss['slope_mb_per_10k_ops']}, thirds "
              f"{rss['thirds_mb']}; leak={rss['leak']}")
        print(f"fds {r['fds']['start']} -> {r['fds']['end']} (after checks {r['fds']['final']})"
              f"; threads {r['threads']['start']} -> {r['threads']['end']} "
              f"(after checks {r['threads']['final']}); connections at end "
              f"{r.get('connections_at_end')}")
        if r["fds"]["start_kinds"] != r["fds"]["end_kinds"]:
            print(f"fd kinds start {r['fds']['start_kinds']}")
            print(f"fd kinds end   {r['fds']['end_kinds']}")
        print("rss samples (s:MB[:sqlite MB]) " + " ".join(
            f"{s['t_s']:.0f}:{s['rss_mb']}" + ("" if s["sqlite_mb"] is None
                                               else f":{s['sqlite_mb']}")
            for s in r["samples"]))
    if "expiry" in r:
        print(f"expiry {r['expiry']}")
    for p, row in r.get("palace_checks", {}).items():
        print(f"  {p}: {row}")
    if "shutdown" in r:
        print(f"shutdown {r['shutdown']}")
    for line in r.get("stall_diagnosis", []):
        print(f"  stall: {line}")
    for line in r.get("log_errors", []):
        print(f"  log: {line[:200]}")
    for line in r.get("examples", [])[:15]:
        print(f"  {line[:240]}")
    print(f"RESULT: {r['result']}" + ("" if not r["reasons"] else
                                      "  -- " + "; ".join(str(x) for x in r["reasons"])))


if __name__ == "__main__":
    sys.exit(main())
