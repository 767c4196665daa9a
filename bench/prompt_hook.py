"""Prompt-time recall as Claude Code runs it: ``palace hook prompt`` per prompt, LoCoMo dev.

A private daemon (scratch ``PALACE_HOME``; the real model unless ``--keyword-only``) gets one
palace per LoCoMo conversation, ingested as ``bench/locomo.py`` does (one drawer per turn, a
few thousand in all). Then every question (at most ``--questions`` per conversation, the
first ones) is a prompt: the hook runs in a fresh process (the console script when on PATH),
fed the UserPromptSubmit input on stdin, timed from spawn to exit. Measured:

* **latency, warm daemon**: p50/p95/max of those runs (each its own session, so each also
  fetches the session's wake-up once, the first-prompt path), of the same prompts as later
  prompts of one session (``in session``: the recall alone), and the floor, the same
  interpreter started to do nothing;
* **daemon down**: the same hook against a home where no daemon runs (the hook never
  starts one: it returns and injects nothing);
* **answerable** (the question in its own conversation's palace, categories 1-4, with gold
  turns): the share where a gold turn's drawer is in the injected text, the share that
  injected anything, and the cl100k tokens injected per prompt (mean, p95, max; 0 for none);
* **unanswerable** (the question in the next conversation's palace, so its people and events
  are not there): the share that injected anything (noise);
* **one session** per conversation (all its prompts in a row): the tokens injected per
  prompt when nothing already shown is injected again.

    PYTHONPATH=. python bench/prompt_hook.py [--conversations 5] [--questions 40]
        [--keyword-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def hook_argv() -> list[str]:
    exe = shutil.which("palace")
    return [exe, "hook", "prompt"] if exe else [
        sys.executable, "-c", "from palace_client.entry import main; main()", "hook", "prompt"]


def run_hook(env: dict[str, str], palace: str, question: str, session: str
             ) -> tuple[float, str]:
    """One hook process: its wall milliseconds and what it injected ("" for nothing)."""
    stdin = json.dumps({"session_id": session, "transcript_path": "/nonexistent.jsonl",
                        "cwd": "/", "hook_event_name": "UserPromptSubmit",
                        "prompt": question})
    started = time.perf_counter()
    res = subprocess.run([*hook_argv(), "--palace", palace], input=stdin, env=env,
                         capture_output=True, text=True, timeout=30)
    took = (time.perf_counter() - started) * 1000
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", type=int, default=5)
    ap.add_argument("--questions", type=int, default=40, help="prompts per conversation")
    ap.add_argument("--keyword-only", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    tok = Tokenizer.load(DEFAULT_TIKTOKEN)
    daemon = PrivateDaemon("pal-prompt-", None if args.keyword_only else DEFAULT_MODEL,
                           DEFAULT_TIKTOKEN)
    down_home = Path(tempfile.mkdtemp(prefix="pal-promptdown-", dir="/tmp"))
    names = [f"locomo-{i}" for i in range(len(samples))]
    turn_of: list[dict[int, str]] = []
    mode = "?"
    try:
        daemon.start()
        with daemon.client("bench-prompt") as c:
            if not args.keyword_only:
                _wait_model(c, 300)
            n_drawers = 0
            for name, sample in zip(names, samples, strict=True):
                c.create_palace(name)
                drawers = build_drawers(sample["conversation"])
                ids = c.remember_many(name, [d.item for d in drawers])
                if not args.keyword_only:
                    _wait_embedded(c, name, 600)
                turn_of.append({i: d.dia_id for i, d in zip(ids, drawers, strict=True)})
                n_drawers += len(drawers)
            mode = str(c.status().get("mode"))
        env = {**daemon.env, "PATH": os.environ.get("PATH", "")}
        env.pop("CLAUDE_PROJECT_DIR", None)
        run_hook(env, names[0], "warm-up question", uuid.uuid4().hex)

        latency: list[float] = []
        found = injected_any = answerable = 0
        tokens: list[int] = []
        noise = unanswerable = 0
        session_tokens: list[int] = []
        session_latency: list[float] = []
        for i, sample in enumerate(samples):
            questions = build_questions(sample)[: args.questions]
            other = names[(i + 1) % len(names)]
            session = uuid.uuid4().hex  # the conversation's one session
            for q in questions:
                took, text = run_hook(env, names[i], q.question, uuid.uuid4().hex)
                latency.append(took)
                if q.category in (1, 2, 3, 4) and q.gold_turns:
                    answerable += 1
                    shown = {turn_of[i].get(int(m)) for m in _HEAD.findall(text)}
                    found += bool(shown & set(q.gold_turns))
                    injected_any += bool(text)
                    tokens.append(tok.count(text) if text else 0)
                if len(names) > 1:
                    _, text = run_hook(env, other, q.question, uuid.uuid4().hex)
                    unanswerable += 1
                    noise += bool(text)
                took, text = run_hook(env, names[i], q.question, session)
                session_latency.append(took)
                session_tokens.append(tok.count(text) if text else 0)
        floor = []
        for _ in range(20):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            floor.append((time.perf_counter() - started) * 1000)
        down_env = {**private_env(down_home, None, None), "PATH": os.environ.get("PATH", "")}
        down = [run_hook(down_env, "locomo-0", "what did Caroline research?",
                         uuid.uuid4().hex)[0] for _ in range(20)]
        daemon_ran = (down_home / "run").exists() and any((down_home / "run").iterdir())
    finally:
        daemon.stop()
        shutil.rmtree(daemon.home, ignore_errors=True)
        shutil.rmtree(down_home, ignore_errors=True)
    report: dict[str, Any] = {
        "mode": mode, "drawers": n_drawers, "prompts": len(latency),
        "budget_tokens": 300, "latency_warm": summary(latency),
        "latency_warm_in_session": summary(session_latency), "daemon_down": summary(down),
        "python_start": summary(floor), "daemon_started_when_down": daemon_ran,
        "answerable": answerable,
        "gold_in_injection": round(found / max(answerable, 1), 3),
        "injected_any_answerable": round(injected_any / max(answerable, 1), 3),
        "tokens_per_prompt": token_summary(tokens or [0]),
        "unanswerable": unanswerable,
        "injected_any_unanswerable": round(noise / max(unanswerable, 1), 3),
        "session_tokens_per_prompt": token_summary(session_tokens or [0]),
    }
    print(f"palace hook prompt, LoCoMo dev: {len(samples)} conversations, {n_drawers} drawers, "
          f"mode {mode}, {len(latency)} prompts")
    for case in ("latency_warm", "latency_warm_in_session", "daemon_down", "python_start"):
        r = report[case]
        print(f"  {case.replace('_', ' '):23} p50 {r['p50_ms']:6.1f} ms   p95 "
              f"{r['p95_ms']:6.1f} ms   max {r['max_ms']:6.1f} ms")
    t, s = report["tokens_per_prompt"], report["session_tokens_per_prompt"]
    print(f"  answerable {answerable}: gold turn injected {report['gold_in_injection']:.3f}, "
          f"anything injected {report['injected_any_answerable']:.3f}; tokens/prompt mean "
          f"{t['mean']} p95 {t['p95']} max {t['max']}")
    print(f"  unanswerable {unanswerable} (another conversation's questions): anything "
          f"injected {report['injected_any_unanswerable']:.3f}")
    print(f"  one session per conversation: tokens/prompt mean {s['mean']} p95 {s['p95']} "
          f"max {s['max']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
