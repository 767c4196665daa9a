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

Where the default output's tokens go (``spend``): per recall, the cl100k tokens delivered and
those of the drawers shown under the relevance floor (their head and text as delivered, the
lines marked ``(under the relevance floor)``), and where each question's gold turns are shown:
among the drawers above the floor, or only among those under it (what leaving them out would
lose). With ``--dev`` the developer questions of ``bench/unanswerable_dev.txt`` (software work
never stored) are asked of every palace too, for the same spend (a miss or not). ``--model``
runs another model directory (e.g. ``../shared/models/all-mpnet-base-v2-onnx-int8``);
``--replay DUMP`` replays ways to show the drawers under the floor on a ``--dump``'s texts.

    PYTHONPATH=. python bench/agent_visible.py [--data PATH] [--conversations N] [--dev]
        [--model DIR] [--no-l1] [--dump texts.jsonl] [--json out]
    PYTHONPATH=. python bench/agent_visible.py --replay texts.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

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
from relevance import dev_questions, is_miss

from palace_client.mcp.toolbox import Toolbox
from palace_client.mcp.tools import tools_of
from palaced.engine.tokens import Tokenizer
from palaced.wire.recall_text import BELOW_FLOOR
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


class Block(NamedTuple):
    """A drawer as a delivered text shows it: its id, whether it is under the floor, its
    lines (head and indented text) and the title of its section."""

    id: int
    under: bool
    text: str
    section: str


def drawer_blocks(text: str) -> list[Block]:
    """The drawers of a delivered text: a ``- #id`` head and the indented lines under it (a
    miss's weak drawers are one line each, all under the floor)."""
    out: list[Block] = []
    lines = text.splitlines()
    miss = is_miss(text)
    section = ""
    for n, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:]
        m = _HEAD.match(line)
        if m is None:
            continue
        block = [line]
        for more in lines[n + 1:]:
            if not more.startswith("  "):
                break
            block.append(more)
        out.append(Block(int(m.group(1)), miss or BELOW_FLOOR in line, "\n".join(block),
                         section))
    return out


def spend(text: str, tok: Tokenizer, drawer_text: dict[int, str]
          ) -> tuple[int, int, list[int], list[int]]:
    """A delivered text's tokens, those of its drawers under the floor (each block counted
    with its newline), and the drawers shown whole above and under the floor."""
    blocks = drawer_blocks(text)
    under = sum(tok.count(b.text + "\n") for b in blocks if b.under)
    shown = set(visible_ranking(text, drawer_text))
    above = [b.id for b in blocks if not b.under and b.id in shown]
    below = [b.id for b in blocks if b.under and b.id in shown]
    return tok.count(text), under, above, below


def pctl(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank), 0 for none."""
    if not xs:
        return 0.0
    ys = sorted(xs)
    return float(ys[min(len(ys) - 1, max(0, round(q * len(ys) + 0.5) - 1))])


def spend_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means and p95 of what the recalls of ``rows`` delivered and spent under the floor,
    for all of them, those with hits and the misses."""
    out: dict[str, Any] = {}
    for key, sel in (("all", rows), ("hits", [r for r in rows if not r["miss"]]),
                     ("misses", [r for r in rows if r["miss"]])):
        tokens = [r["tokens"] for r in sel]
        under = [r["under"] for r in sel]
        out[key] = {"n": len(sel), "tokens_mean": mean(tokens), "tokens_p95": pctl(tokens, .95),
                    "under_mean": mean(under), "under_p95": pctl(under, .95),
                    "under_share": round(sum(under) / max(sum(tokens), 1), 4)}
    return out


# Ways to show the drawers under the floor in the text of a recall that found something,
# replayed on the texts of a --dump: whether one is kept, given the number of drawers shown
# that reach the floor and the block's section; "titles" shows the rest as one-line titles.
OPTIONS: dict[str, Callable[[int, Block], bool]] = {
    "all of them": lambda over, b: True,
    **{f"kept while fewer than {n} reach the floor": (lambda over, b, n=n: over < n)
       for n in (2, 3, 5, 10)},
    "kept in the hits only": lambda over, b: b.section == "Best matches",
    "as one-line titles": lambda over, b: False,
    "left out": lambda over, b: False,
}


def replay(path: Path, tok: Tokenizer) -> None:
    """Print, per option of ``OPTIONS``, the tokens (mean, p95) the texts of a ``--dump``
    would deliver, per set, and the LoCoMo gold turns they would show (by id)."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    for name, keep in OPTIONS.items():
        tokens: dict[str, list[float]] = {"locomo": [], "developer": []}
        gold = 0
        for row in rows:
            blocks, used = drawer_blocks(row["text"]), tok.count(row["text"])
            over = sum(not b.under for b in blocks)
            gone = {b.id for b in blocks if b.under and over and not keep(over, b)}
            for b in blocks:
                if b.id in gone:
                    used -= tok.count(b.text + "\n")
                    if name == "as one-line titles":
                        body = " ".join(ln.strip() for ln in b.text.splitlines()[1:])
                        used += tok.count(f"- #{b.id} weak: {body[:90]}\n")
            tokens[row["set"]].append(used)
            gold += len({b.id for b in blocks if b.id not in gone} & set(row["gold"]))
        print(f"{name:42s} " + "  ".join(
            f"{k} tokens {mean(v):7.1f} p95 {pctl(v, .95):5.0f}" for k, v in tokens.items())
            + f"  LoCoMo gold turns shown {gold}")


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
    ap.add_argument("--dev", action="store_true",
                    help="also ask the developer questions of bench/unanswerable_dev.txt")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--no-l1", action="store_true",
                    help="skip the second call with levels 0-3 (faster)")
    ap.add_argument("--dump", type=Path,
                    help="write each default recall's text and gold drawer ids (JSON lines)")
    ap.add_argument("--replay", type=Path,
                    help="replay the ways to show drawers under the floor on a --dump, and exit")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.replay:
        replay(args.replay, Tokenizer.load(DEFAULT_TIKTOKEN))
        return 0
    dump = args.dump.open("w", encoding="utf-8") if args.dump else None
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    daemon = PrivateDaemon("pal-agentvis-", args.model, DEFAULT_TIKTOKEN)
    daemon.start()
    scores: dict[str, dict[int, list[float]]] = {
        key: {k: [] for k in KS} for key in ("engine", "by_relevance", "agent", "agent_l1")}
    visible_any: list[float] = []
    tok = Tokenizer.load(DEFAULT_TIKTOKEN)
    ratios: list[float] = []
    misses: list[int] = []  # tokens of each default output that says nothing is relevant
    answerable = 0  # questions of categories 1-4 (the answer is stored)
    spent: list[dict[str, Any]] = []  # per default recall of a LoCoMo question
    spent_dev: list[dict[str, Any]] = []  # per developer question asked of a palace
    gold_where = {"above": 0, "only_under": 0, "not_shown": 0, "gold_turns": 0}
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
                # No remember nudge: it is the bridge's, appended when the budget has room, and
                # would hide what recall itself delivers.
                box = Toolbox(lambda: daemon.client("bench-agent-visible-mcp"), name,
                              nudge_after=10**9)
                for q in build_questions(sample):
                    res = client.recall_ex(name, q.question, top_k=10)
                    engine = [turn_of[int(r["id"])] for r in res["results"]]
                    by_relevance = [turn_of[int(r["id"])] for r in sorted(
                        res["results"], key=lambda r: -round(float(r["score"]), 3))]
                    out = box.call("recall", {"query": q.question})
                    shown = out["content"][0]["text"]
                    agent = [turn_of[i] for i in visible_ranking(shown, text_of)]
                    used, under, above, below = spend(shown, tok, text_of)
                    spent.append({"tokens": used, "under": under, "miss": is_miss(shown)})
                    if dump:
                        gold_ids = [i for i, t in turn_of.items() if t in q.gold_turns]
                        dump.write(json.dumps({"set": "locomo", "text": shown,
                                               "gold": gold_ids}) + "\n")
                    for g in q.gold_turns:
                        gold_where["gold_turns"] += 1
                        gold_where["above" if g in {turn_of[i] for i in above} else
                                   "only_under" if g in {turn_of[i] for i in below} else
                                   "not_shown"] += 1
                    ratios.append(used / 1500)  # the tool's default budget
                    answerable += q.category in (1, 2, 3, 4)
                    if q.category in (1, 2, 3, 4) and is_miss(shown):
                        misses.append(used)
                    agent1 = agent
                    if not args.no_l1:
                        out1 = box.call("recall", {"query": q.question,
                                                   "levels": [0, 1, 2, 3]})
                        agent1 = [turn_of[i] for i in
                                  visible_ranking(out1["content"][0]["text"], text_of)]
                    for k in KS:
                        scores["engine"][k].append(recall_at_k(engine, q.gold_turns, k))
                        scores["by_relevance"][k].append(
                            recall_at_k(by_relevance, q.gold_turns, k))
                        scores["agent"][k].append(recall_at_k(agent, q.gold_turns, k))
                        scores["agent_l1"][k].append(recall_at_k(agent1, q.gold_turns, k))
                    visible_any.append(recall_at_k(agent, q.gold_turns, max(len(agent), 1)))
                for question in (dev_questions() if args.dev else []):
                    shown = box.call("recall", {"query": question})["content"][0]["text"]
                    used, under, _, _ = spend(shown, tok, text_of)
                    spent_dev.append({"tokens": used, "under": under, "miss": is_miss(shown)})
                    if dump:
                        dump.write(json.dumps({"set": "developer", "text": shown,
                                               "gold": []}) + "\n")
                print(f"{name}: {len(drawers)} drawers, {len(scores['engine'][1])} questions "
                      "so far", file=sys.stderr, flush=True)
    finally:
        if dump:
            dump.close()
        daemon.stop()
        daemon.cleanup(keep=False)
    report: dict[str, Any] = {
        "questions": len(visible_any),
        **{key: {f"R@{k}": mean(v) for k, v in per.items()} for key, per in scores.items()},
        "agent_visible_anywhere": mean(visible_any),
        "delivered_over_budget_max": round(max(ratios, default=0.0), 4),
        "nothing_relevant_rate": round(len(misses) / max(answerable, 1), 4),
        "miss_tokens_max": max(misses, default=0),
        "spend": spend_report(spent),
        "gold_where": {k: (v if k == "gold_turns" else
                           round(v / max(gold_where["gold_turns"], 1), 4))
                       for k, v in gold_where.items()},
        **({"spend_dev": spend_report(spent_dev)} if spent_dev else {}),
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
    for key, label in (("spend", "LoCoMo"), ("spend_dev", "developer")):
        for part, got in report.get(key, {}).items():
            print(f"{label} {part:6s} n {got['n']:4d}  tokens mean {got['tokens_mean']:7.1f} "
                  f"p95 {got['tokens_p95']:6.0f}  under the floor mean {got['under_mean']:6.1f}"
                  f" p95 {got['under_p95']:5.0f} ({got['under_share']:.1%} of the tokens)")
    where = report["gold_where"]
    print(f"gold turns ({where['gold_turns']}): shown above the floor {where['above']:.3f}, "
          f"only under it {where['only_under']:.3f}, not shown {where['not_shown']:.3f}")
    for label, sets in (("default", parse_toolsets(None)), ("all", tuple(MCP_TOOLSETS))):
        n, tokens = tools_list_tokens(tok, sets)
        print(f"tools/list, {label} toolsets: {n} tools, {tokens} cl100k tokens (compact JSON)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
