"""What ``sections.deliver`` costs: the whole delivered text is rendered and counted no more
often than its packing search needs (the heading's stated count is settled by re-rendering
the heading alone, and the text the search counted is not counted again), and the text is
still ``answer_text`` of the packing, its count exact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from palaced.engine.tokens import Tokenizer
from palaced.retrieval.packing import Item, Section
from palaced.retrieval.sections import HITS, deliver, wire_sections
from palaced.wire import recall_text
from palaced.wire.recall_text import Frame, answer_text
from tests.conftest import TIKTOKEN_FILE


class Counting:
    """The exact tokenizer, noting each whole answer text it counts."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.name = tok.name
        self.answers: list[str] = []

    def count(self, text: str) -> int:
        if text.startswith("Recall in palace"):
            self.answers.append(text)
        return self.tok.count(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.tok.truncate(text, max_tokens)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    t = Tokenizer.load(TIKTOKEN_FILE)
    assert t.exact
    return t


def _parts(n: int) -> list[Section]:
    items = [Item(id=i, text=f"Drawer {i} says the deploy of the billing service moved to "
                  f"Thursday {i} times.", score=1.0 - i / 100, level=HITS,
                  meta={"wing": "w", "room": "ops", "occurred_ms": 1_700_000_000_000})
             for i in range(1, n + 1)]
    return [Section(HITS, "Memories", items)]


def test_no_answer_text_is_counted_twice(tok: Tokenizer) -> None:
    counting = Counting(tok)
    frame = Frame("recall", "p", mode="hybrid")
    packed, text, tokens = deliver(_parts(5), 1500, counting, frame)
    # The packing's text stating the budget, then the texts stating a count until one states
    # its own ("1500" is two tokens, "150" one: three counts). Before, the first text was
    # rendered and counted a second time.
    assert len(counting.answers) == len(set(counting.answers)) == 3
    assert text == answer_text(frame, wire_sections(packed), tokens, 1500)
    assert tokens == tok.count(text) and f"{tokens} of 1500 tokens" in text


def test_a_searched_packing_delivers_the_same_text(tok: Tokenizer) -> None:
    for budget in (40, 90, 150, 300):
        for compact in (False, True):
            counting = Counting(tok)
            frame = Frame("recall", "p", compact, "keyword", notice="no model yet")
            packed, text, tokens = deliver(_parts(30), budget, counting, frame)
            assert len(counting.answers) == len(set(counting.answers))
            assert tokens == tok.count(text) <= budget
            if packed.sections:
                assert text == answer_text(frame if "(no model yet)" in text else
                                           Frame("recall", "p", compact, "keyword"),
                                           wire_sections(packed), tokens, budget)


def test_a_search_renders_each_item_once(tok: Tokenizer, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """The packings a search tries share most items: each item (or cut version of one) is
    turned into its wire mapping and rendered once, not once per packing tried."""
    rendered: list[tuple[object, str]] = []
    real = recall_text.render_drawer

    def spy(item: Mapping[str, Any], **kw: Any) -> str:
        rendered.append((item.get("id"), str(item.get("text"))))
        return real(item, **kw)

    monkeypatch.setattr(recall_text, "render_drawer", spy)
    frame = Frame("recall", "p", mode="hybrid")
    counting = Counting(tok)
    packed, text, tokens = deliver(_parts(30), 300, counting, frame)
    assert len(counting.answers) > 2  # a search: more than one packing was tried
    assert len(rendered) == len(set(rendered))
    monkeypatch.undo()
    assert text == answer_text(frame, wire_sections(packed), tokens, 300)
