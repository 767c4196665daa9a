"""Is "nothing relevant" right? Recall's judgement measured on labelled questions, as an agent
gets it (the MCP ``recall`` tool with the question alone, every default applying).

A private daemon (scratch ``PALACE_HOME``, the real model) gets one palace per LoCoMo dev
conversation, ingested as ``bench/locomo.py`` does (one drawer per turn). Then, each through
the MCP ``recall`` tool with only the query (``palace_client.mcp.toolbox.Toolbox``, the code
``palace mcp`` runs per call, in-process against the daemon's socket; its client is wrapped
to keep the op's JSON answer beside the text, for the relevance and names behind it):

* **answerable**: each conversation's questions of categories 1-4, asked of its own palace
  (the answer is stored): "nothing relevant" there is an error;
* **other conversation**: the same questions asked of the next conversation's palace (which
  holds nothing about them: other people, other lives): "nothing relevant" is right;
* **developer**: the questions of ``bench/unanswerable_dev.txt`` (software work never
  stored in these everyday chats), asked of every palace: "nothing relevant" is right.

A miss is the delivered text saying "Nothing relevant" (its second line). Printed per set
and category: the share of misses; also the tokens of a miss and the delivered tokens over
the budget (the largest ratio). With ``--sweep`` it also prints, from the same answers, the
rates the names rule would give if it gave way to a hit of relevance at least S (S on a
grid): recall's ``STRONG_HIT``.

    PYTHONPATH=. python bench/relevance.py [--conversations N] [--sweep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from locomo import DEFAULT_DATA, _wait_embedded, _wait_model, build_drawers, build_questions
from locomo import palace_name as locomo_palace

from palace_client.mcp.toolbox import Toolbox
from palaced.engine.tokens import Tokenizer

DEV_QUESTIONS = Path(__file__).resolve().parent / "unanswerable_dev.txt"
ANSWERABLE = (1, 2, 3, 4)
SWEEP = (0.0, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 1.01)


def dev_questions(path: Path = DEV_QUESTIONS) -> list[str]:
    """The developer questions, one a line (comments and blank lines skipped)."""
    return [ln.strip() for ln in path.read_text("utf-8").splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def is_miss(text: str) -> bool:
    """Whether a delivered recall text says nothing is relevant."""
    lines = text.splitlines()
    return len(lines) > 1 and lines[1].startswith("Nothing relevant")


class Recording:
    """A daemon client that keeps the last answer it received (the tool shows only text)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.agent = client.agent
        self.last: dict[str, Any] = {}

    def call(self, op: str, palace: str | None = None, args: Any = None, *,
             timeout_ms: int | None = None) -> dict[str, Any]:
        self._client.agent = self.agent
        self.last = self._client.call(op, palace, args, timeout_ms=timeout_ms)
        return self.last

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]:
        return dict(self._client.create_palace(name, exist_ok=exist_ok))

    def list_palaces(self) -> list[dict[str, Any]]:
        return list(self._client.list_palaces())

    def close(self) -> None:
        self._client.close()


def rate(xs: list[bool]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", type=int)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--errors", action="store_true",
                    help="list the answerable questions that got nothing relevant and the "
                    "developer questions that did not")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    samples = json.loads(args.data.read_text("utf-8"))[: args.conversations]
    tok = Tokenizer.load(DEFAULT_TIKTOKEN)
    dev = dev_questions()
    daemon = PrivateDaemon("pal-relevance-", DEFAULT_MODEL, DEFAULT_TIKTOKEN)
    daemon.start()
    # One row per question asked: (set, category, miss, best relevance, names unknown,
    # floor, tokens delivered, budget).
    rows: list[dict[str, Any]] = []
    try:
        with daemon.client("bench-relevance") as client:
            _wait_model(client, 120)
            names = []
            for sample in samples:
                name = locomo_palace(str(sample["sample_id"]))
                client.create_palace(name)
                client.remember_many(name, [d.item for d in build_drawers(sample["conversation"])])
                names.append(name)
            for name in names:
                _wait_embedded(client, name, 900)
            recorder = Recording(daemon.client("bench-relevance-mcp"))
            box = Toolbox(lambda: recorder, names[0], nudge_after=10**9)
            for n, sample in enumerate(samples):
                asked = [(q.question, q.category) for q in build_questions(sample)
                         if q.category in ANSWERABLE]
                other = names[(n + 1) % len(names)]
                plan = ([("answerable", names[n], q, c) for q, c in asked]
                        + ([("other conversation", other, q, c) for q, c in asked]
                           if len(names) > 1 else [])
                        + [("developer", names[n], q, 0) for q in dev])
                for kind, palace, question, category in plan:
                    box.palace = palace
                    text = box.call("recall", {"query": question})["content"][0]["text"]
                    res = recorder.last
                    assert res.get("text") == text, text  # the tool shows the op's text
                    rows.append({
                        "set": kind, "category": category, "miss": is_miss(text),
                        "question": question,
                        "best": max((float(r["score"]) for r in res["results"]), default=0.0),
                        "unknown": bool(res.get("unknown_names")), "floor": res["floor"],
                        "tokens": tok.count(text), "budget": res["budget"]})
                print(f"{names[n]}: {len(rows)} questions so far", file=sys.stderr, flush=True)
            box.close()
    finally:
        daemon.stop()
        daemon.cleanup(keep=False)
    report = summarise(rows, args.sweep)
    if args.errors:
        for r in rows:
            if r["miss"] == (r["set"] == "answerable") and r["set"] != "other conversation":
                print(f"  wrong ({r['set']}, best {r['best']:.3f}, names "
                      f"{'unknown' if r['unknown'] else 'known'}): {r['question']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def summarise(rows: list[dict[str, Any]], sweep: bool) -> dict[str, Any]:
    """Print and return the miss rates per set and category, the tokens, and the sweep."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["set"]].append(r)
        if r["set"] != "developer":
            groups[f"{r['set']} cat {r['category']}"].append(r)
    report: dict[str, Any] = {"nothing_relevant": {}, "questions": len(rows)}
    print(f"{'set':34s} {'questions':>9s} {'nothing relevant':>17s}")
    for key in sorted(groups):
        misses = [r["miss"] for r in groups[key]]
        report["nothing_relevant"][key] = {"n": len(misses), "rate": rate(misses)}
        print(f"{key:34s} {len(misses):9d} {rate(misses):17.3f}")
    miss_tokens = [r["tokens"] for r in rows if r["miss"]]
    ratio = max(r["tokens"] / r["budget"] for r in rows)
    report["miss_tokens"] = {"max": max(miss_tokens, default=0),
                             "mean": round(sum(miss_tokens) / max(len(miss_tokens), 1), 1)}
    report["delivered_over_budget_max"] = round(ratio, 4)
    print(f"tokens of a miss: mean {report['miss_tokens']['mean']}, max "
          f"{report['miss_tokens']['max']}; delivered/budget max {ratio:.3f}")
    if sweep:
        # What the judgement would be if the names rule gave way to a hit of relevance >= s.
        report["sweep"] = {}
        print("names rule gives way to a hit >= S: nothing-relevant rate per set")
        for s in SWEEP:
            line = {}
            for key in ("answerable", "other conversation", "developer"):
                got = [(r["unknown"] and r["best"] < s) or r["best"] < r["floor"]
                       for r in groups.get(key, [])]
                line[key] = rate(got)
            report["sweep"][str(s)] = line
            print(f"  S={s:<5} " + "  ".join(f"{k} {v:.3f}" for k, v in line.items()))
    return report


if __name__ == "__main__":
    raise SystemExit(main())
