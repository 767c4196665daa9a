"""The budget is the delivered text (issue 29): what an agent receives from recall and wake_up,
all of it (heading, titles, item heads, notices, the remember nudge), counted with cl100k_base,
never exceeds the budget; a miss costs a line; a new palace's placeholder identity is not shown.

The property test runs many palaces, queries and budgets (10 to 4,000) through the in-process
daemon core and the MCP tools (``Toolbox``, the code ``palace mcp`` runs per call), counting the
text the tool returns; the real bridge, ``palace recall --budget`` and ``palace wake-up`` are
checked against a real daemon.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from typing import Any

import pytest

from palace_client.mcp.toolbox import NUDGE_TEXT, NUDGE_TOKENS, Toolbox
from palaced.engine.tokens import Tokenizer
from palaced.retrieval.packing import Item, Section
from palaced.retrieval.recall import MISS_TOKENS
from palaced.retrieval.sections import deliver
from palaced.wire.recall_text import Frame
from tests.conftest import TIKTOKEN_FILE, DaemonProc
from tests.support.inproc import InProcDaemon

WORDS = ("invoice billing deploy staging postgres refund approval gateway stripe tax timeout "
         "currency rates dunning template cron nightly migration review incident react vite "
         "frontend kubernetes helm chart lisbon restaurant portugal ticket sprint standup "
         "alice bob caroline melanie berlin office wifi password grafana alert latency").split()
HEAD = re.compile(r"\((?:mode \w+, )?(\d+) of (\d+) tokens")


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    t = Tokenizer.load(TIKTOKEN_FILE)
    assert t.exact
    return t


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.1:  # a long drawer: shown as an excerpt with its note
        return "\n".join(_sentence(rng, 12) for _ in range(rng.randint(20, 60)))
    if kind < 0.3:
        return "\n".join(_sentence(rng, rng.randint(3, 15)) for _ in range(rng.randint(2, 6)))
    return _sentence(rng, rng.randint(3, 25))


def _build(d: InProcDaemon, rng: random.Random, name: str) -> None:
    with d.client() as c:
        c.create_palace(name)
        items = [{"text": _text(rng), "room": rng.choice(["billing", "infra", "people", "ops"]),
                  "importance": rng.choice([0.2, 0.5, 0.8, 1.0])}
                 for _ in range(rng.randint(0, 80))]
        if items:
            c.call("memory.remember_many", name, {"items": items, "dedup": False})
    identity = rng.choice([None, "I keep the billing team's memory. " * rng.randint(1, 30)])
    if identity is not None:
        (d.home / "palaces" / name / "identity.txt").write_text(identity, "utf-8")


def _query(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.15:
        return "What is the wifi password of the Zanzibar office"  # a name no drawer has
    if kind < 0.25:
        return "nonexistentwordxyz"
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) + "?"


def _budget(rng: random.Random) -> int:
    return rng.choice([10, 11, 15, 20, 30, 50, 80, 100, 150, 300]) if rng.random() < 0.4 \
        else rng.randint(10, 4000)


@pytest.mark.slow  # 700 packings and renderings, ~4 s: in the full run, not the unit loop
def test_delivered_text_never_exceeds_the_budget(inproc: InProcDaemon, tok: Tokenizer) -> None:
    rng = random.Random(29)
    ratios: list[float] = []
    stated_wrong = 0
    for p in range(8):
        name = f"budget-prop-{p}"
        _build(inproc, rng, name)
        for compact in (False, True):
            box = Toolbox(lambda: inproc.client(), name, compact=compact, nudge_after=3)
            for _ in range(25):
                budget = _budget(rng)
                if rng.random() < 0.2:
                    tool, args = "wake_up", {"budget": budget}
                else:
                    args = {"query": _query(rng), "budget": budget}
                    if rng.random() < 0.5:
                        args["levels"] = rng.sample([0, 1, 2, 3], rng.randint(1, 4))
                    if rng.random() < 0.3:
                        args["deep"] = True
                    tool = "recall"
                result = box.call(tool, args)
                assert not result["isError"], result
                text = result["content"][0]["text"]
                used = tok.count(text)
                assert used <= budget, (tool, args, used, text)
                ratios.append(used / budget)
                assert _ordered_as_shown(text), text
                # The heading states what was delivered (the nudge, when it fits, is after it).
                head = HEAD.search(text.split("\n", 1)[0])
                if head and NUDGE_TEXT not in text:
                    assert int(head.group(2)) == budget
                    stated_wrong += int(head.group(1)) != used
        box.close()
    print(f"\ndelivered/budget over {len(ratios)} calls: max {max(ratios):.3f}, "
          f"mean {sum(ratios) / len(ratios):.3f}; heading count off in {stated_wrong}")
    assert max(ratios) <= 1.0 and stated_wrong == 0


_SHOWN = re.compile(r"^(?:- )?#\d+ .*?(?:score|weak) (-?\d+\.\d{3})", re.MULTILINE)


def _ordered_as_shown(text: str) -> bool:
    """Whether within each section of ``text`` the drawers come in the order of the score
    they show (ties allowed)."""
    for part in re.split(r"^(?:## )?(?:L\d · )?[A-Z][^\n]*$", text, flags=re.MULTILINE):
        shown = [float(m.group(1)) for m in _SHOWN.finditer(part)]
        if shown != sorted(shown, reverse=True):
            return False
    return True


def test_deliver_property_in_process(tok: Tokenizer) -> None:
    """``deliver`` alone, on random sections and frames (long names, notices, misses)."""
    rng = random.Random(7)
    for _ in range(300):
        sections = [Section(rng.choice([-1, 0, 1, 2, 3]), rng.choice(["Best matches", "Deep"]),
                            [Item(rng.randint(1, 50), _text(rng), rng.random(), 0,
                                  {"wing": "general", "room": rng.choice(WORDS),
                                   "occurred_ms": 1_700_000_000_000})
                             for _ in range(rng.randint(0, 12))])
                    for _ in range(rng.randint(0, 5))]
        frame = Frame(rng.choice(["recall", "wake_up"]), rng.choice(["p", "x" * 60]),
                      rng.random() < 0.5, "hybrid",
                      rng.choice([None, "Nothing relevant in palace 'p' (no drawer mentions X)."]),
                      rng.choice([None, "keyword-only: the embedding model is still loading"]),
                      rng.random() < 0.2)
        budget = _budget(rng)
        cap = MISS_TOKENS if frame.miss else None
        _, text, tokens = deliver(sections, budget, tok, frame, cap)
        assert tok.count(text) == tokens <= min(budget, cap or budget)


def test_nudge_fits_its_reserve(tok: Tokenizer) -> None:
    assert tok.count("x\n\n" + NUDGE_TEXT) - tok.count("x") <= NUDGE_TOKENS


def _recall(d: InProcDaemon | DaemonProc, name: str, query: str, **args: Any) -> dict[str, Any]:
    with d.client() as c:
        return c.call("memory.recall", name, {"query": query, **args})


def test_a_miss_costs_a_line(inproc: InProcDaemon, tok: Tokenizer) -> None:
    name = "budget-miss"
    with inproc.client() as c:
        c.create_palace(name)
        for i in range(40):
            c.call("memory.remember", name, {"text": f"Sprint {i} retro: the deploy pipeline "
                                             "got faster after caching the docker layers " * 3})
    res = _recall(inproc, name, "What is the wifi password of the Berlin office")
    assert res["nothing_relevant"]
    text = res["text"]
    lines = text.splitlines()
    assert lines[1].startswith(f"Nothing relevant in palace '{name}' (no drawer mentions "
                               "Berlin)"), text
    weak = [ln for ln in lines if re.match(r"^- #\d+ weak \d\.\d{3}: ", ln)]
    assert 1 <= len(weak) <= 3 and len(lines) == 2 + len(weak), text
    assert tok.count(text) == res["tokens_used"] <= MISS_TOKENS
    # The JSON keeps the ranked results for a program that wants them.
    assert len(res["results"]) == 10


def _one_drawer(d: InProcDaemon, name: str, text: str) -> None:
    """A new palace ``name`` holding ``text``."""
    with d.client() as c:
        c.create_palace(name)
        c.call("memory.remember", name, {"text": text})


def test_placeholder_identity_is_not_recalled(inproc: InProcDaemon) -> None:
    name = "budget-identity"
    _one_drawer(inproc, name, "The frontend is built with React 18 and Vite.")
    res = _recall(inproc, name, "frontend React Vite")
    assert "holds the memories of" not in res["text"]
    assert all(s["level"] != 0 for s in res["sections"])
    (inproc.home / "palaces" / name / "identity.txt").write_text("I am the web team's memory.")
    res = _recall(inproc, name, "frontend React Vite")
    assert "I am the web team's memory." in res["text"]


# -- the real daemon: CLI and the MCP bridge --------------------------------------------
@pytest.mark.daemon
def test_cli_and_bridge_deliver_within_budget(shared_daemon: DaemonProc, tok: Tokenizer) -> None:
    rng = random.Random(3)
    name = "budget-real"
    shared_daemon.cli("create", name, check=True)
    with shared_daemon.client() as c:
        c.call("memory.remember_many", name, {"items": [
            {"text": _text(rng), "room": rng.choice(["billing", "infra"])} for _ in range(60)],
            "dedup": False})
    for budget in (10, 60, 300, 1500):
        out = shared_daemon.cli("recall", "billing invoice refund", "--palace", name,
                                "--budget", str(budget), check=True).stdout
        assert tok.count(out.rstrip("\n")) <= budget, out
        out = shared_daemon.cli("wake-up", "--palace", name, "--budget", str(budget),
                                check=True).stdout
        assert tok.count(out.rstrip("\n")) <= budget, out
    bridge = subprocess.run(
        [sys.executable, "-m", "palace_client", "mcp", "--palace", name],
        input="\n".join([
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}',
            '{"jsonrpc":"2.0","method":"notifications/initialized"}',
            '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"recall",'
            '"arguments":{"query":"billing invoice refund"}}}',
            '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wake_up",'
            '"arguments":{}}}']) + "\n",
        env=shared_daemon.env, capture_output=True, text=True, timeout=60)
    answers = [json.loads(line) for line in bridge.stdout.splitlines()]
    for answer, budget in zip(answers[1:], (1500, 800), strict=True):
        text = answer["result"]["content"][0]["text"]
        head = HEAD.search(text.split("\n", 1)[0])
        assert head, text
        assert int(head.group(1)) == tok.count(text) <= budget


def test_an_acronym_is_not_a_missing_name(inproc: InProcDaemon) -> None:
    name = "budget-acronym"
    _one_drawer(inproc, name, "The frontend is built with React 18 and Vite.")
    res = _recall(inproc, name, "which UI framework do we use")
    assert "unknown_names" not in res  # the floor decides, not a missing "UI"
    res = _recall(inproc, name, "Where does Caroline work?")
    assert res["unknown_names"] == ["Caroline"] and res["nothing_relevant"]


def test_curated_drawers_outrank_captured_exchanges_at_equal_relevance(inproc: InProcDaemon
                                                                       ) -> None:
    name = "budget-curated"
    with inproc.client() as c:
        c.create_palace(name)
        c.call("memory.remember", name, {
            "text": "Deploys happen on Tuesdays after the standup.", "source": "cli"})
        # An earlier session asking the same question, captured from its transcript.
        c.call("memory.remember", name, {
            "text": "when do deploys happen? when do deploys happen on Tuesdays? Deploys "
                    "happen on Tuesdays after the standup, I think.",
            "source": "/home/u/.claude/projects/p/0b1c.jsonl:10-12"})
    res = _recall(inproc, name, "when do deploys happen on Tuesdays")
    first, second = res["results"][:2]
    assert first["score"] == second["score"] == 1.0  # both hold every word asked
    assert first["source"] == "cli", res["results"]
    assert first["rank_score"] >= second["rank_score"]
    assert _ordered_as_shown(res["text"]), res["text"]
