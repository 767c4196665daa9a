"""The options that carry op arguments the CLI once left out: ``palace drawers --tag``,
``palace health --stale-days/--limit`` and ``palace kg neighbors --max-nodes``, each shown
changing what the command prints, run in-process against a real keyword-only daemon."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import DaemonProc, fresh_name
from tests.support.cli_inproc import InProcCliDaemonProc

pytestmark = pytest.mark.daemon


def _json(d: InProcCliDaemonProc, *args: str) -> Any:
    res = d.cli(*args, "--json")
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_drawers_tag_keeps_the_drawers_holding_any_given_tag(
        shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = fresh_name("tags")
    ids = {}
    for key, tags in (("red", ["red"]), ("blue", ["blue"]), ("both", ["red", "blue"]),
                      ("none", [])):
        args = [a for t in tags for a in ("--tag", t)]
        ids[key] = int(_json(d, "remember", f"heron note {key}", "-p", p, *args)["id"])

    def listed(*args: str) -> set[int]:
        return {x["id"] for x in _json(d, "drawers", "-p", p, *args)["drawers"]}

    assert listed() == set(ids.values())
    assert listed("--tag", "red") == {ids["red"], ids["both"]}
    # Repeated: any of the tags (the op's semantics), not all of them.
    assert listed("--tag", "red", "--tag", "blue") == {ids["red"], ids["blue"], ids["both"]}
    assert listed("--tag", "green") == set()
    # What a person reads: the untagged drawer is left out, the count says so.
    out = d.cli("drawers", "-p", p, "--tag", "blue", check=True).stdout
    assert "heron note blue" in out and "heron note both" in out
    assert "heron note red" not in out and "heron note none" not in out
    assert "(showing 1-2 of 2)" in out
    # recall --tag says "any of them" too: it is the same filter.
    hits = {x["id"] for x in _json(d, "recall", "heron note", "-p", p, "--tag", "red",
                                   "--tag", "blue")["results"]}
    assert hits == {ids["red"], ids["blue"], ids["both"]}


def test_health_stale_days_and_limit(shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = fresh_name("health")
    for text in ("kingfisher seen at the weir", "otter tracks on the sandbank",
                 "egret roosting by the mill"):
        d.cli("remember", text, "-p", p, "--room", "birds", "--importance", "low", check=True)

    def stale_lines(*args: str) -> list[str]:
        out = d.cli("health", "-p", p, "--threshold", "0.9", *args, check=True).stdout
        return [line for line in out.splitlines() if line.strip().startswith("stale [")]

    # Just stored: faded below the threshold (low is 0.2) but not unused for 30 days.
    assert stale_lines() == []
    assert len(stale_lines("--stale-days", "0")) == 3
    out = d.cli("health", "-p", p, "--threshold", "0.9", "--stale-days", "0", "--limit", "1",
                check=True).stdout
    assert len([x for x in out.splitlines() if x.strip().startswith("stale [")]) == 1
    assert "3 stale" in out and "... 2 more stale (--limit 1 per room)" in out
    room = _json(d, "health", "-p", p, "--threshold", "0.9", "--stale-days", "0",
                 "--limit", "2")["rooms"][0]
    assert room["stale_count"] == 3 and len(room["stale"]) == 2
    # The same words three times: two duplicate pairs, one listed with --limit 1.
    for text in ("Heron at the weir.", "heron at the weir", "HERON, at the weir!"):
        d.cli("remember", text, "-p", p, "--room", "herons", check=True)
    out = d.cli("health", "-p", p, "--limit", "1", check=True).stdout
    herons = out[out.index("herons:"):]
    assert "2 duplicate pairs" in herons and herons.count("exact duplicate") == 1
    assert "... 1 more duplicate pair (--limit 1 per room)" in herons


def test_kg_neighbors_max_nodes(shared_keyword_daemon: DaemonProc) -> None:
    d = InProcCliDaemonProc.of(shared_keyword_daemon)
    p = fresh_name("graph")
    for part in ("wheel", "saddle", "chain", "brake"):
        d.cli("kg", "link", part, "part_of", "bicycle", "-p", p, check=True)

    def linked(out: str) -> list[str]:
        return [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("1  ")]

    whole = d.cli("kg", "neighbors", "bicycle", "-p", p, check=True).stdout
    assert sorted(linked(whole)) == ["brake", "chain", "saddle", "wheel"]
    assert "truncated" not in whole
    # The bicycle itself counts: two entities are it and one part.
    cut = d.cli("kg", "neighbors", "bicycle", "-p", p, "--max-nodes", "2", check=True).stdout
    assert len(linked(cut)) == 1
    assert "(truncated: at most 2 entities, --max-nodes)" in cut
    res = _json(d, "kg", "neighbors", "bicycle", "-p", p, "--max-nodes", "3")
    assert len(res["nodes"]) == 3 and res["truncated"] is True
