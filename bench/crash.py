"""Bounded crash-consistency check: kill -9 a private palaced under concurrent writers.

Starts its own ``palaced`` under a scratch ``PALACE_HOME`` (keyword-only, unless ``--model
PATH`` names a model directory) and creates palace ``crash``. ``--workers`` client threads
(each its own ``palace_client.Client``) then write unique texts: single remembers (most),
``remember_many`` batches, and a subset of ops whose answer may be lost in a crash:
``memory.forget`` of one of their own acknowledged drawers and ``palace.create`` /
``palace.delete`` of their own scratch palaces. Every text is recorded before it is sent;
every acknowledged id is recorded with its text.

Each of ``--rounds`` rounds lets the workers write for a random 0.2 to ``--round-s`` seconds,
then SIGKILLs the daemon (no shutdown code runs). With ``--restart client`` (default) the
workers' own calls auto-start a new daemon, as a real client would; with ``--restart
driver`` the clients never auto-start and this script restarts the daemon after a random
delay. The workers are then paused and the state checked:

* every acknowledged remember is present with the same text (all by ``memory.list``, the
  ten latest of each worker also by ``memory.get``): a miss is a LOST acknowledged write;
* no drawer holds a text that was never sent (PHANTOM), and no text is stored twice;
* keyword search (hybrid with a model) finds ``--search-sample`` acknowledged drawers by
  their unique token;
* ``palace.info`` counts equal the listing, the index is not inconsistent;
* forget/create/delete: an acknowledged one must have taken effect (else it is a lost
  acknowledged write); one whose outcome is unknown (connection broke) is resolved from the
  state and counted as applied / not applied; an answer that contradicts what the state
  was before (``MEMORY_NOT_FOUND`` for a drawer known to exist, ``PALACE_EXISTS`` for a
  fresh name, ``PALACE_NOT_FOUND`` for a palace known to exist) is a contradictory answer:
  the request ran, its reply was lost, and the client's retry reported the retry's result.

Output: rounds and kills, acknowledged writes, unacknowledged writes (outcome unknown, and
what became of them), lost acknowledged writes, phantom drawers, search misses, the
forget/create/delete answers, "retried ops whose answer contradicted the final state: N",
then ``RESULT: PASS`` or ``RESULT: FAIL -- reasons``. Exit status 1 on any lost
acknowledged write, phantom or duplicate drawer, inconsistent counts, search miss, stuck
worker or failed restart (and, with ``--strict-retries``, on any contradictory answer).
The scratch home is deleted on PASS and kept (path printed) on FAIL.

    python bench/crash.py                          # 10 rounds, 3 workers, keyword-only
    python bench/crash.py --rounds 2 --seed 3
    python bench/crash.py --rounds 30 --model ../shared/models/all-MiniLM-L6-v2-onnx-int8

``--procs N`` runs the multi-process storm of ``_storm.py`` instead: N client processes
writing, kill -9 at random moments over ``--rounds`` rounds, then during a ``palace reembed``
(with a model; ``--no-reembed`` skips it) and during a ``remember_many`` of ``--bulk``
drawers (0 skips it), with keyword and vector recall checks and, at the end,
``integrity_check`` and the index file compared with the database:

    python bench/crash.py --procs 32 --rounds 10 --bulk 5000 \
        --model ../shared/models/all-MiniLM-L6-v2-onnx-int8
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _daemon import PrivateDaemon, add_daemon_args, all_drawers, launch, wait_ready

from palace_client import Client
from palace_client.transport.connection import Connection
from palaced.wire.errors import MemoryNotFound, PalaceError

PALACE = "crash"
WORKER_STUCK_S = 60.0
RESTART_TIMEOUT_S = 60.0
# Answers that settle nothing: the request may or may not have run.
UNKNOWN_CODES = frozenset({401})  # TIMEOUT: the op may still have completed


class TracingClient(Client):
    """A Client that counts the connections it opens (a second one within one call means
    the client reconnected and retried)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opens = 0

    def _connection(self) -> Connection:
        if self._conn is None:
            self.opens += 1
        return super()._connection()

    def traced(self, op: str, palace: str | None, args: dict[str, Any]
               ) -> tuple[dict[str, Any] | BaseException, bool]:
        """Run one call; returns (result or the exception, whether it retried)."""
        fresh = self._conn is None
        before = self.opens
        try:
            result: dict[str, Any] | BaseException = self.call(op, palace, args)
        except (PalaceError, OSError) as exc:
            result = exc
        return result, self.opens - before > (1 if fresh else 0)


def answer_of(result: dict[str, Any] | BaseException) -> str:
    """``ok``, the daemon's error name, or ``unknown`` (the op may or may not have run)."""
    if not isinstance(result, BaseException):
        return "ok"
    if isinstance(result, PalaceError) and result.code < 600 and (
            result.code not in UNKNOWN_CODES):
        return result.name
    return "unknown"


@dataclass
class Outcome:
    """One forget/create/delete: what the client said and what the state was before."""

    op: str
    target: str
    answer: str
    retried: bool  # the client reconnected during the call
    before: bool | None  # the target existed before the op (None: not known)
    span: tuple[float, float] = (0.0, 0.0)  # monotonic start and end of the call


@dataclass
class WorkerState:
    """What one worker sent and was told (read by the driver only while workers pause)."""

    sent: set[str] = field(default_factory=set)
    acked: dict[int, str] = field(default_factory=dict)  # id -> text, must be present
    recent: list[int] = field(default_factory=list)  # latest acked ids (checked by get)
    forget_pending: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (text, answer)
    unacked: dict[str, str] = field(default_factory=dict)  # text -> error name
    scratch: dict[str, bool | None] = field(default_factory=dict)  # name -> exists (belief)
    outcomes: list[Outcome] = field(default_factory=list)
    pending_ops: list[Outcome] = field(default_factory=list)  # resolved at the next check
    errors: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    retried: int = 0


class Worker(threading.Thread):
    """Writes until stopped; pauses when the driver checks the state."""

    def __init__(self, idx: int, daemon: PrivateDaemon, seed: int, autostart: bool,
                 run: threading.Event, stop: threading.Event) -> None:
        super().__init__(name=f"crash-{idx}", daemon=True)
        self.idx = idx
        self.rnd = random.Random(seed)
        self.client = TracingClient(daemon.sock, autostart=autostart,
                                    client_name=f"crash-{idx}")
        self.run_ev = run
        self.stop_ev = stop
        self.idle = threading.Event()
        self.state = WorkerState()
        self.serial = 0
        self.scratch_serial = 0
        self.crashed: str | None = None
        self.span = (0.0, 0.0)

    def text(self) -> str:
        self.serial += 1
        return (f"crash note cz{self.idx}x{self.serial} from worker {self.idx} "
                f"{self.rnd.getrandbits(40):x}")

    def run(self) -> None:
        try:
            while not self.stop_ev.is_set():
                if not self.run_ev.is_set():
                    self.idle.set()
                    self.run_ev.wait(0.05)
                    continue
                self.idle.clear()
                if not self.run_ev.is_set():  # paused between the check and clear
                    continue
                self.step()
        except Exception as exc:
            self.crashed = f"{type(exc).__name__}: {exc}"
        finally:
            self.idle.set()
            self.client.close()

    def step(self) -> None:
        roll = self.rnd.random()
        if roll < 0.72:
            self.remember()
        elif roll < 0.82:
            self.remember_many()
        elif roll < 0.9:
            self.forget()
        else:
            self.scratch_op()

    def call(self, op: str, palace: str | None, args: dict[str, Any]
             ) -> tuple[dict[str, Any] | BaseException, bool]:
        t0 = time.monotonic()
        result, retried = self.client.traced(op, palace, args)
        self.span = (t0, time.monotonic())
        self.state.counts[op] += 1
        if retried:
            self.state.retried += 1
        if isinstance(result, BaseException):
            name = result.name if isinstance(result, PalaceError) else type(result).__name__
            self.state.errors[f"{op}: {name}"] += 1
            if answer_of(result) == "unknown":
                time.sleep(0.02)  # the daemon is down: do not spin
        return result, retried

    def remember(self) -> None:
        text = self.text()
        st = self.state
        st.sent.add(text)
        result, _ = self.call("memory.remember", PALACE,
                              {"text": text, "room": f"r{self.idx}", "dedup": False})
        if isinstance(result, BaseException):
            st.unacked[text] = answer_of(result)
            return
        self.ack(int(result["id"]), text)

    def remember_many(self) -> None:
        texts = [self.text() for _ in range(self.rnd.randrange(2, 6))]
        st = self.state
        st.sent.update(texts)
        items = [{"text": t, "room": f"r{self.idx}"} for t in texts]
        result, _ = self.call("memory.remember_many", PALACE, {"items": items})
        if isinstance(result, BaseException):
            for t in texts:
                st.unacked[t] = answer_of(result)
            return
        for did, t in zip(result["ids"], texts, strict=True):
            self.ack(int(did), t)

    def ack(self, did: int, text: str) -> None:
        st = self.state
        st.acked[did] = text
        st.recent = [*st.recent[-9:], did]
        st.counts["acknowledged"] += 1

    def forget(self) -> None:
        st = self.state
        if not st.acked:
            self.remember()
            return
        did = self.rnd.choice(list(st.acked))
        text = st.acked.pop(did)
        result, retried = self.call("memory.forget", PALACE, {"id": did})
        answer = answer_of(result)
        st.forget_pending[did] = (text, answer)
        st.pending_ops.append(Outcome("forget", str(did), answer, retried, True, self.span))

    def scratch_op(self) -> None:
        st = self.state
        live = [n for n, exists in st.scratch.items() if exists is not False]
        if live:
            name = live[0]
            before = st.scratch[name]
            result, retried = self.call("palace.delete", name, {})
            op = "delete"
        else:
            self.scratch_serial += 1
            name = f"crash-s{self.idx}-{self.scratch_serial}"
            before = False
            result, retried = self.call("palace.create", name, {})
            op = "create"
        answer = answer_of(result)
        if answer == "ok":
            st.scratch[name] = op == "create"
        elif answer == "unknown":
            st.scratch[name] = None
        elif op == "create" and answer == "PALACE_EXISTS":
            st.scratch[name] = True
        elif op == "delete" and answer == "PALACE_NOT_FOUND":
            st.scratch[name] = False
        st.pending_ops.append(Outcome(op, name, answer, retried, before, self.span))


# -- the checks -----------------------------------------------------------------------------
@dataclass
class Totals:
    """Counters over all rounds."""

    rounds: int = 0
    kills: int = 0
    pids: list[int] = field(default_factory=list)
    lost: int = 0
    lost_by_forget: int = 0
    phantom: int = 0
    duplicates: int = 0
    search_checked: int = 0
    search_misses: int = 0
    info_bad: int = 0
    gets: int = 0
    unacked_present: int = 0
    unacked_absent: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    unknown_applied: Counter[str] = field(default_factory=Counter)
    contradictions: Counter[str] = field(default_factory=Counter)
    contradictions_retried: int = 0
    contradictions_crossed: int = 0
    kill_times: list[float] = field(default_factory=list)
    acked_not_applied: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def example(self, msg: str) -> None:
        if len(self.examples) < 12:
            self.examples.append(msg[:300])


def listing(ctl: Client) -> dict[int, str]:
    """Every drawer of the crash palace: id -> text."""
    return {int(d["id"]): str(d["text"]) for d in all_drawers(ctl, PALACE)}


def check_round(ctl: Client, workers: list[Worker], tot: Totals, rnd: random.Random,
                sample: int) -> None:
    """Check the state against what the workers were told (workers paused)."""
    stored = listing(ctl)
    by_text: dict[str, int] = {}
    for did, text in stored.items():
        if text in by_text:
            tot.duplicates += 1
            tot.example(f"text stored twice: ids {by_text[text]} and {did}")
        by_text[text] = did
    sent: set[str] = set().union(*(w.state.sent for w in workers))
    phantoms = [did for did, text in stored.items() if text not in sent]
    tot.phantom = max(tot.phantom, len(phantoms))  # the listing is cumulative: recount
    for did in phantoms[:3]:
        tot.example(f"phantom drawer {did}: {stored[did][:80]!r}")
    lost_now = 0
    for w in workers:
        st = w.state
        for did, text in st.acked.items():
            if stored.get(did) != text:
                lost_now += 1
                tot.example(f"lost acknowledged drawer {did} ({text[:40]!r}): "
                            f"{'absent' if did not in stored else 'text differs'}")
        for did in st.recent:
            if did in st.acked:
                tot.gets += 1
                try:
                    got = ctl.get(PALACE, did)["text"]
                except MemoryNotFound:
                    got = None
                if got != st.acked[did] and stored.get(did) == st.acked[did]:
                    lost_now += 1
                    tot.example(f"get({did}) disagrees with the listing: {str(got)[:60]!r}")
        for text, _answer in list(st.unacked.items()):
            if text in by_text:
                tot.unacked_present += 1
                st.acked[by_text[text]] = text  # stored after all: it must now stay
            else:
                tot.unacked_absent += 1
        st.unacked.clear()
        resolve_ops(ctl, w, stored, tot)
    tot.lost = max(tot.lost, lost_now)  # every acked drawer is rechecked each round
    search(ctl, workers, tot, rnd, sample)
    info = ctl.palace_info(PALACE)
    if info["drawers"] != len(stored) or info.get("consistent") is False or (
            info.get("mismatch")):
        tot.info_bad += 1
        keys = ("drawers", "vectors", "index", "consistent", "pending_embeddings", "mismatch")
        tot.example(f"palace.info {({k: info.get(k) for k in keys})} but {len(stored)} "
                    "drawers listed")


def resolve_ops(ctl: Client, w: Worker, stored: dict[int, str], tot: Totals) -> None:
    """Judge the worker's forget/create/delete answers of this round against the state."""
    st = w.state
    palaces = {p["name"] for p in ctl.list_palaces()}
    for o in st.pending_ops:
        tot.answers[f"{o.op} said {o.answer}"] += 1
        exists_now = (int(o.target) in stored) if o.op == "forget" else (o.target in palaces)
        applied = (not exists_now) if o.op in ("forget", "delete") else exists_now
        crossed = any(o.span[0] <= k <= o.span[1] for k in tot.kill_times)
        if o.op == "forget" and o.answer == "MEMORY_NOT_FOUND" and not (o.retried or crossed):
            # No kill during the call, so no lost reply: the acknowledged drawer was gone.
            tot.lost_by_forget += 1
            tot.example(f"forget {o.target}: MEMORY_NOT_FOUND, no kill during the call, for "
                        "an acknowledged drawer")
        contradiction = (
            (o.op == "forget" and o.answer == "MEMORY_NOT_FOUND" and (o.retried or crossed))
            or (o.op == "create" and o.answer == "PALACE_EXISTS" and o.before is False)
            or (o.op == "delete" and o.answer == "PALACE_NOT_FOUND" and o.before is True))
        if contradiction:
            tot.contradictions[f"{o.op} said {o.answer}"] += 1
            tot.contradictions_retried += int(o.retried)
            tot.contradictions_crossed += int(crossed)
            tot.example(f"{o.op} {o.target}: said {o.answer} (reconnected={o.retried}, "
                        f"crossed a kill={crossed}) although "
                        f"the target {'existed' if o.before else 'did not exist'} before")
        if o.answer == "unknown":
            tot.unknown_applied[f"{o.op} {'applied' if applied else 'not applied'}"] += 1
        latest = o is last_op_on(st.pending_ops, o.target)
        if o.answer == "ok" and latest and not applied:
            tot.acked_not_applied[o.op] += 1
            tot.example(f"acknowledged {o.op} of {o.target} did not take effect")
        if o.op == "forget":
            text, _ = st.forget_pending.pop(int(o.target), ("", ""))
            if exists_now and text:
                st.acked[int(o.target)] = text  # not forgotten: it must stay
        elif latest:
            st.scratch[o.target] = o.target in palaces  # the state is known again
    st.outcomes.extend(st.pending_ops)
    st.pending_ops = []


def last_op_on(ops: list[Outcome], target: str) -> Outcome | None:
    for o in reversed(ops):
        if o.target == target:
            return o
    return None


def search(ctl: Client, workers: list[Worker], tot: Totals, rnd: random.Random,
           sample: int) -> None:
    """Keyword (or hybrid) recall finds acknowledged drawers by their unique token."""
    pool = [(did, text) for w in workers for did, text in w.state.acked.items()]
    latest = [(did, w.state.acked[did]) for w in workers for did in w.state.recent[-1:]
              if did in w.state.acked]
    picks = latest + rnd.sample(pool, min(len(pool), max(0, sample - len(latest))))
    for did, text in picks:
        token = text.split()[2]  # czNxM
        tot.search_checked += 1
        hits = {int(r["id"]) for r in ctl.recall(PALACE, token, top_k=5)}
        if did not in hits:
            tot.search_misses += 1
            tot.example(f"recall {token!r} does not find drawer {did}")


# -- the run --------------------------------------------------------------------------------
def pause(workers: list[Worker], run: threading.Event) -> list[str]:
    """Stop the workers after their current op; returns the names of stuck ones."""
    run.clear()
    deadline = time.monotonic() + WORKER_STUCK_S
    for w in workers:
        w.idle.wait(max(0.0, deadline - time.monotonic()))
    return [w.name for w in workers if not w.idle.is_set() and w.is_alive()]


def restart(daemon: PrivateDaemon, mode: str, rnd: random.Random) -> None:
    """After a kill: in driver mode start the daemon again after a random delay; in client
    mode the workers' calls do it (or the control client at the check)."""
    if mode == "driver":
        time.sleep(rnd.uniform(0.0, 0.5))
        daemon.proc = launch(daemon.env, daemon.home / "palaced.stderr")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="kill -9 rounds")
    ap.add_argument("--workers", type=int, default=3, help="writer threads")
    ap.add_argument("--round-s", type=float, default=2.5,
                    help="longest write phase of a round before the kill (s)")
    ap.add_argument("--duration", type=float, default=60.0,
                    help="start no new round after this many seconds")
    ap.add_argument("--restart", choices=("client", "driver"), default="client",
                    help="who restarts the killed daemon: the clients' auto-start or this "
                         "script")
    ap.add_argument("--search-sample", type=int, default=10,
                    help="acknowledged drawers looked up by recall each round")
    ap.add_argument("--seed", type=int, default=1, help="seed of kill times and texts")
    ap.add_argument("--strict-retries", action="store_true",
                    help="also fail on contradictory answers of retried ops")
    ap.add_argument("--procs", type=int, default=0,
                    help="run the multi-process storm (_storm.py) with this many writers")
    ap.add_argument("--bulk", type=int, default=5000,
                    help="storm: drawers of the remember_many killed mid-way (0: skip)")
    ap.add_argument("--no-reembed", dest="reembed", action="store_false",
                    help="storm: skip the kill during palace reembed")
    add_daemon_args(ap)
    args = ap.parse_args()
    if args.procs:
        import _storm

        return _storm.run(args)

    daemon = PrivateDaemon("palcrash-", args.model, args.tiktoken)
    daemon.adopt_env()  # clients that auto-start a daemon start it under the scratch home
    rnd = random.Random(args.seed)
    tot = Totals()
    reasons: list[str] = []
    run_ev, stop_ev = threading.Event(), threading.Event()
    workers: list[Worker] = []
    mode = "?"
    t0 = time.monotonic()
    try:
        status = daemon.start()
        mode = status["mode"]
        tot.pids.append(int(status["pid"]))
        with daemon.client("crash-setup") as c:
            c.create_palace(PALACE)
        workers = [Worker(i, daemon, args.seed * 100 + i, args.restart == "client", run_ev,
                          stop_ev) for i in range(args.workers)]
        for w in workers:
            w.start()
        ctl = daemon.client("crash-check", autostart=args.restart == "client")
        while tot.rounds < args.rounds and time.monotonic() - t0 < args.duration:
            run_ev.set()
            time.sleep(rnd.uniform(0.2, max(0.2, args.round_s)))
            tot.kill_times.append(time.monotonic())
            if daemon.kill9() is not None:
                tot.kills += 1
            restart(daemon, args.restart, rnd)
            time.sleep(rnd.uniform(0.0, 0.3))  # let the workers hit the dead socket
            stuck = pause(workers, run_ev)
            if stuck:
                reasons.append(f"workers stuck in a call for {WORKER_STUCK_S:.0f}s: {stuck}")
                break
            ctl.close()
            status = wait_ready(None, daemon.sock, RESTART_TIMEOUT_S, "crash-ready") if (
                args.restart == "driver") else ctl.status()
            tot.pids.append(int(status["pid"]))
            check_round(ctl, workers, tot, rnd, args.search_sample)
            tot.rounds += 1
        ctl.close()
    except Exception as exc:
        reasons.append(f"crash check aborted: {exc!r}")
    finally:
        stop_ev.set()
        run_ev.set()
        for w in workers:
            w.join(WORKER_STUCK_S)
        shutdown = daemon.stop()
    elapsed = time.monotonic() - t0
    reasons += [f"{w.name} crashed: {w.crashed}" for w in workers if w.crashed]
    for what, n in (("lost acknowledged writes", tot.lost + tot.lost_by_forget),
                    ("phantom drawers", tot.phantom),
                    ("texts stored twice", tot.duplicates),
                    ("acknowledged forget/create/delete not applied",
                     sum(tot.acked_not_applied.values())),
                    ("recall misses", tot.search_misses),
                    ("palace.info disagreements", tot.info_bad)):
        if n:
            reasons.append(f"{n} {what}")
    if args.strict_retries and tot.contradictions:
        reasons.append(f"{sum(tot.contradictions.values())} contradictory retry answers")
    report = print_report(args, tot, workers, mode, elapsed, shutdown, reasons)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    daemon.cleanup(keep=bool(reasons) or args.keep_home)
    return 1 if reasons else 0


def print_report(args: argparse.Namespace, tot: Totals, workers: list[Worker], mode: str,
                 elapsed: float, shutdown: dict[str, Any], reasons: list[str]
                 ) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    retried = 0
    for w in workers:
        counts.update(w.state.counts)
        errors.update(w.state.errors)
        retried += w.state.retried
    acked = counts["acknowledged"]
    report: dict[str, Any] = {
        "rounds": tot.rounds, "kills": tot.kills, "workers": args.workers, "mode": mode,
        "restart": args.restart, "seed": args.seed, "elapsed_s": round(elapsed, 1),
        "daemon_pids": tot.pids, "acknowledged_writes": acked, "calls": dict(counts),
        "errors": dict(errors), "retried_calls": retried,
        "unacknowledged_present": tot.unacked_present,
        "unacknowledged_absent": tot.unacked_absent, "lost": tot.lost + tot.lost_by_forget,
        "phantom": tot.phantom, "duplicates": tot.duplicates, "gets": tot.gets,
        "search_checked": tot.search_checked, "search_misses": tot.search_misses,
        "info_disagreements": tot.info_bad, "answers": dict(tot.answers),
        "unknown_outcomes": dict(tot.unknown_applied),
        "contradictions": dict(tot.contradictions),
        "contradictions_reconnected": tot.contradictions_retried,
        "contradictions_crossing_a_kill": tot.contradictions_crossed,
        "acked_not_applied": dict(tot.acked_not_applied), "shutdown": shutdown,
        "examples": tot.examples, "result": "FAIL" if reasons else "PASS", "reasons": reasons}
    print(f"palace crash check: seed {args.seed}, {args.workers} workers, mode {mode}, "
          f"restart by {args.restart}, {elapsed:.1f} s")
    rows = [
        ("rounds (kill -9 + restart + check)", f"{tot.rounds} ({tot.kills} kills, "
                                               f"{len(set(tot.pids))} daemon pids)"),
        ("calls", f"{sum(v for k, v in counts.items() if k != 'acknowledged'):,}"),
        ("acknowledged writes", f"{acked:,}"),
        ("unacknowledged remembers", f"{tot.unacked_present + tot.unacked_absent:,} "
                                     f"(stored anyway {tot.unacked_present}, absent "
                                     f"{tot.unacked_absent})"),
        ("lost acknowledged writes", f"{tot.lost + tot.lost_by_forget}"),
        ("phantom drawers", f"{tot.phantom}"),
        ("texts stored twice", f"{tot.duplicates}"),
        ("recall checks / misses", f"{tot.search_checked} / {tot.search_misses}"),
        ("get checks", f"{tot.gets}"),
        ("palace.info disagreements", f"{tot.info_bad}"),
        ("calls that reconnected and retried", f"{retried}"),
    ]
    for label, value in rows:
        print(f"{label:<38}{value}")
    print(f"{'forget/create/delete answers':<38}{dict(sorted(tot.answers.items()))}")
    print(f"{'outcome unknown, resolved':<38}{dict(sorted(tot.unknown_applied.items()))}")
    print(f"{'acknowledged but not applied':<38}{sum(tot.acked_not_applied.values())} "
          f"{dict(tot.acked_not_applied)}")
    print(f"retried ops whose answer contradicted the final state: "
          f"{sum(tot.contradictions.values())} {dict(tot.contradictions)} "
          f"(reconnected mid-call: {tot.contradictions_retried}, during a kill: "
          f"{tot.contradictions_crossed})")
    print(f"{'errors seen by the workers':<38}{dict(sorted(errors.items()))}")
    print(f"{'shutdown':<38}{shutdown}")
    for ex in tot.examples:
        print(f"  {ex}")
    print(f"RESULT: {report['result']}" + ("" if not reasons else "  -- " + "; ".join(reasons)))
    return report


if __name__ == "__main__":
    sys.exit(main())
