"""Prompt-time recall as Claude Code runs it: ``palace hook prompt`` per prompt, LoCoMo dev.

A private daemon (scratch ``PALACE_HOME``; the real model unless ``--keyword-only``) gets one
palace per LoCoMo conversation, ingested as ``bench/locomo.py`` does (one drawer per turn, a
few thousand in all). Then every question (at most ``--questions`` per conversation, the
first ones) is a prompt: the hook runs in a fresh process (the console script when on PATH),
fed the UserPromptSubmit input on stdin, timed from spawn to exit. Measured:

* **latency, warm daemon**: p50/p95/max of those runs (each its own session, so each also
  fetches the session's wake-up once, the first-prompt path), of the prompts of the
  realistic sessions below (``in session``: the recall alone), and the floor, the same
  interpreter started to do nothing;
* **CPU time**: the hook process's (user + system, p50/p95 over the warm runs) and the
  daemon's per prompt (its /proc counters over the warm runs, divided by their number):
  what a quiet machine's wall time is made of, hardly changed by a shared machine's load;
* **latency, cold daemon**: the first prompt after a daemon start, ``--restarts`` times (the
  daemon stopped and started again, the hook run once its model is loaded: the palace is
  opened and every cache is cold), and whether it still injected within its time box;
* **daemon down**: the same hook against a home where no daemon runs (the hook never
  starts one: it returns and injects nothing);
* **answerable** (the question in its own conversation's palace, categories 1-4, with gold
  turns, each its own session): the share where a gold turn's drawer is in the injected
  text, the share that injected anything, and the cl100k tokens injected per prompt (mean,
  p95, max; 0 for none);
* **unanswerable** (the question in the next conversation's palace, so its people and events
  are not there): the share that injected anything (noise);
* **realistic session**: one session per conversation in its palace, its prompts alternating
  its own questions and the next conversation's (what the palace cannot answer), in a row,
  so that nothing already shown is injected again: per prompt, the share that got a relevant
  memory (a gold turn), the share that got noise (something injected, no gold turn; for the
  unanswerable ones anything), the share of answerable prompts whose gold turn is in the
  agent's context (injected now or by an earlier prompt of the session: the hook does not
  inject it twice), the tokens injected, and the share of injections whose
  heading states the text's exact token count (a hook that drops lines after packing makes
  it an upper bound). ``--compare TREE`` runs the same sessions with the hook of another
  checkout too (its ``PYTHONPATH``; e.g. ``git worktree add /tmp/old REV``), against the same
  daemon: before and after in one run.

    PYTHONPATH=. python bench/prompt_hook.py [--conversations 5] [--questions 40]
        [--restarts 5] [--repeat 20] [--compare TREE] [--keyword-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon, private_env
from locomo import DEFAULT_DATA, _wait_embedded, _wait_model, build_drawers, build_questions

from palaced.engine.tokens import Tokenizer

_HEAD = re.compile(r"^#(\d+) ", re.MULTILINE)  # a drawer's line in the compact recall
_STATED = re.compile(r"^Recall in palace '[^']*' \(mode \w+, (\d+) of \d+ tokens")


def hook_argv() -> list[str]:
    exe = shutil.which("palace")
    return [exe, "hook", "prompt"] if exe else [
        sys.executable, "-c", "from palace_client.entry import main; main()", "hook", "prompt"]


# CPU milliseconds (user + system) of every hook process run: unlike wall times, hardly
# changed by the load of a shared machine.
HOOK_CPU: list[float] = []


def children_cpu_ms() -> float:
    """CPU milliseconds of this process's reaped children (the hooks; the daemon is reaped
    only when stopped)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (use.ru_utime + use.ru_stime) * 1000


def process_cpu_ms(pid: int | None) -> float:
    """CPU milliseconds process ``pid`` has used so far (Linux /proc; 0 when unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def run_hook(env: dict[str, str], palace: str, question: str, session: str
             ) -> tuple[float, str]:
    """One hook process: its wall milliseconds and what it injected ("" for nothing); its
    CPU time goes to ``HOOK_CPU``.

    Raises:
        RuntimeError: the hook exited non-zero or wrote to stderr.
    """
    stdin = json.dumps({"session_id": session, "transcript_path": "/nonexistent.jsonl",
                        "cwd": "/", "hook_event_name": "UserPromptSubmit",
                        "prompt": question})
    cpu, started = children_cpu_ms(), time.perf_counter()
    res = subprocess.run([*hook_argv(), "--palace", palace], input=stdin, env=env,
                         capture_output=True, text=True, timeout=30)
    took = (time.perf_counter() - started) * 1000
    HOOK_CPU.append(children_cpu_ms() - cpu)
    if res.returncode != 0 or res.stderr:
        raise RuntimeError(f"hook failed: {res.returncode} {res.stderr!r}")
    if not res.stdout:
        return took, ""
    return took, str(json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 1), "p95_ms": round(pct(values, 95), 1),
            "max_ms": round(max(values), 1), "runs": len(values)}


def token_summary(values: list[int]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 1), "p95": pct([float(v) for v in values], 95),
            "max": max(values)}


def ingest(daemon: PrivateDaemon, names: list[str], samples: list[dict[str, Any]],
           keyword_only: bool) -> tuple[list[dict[int, str]], int, str]:
    """One palace per conversation, one drawer per turn (embedded before returning): the
    LoCoMo turn of each drawer id per palace, the drawer count and the daemon's mode."""
    turn_of: list[dict[int, str]] = []
    n_drawers = 0
    with daemon.client("bench-prompt") as c:
        if not keyword_only:
            _wait_model(c, 300)
        for name, sample in zip(names, samples, strict=True):
            c.create_palace(name)
            drawers = build_drawers(sample["conversation"])
            ids = c.remember_many(name, [d.item for d in drawers])
            if not keyword_only:
                _wait_embedded(c, name, 600)
            turn_of.append({i: d.dia_id for i, d in zip(ids, drawers, strict=True)})
            n_drawers += len(drawers)
        mode = str(c.status().get("mode"))
    return turn_of, n_drawers, mode


class Session:
    """The figures of realistic sessions run with one hook (one tree's code)."""

    def __init__(self, env: dict[str, str], tok: Tokenizer) -> None:
        self.env, self.tok = env, tok
        self.latency: list[float] = []
        self.tokens: list[int] = []
        self.answerable = self.relevant = self.noise_answerable = self.in_context = 0
        self.shown: dict[str, set[str]] = {}  # the turns each session was injected so far
        self.unanswerable = self.noise_unanswerable = 0
        self.injections = self.exact_heading = 0

    def prompt(self, palace: str, question: str, session: str, gold: set[str] | None,
               turn_of: dict[int, str]) -> None:
        """One prompt of a session; ``gold`` the gold turns (None: not answerable here)."""
        took, text = run_hook(self.env, palace, question, session)
        self.latency.append(took)
        self.tokens.append(self.tok.count(text) if text else 0)
        if text:
            self.injections += 1
            stated = _STATED.match(text)
            self.exact_heading += bool(stated and int(stated.group(1)) == self.tokens[-1])
        if gold is None:
            self.unanswerable += 1
            self.noise_unanswerable += bool(text)
            return
        self.answerable += 1
        turns = {turn_of.get(int(m)) for m in _HEAD.findall(text)}
        hit = bool(turns & gold)
        self.relevant += hit
        self.noise_answerable += bool(text) and not hit
        # Injected now or by an earlier prompt of the session: in the agent's context.
        before = self.shown.setdefault(session, set())
        self.in_context += hit or bool(before & gold)
        before.update(t for t in turns if t is not None)

    def report(self) -> dict[str, Any]:
        """The figures as the JSON report holds them."""
        prompts = self.answerable + self.unanswerable
        noise = self.noise_answerable + self.noise_unanswerable
        return {
            "prompts": prompts, "answerable": self.answerable,
            "unanswerable": self.unanswerable,
            "relevant_share": round(self.relevant / max(prompts, 1), 3),
            "noise_share": round(noise / max(prompts, 1), 3),
            "answerable_gold_injected": round(self.relevant / max(self.answerable, 1), 3),
            "answerable_gold_in_context": round(self.in_context / max(self.answerable, 1),
                                                3),
            "answerable_noise": round(self.noise_answerable / max(self.answerable, 1), 3),
            "unanswerable_noise": round(self.noise_unanswerable / max(self.unanswerable, 1),
                                        3),
            "tokens_per_prompt": token_summary(self.tokens or [0]),
            "injected_share": round(self.injections / max(prompts, 1), 3),
            "exact_heading_share": round(self.exact_heading / max(self.injections, 1), 3),
            "latency": summary(self.latency or [0.0]),
        }


def cold_runs(daemon: PrivateDaemon, env: dict[str, str], names: list[str],
              samples: list[dict[str, Any]], restarts: int
              ) -> tuple[list[float], list[float], int]:
    """The first prompt after each of ``restarts`` daemon starts (model loaded, caches
    cold): wall milliseconds, the daemon's CPU milliseconds meanwhile, and how many
    injected something."""
    took_ms: list[float] = []
    daemon_ms: list[float] = []
    injected = 0
    for r in range(restarts):
        daemon.stop()
        daemon.start()  # returns once the model is no longer loading
        i = r % len(names)
        question = build_questions(samples[i])[r // len(names)].question
        cpu = process_cpu_ms(daemon.pid())
        took, text = run_hook(env, names[i], question, uuid.uuid4().hex)
        daemon_ms.append(process_cpu_ms(daemon.pid()) - cpu)
        took_ms.append(took)
        injected += bool(text)
    return took_ms, daemon_ms, injected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--questions", type=int, default=40, help="prompts per conversation")
    ap.add_argument("--restarts", type=int, default=5, help="daemon starts for the cold case")
    ap.add_argument("--repeat", type=int, default=20,
                    help="runs of the daemon-down hook and of the bare interpreter")
    ap.add_argument("--compare", type=Path, help="another checkout whose hook runs the "
                    "realistic sessions too (before/after)")
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    tok = Tokenizer.load(DEFAULT_TIKTOKEN)
    daemon = PrivateDaemon("pal-prompt-", None if args.keyword_only else DEFAULT_MODEL,
                           DEFAULT_TIKTOKEN)
    down_home = Path(tempfile.mkdtemp(prefix="pal-promptdown-", dir="/tmp"))
    names = [f"locomo-{i}" for i in range(len(samples))]
    try:
        daemon.start()
        turn_of, n_drawers, mode = ingest(daemon, names, samples, args.keyword_only)
        env = {**daemon.env, "PATH": os.environ.get("PATH", "")}
        env.pop("CLAUDE_PROJECT_DIR", None)
        run_hook(env, names[0], "warm-up question", uuid.uuid4().hex)
        hooks = {"this tree": Session(env, tok)}
        if args.compare:
            import compileall  # as launch() does for this tree: no import compiles

            for package in ("palaced", "palace_client"):
                compileall.compile_dir(args.compare / package, quiet=1)
            hooks[str(args.compare)] = Session(
                {**env, "PYTHONPATH": str(args.compare.resolve())}, tok)

        HOOK_CPU.clear()
        daemon_cpu = process_cpu_ms(daemon.pid())
        latency: list[float] = []
        found = injected_any = answerable = 0
        tokens: list[int] = []
        noise = unanswerable = 0
        for i, sample in enumerate(samples):
            questions = build_questions(sample)[: args.questions]
            j = (i + 1) % len(names)
            others = build_questions(samples[j])[: args.questions] if j != i else []
            sessions = {label: uuid.uuid4().hex for label in hooks}  # one per conversation
            for n, q in enumerate(questions):
                took, text = run_hook(env, names[i], q.question, uuid.uuid4().hex)
                latency.append(took)
                gold = set(q.gold_turns) if q.category in (1, 2, 3, 4) and q.gold_turns else None
                if gold:
                    answerable += 1
                    shown = {turn_of[i].get(int(m)) for m in _HEAD.findall(text)}
                    found += bool(shown & gold)
                    injected_any += bool(text)
                    tokens.append(tok.count(text) if text else 0)
                if others:
                    _, text = run_hook(env, names[i], others[n % len(others)].question,
                                       uuid.uuid4().hex)
                    unanswerable += 1
                    noise += bool(text)
                # The realistic sessions: this prompt, then (when there is one) another
                # conversation's question, in the same session, with each hook compared.
                for label, hook in hooks.items():
                    if gold:
                        hook.prompt(names[i], q.question, sessions[label], gold, turn_of[i])
                    if others:
                        hook.prompt(names[i], others[n % len(others)].question,
                                    sessions[label], None, turn_of[i])
        warm_runs = len(HOOK_CPU)
        daemon_cpu = (process_cpu_ms(daemon.pid()) - daemon_cpu) / max(warm_runs, 1)
        hook_cpu = summary(HOOK_CPU or [0.0])
        floor = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            floor.append((time.perf_counter() - started) * 1000)
        down_env = {**private_env(down_home, None, None), "PATH": os.environ.get("PATH", "")}
        down = [run_hook(down_env, "locomo-0", "what did Caroline research?",
                         uuid.uuid4().hex)[0] for _ in range(args.repeat)]
        daemon_ran = (down_home / "run").exists() and any((down_home / "run").iterdir())
        cold, cold_daemon, cold_injected = cold_runs(daemon, env, names, samples,
                                                     args.restarts)
    finally:
        daemon.stop()
        shutil.rmtree(daemon.home, ignore_errors=True)
        shutil.rmtree(down_home, ignore_errors=True)
    sessions_report = {label: hook.report() for label, hook in hooks.items()}
    report: dict[str, Any] = {
        "mode": mode, "drawers": n_drawers, "prompts": len(latency),
        "budget_tokens": 300, "latency_warm": summary(latency or [0.0]),
        "latency_warm_in_session": sessions_report["this tree"]["latency"],
        "hook_cpu_warm": hook_cpu, "daemon_cpu_per_prompt_ms": round(daemon_cpu, 1),
        "latency_cold_first_prompt": summary(cold or [0.0]),
        "cold_injected": cold_injected, "daemon_cpu_cold_ms": summary(cold_daemon or [0.0]),
        # The cold runs are the last hooks run.
        "hook_cpu_cold": summary(HOOK_CPU[-len(cold):] if cold else [0.0]),
        "daemon_down": summary(down),
        "python_start": summary(floor), "daemon_started_when_down": daemon_ran,
        "answerable": answerable,
        "gold_in_injection": round(found / max(answerable, 1), 3),
        "injected_any_answerable": round(injected_any / max(answerable, 1), 3),
        "tokens_per_prompt": token_summary(tokens or [0]),
        "unanswerable": unanswerable,
        "injected_any_unanswerable": round(noise / max(unanswerable, 1), 3),
        "sessions": sessions_report,
    }
    print(f"palace hook prompt, LoCoMo dev: {len(samples)} conversations, {n_drawers} drawers, "
          f"mode {mode}, {len(latency)} prompts")
    for case in ("latency_warm", "latency_warm_in_session", "hook_cpu_warm",
                 "latency_cold_first_prompt", "daemon_down", "python_start"):
        r = report[case]
        print(f"  {case.replace('_', ' '):26} p50 {r['p50_ms']:6.1f} ms   p95 "
              f"{r['p95_ms']:6.1f} ms   max {r['max_ms']:6.1f} ms   ({r['runs']} runs)")
    print(f"  daemon CPU per warm prompt (mean of {warm_runs}): "
          f"{report['daemon_cpu_per_prompt_ms']} ms")
    print(f"  cold: {cold_injected} of {len(cold)} first prompts injected within the time box; "
          f"CPU p50/max: hook {report['hook_cpu_cold']['p50_ms']}/"
          f"{report['hook_cpu_cold']['max_ms']} ms, daemon "
          f"{report['daemon_cpu_cold_ms']['p50_ms']}/{report['daemon_cpu_cold_ms']['max_ms']} ms")
    t = report["tokens_per_prompt"]
    print(f"  answerable {answerable}: gold turn injected {report['gold_in_injection']:.3f}, "
          f"anything injected {report['injected_any_answerable']:.3f}; tokens/prompt mean "
          f"{t['mean']} p95 {t['p95']} max {t['max']}")
    print(f"  unanswerable {unanswerable} (another conversation's questions): anything "
          f"injected {report['injected_any_unanswerable']:.3f}")
    for label, r in sessions_report.items():
        s = r["tokens_per_prompt"]
        print(f"  realistic sessions, hook of {label}: {r['prompts']} prompts "
              f"({r['answerable']} answerable, {r['unanswerable']} not): relevant "
              f"{r['relevant_share']:.3f}, noise {r['noise_share']:.3f} (answerable: gold "
              f"{r['answerable_gold_injected']:.3f}, gold in context "
              f"{r['answerable_gold_in_context']:.3f}, noise {r['answerable_noise']:.3f}; "
              f"unanswerable: noise {r['unanswerable_noise']:.3f}); injected "
              f"{r['injected_share']:.3f}, tokens/prompt mean {s['mean']} p95 {s['p95']} "
              f"max {s['max']}; heading exact {r['exact_heading_share']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
