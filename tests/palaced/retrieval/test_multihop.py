"""The second hop of recall (palaced.retrieval.multihop): names the first hits mention, searched in turn."""

from __future__ import annotations

from palaced.retrieval.multihop import MAX_DF_SHARE, hop_terms
from tests.conftest import DaemonProc


def test_hop_follows_names_the_query_does_not_mention() -> None:
    texts = ["Alice is employed by Zephyrcorp, says Bob.", "Later Bob met Quillan at Zephyrcorp."]
    df = {"zephyrcorp": 2, "bob": 3, "quillan": 1}
    got = hop_terms("Where does Alice work?", texts, lambda w: df.get(w, 0), 100)
    # Alice is asked about already; Zephyrcorp (two of the texts) outranks Bob, who is in
    # more drawers, and Quillan, named once.
    assert got[0] == "zephyrcorp"
    assert set(got) == {"zephyrcorp", "bob", "quillan"}
    assert "alice" not in got


def test_hop_skips_common_unknown_and_short_names() -> None:
    texts = ["Yesterday Caroline told Melanie about Tokyo and Ed in 2023."]
    # Caroline is in half the drawers, Tokyo in none (a stale count), Ed too short.
    df = {"caroline": 50, "melanie": int(MAX_DF_SHARE * 100), "ed": 1}
    got = hop_terms("What did she say?", texts, lambda w: df.get(w, 0), 100)
    assert got == ["melanie"]
    assert hop_terms("What did she say?", texts, lambda w: 1, 0) == []


def test_hop_is_capped() -> None:
    names = " ".join(f"Zed{chr(97 + i)}x" for i in range(20))
    got = hop_terms("what?", [f"We met {names} today."], lambda w: 1, 1000, limit=4)
    assert len(got) == 4


def _fill(d: DaemonProc, palace: str, *, bridge: bool) -> None:
    with d.client() as c:
        c.create_palace(palace)
        items = [{"text": f"Person{i} went to the market and bought {i} apples.",
                  "room": f"r{i % 5}"} for i in range(30)]
        items.append({"text": "Bob moved to a new city last year.", "room": "home"})
        items.append({"text": "Zephyrcorp opened its head office in Lisbon.", "room": "far"})
        if bridge:
            items.append({"text": "Alice is employed by Zephyrcorp.", "room": "work"})
        c.remember_many(palace, items)


QUESTION = "Which city is Alice's employer based in?"


def _found(d: DaemonProc, palace: str) -> list[str]:
    with d.client() as c:
        out = c.recall_ex(palace, QUESTION, top_k=3)
    return [str(r["text"]) for r in out["results"]]


def test_two_hop_question_finds_the_answer_through_a_shared_name(
        keyword_daemon: DaemonProc) -> None:
    # Keyword-only, so no vector can find the answer: it shares no word with the question,
    # only the name Zephyrcorp with the drawer the question's words find.
    answer = "Zephyrcorp opened its head office in Lisbon."
    _fill(keyword_daemon, "hop", bridge=True)
    assert answer in _found(keyword_daemon, "hop")
    with keyword_daemon.client() as c:
        out = c.recall_ex("hop", QUESTION, top_k=3)
    # Rooms rank by the query alone; a hop's drawer keeps its (absent) keyword score.
    assert out["rooms"][0]["room"] == "work"
    assert [r["lexical"] for r in out["results"] if r["text"] == answer] == [None]
    _fill(keyword_daemon, "nohop", bridge=False)
    assert answer not in _found(keyword_daemon, "nohop")
