"""The 0-1 relevance, and the excerpts of long drawers (pure functions, then in-process)."""

from __future__ import annotations

import pytest

from palaced.text.relevance import EXCERPT_CHARS, coverage, excerpt, relevance, shorten
from tests.support.inproc import InProcDaemon


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


def _naive_best_window(text: str, terms: list[str], limit: int) -> int:
    """Every window start tried, every window scanned: what ``TextMap.best_window`` must
    agree with (ties to the earliest; words counted when whole inside the window)."""
    import re

    from palaced.text.relevance import _found

    starts = [0] + [m.end() for m in re.finditer(r"\n+|(?<=[.!?])\s+", text)
                    if m.end() < len(text)]
    best, best_hits = 0, 0
    for s in starts:
        words = sorted({m.group().lower() for m in re.finditer(r"\w+", text)
                        if m.start() >= s and m.end() <= s + limit})
        hits = sum(1 for t in terms if _found(t, words))
        if hits > best_hits:
            best, best_hits = s, hits
    return best


def test_best_window_agrees_with_scanning_every_window() -> None:
    import random

    from palaced.text.relevance import TextMap

    rnd = random.Random(4)
    vocab = ["otter", "river", "researching", "research", "kayak", "bridge", "north",
             "paint", "painted", "sunset", "harbour", "crane"]
    for _ in range(60):
        sentences = [" ".join(rnd.choices(vocab, k=rnd.randint(2, 12))) + rnd.choice(
            [".", "!", "?", "\n", ","]) for _ in range(rnd.randint(1, 60))]
        text = " ".join(sentences)
        terms = rnd.sample(["otter", "research", "paint", "crane", "north", "zebra"],
                           k=rnd.randint(1, 4))
        limit = rnd.choice([40, 80, 200])
        assert TextMap(text).best_window(terms, limit) == _naive_best_window(
            text, terms, limit), (text, terms, limit)
        assert TextMap(text).coverage(terms) == coverage(text, terms)


def test_excerpt_of_a_huge_drawer_costs_what_its_matches_cost() -> None:
    """The word map is built once (a recall keeps it); then finding the passage does not
    rescan the text: 150k characters, a few milliseconds at most."""
    import time

    from palaced.text.relevance import TextMap

    filler = " ".join(f"Paragraph {i} covers badge access and the coffee machine." for i in
                      range(1300))
    text = filler + " The merge strategy: we squash-merge feature branches. " + filler
    assert len(text) > 140_000
    tmap = TextMap(text)
    started = time.perf_counter()
    for _ in range(20):
        cut = excerpt(text, ["squash", "merge", "strategy"], tmap=tmap)
    per_call = (time.perf_counter() - started) / 20
    assert cut is not None and "squash-merge" in cut
    assert per_call < 0.005, f"{per_call * 1000:.1f} ms per excerpt"
    assert excerpt(text, ["squash", "merge", "strategy"]) == cut  # without a kept map
