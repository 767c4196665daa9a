"""Budgeted recall and wake-up end to end: ``palace recall --budget/--levels``, ``palace
wake-up``, ``Client.wake_up`` and the MCP ``recall``/``wake_up`` tools, against a real daemon
with the real model and the exact cl100k_base tokenizer.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palace_client.agents.setup import hook_command
from palaced.engine.tokens import Tokenizer
from palaced.wire.recall_text import BELOW_FLOOR
from tests.conftest import TIKTOKEN_FILE, DaemonProc, fresh_name
from tests.support.cli_inproc import InProcCliDaemonProc

BRIDGE = [sys.executable, "-m", "palace_client", "mcp"]
IDENTITY = ("I am the memory of the Harbor billing service. The team ships on Tuesdays, "
            "reviews every migration twice, and keeps incident notes in the ops wing.")
LONG_IDENTITY = " ".join(f"Rule {i}: every invoice line carries its currency and tax code."
                         for i in range(40))
# The heading of a recall or wake-up: the tokens of the whole text, of the budget.
HEAD = re.compile(r"^(?:Recall in|Wake-up context of) palace '([^']+)' \((?:mode \w+, )?"
                  r"(\d+) of (\d+) tokens")
DRAWERS = [
    ("Invoices are generated nightly at 02:00 UTC by the billing-cron job.", "billing", "high"),
    ("The staging database is Postgres 16 on port 5433.", "infra", "critical"),
    ("Refunds above 500 EUR need approval from the finance lead.", "billing", "high"),
    ("Alice owns the payment gateway integration with Stripe.", "people", "0.6"),
    ("Deploys happen on Tuesdays after the 10:00 standup.", "process", "0.7"),
    ("The tax service times out after 3 seconds and is retried twice.", "infra", "0.4"),
    ("Currency conversion uses the ECB reference rates fetched daily.", "billing", "0.5"),
    ("Bob wrote the dunning emails; templates live in templates/dunning.", "people", "0.3"),
]
_names = (f"cli-recall-{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def shared_daemon(shared_daemon: DaemonProc) -> InProcCliDaemonProc:
    """The module's real-model daemon with the CLI run in-process: these tests check what
    recall and wake-up print (test_wake_up_without_palace_uses_the_sessions_project and
    test_hook_installed_by_init_runs run the real console script)."""
    return InProcCliDaemonProc.of(shared_daemon)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tok = Tokenizer.load(TIKTOKEN_FILE)
    assert tok.exact
    return tok


def _palace(d: DaemonProc, identity: str = IDENTITY) -> str:
    """A fresh palace with DRAWERS stored and ``identity`` as its L0 text."""
    name = next(_names)
    d.cli("create", name, check=True)
    for text, room, importance in DRAWERS:
        d.cli("remember", text, "--palace", name, "--room", room, "--importance", importance,
              check=True)
    (d.home / "palaces" / name / "identity.txt").write_text(
        f"# comment lines are not part of L0\n{identity}\n", "utf-8")
    return name


@pytest.fixture(scope="module")
def palace(shared_daemon: DaemonProc) -> str:
    return _palace(shared_daemon)


def _json(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _texts(res: dict[str, Any]) -> list[str]:
    return [str(item["text"]) for s in res["sections"] for item in s["items"]]


# -- palace recall --------------------------------------------------------------------------------
def test_budgeted_recall_json_stays_within_budget(shared_daemon: DaemonProc, palace: str,
                                                  tokenizer: Tokenizer) -> None:
    res = _json(shared_daemon.cli("recall", "when are invoices generated?", "--palace", palace,
                                  "--budget", "200", "--levels", "0,1,3", "--json"))
    assert res["budget"] == 200
    assert 0 < res["tokens_used"] <= 200
    assert res["tokenizer"] == {"name": "cl100k_base", "exact": True}
    # The hits come first (no level, each with its 0-1 relevance), then the levels asked for.
    hits, *levels = res["sections"]
    assert hits["level"] is None and hits["title"] == "Best matches"
    # Each shows the score that orders them (rank_score), and keeps its 0-1 relevance.
    assert all(0 <= i["relevance"] <= 1 for i in hits["items"])
    scores = [i["score"] for i in hits["items"]]
    assert scores == sorted(scores, reverse=True)
    assert [s["level"] for s in levels] == [0, 1, 3][: len(levels)]
    assert levels[0]["items"][0]["text"] == IDENTITY
    # The texts alone (without the headings and per-item overheads) fit the reported usage.
    assert sum(tokenizer.count(t) for t in _texts(res)) <= res["tokens_used"]
    assert any("nightly at 02:00" in r["text"] for r in res["results"])


@pytest.mark.parametrize("budget", [0, 15, 40, 90])
def test_recall_never_exceeds_small_budgets(shared_daemon: DaemonProc, palace: str,
                                            budget: int) -> None:
    res = _json(shared_daemon.cli("recall", "Postgres staging", "--palace", palace,
                                  "--budget", str(budget), "--deep", "--json"))
    assert res["tokens_used"] <= budget
    assert res["budget"] == budget


def test_budgeted_recall_human_output(shared_daemon: DaemonProc, palace: str,
                                      tokenizer: Tokenizer) -> None:
    res = shared_daemon.cli("recall", "when are invoices generated?", "--palace", palace,
                            "--budget", "200", "--levels", "0,1,3", "--top-k", "3")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # What an agent is shown: the heading states the tokens of all of it.
    head = HEAD.match(lines[0])
    assert head, lines[0]
    assert head.group(1) == palace and int(head.group(3)) == 200
    assert int(head.group(2)) == tokenizer.count(res.stdout.rstrip("\n")) <= 200
    assert lines[1:3] == ["", "## Best matches"]
    assert re.match(r"^- #\d+ \[general/[a-z]+\] score -?\d+\.\d{3} \S", lines[3]), lines[3]
    at = lines.index(f"## L0 · Identity of {palace}")
    assert lines[at + 1] == "  " + IDENTITY
    assert "## L1 · Essential" in lines
    drawer_lines = [ln for ln in lines if ln.startswith("- #")]
    assert drawer_lines and any("nightly at 02:00" in ln
                                for ln in lines[:lines.index("## L0 · Identity of " + palace)])


def test_plain_recall_keeps_the_ranked_list(shared_daemon: DaemonProc, palace: str) -> None:
    res = shared_daemon.cli("recall", "Postgres staging database", "--palace", palace,
                            "--include-superseded")
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert re.match(r"^\[\d+\] general/infra  score=", first), first
    assert "## L0" not in res.stdout and "tokens used" not in res.stdout


def test_recall_levels_are_validated(shared_daemon: DaemonProc, palace: str) -> None:
    bad = shared_daemon.cli("recall", "x", "--palace", palace, "--levels", "9")
    assert bad.returncode == 5
    assert "INVALID_ARGS" in bad.stderr
    not_numbers = shared_daemon.cli("recall", "x", "--palace", palace, "--levels", "0,one",
                                    "--json")
    assert not_numbers.returncode == 5
    assert json.loads(not_numbers.stdout)["error"]["name"] == "INVALID_ARGS"
    # Out of the range the op's spec gives the option: a usage error, nothing is sent.
    negative = shared_daemon.cli("recall", "x", "--palace", palace, "--budget", "-1")
    assert negative.returncode == 2 and "--budget" in negative.stderr
    missing = shared_daemon.cli("recall", "x", "--palace", "no-such-palace", "--budget", "50")
    assert missing.returncode == 4


def test_deep_recall_shows_level_three(shared_daemon: DaemonProc, palace: str) -> None:
    res = _json(shared_daemon.cli("recall", "tax service timeout", "--palace", palace,
                                  "--levels", "3", "--deep", "--budget", "300", "--json"))
    # L3 is the ranking beyond the hits: this small palace has none, so the hits alone.
    assert [s["level"] for s in res["sections"]] in ([None], [None, 3])
    assert any("times out after 3 seconds" in t for t in _texts(res)[:2])


# -- palace wake-up -------------------------------------------------------------------------------
def test_wake_up_prints_identity_and_essentials(shared_daemon: DaemonProc, palace: str,
                                                tokenizer: Tokenizer) -> None:
    res = shared_daemon.cli("wake-up", "--palace", palace, "--budget", "100")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    head = HEAD.match(lines[0])
    assert head and int(head.group(2)) == tokenizer.count(res.stdout.rstrip("\n")) <= 100
    assert lines[1:4] == ["", f"## L0 · Identity of {palace}", "  " + IDENTITY]
    assert "## L1 · Essential" in lines
    assert "  The staging database is Postgres 16 on port 5433." in lines  # critical first
    assert "\n\n## L1 · Essential\n" in res.stdout and not res.stdout.endswith("\n\n")
    data = _json(shared_daemon.cli("wake-up", "--palace", palace, "--budget", "100", "--json"))
    assert data["budget"] == 100 and data["tokens_used"] <= 100
    assert [s["level"] for s in data["sections"]] == [0, 1]
    assert sum(tokenizer.count(t) for t in _texts(data)) <= data["tokens_used"]
    assert data["cut"], "the 100-token budget cannot hold all eight drawers"


def test_tiny_budget_truncates_identity_instead_of_dropping_it(shared_daemon: DaemonProc
                                                              ) -> None:
    name = _palace(shared_daemon, LONG_IDENTITY)
    for budget in (45, 60):  # the heading and the L0 title take about 30
        data = _json(shared_daemon.cli("wake-up", "--palace", name, "--budget", str(budget),
                                       "--json"))
        assert data["tokens_used"] <= budget
        assert data["sections"][0]["level"] == 0
        (item,) = data["sections"][0]["items"]
        assert item["truncated"] is True
        assert item["text"].endswith("…")
        assert LONG_IDENTITY.startswith(item["text"][:-1].rstrip())
        assert any(c["id"] == "identity" and c["truncated"] for c in data["cut"])
    # Beside the hits at a small budget: cut to fit, with the marker.
    human = shared_daemon.cli("recall", "invoice", "--palace", name, "--budget", "90")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    at = lines.index(f"## L0 · Identity of {name}")
    assert lines[at + 1].startswith("  Rule 0:") and lines[at + 1].endswith("…")


def test_wake_up_of_a_missing_palace_prints_nothing_and_creates_nothing(
        shared_daemon: DaemonProc) -> None:
    """A read never creates a palace (the first write does): the session-start hook of a
    brand-new project still exits 0, with an empty context."""
    name = next(_names)
    res = shared_daemon.cli("wake-up", "--palace", name)
    assert (res.returncode, res.stdout) == (0, ""), res.stderr
    with shared_daemon.client() as c:
        assert name not in {p["name"] for p in c.list_palaces()}


def test_wake_up_without_palace_uses_the_sessions_project(shared_daemon: DaemonProc,
                                                        tmp_path: Path) -> None:
    # A user-scope hook pins no palace: the project comes from CLAUDE_PROJECT_DIR per session.
    project = tmp_path / "Hook Project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    env = {**shared_daemon.env, "CLAUDE_PROJECT_DIR": str(project / "src")}
    env.pop("PALACE", None)
    stored = subprocess.run([sys.executable, "-m", "palace_client", "remember",
                             "hook projects deploy on Fridays"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert stored.returncode == 0, stored.stderr
    res = subprocess.run([sys.executable, "-m", "palace_client", "wake-up"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Wake-up context of palace 'hook-project' (")
    assert "hook projects deploy on Fridays" in res.stdout


def test_hook_installed_by_init_runs(shared_daemon: DaemonProc, palace: str) -> None:
    """`palace init --hooks` installs `palace wake-up --palace NAME`; that line must work."""
    command = hook_command(palace)
    assert shlex.split(command)[-3:] == ["wake-up", "--palace", palace]
    res = subprocess.run(shlex.split(command), env=shared_daemon.env, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"Wake-up context of palace '{palace}' (")
    assert f"\n\n## L0 · Identity of {palace}\n  {IDENTITY}\n" in res.stdout


def test_client_wake_up(shared_daemon: DaemonProc, palace: str) -> None:
    with shared_daemon.client() as c:
        data = c.wake_up(palace, budget=100)
        default = c.wake_up(palace)
    assert data["budget"] == 100 and data["tokens_used"] <= 100
    assert data["sections"][0]["items"][0]["text"] == IDENTITY
    assert default["budget"] == 800 and not default["cut"]


# -- MCP tools through a real bridge process ------------------------------------------------------
class Bridge:
    """A ``palace mcp`` subprocess speaking line-delimited JSON-RPC."""

    def __init__(self, palace: str, env: dict[str, str]) -> None:
        self.p = subprocess.Popen([*BRIDGE, "--palace", palace], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "tests", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(message).encode() + b"\n")
        self.p.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line.endswith(b"\n"), self.p.stderr.read() if self.p.stderr else b""
        answer: dict[str, Any] = json.loads(line)
        assert answer["id"] == self.next_id
        return answer

    def tool(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        return bool(result["isError"]), "\n".join(c["text"] for c in result["content"])

    def close(self) -> int:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.stdin = None
        self.p.communicate(timeout=30)
        return self.p.returncode


@pytest.fixture
def bridge(shared_daemon: DaemonProc, palace: str) -> Iterator[Bridge]:
    b = Bridge(palace, shared_daemon.env)
    yield b
    if b.p.poll() is None:
        assert b.close() == 0


def test_mcp_recall_with_budget_and_levels(bridge: Bridge, palace: str) -> None:
    failed, text = bridge.tool("recall", {"query": "refund approval", "budget": 120,
                                          "levels": [0, 3], "deep": True})
    assert not failed, text
    head = text.splitlines()[0]
    tokens = re.search(r"(\d+) tokens", head)
    assert tokens and int(tokens.group(1)) <= 120, head
    assert f"## L0 · Identity of {palace}" in text and IDENTITY in text
    assert text.index("## Best matches") < text.index("## L0 ·") and "500 EUR" in text
    assert "## L1" not in text
    failed, text = bridge.tool("recall", {"query": "x", "levels": [9]})
    assert failed and "INVALID_ARGS" in text


def test_mcp_wake_up(bridge: Bridge, palace: str) -> None:
    failed, text = bridge.tool("wake_up", {"budget": 100})
    assert not failed, text
    head = HEAD.match(text.splitlines()[0])
    assert head and head.group(1) == palace and int(head.group(2)) <= 100, text
    assert IDENTITY in text and "Postgres 16 on port 5433" in text
    assert text.index("## L0") < text.index("## L1")


# -- relevance floor (real model) -----------------------------------------------------------------
def test_nothing_relevant_says_so_in_one_line(shared_daemon: DaemonProc, palace: str) -> None:
    res = _json(shared_daemon.cli("recall", "nonexistentwordxyz", "--palace", palace, "--json"))
    assert res["mode"] == "hybrid" and res["floor"] > 0
    assert res["nothing_relevant"] is True
    assert all(r["below_floor"] and 0 <= r["score"] < res["floor"] for r in res["results"])
    human = shared_daemon.cli("recall", "nonexistentwordxyz", "--palace", palace)
    assert human.returncode == 0, human.stderr
    first = human.stdout.splitlines()[0]
    assert first == f"nothing relevant in palace {palace} for: nonexistentwordxyz"
    good = _json(shared_daemon.cli("recall", "when are invoices generated?", "--palace", palace,
                                   "--json"))
    assert good["nothing_relevant"] is False
    best = good["results"][0]
    assert "nightly at 02:00" in best["text"]
    assert good["floor"] <= best["score"] <= 1 and best["below_floor"] is False


def test_a_name_the_palace_never_mentions_is_nothing_relevant(shared_daemon: DaemonProc,
                                                             palace: str) -> None:
    # A billing project's palace: it knows Alice, never mentions Caroline.
    q = "What did Caroline say about the payment gateway?"
    res = _json(shared_daemon.cli("recall", q, "--palace", palace, "--json"))
    assert res["mode"] == "hybrid" and res["nothing_relevant"] is True
    assert res["unknown_names"] == ["Caroline"]
    assert res["results"] and all(r["below_floor"] for r in res["results"])
    human = shared_daemon.cli("recall", q, "--palace", palace)
    assert human.returncode == 0, human.stderr
    assert human.stdout.splitlines()[0] == (
        f"nothing relevant in palace {palace} for: {q} (no drawer mentions Caroline)")
    known = _json(shared_daemon.cli("recall", "What did Alice say about the payment gateway?",
                                    "--palace", palace, "--json"))
    assert known["nothing_relevant"] is False and "unknown_names" not in known
    assert "Alice owns the payment gateway" in known["results"][0]["text"]
    assert known["results"][0]["below_floor"] is False
    stg = _json(shared_daemon.cli("recall", "what port does staging MySQL use?", "--palace",
                                  palace, "--json"))
    assert stg["nothing_relevant"] is True and stg["unknown_names"] == ["MySQL"]
    pg = _json(shared_daemon.cli("recall", "what port does staging Postgres use?", "--palace",
                                 palace, "--json"))
    assert pg["nothing_relevant"] is False and "port 5433" in pg["results"][0]["text"]


def test_mcp_recall_puts_the_hit_first_and_says_nothing_relevant(bridge: Bridge,
                                                                   palace: str) -> None:
    failed, text = bridge.tool("recall", {"query": "when are invoices generated?"})
    assert not failed, text
    body = text.split("\n", 2)[2]
    assert body.startswith("## Best matches\n- #") and "nightly at 02:00" in body.split("\n")[2]
    assert body.index("## Best matches") < body.index("## L0")
    assert "## L1" not in text  # the essentials belong to wake_up
    failed, text = bridge.tool("recall", {"query": "nonexistentwordxyz"})
    assert not failed, text
    # A miss costs a line, and the nearest drawers, marked weak.
    miss, *weak = text.splitlines()[1:]
    assert miss == f"Nothing relevant in palace '{palace}'. Nearest, all weak:"
    assert 1 <= len(weak) <= 3 and all(re.match(r"^- #\d+ weak ", ln) for ln in weak)
    failed, text = bridge.tool("recall", {"query": "Where does Caroline work?"})
    assert not failed, text
    assert text.splitlines()[1] == (f"Nothing relevant in palace '{palace}' (no drawer "
                                    "mentions Caroline). Nearest, all weak:")


def test_mcp_recall_leaves_drawers_under_the_floor_out(bridge: Bridge, palace: str,
                                                      shared_daemon: DaemonProc,
                                                      tokenizer: Tokenizer) -> None:
    """A recall that found something spends no token on the drawers under the relevance
    floor: they stay in the JSON results, flagged, but the agent's text shows the hits that
    reach the floor, and its heading counts exactly what is left."""
    query = "when are invoices generated?"
    res = _json(shared_daemon.cli("recall", query, "--palace", palace, "--json"))
    over = {r["id"] for r in res["results"] if not r["below_floor"]}
    under = {r["id"] for r in res["results"] if r["below_floor"]}
    assert over and under and res["nothing_relevant"] is False  # the case in question
    failed, text = bridge.tool("recall", {"query": query})
    assert not failed, text
    shown = {int(i) for i in re.findall(r"^- #(\d+) ", text, re.MULTILINE)}
    assert shown == over, text
    assert BELOW_FLOOR not in text and "nightly at 02:00" in text
    head = HEAD.match(text.splitlines()[0])
    assert head and int(head.group(2)) == tokenizer.count(text) <= int(head.group(3)) == 1500


def test_recall_all_from_the_cli(shared_daemon: DaemonProc, palace: str) -> None:
    res = _json(shared_daemon.cli("recall", "when are invoices generated?", "--all", "--json"))
    assert palace in res["palaces"]
    best = res["results"][0]
    # Every palace of this module holds the same drawers: the best is one of theirs.
    assert best["palace"].startswith("cli-recall-") and "nightly at 02:00" in best["text"]
    human = shared_daemon.cli("recall", "when are invoices generated?", "--all", "-k", "2")
    assert human.returncode == 0, human.stderr
    assert re.match(r"^cli-recall-\d+ \[\d+\] general/\w+  score=", human.stdout.splitlines()[0])


def test_unknown_names_hold_in_keyword_only_mode(shared_keyword_daemon: DaemonProc) -> None:
    keyword_daemon = InProcCliDaemonProc.of(shared_keyword_daemon)
    kw = fresh_name("kw")
    keyword_daemon.cli("create", kw, check=True)
    keyword_daemon.cli("remember", "Alice owns the payment gateway integration with Stripe.",
                       "--palace", kw, check=True)
    res = _json(keyword_daemon.cli("recall", "What did Caroline say about the payment gateway?",
                                   "--palace", kw, "--json"))
    assert res["mode"] == "keyword" and res["floor"] == 0
    assert res["nothing_relevant"] is True and res["unknown_names"] == ["Caroline"]
    assert all(r["below_floor"] for r in res["results"])
    res = _json(keyword_daemon.cli("recall", "What did Alice say about the payment gateway?",
                                   "--palace", kw, "--json"))
    assert res["nothing_relevant"] is False and res["results"][0]["below_floor"] is False
