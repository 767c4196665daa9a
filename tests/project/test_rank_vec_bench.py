"""``bench/rank_vec.py``'s fusion experiments, on hand-made hit lists (no LoCoMo data, no model):
its form 0 is the engine's fusion, and the other forms rank as they say."""

from __future__ import annotations

import pytest

from bench import rank_vec
from palaced.retrieval.fusion import fuse

LEXICAL = {1: 9.0, 2: 5.0, 3: 1.0}
VECTOR = {3: 0.8, 4: 0.6, 2: 0.5}


def _fused(form: int, stats: tuple[float, float] = (0.0, 1.0)) -> dict[int, float]:
    side = rank_vec.VectorSide()
    side.form, side.stats = form, stats
    return side.fused(LEXICAL, VECTOR, lexical_weight=0.6, vector_weight=0.4)


def test_form_0_is_the_engines_fusion() -> None:
    assert _fused(0) == fuse(LEXICAL, VECTOR, lexical_weight=0.6, vector_weight=0.4)


def test_rrf_sums_reciprocal_ranks_and_a_missing_list_adds_nothing() -> None:
    got = _fused(1)
    assert got[1] == pytest.approx(0.6 / 61)
    assert got[2] == pytest.approx(0.6 / 62 + 0.4 / 63)
    assert got[4] == pytest.approx(0.4 / 62)
    assert rank_vec.rrf([1, 2], [2, 3]) == [2, 1, 3]


def test_min_max_and_linear_rank_forms() -> None:
    minmax = _fused(2)
    assert minmax[1] == pytest.approx(0.6)  # the keyword list's best, absent from the other
    assert minmax[3] == pytest.approx(0.4)  # the keyword list's worst, the vector list's best
    linear = _fused(3)
    assert linear[2] == pytest.approx(0.6 * (1 - 1 / 3) + 0.4 * (1 - 2 / 3))


def test_palace_wide_form_standardises_vectors_by_the_given_stats() -> None:
    got = _fused(4, stats=(0.4, 0.1))
    base = _fused(4, stats=(0.4, 0.2))
    # drawer 1 is not a vector hit: it takes the list's lowest score's (0.5) standard score
    assert got[1] - base[1] == pytest.approx(0.4 * ((0.5 - 0.4) / 0.1 - (0.5 - 0.4) / 0.2))
    assert got[3] - got[4] == pytest.approx(0.4 * (0.8 - 0.6) / 0.1)
