"""The 0-1 relevance, and the excerpts of long drawers (pure functions, then in-process)."""

from __future__ import annotations

import pytest

from palaced.relevance import EXCERPT_CHARS, coverage, excerpt, relevance, shorten
from tests.inproc import InProcDaemon


def test_coverage_and_relevance_are_on_a_0_1_scale() -> None:
    assert coverage("Caroline is researching adoption agencies", ["caroline", "research"]) == 1
    assert coverage("Melanie painted a sunset", ["caroline", "paint"]) == 0.5
    assert coverage("anything", []) == 0
    assert relevance("x", ["y"], 0.42) == 0.42
    assert relevance("y", ["y"], 0.42) == 1.0
    assert relevance("x", ["y"], -0.3) == 0.0 and relevance("x", ["y"], None) == 0.0


def test_excerpt_is_the_passage_with_the_query_terms() -> None:
    filler = "".join(f"Line {i} is about the office coffee machine.\n" for i in range(200))
    text = filler + "The rollback of release 4.2 was decided by Dana.\n" + filler
    assert excerpt("short text", ["rollback"]) is None
    cut = excerpt(text, ["rollback", "release"])
    assert cut is not None and len(cut) <= EXCERPT_CHARS + 2
    assert "rollback of release 4.2" in cut and cut.startswith("…") and cut.endswith("…")
    d = shorten({"id": 7, "text": text}, ["rollback"])
    assert d["excerpt"] is True and d["chars"] == len(text) and "rollback" in d["text"]
    assert shorten({"id": 8, "text": "tiny"}, ["x"]) == {"id": 8, "text": "tiny"}


def test_recall_shows_a_long_drawer_as_its_passage(inproc: InProcDaemon) -> None:
    filler = " ".join(f"Paragraph {i} covers badge access and the coffee machine." for i in
                      range(1500))
    text = filler + " The merge strategy decision: we squash-merge feature branches. " + filler
    with inproc.client() as c:
        c.create_palace("excerpts")
        big = c.remember("excerpts", text)
        res = c.recall_ex("excerpts", "squash-merge strategy", budget=400)
        (hit,) = [r for r in res["results"] if r["id"] == big]
        assert hit["excerpt"] is True and hit["chars"] == len(text)
        assert "squash-merge" in hit["text"] and len(hit["text"]) < 700
        item = res["sections"][0]["items"][0]
        assert item["id"] == big and item["excerpt"] is True and "squash-merge" in item["text"]
        assert res["tokens_used"] <= 400
        full = c.get("excerpts", big)
        assert full["text"] == text


def test_recall_all_ranks_every_palace_on_one_scale(inproc: InProcDaemon) -> None:
    with inproc.client() as c:
        c.create_palace("all-a")
        c.create_palace("all-b")
        a = c.remember("all-a", "The merge strategy is squash-merge for feature branches")
        c.remember("all-a", "Lunch is at noon")
        b = c.remember("all-b", "Release trains leave every second Tuesday")
        res = c.recall_all("squash-merge strategy", top_k=5)
        assert {"all-a", "all-b"} <= set(res["palaces"]) and res["skipped"] == []
        first = res["results"][0]
        assert (first["palace"], first["id"]) == ("all-a", a)
        scores = [r["score"] for r in res["results"]]
        assert scores == sorted(scores, reverse=True) and all(0 <= x <= 1 for x in scores)
        assert res["nothing_relevant"] is False
        res = c.recall_all("release trains", top_k=1)
        assert [(r["palace"], r["id"]) for r in res["results"]] == [("all-b", b)]


def test_coverage_splits_words_as_the_keyword_index_does() -> None:
    # FTS5 indexes "squash-merge" as two words; coverage must see the same words, or a drawer
    # the keyword search found for "merge" would score 0 and be flagged under the floor.
    text = "We decided to squash-merge feature branches to keep main linear"
    assert coverage(text, ["merge", "strategy", "pick"]) == pytest.approx(1 / 3)
