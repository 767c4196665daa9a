"""The time and author filters of ``memory.recall`` and ``memory.list`` (issue 32's web app
filters by them): ``since``/``until`` keep the drawers dated in ``[since, until)``,
``created_by`` (list only) the drawers one agent remembered (``palaced.ops.fields``'
``filters_from_args``). Through a real daemon."""

from __future__ import annotations

import pytest

from palace_client import Client
from palaced.wire.errors import InvalidContent
from tests.conftest import DaemonProc, fresh_name

pytestmark = pytest.mark.daemon


def _client(daemon: DaemonProc, agent: str) -> Client:
    return Client(daemon.socket, autostart=False, client_name="tests", agent=agent)


def test_recall_and_list_keep_the_drawers_dated_in_the_window(
        shared_keyword_daemon: DaemonProc) -> None:
    _dated_window(shared_keyword_daemon, None)


def test_the_window_on_a_team_palace(shared_keyword_daemon: DaemonProc, pg_url: str) -> None:
    _dated_window(shared_keyword_daemon, pg_url)


def _dated_window(daemon: DaemonProc, store: str | None) -> None:
    palace = fresh_name("dated")
    with _client(daemon, "agent:a") as c:
        if store is not None:  # a team palace in PostgreSQL: the same filter, its dialect
            c.call("palace.create", palace, {"store": store})
        old = c.call("memory.remember", palace, {"text": "The heron left the mill in winter",
                                                 "occurred_at": "2020-03-01"})["id"]
        new = c.call("memory.remember", palace, {"text": "The heron came back to the mill",
                                                 "occurred_at": "2024-06-01"})["id"]

        def recalled(**window: str) -> set[int]:
            got = c.call("memory.recall", palace, {"query": "heron mill", **window})
            return {int(h["id"]) for h in got["results"]}

        def listed(**window: str) -> set[int]:
            return {int(d["id"]) for d in c.call("memory.list", palace, window)["drawers"]}

        assert recalled() == listed() == {old, new}
        assert recalled(since="2021-01-01") == listed(since="2021-01-01") == {new}
        assert recalled(until="2021-01-01") == listed(until="2021-01-01") == {old}
        # ``until`` is excluded: a drawer dated exactly then is out, one at ``since`` is in.
        assert recalled(since="2024-06-01", until="2024-06-02") == {new}
        assert recalled(since="2020-03-02", until="2024-06-01") == set()
        with pytest.raises(InvalidContent, match="since"):
            c.call("memory.recall", palace, {"query": "heron", "since": "last tuesday"})
        if store is not None:
            c.call("palace.delete", palace, {"purge": True})


def test_list_keeps_the_drawers_one_agent_remembered(
        shared_keyword_daemon: DaemonProc) -> None:
    palace = fresh_name("author")
    with _client(shared_keyword_daemon, "agent:a") as a, \
            _client(shared_keyword_daemon, "agent:b") as b:
        mine = a.call("memory.remember", palace, {"text": "Swallows nest under the eaves"})["id"]
        theirs = b.call("memory.remember", palace, {"text": "Swifts never land"})["id"]
        page = a.call("memory.list", palace, {"created_by": "agent:b"})
        assert [d["id"] for d in page["drawers"]] == [theirs] and page["total"] == 1
        assert page["drawers"][0]["created_by"] == "agent:b"
        assert {d["id"] for d in a.call("memory.list", palace, {})["drawers"]} == {mine, theirs}
