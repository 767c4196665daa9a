"""What the agent sees: LoCoMo dev questions through the MCP ``recall`` tool, with its defaults.

A private daemon (scratch ``PALACE_HOME``, the real model) gets one palace per LoCoMo
conversation, ingested as ``bench/locomo.py`` does (one drawer per turn). Every question is
then asked twice:

* **engine**: ``memory.recall`` (``top_k`` 10), scored on its ``results`` ranking;
* **agent-visible**: the MCP bridge's ``recall`` tool with the question as its only argument
  (so every default applies: levels, budget, top_k), run in-process through
  ``palace_client.mcp.toolbox.Toolbox`` against that same daemon over its socket (the code
  path ``palace mcp`` runs per tool call, without one bridge process per conversation). The
  drawers the output shows (``#id`` heads, in output order, each counted once) whose whole
  text appears in the output make the visible ranking.

Both are scored as ``bench/locomo.py`` does (turn recall@k = |gold ∩ top-k| / |gold|, averaged
over questions); also reported: the share of questions whose gold turn is visible at all, and
with ``levels`` [0, 1, 2, 3] (the essentials asked for) for comparison; the engine's results
in the order of their printed 0-1 relevance (``by relevance``); and what the default output
costs: its cl100k tokens over the budget (the largest ratio), the share of the answerable
questions (categories 1-4) answered "nothing relevant" (each an error) and the tokens of a
miss. Last, what every session pays before any call: the cl100k tokens of ``tools/list`` as
compact JSON, for the default toolset and for every toolset served.

    PYTHONPATH=. python bench/agent_visible.py [--data PATH] [--conversations N] [--json out]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from locomo import (
    DEFAULT_DATA,
    _wait_embedded,
    _wait_model,
    build_drawers,
    build_questions,
    palace_name,
    recall_at_k,
)

from palace_client.mcp.toolbox import Toolbox
from palace_client.mcp.tools import tools_of
from palaced.engine.tokens import Tokenizer
from palaced.wire.specs import MCP_TOOLSETS, parse_toolsets

KS = (1, 5, 10)
_HEAD = re.compile(r"^- #(\d+) ", re.MULTILINE)


def visible_ranking(text: str, drawer_text: dict[int, str]) -> list[int]:
    """Drawer ids in the order the output shows them, kept when their whole text is shown."""
    seen: list[int] = []
    for m in _HEAD.finditer(text):
        did = int(m.group(1))
        if did in seen:
            continue
        body = drawer_text.get(did)
        if body is not None and all(line.strip() in text for line in body.splitlines()):
            seen.append(did)
    return seen


def tools_list_tokens(tok: Tokenizer, toolsets: tuple[str, ...]) -> tuple[int, int]:
    """How many tools ``tools/list`` serves for ``toolsets`` and its cl100k tokens as compact
    JSON (what an agent session carries before any call)."""
    tools = [spec.to_mcp() for spec in tools_of(toolsets)]
    return len(tools), tok.count(json.dumps({"tools": tools}, separators=(",", ":"),
                                            ensure_ascii=False))


def mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", type=int)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    daemon = PrivateDaemon("pal-agentvis-", DEFAULT_MODEL, DEFAULT_TIKTOKEN)
    daemon.start()
    scores: dict[str, dict[int, list[float]]] = {
        key: {k: [] for k in KS} for key in ("engine", "by_relevance", "agent", "agent_l1")}
    visible_any: list[float] = []
    tok = Tokenizer.load(DEFAULT_TIKTOKEN)
    ratios: list[float] = []
    misses: list[int] = []  # tokens of each default output that says nothing is relevant
    answerable = 0  # questions of categories 1-4 (the answer is stored)
    try:
        with daemon.client("bench-agent-visible") as client:
            _wait_model(client, 120)
            for sample in samples:
                name = palace_name(str(sample["sample_id"]))
                client.create_palace(name)
                drawers = build_drawers(sample["conversation"])
                ids = client.remember_many(name, [d.item for d in drawers])
                _wait_embedded(client, name, 600)
                turn_of = {int(i): d.dia_id for i, d in zip(ids, drawers, strict=True)}
                text_of = {int(i): str(d.item["text"]) for i, d in zip(ids, drawers, strict=True)}
                box = Toolbox(lambda: daemon.client("bench-agent-visible-mcp"), name)
                for q in build_questions(sample):
                    res = client.recall_ex(name, q.question, top_k=10)
                    engine = [turn_of[int(r["id"])] for r in res["results"]]
                    by_relevance = [turn_of[int(r["id"])] for r in sorted(
                        res["results"], key=lambda r: -round(float(r["score"]), 3))]
                    out = box.call("recall", {"query": q.question})
                    shown = out["content"][0]["text"]
                    agent = [turn_of[i] for i in visible_ranking(shown, text_of)]
                    used = tok.count(shown)
                    ratios.append(used / 1500)  # the tool's default budget
                    answerable += q.category in (1, 2, 3, 4)
                    if q.category in (1, 2, 3, 4) and shown.split("\n")[1:2] and shown.split(
                            "\n")[1].startswith("Nothing relevant"):
                        misses.append(used)
                    out1 = box.call("recall", {"query": q.question, "levels": [0, 1, 2, 3]})
                    agent1 = [turn_of[i] for i in
                              visible_ranking(out1["content"][0]["text"], text_of)]
                    for k in KS:
                        scores["engine"][k].append(recall_at_k(engine, q.gold_turns, k))
                        scores["by_relevance"][k].append(
                            recall_at_k(by_relevance, q.gold_turns, k))
                        scores["agent"][k].append(recall_at_k(agent, q.gold_turns, k))
                        scores["agent_l1"][k].append(recall_at_k(agent1, q.gold_turns, k))
                    visible_any.append(recall_at_k(agent, q.gold_turns, max(len(agent), 1)))
                print(f"{name}: {len(drawers)} drawers, {len(scores['engine'][1])} questions "
                      "so far", file=sys.stderr, flush=True)
    finally:
        daemon.stop()
        daemon.cleanup(keep=False)
    report: dict[str, Any] = {
        "questions": len(visible_any),
        **{key: {f"R@{k}": mean(v) for k, v in per.items()} for key, per in scores.items()},
        "agent_visible_anywhere": mean(visible_any),
        "delivered_over_budget_max": round(max(ratios, default=0.0), 4),
        "nothing_relevant_rate": round(len(misses) / max(answerable, 1), 4),
        "miss_tokens_max": max(misses, default=0),
    }
    print(f"{report['questions']} questions")
    for key, label in (("engine", "engine (memory.recall ranking)"),
                       ("by_relevance", "engine results by printed relevance"),
                       ("agent", "agent-visible, MCP recall defaults"),
                       ("agent_l1", "agent-visible, levels 0,1,2,3")):
        row = "  ".join(f"R@{k} {report[key][f'R@{k}']:.3f}" for k in KS)
        print(f"{label:40s} {row}")
    print(f"gold visible anywhere in the default output: {report['agent_visible_anywhere']:.3f}")
    print(f"default output: delivered/budget max {report['delivered_over_budget_max']:.3f}; "
          f"nothing relevant on {report['nothing_relevant_rate']:.3f} of these answerable "
          f"questions, at most {report['miss_tokens_max']} tokens each")
    for label, sets in (("default", parse_toolsets(None)), ("all", tuple(MCP_TOOLSETS))):
        n, tokens = tools_list_tokens(tok, sets)
        print(f"tools/list, {label} toolsets: {n} tools, {tokens} cl100k tokens (compact JSON)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
