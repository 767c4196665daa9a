"""Tokenizer loading (exact, cached, fallback) and its count/truncate contract."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.engine import tokens
from palaced.engine.tokens import CL100K_CACHE_NAME, CL100K_SHA256, Tokenizer, parse_tiktoken_bpe

BPE_FILE = Path(__file__).resolve().parents[3].parent / "shared/data/tiktoken/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def exact() -> Tokenizer:
    tok = Tokenizer.load(BPE_FILE)
    assert tok.exact, tok.reason
    return tok


@pytest.fixture(autouse=True)
def _no_env_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken
    import tiktoken.load

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tokenizer loading must never download")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(tiktoken, "get_encoding", refuse)


def test_bpe_file_gives_exact_cl100k(exact: Tokenizer) -> None:
    assert exact.name == "cl100k_base"
    assert exact.reason is None
    assert exact.source == BPE_FILE
    assert exact.count("") == 0
    assert exact.count("hello world") == 2
    assert exact.count("The quick brown fox jumps over the lazy dog.") == 10


def test_special_token_text_is_counted_not_refused(exact: Tokenizer) -> None:
    assert exact.count("<|endoftext|>") > 1


def test_ranks_match_tiktokens_own_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken.load

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # "" disables tiktoken's cache copy
    theirs = tiktoken.load.load_tiktoken_bpe(str(BPE_FILE), expected_hash=CL100K_SHA256)
    assert parse_tiktoken_bpe(BPE_FILE.read_bytes()) == theirs


def test_constructor_params_match_tiktoken_ext(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *a, **k: {})
    params = public.cl100k_base()
    assert params["name"] == tokens.CL100K_NAME
    assert params["pat_str"] == tokens._CL100K_PAT_STR
    assert params["special_tokens"] == tokens._CL100K_SPECIAL_TOKENS


@pytest.mark.usefixtures("no_network")
def test_cache_dir_with_tiktoken_cache_name(tmp_path: Path) -> None:
    (tmp_path / CL100K_CACHE_NAME).symlink_to(BPE_FILE)
    tok = Tokenizer.load(None, tmp_path)
    assert tok.exact and tok.count("hello world") == 2
    assert CL100K_CACHE_NAME == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


@pytest.mark.usefixtures("no_network")
def test_tiktoken_cache_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / CL100K_CACHE_NAME).symlink_to(BPE_FILE)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert Tokenizer.load(None, None).exact


@pytest.mark.usefixtures("no_network")
def test_bad_bpe_file_falls_through_to_cache(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(b"aGVsbG8= 0\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copyfile(BPE_FILE, cache / CL100K_CACHE_NAME)
    tok = Tokenizer.load(bad, cache)
    assert tok.exact
    assert tok.source == cache / CL100K_CACHE_NAME


@pytest.mark.usefixtures("no_network")
def test_fallback_never_raises_and_says_why(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(b"not a bpe file")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    tok = Tokenizer.load(bad, tmp_path)  # a wrong file, a dir without the cache name, env
    assert not tok.exact
    assert tok.name == "chars/4-estimate"
    assert tok.reason is not None
    assert "sha256" in tok.reason and "cache_dir" in tok.reason
    assert "TIKTOKEN_CACHE_DIR" in tok.reason
    assert not Tokenizer.load(tmp_path).exact  # a directory as the BPE file
    nothing = Tokenizer.load(None, None)
    assert not nothing.exact and nothing.reason


def test_fallback_counts_chars_over_four() -> None:
    tok = Tokenizer.fallback("test")
    assert tok.reason == "test"
    assert [tok.count("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert tok.truncate("abcdefghij", 2) == "abcdefgh"
    assert tok.truncate("abc", 0) == ""


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=400), n=st.integers(min_value=-2, max_value=120))
def test_truncate_fits_and_is_a_prefix(exact: Tokenizer, text: str, n: int) -> None:
    for tok in (exact, Tokenizer.fallback("test")):
        cut = tok.truncate(text, n)
        assert text.startswith(cut)
        assert tok.count(cut) <= max(n, 0)
        if tok.count(text) <= n:
            assert cut == text


def test_fallback_count_matches_formula() -> None:
    tok = Tokenizer.fallback("x")
    text = "héllo wörld 日本語"
    assert tok.count(text) == math.ceil(len(text) / 4)


def test_truncate_never_splits_a_character(exact: Tokenizer) -> None:
    text = "日本語のテキスト" * 20
    for n in range(1, 30):
        cut = exact.truncate(text, n)
        assert text.startswith(cut)
        assert exact.count(cut) <= n


# Pieces around the joins a long text is counted by (``tokens._PIECES``): newlines, runs of
# whitespace, punctuation that absorbs newlines, contractions, digits, non-ASCII and special
# token text, so that every alternative of the pre-tokenizer meets a join.
_PARTS = ["\n", "\n\n", "\r\n", "\r", " ", "  ", "\t", " \n", ".\n", ")\n\n", "a", "Zb",
          "word", "'s", "'LL", "1", "123", "4567", ".", ")", "…", "é", "日本", "#", "-",
          "- #12", "## L2 · Hits", "\u00a0", "\u2028", "\x1c", "\x85", "<|endoftext|>", "'",
          "!!", "(", "  indented", "\n  ", "\n- ", "\n#", "\n'", "\n1", "\n.", "\n!",
          "\n\t", " \t", "\n \n", "\n  x", "\t\n", "\n \t'", "\f", "\v"]


def _whole(tok: Tokenizer, text: str) -> int:
    """``text``'s count encoded whole, as tiktoken does."""
    enc: Any = tok._enc
    return len(enc.encode_ordinary(text))


@pytest.mark.slow  # 400 hypothesis examples, ~6 s: the full run keeps it, the unit loop skips it
@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PARTS), min_size=150, max_size=400))
def test_a_long_text_counted_by_pieces_counts_as_a_whole(exact: Tokenizer,
                                                         parts: list[str]) -> None:
    """A long text is counted as the sum of its pieces' counts (each remembered, so the
    packing search counts a re-rendered answer by its new lines alone): the same count as
    encoding it whole, whatever its joins."""
    text = "".join(parts)
    fresh = Tokenizer(exact._enc)  # no piece remembered from another example
    assert fresh.count(text) == _whole(exact, text)


def test_an_answer_is_counted_by_its_pieces(exact: Tokenizer) -> None:
    lines = [f"- #{i} [w/ops] score 0.{i:03d} 2023-11-14\n  Drawer {i} says: it's done.\n"
             "  (second line)" for i in range(40)]
    text = "Recall in palace 'p' (mode hybrid, 900 of 1500 tokens)\n\n## Hits\n" + \
        "\n".join(lines)
    assert len(tokens._PIECES.split(text)) == 2 + 3 * 40
    fresh = Tokenizer(exact._enc)
    assert fresh.count(text) == _whole(exact, text)
    # The same answer stating another count re-encodes its heading alone; a drawer's lines
    # are pieces of their own, whatever its head.
    calls: list[str] = []
    enc: Any = fresh._enc

    class Spy:
        def encode_ordinary(self, t: str) -> list[int]:
            calls.append(t)
            return list(enc.encode_ordinary(t))

    fresh._enc = Spy()
    again = text.replace("900 of", "901 of")
    assert fresh.count(again) == len(enc.encode_ordinary(again))
    assert calls == ["Recall in palace 'p' (mode hybrid, 901 of 1500 tokens)\n\n"]
