"""Team palace soak (issue 34): many daemons, many clients, a PostgreSQL restart in the middle.

``--daemons`` (4) private palaced processes, each with its own ``PALACE_HOME`` (four
"machines"), share one team palace on a real PostgreSQL 18 + pgvector
(``tests/support/pgserver.py``), reached through a real PgBouncer in transaction pooling mode
(``tests/support/pgbouncer.py``, ``[stores.team] pooler = "transaction"``) unless ``--direct``.
Each daemon serves ``--clients`` (8) client threads, each with its own connection, that for
``--minutes`` (10) mix ``remember`` (50 %, into one of ``--rooms`` rooms: 1 by default, the
worst case, where every write takes turns under the room's advisory lock), ``recall`` (35 %:
the text of one of its own live drawers, which must come back) and ``forget`` (15 %: one of
its own live drawers), with ``--pause-ms`` between requests. Half-way, PostgreSQL is
restarted with a fast shutdown (what ``pg_ctl restart -m fast`` does: SIGINT to the
postmaster, then a start).

A failed ``remember`` is sent again (same text) while its error is retryable, for up to 60 s:
the content hash makes that idempotent, which the check below holds it to.

Afterwards, through every daemon's ``memory.list``:

- every acknowledged write is present exactly once with its text (by its unique token), and
  no text is stored twice;
- every acknowledged forget is gone;
- writes whose outcome is unknown (never acknowledged) are present at most once;
- each recall of a client's own live drawer found it.

Reported: per-op count and p50/p95/p99 latency (ms), errors by op, name and retryability,
split into those in the restart window (restart start + 30 s) and the rest; the restart's
duration. Exit 1 on any problem or any non-retryable error.

    python bench/team_soak.py --minutes 10 --json /tmp/soak.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon, all_drawers  # noqa: E402
from perf import pct  # noqa: E402

from palaced.wire.errors import PalaceError  # noqa: E402
from tests.support.pgbouncer import PgBouncer  # noqa: E402
from tests.support.pgserver import PgServer, dbname_of  # noqa: E402
from tests.support.team_storm import error_name, sentence  # noqa: E402

PALACE = "soak"
RESTART_WINDOW_S = 30.0
RETRY_FOR_S = 60.0
_TOKEN = re.compile(r"ticket (\S+x[0-9a-f]{10})\.")


class Soak:
    """The shared record of every client thread."""

    def __init__(self, stop_at: float, pause_s: float, rooms: int) -> None:
        self.stop_at = stop_at
        self.pause_s = pause_s
        self.rooms = rooms
        self.lock = threading.Lock()
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[tuple[str, str, bool, bool]] = Counter()
        self.examples: dict[tuple[str, str], str] = {}  # (op, error): its first message
        self.acked: dict[str, int] = {}  # token -> drawer id
        self.unknown: set[str] = set()  # tokens sent, never acknowledged
        self.forgotten: dict[str, int] = {}  # token -> drawer id, forget acknowledged
        self.forget_unknown: set[str] = set()
        self.recall_misses: list[str] = []
        self.restart: tuple[float, float] | None = None  # (start, end), monotonic

    def in_window(self, t: float) -> bool:
        """Whether ``t`` is from the restart's start to RESTART_WINDOW_S after it."""
        r = self.restart
        return r is not None and r[0] <= t <= r[0] + RESTART_WINDOW_S

    def error(self, op: str, exc: BaseException) -> None:
        """Count a failed request, by the time it failed (in the restart window or not)."""
        retryable = bool(getattr(exc, "retryable", False))
        t = time.monotonic()
        with self.lock:
            self.errors[(op, error_name(exc), retryable, self.in_window(t))] += 1
            self.examples.setdefault((op, error_name(exc)), str(exc)[:300])


def client_thread(soak: Soak, daemon: PrivateDaemon, tag: str, seed: int) -> None:
    rng = random.Random(seed)
    live: list[tuple[str, int, str]] = []  # (token, id, text) of this thread's drawers
    client = daemon.client(f"soak-{tag}")
    try:
        while time.monotonic() < soak.stop_at:
            roll = rng.random()
            if roll < 0.5 or not live:
                remember(soak, client, rng, tag, live)
            elif roll < 0.85:
                token, did, text = rng.choice(live)
                t0 = time.monotonic()
                try:
                    hits = client.recall(PALACE, text, top_k=5)
                except PalaceError as exc:
                    soak.error("recall", exc)
                else:
                    soak.lat["recall"].append((time.monotonic() - t0) * 1000)
                    if all(int(h["id"]) != did for h in hits):
                        with soak.lock:
                            soak.recall_misses.append(f"{tag}: {did} ({token})")
            else:
                token, did, text = live.pop(rng.randrange(len(live)))
                t0 = time.monotonic()
                try:
                    client.forget(PALACE, did)
                except PalaceError as exc:
                    soak.error("forget", exc)
                    with soak.lock:
                        soak.forget_unknown.add(token)
                else:
                    soak.lat["forget"].append((time.monotonic() - t0) * 1000)
                    with soak.lock:
                        soak.forgotten[token] = did
            time.sleep(soak.pause_s)
    finally:
        client.close()


def remember(soak: Soak, client: Any, rng: random.Random, tag: str,
             live: list[tuple[str, int, str]]) -> None:
    """One remember, sent again while it fails with a retryable error (up to RETRY_FOR_S)."""
    text = sentence(rng, tag)
    room = f"room{rng.randrange(soak.rooms)}"
    m = _TOKEN.search(text)
    assert m is not None
    token = m.group(1)
    first = time.monotonic()
    while True:
        t0 = time.monotonic()
        try:
            did = int(client.remember(PALACE, text, room=room))
        except PalaceError as exc:
            soak.error("remember", exc)
            if not getattr(exc, "retryable", False) or time.monotonic() - first > RETRY_FOR_S:
                with soak.lock:
                    soak.unknown.add(token)
                return
            time.sleep(0.2)
            continue
        soak.lat["remember"].append((time.monotonic() - t0) * 1000)
        with soak.lock:
            soak.acked[token] = did
        live.append((token, did, text))
        return


def check(soak: Soak, daemons: list[PrivateDaemon]) -> tuple[list[str], dict[str, Any]]:
    """The problems of the final state, through every daemon's listing; and its counts."""
    problems: list[str] = []
    counts: dict[str, Any] = {}
    for i, d in enumerate(daemons):
        with d.client("soak-check") as c:
            drawers = all_drawers(c, PALACE)
        by_token: dict[str, list[int]] = defaultdict(list)
        for dr in drawers:
            m = _TOKEN.search(str(dr["text"]))
            if m is None:
                problems.append(f"daemon {i}: drawer {dr['id']} holds a text never sent")
                continue
            by_token[m.group(1)].append(int(dr["id"]))
        dups = {t: ids for t, ids in by_token.items() if len(ids) > 1}
        problems += [f"daemon {i}: token {t} stored {len(ids)} times: {ids}"
                     for t, ids in list(dups.items())[:10]]
        live = {t: did for t, did in soak.acked.items()
                if t not in soak.forgotten and t not in soak.forget_unknown}
        missing = [t for t, did in live.items() if by_token.get(t) != [did]]
        problems += [f"daemon {i}: acknowledged {t} (drawer {live[t]}) is "
                     f"{by_token.get(t, 'missing')}" for t in missing[:10]]
        back = [t for t in soak.forgotten if t in by_token]
        problems += [f"daemon {i}: forgotten {t} is still listed" for t in back[:10]]
        unknown_stored = sum(1 for t in soak.unknown if t in by_token)
        counts[f"daemon_{i}"] = {"listed": len(drawers), "duplicates": len(dups),
                                 "missing": len(missing), "forgotten_listed": len(back),
                                 "unknown_stored": unknown_stored}
    problems += [f"recall missed its own live drawer {m}" for m in soak.recall_misses[:10]]
    return problems, counts


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = None if args.model == "none" else Path(args.model)
    report: dict[str, Any] = {"minutes": args.minutes, "daemons": args.daemons,
                              "clients_per_daemon": args.clients, "rooms": args.rooms,
                              "via": "direct" if args.direct else "pgbouncer (transaction)",
                              "model": model.name if model else "keyword-only"}
    server = PgServer()
    bouncer: PgBouncer | None = None
    daemons: list[PrivateDaemon] = []
    try:
        url = server.create_database()
        if not args.direct:
            bouncer = PgBouncer(server, mode="transaction", pool_size=args.pool_size)
            url = bouncer.url(dbname_of(url))
            report["pgbouncer_pool_size"] = args.pool_size
        pooler = "" if args.direct else 'pooler = "transaction"\n'
        t0 = time.monotonic()
        for i in range(args.daemons):
            d = PrivateDaemon(f"soak{i}-", model, DEFAULT_TIKTOKEN)
            (d.home / "config.toml").write_text(f'[stores.team]\nurl = "{url}"\n{pooler}')
            daemons.append(d)
            d.start()
            with d.client("soak-setup") as c:
                c.create_palace(PALACE, store="team", exist_ok=True)
        report["start_s"] = round(time.monotonic() - t0, 1)
        duration = args.minutes * 60
        start = time.monotonic()
        soak = Soak(start + duration, args.pause_ms / 1000, args.rooms)
        threads = [threading.Thread(target=client_thread,
                                    args=(soak, d, f"d{i}c{j}", args.seed * 1000 + i * 100 + j),
                                    daemon=True)
                   for i, d in enumerate(daemons) for j in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(duration / 2)
        r0 = time.monotonic()
        soak.restart = (r0, r0)
        server.restart()  # fast shutdown (SIGINT) then start: ``pg_ctl restart -m fast``
        soak.restart = (r0, time.monotonic())
        report["restart_s"] = round(soak.restart[1] - r0, 2)
        report["restart_at_s"] = round(r0 - start, 1)
        for t in threads:
            t.join(timeout=duration + 300)
        report["ran_s"] = round(time.monotonic() - start, 1)
        problems, counts = check(soak, daemons)
        report["ops"] = {op: {"n": len(v), "p50_ms": round(pct(v, 50), 1),
                              "p95_ms": round(pct(v, 95), 1), "p99_ms": round(pct(v, 99), 1)}
                         for op, v in sorted(soak.lat.items()) if v}
        report["acknowledged_writes"] = len(soak.acked)
        report["acknowledged_forgets"] = len(soak.forgotten)
        report["unknown_writes"] = len(soak.unknown)
        report["errors"] = [{"op": op, "error": name, "retryable": retryable,
                             "in_restart_window": window, "n": n}
                            for (op, name, retryable, window), n in sorted(soak.errors.items())]
        report["error_examples"] = {f"{op} {name}": text
                                    for (op, name), text in sorted(soak.examples.items())}
        report["final"] = counts
        bad = [e for e in report["errors"] if not e["retryable"]]
        problems += [f"non-retryable error: {e}" for e in bad]
        report["problems"] = problems
        return report
    finally:
        for d in daemons:
            d.stop()
            if not args.keep_home:
                shutil.rmtree(d.home, ignore_errors=True)
        if bouncer is not None:
            bouncer.close()
        server.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--daemons", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8, help="client threads per daemon")
    ap.add_argument("--rooms", type=int, default=1, help="rooms the writes go to")
    ap.add_argument("--pause-ms", type=float, default=20.0, help="pause between requests")
    ap.add_argument("--direct", action="store_true", help="no PgBouncer in between")
    ap.add_argument("--pool-size", type=int, default=8,
                    help="PgBouncer's default_pool_size (server connections)")
    ap.add_argument("--model", default=str(DEFAULT_MODEL),
                    help="embedding model directory, or 'none' (keyword-only)")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--keep-home", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args()
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print("PASS" if not report["problems"] else "FAIL", file=sys.stderr)
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
