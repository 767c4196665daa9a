"""The multi-process crash storm of ``crash.py --procs N``: kill -9 a private palaced under many
client processes, during a large ``remember_many`` and during a ``palace reembed``.

Phases (each kill is followed by a restart, then every check below):

1. ``--rounds`` storm rounds: ``--procs`` writer processes (``_storm_writer.py``, each its own
   auto-starting ``Client``) write unique drawers, one at a time or in small batches; after a
   random 0.3 to ``--round-s`` seconds the daemon is SIGKILLed; the writers' own calls start
   the next one; then they are paused and the state checked.
2. ``palace reembed`` (the CLI) of the storm palace, killed at a random moment while it runs.
3. One ``remember_many`` of ``--bulk`` drawers, killed once a random number of its
   transactions (256 drawers each) committed; then the whole batch is sent again, which must
   store each drawer exactly once.

Checks after each kill: every acknowledged write is present with its exact text (all by
``memory.list``); no text is stored twice; no drawer holds a text never sent; once the
backfill is done, the index holds exactly one vector per drawer (``palace.info``: drawers ==
vectors == index, consistent); keyword recall finds a sample of acknowledged drawers by
their unique token, and (with a model) vector recall finds a sample by their text, with a
cosine of at least 0.99 (so the vector index returned them). At the end the daemon is
stopped, the database passes ``PRAGMA integrity_check``, its drawers are exactly the last
listing, and the saved index file holds exactly the database's vectors.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _daemon import PrivateDaemon, all_drawers
from _dbcheck import index_problems, integrity, texts

from palace_client import Client
from palaced.wire.errors import PalaceError

PALACE = "storm"
WRITER = Path(__file__).with_name("_storm_writer.py")
PAUSE_LIMIT_S = 60.0
SETTLE_LIMIT_S = 120.0  # restart, model load and backfill after a kill
BATCH = 256  # drawers per transaction of remember_many (palaced.memory.writes.REMEMBER_BATCH)


@dataclass
class Report:
    """What the storm saw; ``problems`` fail it."""

    kills: int = 0
    rounds: int = 0
    pids: set[int] = field(default_factory=set)
    acked: int = 0
    unacked: int = 0
    unacked_stored: int = 0
    keyword_checked: int = 0
    keyword_misses: int = 0
    vector_checked: int = 0
    vector_misses: int = 0
    checks: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, msg: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(msg[:300])


class Writers:
    """The writer processes and their control directory."""

    def __init__(self, daemon: PrivateDaemon, n: int, seed: int) -> None:
        self.control = daemon.home / "storm"
        self.control.mkdir()
        (self.control / "pause").touch()
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(n):
            with open(self.control / f"w{i}.err", "wb") as err:
                self.procs.append(subprocess.Popen(
                    [sys.executable, str(WRITER), str(daemon.sock), PALACE, str(i),
                     str(self.control), str(seed * 1000 + i)], env=daemon.env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err))

    def resume(self) -> None:
        for f in self.control.glob("paused.*"):
            f.unlink(missing_ok=True)
        (self.control / "pause").unlink(missing_ok=True)

    def pause(self) -> list[int]:
        """Pause every writer after its current call; returns the ones that did not."""
        (self.control / "pause").touch()
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while time.monotonic() < deadline:
            waiting = [i for i in range(self.n) if not (self.control / f"paused.{i}").exists()
                       and self.procs[i].poll() is None]
            if not waiting:
                return []
            time.sleep(0.05)
        return waiting

    def stop(self) -> None:
        (self.control / "stop").touch()
        for p in self.procs:
            try:
                p.wait(timeout=PAUSE_LIMIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def crashed(self) -> list[str]:
        return [f"writer {i} exited {p.returncode}: "
                f"{(self.control / f'w{i}.err').read_text()[-300:]}"
                for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]

    def journal(self) -> tuple[set[str], dict[int, str], set[str], Counter[str]]:
        """(texts sent, acknowledged id -> text, unacknowledged texts, errors by name)."""
        sent: set[str] = set()
        acked: dict[int, str] = {}
        unacked: set[str] = set()
        errors: Counter[str] = Counter()
        for i in range(self.n):
            path = self.control / f"w{i}.jsonl"
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                ev = json.loads(line)
                if "s" in ev:
                    sent.update(ev["s"])
                elif "a" in ev:
                    acked.update(zip(ev["a"], ev["t"], strict=True))
                else:
                    unacked.update(ev["u"])
                    errors[ev["e"]] += 1
        return sent, acked, unacked - set(acked.values()), errors


def settle(ctl: Client, model: bool) -> dict[str, Any]:
    """Wait for the (re)started daemon: model loaded, nothing awaiting its vectors."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while True:
        try:
            st = ctl.status()
            info = ctl.palace_info(PALACE)
            if st["model"]["state"] != "loading" and not (
                    model and info["pending_embeddings"]):
                return info
        except (PalaceError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the daemon did not settle after a kill")
        time.sleep(0.1)


def check(ctl: Client, rep: Report, sent: set[str], acked: dict[int, str], unacked: set[str],
          rnd: random.Random, sample: int, model: bool, where: str) -> dict[int, str]:
    """Every check of the state after a kill; returns the listing (id -> text)."""
    rep.checks += 1
    info = settle(ctl, model)
    stored = {int(d["id"]): str(d["text"]) for d in all_drawers(ctl, PALACE)}
    by_text: dict[str, int] = {}
    for did, text in stored.items():
        if text in by_text:
            rep.problem(f"{where}: text stored twice (ids {by_text[text]}, {did}): {text[:60]!r}")
        by_text[text] = did
    for did, text in stored.items():
        if text not in sent:
            rep.problem(f"{where}: phantom drawer {did}: {text[:60]!r}")
    for did, text in acked.items():
        if stored.get(did) != text:
            rep.problem(f"{where}: LOST acknowledged drawer {did} {text[:60]!r}: "
                        f"{'absent' if did not in stored else repr(stored[did][:60])}")
    rep.unacked_stored = sum(1 for t in unacked if t in by_text)
    want = (len(stored), len(stored) if model else 0, len(stored) if model else None)
    got = (info["drawers"], info["vectors"], info["index"])
    if got != want or (model and info["consistent"] is not True) or info["mismatch"]:
        rep.problem(f"{where}: palace.info drawers/vectors/index {got}, expected {want} "
                    f"(consistent {info['consistent']}, mismatch {info['mismatch']})")
    picks = rnd.sample(sorted(acked.items()), min(sample, len(acked)))
    for did, text in picks:
        rep.keyword_checked += 1
        token = text.split(":")[0]
        if did not in {int(r["id"]) for r in ctl.recall(PALACE, token, top_k=5)}:
            rep.keyword_misses += 1
            rep.problem(f"{where}: keyword recall of {token!r} misses drawer {did}")
        if model:
            # The drawer's own text: its cosine is ~1, and ``vector`` is set only for hits
            # the vector index returned, so this proves the index holds the drawer.
            rep.vector_checked += 1
            hits = ctl.recall(PALACE, text, top_k=10)
            vec = {int(r["id"]): r.get("vector") for r in hits}
            if (vec.get(did) or 0.0) < 0.99:
                rep.vector_misses += 1
                rep.problem(f"{where}: vector recall of drawer {did}: cosine {vec.get(did)}")
    return stored


def kill(daemon: PrivateDaemon, rep: Report) -> None:
    pid = daemon.kill9()
    if pid is not None:
        rep.kills += 1
        rep.pids.add(pid)


def reembed_phase(daemon: PrivateDaemon, ctl: Client, rep: Report, rnd: random.Random) -> None:
    """``palace reembed`` killed at a random moment while it runs: once its progress shows (the
    new vectors are built beside the old ones, which keep serving) or vectors are missing."""
    cli = subprocess.Popen([sys.executable, "-m", "palace_client", "reembed", "--palace",
                            PALACE, "--json"], env=daemon.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    missing = 0
    deadline = time.monotonic() + SETTLE_LIMIT_S
    with daemon.client("storm-watch") as watch:
        while cli.poll() is None and time.monotonic() < deadline:
            info = watch.palace_info(PALACE)
            missing = info["drawers"] - info["vectors"]
            moving = info.get("reembedding") or {}
            if missing or moving.get("done", 0) > 0:
                break
            time.sleep(0.02)
    time.sleep(rnd.uniform(0.0, 0.05))  # a batch of 64 takes longer: the kill lands inside
    done = cli.poll() is not None
    kill(daemon, rep)
    out, err = cli.communicate(timeout=SETTLE_LIMIT_S)
    rep.notes.append(f"reembed: killed {'after it finished' if done else 'while it ran'}"
                     f"{f' ({missing} drawers without vectors seen)' if missing else ''}; CLI "
                     f"exit {cli.returncode}: {(err or out).strip()[-100:]!r}")
    ctl.close()


def bulk_phase(daemon: PrivateDaemon, ctl: Client, rep: Report, rnd: random.Random, n: int,
               base: int) -> list[str]:
    """A ``remember_many`` of ``n`` drawers killed mid-way, then sent again in full."""
    items = [f"bulk{i}: the {rnd.choice(('pumps', 'ferries', 'orchards'))} of sector {i} "
             f"were logged at {rnd.randrange(24)}h" for i in range(n)]
    batches = max(1, (n + BATCH - 1) // BATCH)
    target = base + BATCH * rnd.randrange(1, batches) if batches > 1 else base
    outcome: list[Any] = []

    def send() -> None:
        try:
            with daemon.client("storm-bulk") as c:
                outcome.append(c.remember_many(PALACE, [{"text": t} for t in items]))
        except (PalaceError, OSError) as exc:
            outcome.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    with daemon.client("storm-watch") as watch:
        while sender.is_alive():
            try:
                if watch.palace_info(PALACE)["drawers"] >= target:
                    break
            except (PalaceError, OSError):
                pass
            time.sleep(0.05)
    finished = not sender.is_alive()
    kill(daemon, rep)
    sender.join(SETTLE_LIMIT_S)
    ctl.close()
    settle(ctl, model=False)
    stored = sum(1 for d in all_drawers(ctl, PALACE) if str(d["text"]).startswith("bulk"))
    rep.notes.append(f"bulk remember_many of {n}: killed "
                     f"{'after it finished' if finished else f'with {stored} stored'}; "
                     f"the answer: {type(outcome[0]).__name__ if outcome else 'none'}")
    if not finished and stored % BATCH and stored != n:
        rep.problem(f"bulk: {stored} drawers stored, not whole transactions of {BATCH}")
    ids = ctl.remember_many(PALACE, [{"text": t} for t in items])
    if len(ids) != n or len(set(ids)) != n:
        rep.problem(f"bulk resend: {len(ids)} ids, {len(set(ids))} distinct, for {n} items")
    rep.notes.append(f"bulk resent in full: {len(set(ids))} distinct ids for {n} items")
    return items


def final_checks(daemon: PrivateDaemon, rep: Report, listing: dict[int, str]) -> None:
    """After a clean stop: the files themselves."""
    shutdown = daemon.stop()
    if shutdown.get("exit_code") not in (0, None) or shutdown.get("killed"):
        rep.problem(f"shutdown: {shutdown}")
    pdir = daemon.home / "palaces" / PALACE
    verdict = integrity(pdir / "palace.db")
    rep.notes.append(f"integrity_check: {verdict}")
    if verdict != "ok":
        rep.problem(f"integrity_check: {verdict[:200]}")
    if texts(pdir / "palace.db") != listing:
        rep.problem("the database file's drawers differ from the last listing")
    for p in index_problems(pdir):
        rep.problem(f"index file: {p}")


def run(args: argparse.Namespace) -> int:
    """The storm (``crash.py --procs N``); prints the report, returns the exit status."""
    daemon = PrivateDaemon("palstorm-", args.model, args.tiktoken)
    daemon.adopt_env()
    # Prompt upkeep: writes made while a restarted daemon loads its model get their vectors
    # within a second of going idle, so checks do not wait for the default 5 s.
    (daemon.home / "config.toml").write_text("[limits]\ncheckpoint_idle_s = 0.5\n")
    model = args.model is not None
    rnd = random.Random(args.seed)
    rep = Report()
    writers: Writers | None = None
    t0 = time.monotonic()
    listing: dict[int, str] = {}
    bulk: list[str] = []
    try:
        rep.pids.add(int(daemon.start()["pid"]))
        ctl = daemon.client("storm-check", autostart=True)
        ctl.create_palace(PALACE)
        writers = Writers(daemon, args.procs, args.seed)
        sent: set[str] = set()
        acked: dict[int, str] = {}
        unacked: set[str] = set()
        t_phase = time.monotonic()
        for _ in range(args.rounds):
            writers.resume()
            time.sleep(rnd.uniform(0.3, max(0.3, args.round_s)))
            kill(daemon, rep)
            time.sleep(rnd.uniform(0.5, 1.5))  # the writers restart it and write on
            t_pause = time.monotonic()
            stuck = writers.pause()
            if stuck:
                rep.problem(f"writers stuck in a call for {PAUSE_LIMIT_S:.0f}s: {stuck}")
                break
            ctl.close()
            t_check = time.monotonic()
            sent, acked, unacked, rep.errors = writers.journal()
            listing = check(ctl, rep, sent, acked, unacked, rnd, args.search_sample, model,
                            f"round {rep.rounds + 1}")
            rep.rounds += 1
            rep.notes.append(f"round {rep.rounds}: pausing the writers {t_check - t_pause:.1f}"
                             f" s, restart + settle + checks {time.monotonic() - t_check:.1f} s")
        rep.notes.append(f"storm rounds: {time.monotonic() - t_phase:.1f} s")
        if args.reembed and model and not rep.problems:
            t_phase = time.monotonic()
            reembed_phase(daemon, ctl, rep, rnd)
            listing = check(ctl, rep, sent, acked, unacked, rnd, args.search_sample, model,
                            "after the reembed kill")
            rep.notes.append(f"reembed phase: {time.monotonic() - t_phase:.1f} s")
        if args.bulk and not rep.problems:
            t_phase = time.monotonic()
            bulk = bulk_phase(daemon, ctl, rep, rnd, args.bulk, len(listing))
            listing = check(ctl, rep, sent | set(bulk), acked, unacked, rnd,
                            args.search_sample, model, "after the bulk kill")
            rep.notes.append(f"bulk phase: {time.monotonic() - t_phase:.1f} s")
        rep.acked, rep.unacked = len(acked), len(unacked)
        ctl.close()
    except Exception as exc:
        rep.problem(f"storm aborted: {exc!r}")
    finally:
        if writers is not None:
            writers.stop()
            rep.problems.extend(writers.crashed())
    if listing and not rep.problems:
        final_checks(daemon, rep, listing)
    else:
        daemon.stop()
    print_report(args, rep, model, time.monotonic() - t0, len(listing), len(bulk))
    daemon.cleanup(keep=bool(rep.problems) or args.keep_home)
    return 1 if rep.problems else 0


def print_report(args: argparse.Namespace, rep: Report, model: bool, elapsed: float,
                 drawers: int, bulk: int) -> None:
    print(f"palace crash storm: seed {args.seed}, {args.procs} writer processes, "
          f"{'model' if model else 'keyword-only'}, {elapsed:.1f} s")
    rows = [
        ("rounds (kill -9 + restart + check)", f"{rep.rounds}"),
        ("kills (all phases)", f"{rep.kills} ({len(rep.pids)} daemon pids)"),
        ("writer processes", f"{args.procs}"),
        ("acknowledged writes", f"{rep.acked:,}"),
        ("unacknowledged (stored anyway)", f"{rep.unacked:,} ({rep.unacked_stored})"),
        ("drawers at the end", f"{drawers:,} ({bulk:,} of them the bulk batch)"),
        ("state checks", f"{rep.checks}"),
        ("keyword recall checks / misses", f"{rep.keyword_checked} / {rep.keyword_misses}"),
        ("vector recall checks / misses", f"{rep.vector_checked} / {rep.vector_misses}"),
        ("errors seen by the writers", f"{dict(sorted(rep.errors.items()))}"),
    ]
    for label, value in rows:
        print(f"{label:<38}{value}")
    for note in rep.notes:
        print(f"  {note}")
    lost = sum(1 for p in rep.problems if "LOST" in p)
    print(f"{'lost acknowledged writes':<38}{lost}")
    print(f"{'problems':<38}{len(rep.problems)}")
    for p in rep.problems:
        print(f"  {p}")
    print(f"RESULT: {'FAIL' if rep.problems else 'PASS'}")
