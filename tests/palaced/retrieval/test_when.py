"""Questions that ask when and name dates (palaced.retrieval.when), and how recall ranks them."""

from __future__ import annotations

import pytest

from palaced.retrieval.when import (
    MAX_QUERY_DATES,
    asks_when,
    date_matches,
    drawer_spans,
    query_dates,
    states_time,
)
from tests.conftest import DaemonProc


@pytest.fixture
def keyword_daemon(shared_keyword_daemon: DaemonProc) -> DaemonProc:
    """The module's keyword-only daemon (``shared_keyword_daemon``), not one per test: each
    test here works in palaces of its own names and never stops, kills or damages it."""
    return shared_keyword_daemon


@pytest.mark.parametrize(("query", "asks"), [
    ("When did Caroline go to the support group?", True),
    ("  when is the talent show", True),
    ("Which year did they marry?", True),
    ("What date is the party?", True),
    ("How long ago was her birthday?", True),
    ("How long has Caroline had her friends?", True),
    ("What did she say when he left?", False),  # "when" as a conjunction
    ("Where does Alice work?", False),
])
def test_asks_when(query: str, asks: bool) -> None:
    assert asks_when(query) is asks


@pytest.mark.parametrize(("text", "states"), [
    ("I went to a support group yesterday.", True),
    ("We met last Friday at the park", True),
    ("three weeks ago we moved", True),
    ("It opened in 2016.", True),
    ("Camping in June was great", True),
    ("See you on 5 May!", True),
    ("Sundays are for pottery", True),
    ("Due 2023-05-08", True),
    ("I may go to the group.", False),  # "may" the verb
    ("Jan said hi to Mar.", False),  # names, not months
    ("The group was lovely and supportive.", False),
])
def test_states_time(text: str, states: bool) -> None:
    assert states_time(text) is states


def test_a_duration_answers_how_long_only() -> None:
    text = "I have known them for three years now."
    assert states_time(text, "How long has Caroline known them?")
    assert not states_time(text, "When did Caroline meet them?")
    assert not states_time(text)
    assert states_time("We met last Friday.", "How long has she known them?")


def test_states_time_reads_only_the_head() -> None:
    assert not states_time("x " * 1_500 + "yesterday")
    assert states_time("yesterday " + "x " * 1_500)


@pytest.mark.parametrize(("query", "spans"), [
    ("When did Melanie go camping in June?", [(6, None)]),
    ("What did she paint on October 13, 2023?", [(10, 2023)]),
    ("What did Gina find on 1 February, 2023?", [(2, 2023)]),
    ("What happened in May 2023 and in 2022?", [(5, 2023), (None, 2022)]),
    ("How many times did she go to the beach in 2023?", [(None, 2023)]),
    ("I may go", []),  # the verb
    ("What did they do?", []),
])
def test_query_dates(query: str, spans: list[tuple[int | None, int | None]]) -> None:
    assert query_dates(query) == spans


def test_query_naming_many_dates_asks_about_none() -> None:
    query = " ".join(f"in {y}" for y in range(2000, 2001 + MAX_QUERY_DATES))
    assert query_dates(query) == []


def test_drawer_spans_and_matching() -> None:
    spans = drawer_spans((7, 2023), "June 2023 2022")
    assert spans == {(7, 2023), (6, 2023), (None, 2022)}
    assert date_matches([(6, None)], spans)  # a resolved "last month"
    assert date_matches([(None, 2023)], spans)  # its own year
    assert date_matches([(None, 2022)], spans)  # "last year", resolved
    assert not date_matches([(6, 2022)], spans)  # only the year 2022 is known
    assert not date_matches([(8, None)], spans)
    assert not date_matches([], spans)


def _results(d: DaemonProc, palace: str, items: list[dict[str, object]],
             query: str) -> list[dict[str, object]]:
    with d.client() as c:
        c.create_palace(palace)
        c.remember_many(palace, items)
        return list(c.recall_ex(palace, query, top_k=5)["results"])


# Drawers that share a name with the questions, so the keyword scores spread over a pool
# of candidates as in a real palace (a boost is a share of that spread).
FILLER = [{"text": f"Caroline and Melanie bought {i} apples at the market.", "room": f"r{i % 4}"}
          for i in range(20)]


def test_when_question_ranks_the_drawer_that_states_a_time_first(
        keyword_daemon: DaemonProc) -> None:
    timed = "Caroline went to a support group yesterday."
    wordy = "Caroline said the support group is lovely."
    got = _results(keyword_daemon, "when", [
        *FILLER, {"text": wordy, "room": "a"}, {"text": timed, "room": "b"}],
        "When did Caroline go to the support group?")
    lexical = {r["text"]: r["lexical"] for r in got}
    # The keyword match alone prefers the wordy drawer; the question asks when.
    assert float(lexical[wordy]) > float(lexical[timed])  # type: ignore[arg-type]
    assert got[0]["text"] == timed
    # The same words asked without "when" keep the keyword order.
    plain = _results(keyword_daemon, "plain", [
        *FILLER, {"text": wordy, "room": "a"}, {"text": timed, "room": "b"}],
        "Did Caroline go to the support group?")
    assert plain[0]["text"] == wordy


def test_question_naming_a_month_prefers_drawers_of_that_month(
        keyword_daemon: DaemonProc) -> None:
    june = "Melanie went camping with the kids."
    august = "Melanie went camping, camping with June the dog."  # June is a name here
    items = [*FILLER,
             {"text": june, "room": "s1", "occurred_at": "2023-06-20T10:00:00Z"},
             {"text": august, "room": "s2", "occurred_at": "2023-08-10T10:00:00Z"}]
    got = _results(keyword_daemon, "month", items, "Where did Melanie go camping in June?")
    lexical = {r["text"]: r["lexical"] for r in got}
    assert float(lexical[august]) > float(lexical[june])  # type: ignore[arg-type]
    assert got[0]["text"] == june
    # "last month" said in July is about June too.
    said = "Melanie said the camping trip last month was lovely."
    items = [*FILLER,
             {"text": said, "room": "s1", "occurred_at": "2023-07-05T10:00:00Z"},
             {"text": august, "room": "s2", "occurred_at": "2023-08-10T10:00:00Z"}]
    got = _results(keyword_daemon, "resolved", items, "Where did Melanie go camping in June?")
    assert got[0]["text"] == said
