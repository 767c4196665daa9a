"""Score fusion, boosts, room scoring (palaced.retrieval.fusion) and budget packing (palaced.retrieval.packing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from palaced.engine.tokens import Tokenizer
from palaced.retrieval.fusion import (
    DrawerMeta,
    apply_boosts,
    fuse,
    normalize,
    rank_rooms,
    ranking,
    room_scores,
    standardized_fusion,
)
from palaced.retrieval.packing import (
    ITEM_OVERHEAD_TOKENS,
    MIN_ITEM_TOKENS,
    SECTION_OVERHEAD_TOKENS,
    Item,
    PackResult,
    Section,
    pack,
)

BPE_FILE = Path(__file__).resolve().parents[3].parent / "shared/data/tiktoken/cl100k_base.tiktoken"
DAY_MS = 86_400_000
NOW_MS = 1_700_000_000_000


def fuse_even(lexical: dict[int, float], vector: dict[int, float]) -> dict[int, float]:
    """``fuse`` with equal weights, for the tests of the maths (recall's are RankParams')."""
    return fuse(lexical, vector, lexical_weight=0.5, vector_weight=0.5)


@pytest.fixture(scope="module")
def exact() -> Tokenizer:
    tok = Tokenizer.load(BPE_FILE)
    assert tok.exact, tok.reason
    return tok


CHARS4 = Tokenizer.fallback("tests")


# -- fusion ---------------------------------------------------------------------------------
def test_ranking_breaks_ties_by_id() -> None:
    assert ranking({5: 1.0, 2: 1.0, 9: 3.0}) == [9, 2, 5]


def test_agreeing_lists_keep_their_order() -> None:
    lexical = {1: 10.0, 2: 5.0, 3: 1.0}
    vector = {1: 0.9, 2: 0.5, 3: 0.1}
    assert ranking(fuse_even(lexical, vector)) == [1, 2, 3]


def test_standardized_fusion_respects_margins() -> None:
    # Lexical is sure about 1; the vector list nearly ties 2 > 3 > 1 (ranks alone, as
    # reciprocal-rank fusion reads them, would put 2 first).
    lexical = {1: 20.0, 2: 2.0, 3: 1.0, 4: 0.5}
    vector = {2: 0.62, 3: 0.61, 1: 0.60, 4: 0.10}
    assert ranking(fuse_even(lexical, vector)) == [1, 2, 3, 4]


def test_zscore_floor_is_the_worst_hit() -> None:
    normed, floor = normalize({1: 3.0, 2: 1.0})
    assert normed == pytest.approx({1: 1.0, 2: -1.0})
    assert floor == pytest.approx(-1.0)
    fused = fuse({1: 3.0, 2: 1.0}, {3: 0.9, 1: 0.1}, lexical_weight=1.0, vector_weight=1.0)
    assert fused == pytest.approx({1: 1.0 - 1.0, 2: -1.0 - 1.0, 3: -1.0 + 1.0})


def test_single_value_lists_only_signal_presence() -> None:
    assert normalize({7: 3.0}) == ({7: 1.0}, -1.0)
    assert normalize({7: 3.0, 8: 3.0}) == ({7: 1.0, 8: 1.0}, -1.0)
    fused = fuse_even({7: 3.0}, {7: 0.5, 8: 0.4})
    assert fused == pytest.approx({7: 0.5 * 1.0 + 0.5 * 1.0, 8: 0.5 * -1.0 + 0.5 * -1.0})
    # A lone exact keyword hit is not drowned by the other list's spread.
    fused = fuse({9: 2.0}, {8: 0.9, 9: 0.2, 10: 0.1, 11: 0.1}, lexical_weight=0.6,
                 vector_weight=0.4)
    assert ranking(fused)[0] == 9


def test_empty_list_leaves_the_other_in_charge() -> None:
    lexical = {1: 2.0, 2: 9.0, 3: 4.0}
    assert ranking(fuse_even(lexical, {})) == [2, 3, 1]
    assert ranking(fuse_even({}, {5: 0.1, 6: 0.7})) == [6, 5]
    assert fuse_even({}, {}) == {}


def test_zero_weight_ignores_a_list() -> None:
    lexical = {1: 1.0, 2: 2.0}
    vector = {1: 0.9, 2: 0.1}
    assert ranking(fuse(lexical, vector, lexical_weight=0.5, vector_weight=0.0)) == [2, 1]
    assert ranking(fuse(lexical, vector, lexical_weight=0.0, vector_weight=0.5)) == [1, 2]


def test_bad_fusion_arguments_raise() -> None:
    with pytest.raises(ValueError):
        fuse({1: 1.0}, {}, lexical_weight=-1.0, vector_weight=0.5)
    with pytest.raises(ValueError):
        standardized_fusion([{1: 1.0}], weights=[1.0, 2.0])


_scores = st.dictionaries(st.integers(0, 30), st.floats(-50, 50), max_size=25)


@settings(max_examples=200, deadline=None)
@given(lexical=_scores, vector=_scores)
def test_fusion_is_monotone_and_covers_the_union(lexical: dict[int, float],
                                                 vector: dict[int, float]) -> None:
    fused = fuse_even(lexical, vector)
    assert set(fused) == set(lexical) | set(vector)
    both = sorted(set(lexical) & set(vector))
    for a in both:
        for b in both:
            if lexical[a] > lexical[b] and vector[a] > vector[b]:
                assert fused[a] >= fused[b] - 1e-9


# -- boosts ---------------------------------------------------------------------------------
def test_boosts_are_fractions_of_the_score_range() -> None:
    scores = {1: 0.0, 2: 10.0}
    meta = {
        1: DrawerMeta(importance=1.0, ts_ms=NOW_MS),  # +0.1 R importance, +0.05 R fresh
        2: DrawerMeta(importance=0.5, ts_ms=NOW_MS - 30 * DAY_MS),  # one half-life: +0.025 R
    }
    boosted = apply_boosts(scores, meta, now_ms=NOW_MS)
    assert boosted == pytest.approx({1: 10 * 0.15, 2: 10.0 + 10 * 0.025})


def test_boosts_break_ties_but_not_clear_wins() -> None:
    meta = {1: DrawerMeta(importance=0.0), 2: DrawerMeta(importance=1.0, ts_ms=NOW_MS + DAY_MS)}
    assert ranking(apply_boosts({1: 1.0, 2: 1.0}, meta, now_ms=NOW_MS)) == [2, 1]
    assert ranking(apply_boosts({1: 1.0, 2: 0.0}, meta, now_ms=NOW_MS)) == [1, 2]
    newer = {1: DrawerMeta(ts_ms=NOW_MS - 90 * DAY_MS), 2: DrawerMeta(ts_ms=NOW_MS - DAY_MS)}
    assert ranking(apply_boosts({1: 0.5, 2: 0.5}, newer, now_ms=NOW_MS)) == [2, 1]


def test_boosts_leave_unknown_drawers_alone_and_validate() -> None:
    assert apply_boosts({1: 0.3}, {}, now_ms=NOW_MS) == {1: 0.3}
    clamped = apply_boosts({1: 0.0}, {1: DrawerMeta(importance=7.0)}, now_ms=NOW_MS,
                           recency_weight=0.0)
    assert clamped == pytest.approx({1: 0.1})  # equal scores: the range counts as 1
    with pytest.raises(ValueError):
        apply_boosts({}, {}, now_ms=0, half_life_days=0)
    with pytest.raises(ValueError):
        apply_boosts({}, {}, now_ms=0, importance_weight=-0.1)


# -- rooms ----------------------------------------------------------------------------------
def test_room_scores_best_plus_share_of_support() -> None:
    drawers = {1: 5.0, 2: 4.0, 3: 3.0, 4: 1.0, 5: 0.0, 6: 2.0, 7: 9.0}
    rooms: dict[int, str | None] = {1: "a", 2: "b", 3: "b", 4: "b", 5: "c", 6: "b", 7: None}
    scored = room_scores(drawers, rooms)
    # b's top three are 4, 3, 2 (the fourth, 1, does not count): 4 + 0.2 * (3 + 2)
    assert scored == pytest.approx({"a": 5.0, "b": 5.0, "c": 0.0})
    assert rank_rooms(scored) == ["a", "b", "c"]
    assert room_scores(drawers, rooms, support_share=0.5)["b"] == pytest.approx(6.5)


def test_room_scores_shift_negative_scores() -> None:
    scored = room_scores({1: -2.0, 2: -1.0, 3: -3.0}, {1: "a", 2: "a", 3: "b"})
    assert scored == pytest.approx({"a": 2.0 + 0.2 * 1.0, "b": 0.0})
    assert room_scores({}, {}) == {}
    with pytest.raises(ValueError):
        room_scores({1: 1.0}, {1: "a"}, top_n=0)


def test_room_pipeline_on_fused_scores() -> None:
    fused = fuse_even({1: 3.0, 2: 2.95, 3: 2.9, 4: 0.0}, {1: 0.5, 2: 0.49, 3: 0.48, 4: 0.0})
    rooms: dict[int, str | None] = {1: "x", 2: "y", 3: "y", 4: "z"}
    assert ranking(fused) == [1, 2, 3, 4]
    strength = room_scores(fused, rooms)
    # y has two near-top drawers: it ranks first among the rooms, while the drawers keep
    # their own order (no room feedback lifts y's best over x's single one).
    assert rank_rooms(strength) == ["y", "x", "z"]


# -- packing --------------------------------------------------------------------------------
def _cost(tok: Tokenizer, result: PackResult) -> int:
    total = 0
    for section in result.sections:
        total += tok.count(section.title) + SECTION_OVERHEAD_TOKENS
        total += sum(tok.count(i.text) + ITEM_OVERHEAD_TOKENS for i in section.items)
    return total


def test_pack_hand_case_with_chars4() -> None:
    tok = CHARS4
    sections = [
        Section(0, "Id", [Item("identity", "I am Ada, a lab assistant.", 1.0, 0)]),  # 7 + 3
        Section(1, "Top", [Item(1, "x" * 40, 0.9, 1), Item(2, "y" * 400, 0.8, 1),
                           Item(3, "z" * 8, 0.7, 1)]),
        Section(2, "Room", [Item(1, "x" * 40, 0.9, 2), Item(4, "w" * 4, 0.5, 2)]),
    ]
    # First items, in order: Id 5 + 10, Top 5 + 13, Room (1 is a duplicate) 5 + 4 = 42;
    # then the rest: item 2 (103) is cut, item 3 (2 + 3) fits -> 47.
    result = pack(sections, 47, tok)
    assert [[i.id for i in s.items] for s in result.sections] == [["identity"], [1, 3], [4]]
    assert result.tokens_used == 47 == _cost(tok, result)
    assert result.cut == [{"id": 2, "level": 1, "tokens": 103, "truncated": False}]
    assert result.cut_by_level() == {1: 1}
    assert result.tokenizer_name == "chars/4-estimate"
    smaller = pack(sections, 46, tok)  # item 3 no longer fits; every section still shows
    assert [s.title for s in smaller.sections] == ["Id", "Top", "Room"]
    assert smaller.render() == ("## Id\n- I am Ada, a lab assistant.\n\n"
                                f"## Top\n- {'x' * 40}\n\n## Room\n- wwww\n")


def test_pack_cuts_a_first_item_rather_than_drop_a_section(exact: Tokenizer) -> None:
    long = " ".join(f"fact{i}" for i in range(400))
    sections = [Section(0, "Identity", [Item("id", long, 1.0, 0), Item("id2", "short", 1.0, 0)]),
                Section(1, "More", [Item(7, "seven " * 200, 0.5, 1)])]
    result = pack(sections, 60, exact)
    assert result.tokens_used <= 60
    identity, more = result.sections
    assert identity.items[0].text.endswith("…") and more.items[0].text.endswith("…")
    assert long.startswith(identity.items[0].text[:-1])
    assert identity.items[0].meta == {"truncated": True}
    assert [c["id"] for c in result.cut] == ["id", 7, "id2"]
    assert [c["truncated"] for c in result.cut] == [True, True, False]


def test_pack_budget_zero_and_negative() -> None:
    sections = [Section(0, "L0", [Item(1, "hello", 1.0, 0)])]
    empty = pack(sections, 0, CHARS4)
    assert empty.sections == [] and empty.tokens_used == 0 and len(empty.cut) == 1
    with pytest.raises(ValueError):
        pack(sections, -1, CHARS4)


def test_pack_fills_in_input_order() -> None:
    sections = [Section(-1, "Hits", [Item(1, "a" * 40, 0.1, -1)]),
                Section(0, "L0", [Item(1, "a" * 40, 0.1, 0), Item(2, "b" * 40, 0.1, 0)])]
    result = pack(sections, 40, CHARS4)
    assert [s.title for s in result.sections] == ["Hits", "L0"]  # the first section wins the id
    assert [i.id for i in result.sections[0].items] == [1]


def test_pack_places_a_short_first_item_whole_when_it_fits_its_share() -> None:
    # Found by Hypothesis: an item shorter than its fair share was sent to truncation, which
    # made its empty text nothing at all, and the item was dropped though it fitted.
    sections = [Section(0, "0", [Item(0, "", 0.0, 0)]),
                Section(0, "0", [Item(0, "", 0.0, 0), Item(2, "0", 0.0, 0)]),
                Section(0, "", [Item(1, "", 0.0, 0)])]
    result = pack(sections, 23, CHARS4)
    assert [[i.id for i in s.items] for s in result.sections][:2] == [[0], [2]]
    assert not any(c["truncated"] for c in result.cut) and result.tokens_used <= 23


_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=120)
_item = st.builds(lambda i, t: (i, t), st.integers(0, 15), _text)
_section = st.tuples(st.integers(0, 3), st.text(max_size=12), st.lists(_item, max_size=6))


@settings(max_examples=120, deadline=None)
@given(raw=st.lists(_section, max_size=6), budget=st.integers(0, 300),
       use_exact=st.booleans())
def test_pack_properties(exact: Tokenizer, raw: list[tuple[int, str, list[tuple[int, str]]]],
                         budget: int, use_exact: bool) -> None:
    tok = exact if use_exact else CHARS4
    sections = [Section(level, title, [Item(i, t, 0.0, level) for i, t in items])
                for level, title, items in raw]
    result = pack(sections, budget, tok)

    # never over budget, and the accounting is what the documented costs add up to
    assert result.tokens_used <= budget
    assert result.tokens_used == _cost(tok, result)
    assert tok.count(result.render()) <= result.tokens_used

    # no id twice, across all levels
    ids = [i.id for s in result.sections for i in s.items]
    assert len(ids) == len(set(ids))

    # every distinct input id is placed or reported cut
    cut_ids = {c["id"] for c in result.cut}
    assert {i.id for s in sections for i in s.items} <= set(ids) | cut_ids

    # the first section's first item is kept whole whenever it fits beside the others' share
    # (what the others hold once ids placed earlier are dropped from them)
    seen: set[object] = set()
    fresh_sections = []
    for sec in sections:
        fresh = [i for i in sec.items if i.id not in seen]
        seen.update(i.id for i in fresh)
        fresh_sections.append(Section(sec.level, sec.title, fresh))
    nonempty = [sec for sec in fresh_sections if sec.items]
    if nonempty:
        first, later = nonempty[0], nonempty[1:]
        keep = sum(tok.count(sec.title) + SECTION_OVERHEAD_TOKENS
                   + min(tok.count(sec.items[0].text), MIN_ITEM_TOKENS) + ITEM_OVERHEAD_TOKENS
                   for sec in later)
        cost = (tok.count(first.title) + SECTION_OVERHEAD_TOKENS + tok.count(first.items[0].text)
                + ITEM_OVERHEAD_TOKENS)
        if cost <= budget - keep:
            assert result.sections[0].items[0].text == first.items[0].text


@settings(max_examples=60, deadline=None)
@given(text=_text.filter(lambda t: t.strip() != ""), budget=st.integers(0, 40))
def test_oversized_l0_is_truncated_not_dropped(exact: Tokenizer, text: str, budget: int) -> None:
    long = (text + " ") * 30
    result = pack([Section(0, "I", [Item("me", long, 1.0, 0)])], budget, exact)
    assert result.tokens_used <= budget
    room = budget - exact.count("I") - SECTION_OVERHEAD_TOKENS - ITEM_OVERHEAD_TOKENS
    assume(exact.count(long) > room)
    if room >= exact.count(long[0]):  # at least one whole character fits
        assert result.sections and result.sections[0].items[0].id == "me"
        assert result.cut[0]["truncated"]
