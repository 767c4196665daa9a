"""chunk_text: windows that fit, overlap, cover the text and keep late facts findable."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.text.chunking import chunk_spans, chunk_text, estimate_wordpieces


def _sentences(n: int) -> str:
    return " ".join(f"Sentence number {i} talks about topic {i % 7} at some length."
                    for i in range(n))


def test_spans_of_short_and_blank_texts() -> None:
    assert chunk_spans("  hi there ") == [(2, 10)]
    assert chunk_spans(" \n ") == []


def test_short_and_blank_texts_are_returned_whole() -> None:
    assert chunk_text("Caroline went to the support group.") == [
        "Caroline went to the support group."
    ]
    assert chunk_text("") == [""]
    assert chunk_text("   \n ") == ["   \n "]


def test_estimate_wordpieces() -> None:
    assert estimate_wordpieces("") == 0
    assert estimate_wordpieces("Hey Mel!") == 3
    assert estimate_wordpieces("snake_case") == 3  # "_" is its own piece
    assert estimate_wordpieces("antidisestablishment") == 6


def test_long_text_is_split_on_sentences_with_overlap() -> None:
    text = _sentences(60) + " The key fact: the launch code is 4471."
    chunks = chunk_text(text, max_tokens=60, overlap=15)
    assert len(chunks) > 3
    for chunk in chunks:
        assert estimate_wordpieces(chunk) <= 60
        assert chunk in text
        assert chunk.endswith(".")  # every window closes on a sentence end
    assert "launch code is 4471" in chunks[-1]
    for earlier, later in itertools.pairwise(chunks):
        first_sentence = re.match(r".*?\.(?=\s|$)", later)
        assert first_sentence is not None
        assert first_sentence.group() in earlier  # the overlap is whole sentences
        assert text.index(later) > text.index(earlier)


def test_zero_overlap_partitions_the_text() -> None:
    text = _sentences(40)
    chunks = chunk_text(text, max_tokens=50, overlap=0)
    assert " ".join(chunks) == text


def test_one_long_sentence_splits_on_words() -> None:
    text = " ".join(f"word{i}" for i in range(500))
    chunks = chunk_text(text, max_tokens=40, overlap=8)
    assert all(estimate_wordpieces(c) <= 40 for c in chunks)
    assert chunks[0].startswith("word0 ") and chunks[-1].endswith("word499")
    for earlier, later in itertools.pairwise(chunks):
        assert later.split()[0] in earlier.split()


def test_giant_word_is_cut_into_pieces() -> None:
    text = "x" * 3000
    chunks = chunk_text(text, max_tokens=50, overlap=10)
    assert all(estimate_wordpieces(c) <= 50 for c in chunks)
    assert "".join(chunks) == text  # single-piece units: no overlap possible inside a word


def test_custom_counter_is_used() -> None:
    text = "a. b. c. d. e. f."
    assert chunk_text(text, max_tokens=2, overlap=0, count=len) == text.split(" ")


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_bad_sizes_raise(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("x", max_tokens=max_tokens, overlap=overlap)


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab c.!?\n_é-"), max_size=600),
    max_tokens=st.integers(min_value=1, max_value=40),
    data=st.data(),
)
def test_chunks_fit_cover_and_keep_order(text: str, max_tokens: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(min_value=0, max_value=max_tokens - 1))
    chunks = chunk_text(text, max_tokens=max_tokens, overlap=overlap)
    if estimate_wordpieces(text) <= max_tokens:
        assert chunks == [text]
        return
    spans = chunk_spans(text, max_tokens=max_tokens, overlap=overlap)
    assert chunks == [text[a:b] for a, b in spans]
    covered = [False] * len(text)
    for (a, _), (c, _) in itertools.pairwise(spans):
        assert a < c  # windows move forward
    for a, b in spans:
        chunk = text[a:b]
        assert chunk and chunk == chunk.strip()
        assert estimate_wordpieces(chunk) <= max_tokens
        for i in range(a, b):
            covered[i] = True
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace())
