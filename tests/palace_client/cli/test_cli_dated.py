"""``palace recall`` and ``palace drawers`` filter by a drawer's date (``--since``,
``--until``: ISO 8601 or a duration back from now, as ``palace audit --since`` takes) and
``palace drawers`` by the agent that remembered it (``--created-by``), through the real
``palace`` process against a keyword-only daemon."""

from __future__ import annotations

import json
from typing import Any

import pytest

from palace_client.cli.common import EXIT_INVALID, EXIT_USAGE
from tests.conftest import DaemonProc, fresh_name

pytestmark = pytest.mark.daemon


def _json(d: DaemonProc, *args: str) -> Any:
    res = d.cli(*args, "--json")
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return json.loads(res.stdout)


def _seed(d: DaemonProc) -> tuple[str, dict[str, int]]:
    """Three otter drawers: dated January and March 2026 by ann, and one dated now by bob."""
    p = fresh_name("dated")
    d.cli("create", p, check=True)
    ids = {}
    for key, agent, when in (("jan", "ann", "2026-01-10"), ("mar", "ann", "2026-03-15T08:00Z"),
                             ("now", "bob", None)):
        args = ["--agent", agent, "remember", f"otter survey {key}: the river count", "-p", p]
        ids[key] = int(_json(d, *args, *(["--when", when] if when else []))["id"])
    return p, ids


def test_drawers_and_recall_take_since_until_and_created_by(
        shared_keyword_daemon: DaemonProc) -> None:
    d = shared_keyword_daemon
    p, ids = _seed(d)

    def listed(*args: str) -> set[int]:
        return {x["id"] for x in _json(d, "drawers", "-p", p, *args)["drawers"]}

    def recalled(*args: str) -> set[int]:
        return {x["id"] for x in _json(d, "recall", "otter survey", "-p", p, *args)["results"]}

    assert listed() == set(ids.values())
    # ISO 8601 dates and datetimes: [since, until).
    assert listed("--since", "2026-02-01", "--until", "2026-04-01") == {ids["mar"]}
    assert listed("--until", "2026-03-15T08:00:00Z") == {ids["jan"]}
    assert recalled("--since", "2026-02-01", "--until", "2026-04-01") == {ids["mar"]}
    # Durations back from now, as `palace audit --since 7d` takes them.
    assert listed("--since", "1d") == {ids["now"]} == recalled("--since", "12h")
    assert listed("--until", "1h") == {ids["jan"], ids["mar"]} == recalled("--until", "2d")
    # The agent that remembered them.
    assert listed("--created-by", "ann") == {ids["jan"], ids["mar"]}
    assert listed("--created-by", "bob", "--since", "2026-01-01") == {ids["now"]}
    assert listed("--created-by", "carol") == set()
    # The human listing filters the same way.
    text = d.cli("drawers", "-p", p, "--since", "2026-03-01", "--until", "2026-04-01").stdout
    assert "otter survey mar" in text and "jan" not in text and "(showing 1 of 1)" in text


def test_a_bad_date_names_its_flag_and_all_palaces_refuses_dates(
        shared_keyword_daemon: DaemonProc) -> None:
    d = shared_keyword_daemon
    p, _ = _seed(d)
    res = d.cli("drawers", "-p", p, "--since", "last tuesday", "--json")
    assert res.returncode == EXIT_INVALID, res.stderr
    error = json.loads(res.stdout)["error"]
    assert error["details"]["arg"] == "since" and "--since" in res.stderr
    res = d.cli("recall", "otter", "-p", p, "--until", "7x", "--json")
    assert res.returncode == EXIT_INVALID and "--until" in res.stderr, res.stderr
    res = d.cli("recall", "otter", "--all", "--since", "7d", "--json")
    assert res.returncode == EXIT_USAGE and "--all" in res.stderr, res.stderr
