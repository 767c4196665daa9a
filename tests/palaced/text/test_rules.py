"""Memory rules (palaced.text.rules): importance, decay, pruning and near-duplicate detection."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from palaced.text.rules import (
    DEDUP_THRESHOLD,
    HALF_LIFE_DAYS,
    MS_PER_DAY,
    days_since_use,
    drawer_weight,
    importance_class,
    is_near_duplicate,
    lexical_guard,
    parse_importance,
    prune_candidates,
    weight,
)
from palaced.wire.errors import InvalidArgs

MODEL_DIR = Path(__file__).resolve().parents[3].parent / "shared/models/all-MiniLM-L6-v2-onnx-int8"

importances = st.floats(0.0, 1.0, allow_nan=False)
ages = st.floats(0.0, 10_000.0, allow_nan=False)
accesses = st.integers(0, 10_000)


# -- importance -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("critical", 1.0),
        ("HIGH", 0.8),
        (" medium ", 0.5),
        ("low", 0.2),
        (0, 0.0),
        (1, 1.0),
        (0.35, 0.35),
        ("0.7", 0.7),
    ],
)
def test_parse_importance_accepts(value: float | str, expected: float) -> None:
    assert parse_importance(value) == expected


@pytest.mark.parametrize(
    "value", ["urgent", "", "1.5", -0.1, 1.01, math.nan, math.inf, True, None, [0.5]]
)
def test_parse_importance_refuses(value: Any) -> None:
    with pytest.raises(InvalidArgs):
        parse_importance(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("critical", "critical"),
        ("high", "high"),
        ("medium", "medium"),
        ("low", "low"),
        (0.9, "critical"),
        (0.89, "high"),
        (0.65, "high"),
        (0.64, "medium"),
        (0.35, "medium"),
        (0.34, "low"),
        (0.0, "low"),
    ],
)
def test_importance_class(value: float | str, expected: str) -> None:
    assert importance_class(value) == expected


# -- decay ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("importance", "half_life_days"),
    [("high", 2 * HALF_LIFE_DAYS), ("medium", HALF_LIFE_DAYS), ("low", HALF_LIFE_DAYS / 2)],
)
def test_weight_halves_per_class_half_life(importance: str, half_life_days: float) -> None:
    start = parse_importance(importance)
    assert weight(importance, age_days=0, access_count=0) == start
    assert weight(importance, age_days=half_life_days, access_count=0) == pytest.approx(start / 2)
    assert weight(importance, age_days=3 * half_life_days, access_count=0) == pytest.approx(
        start / 8
    )


@given(ages, accesses)
def test_critical_never_decays(age: float, n: int) -> None:
    assert weight("critical", age_days=age, access_count=n) == 1.0


@given(importances, ages, ages, accesses)
def test_weight_is_monotonic_in_age(importance: float, a: float, b: float, n: int) -> None:
    young, old = sorted((a, b))
    w_young = weight(importance, age_days=young, access_count=n)
    w_old = weight(importance, age_days=old, access_count=n)
    assert 0.0 <= w_old <= w_young <= importance


@given(importances, st.floats(0.1, 1000.0), accesses, accesses)
def test_access_slows_decay(importance: float, age: float, a: int, b: int) -> None:
    rare, often = sorted((a, b))
    assert weight(importance, age_days=age, access_count=often) >= weight(
        importance, age_days=age, access_count=rare
    )


def test_access_count_divides_effective_age() -> None:
    n = 10
    assert weight("medium", age_days=30 * (1 + math.log1p(n)), access_count=n) == pytest.approx(
        0.25
    )
    assert weight("medium", age_days=30, access_count=n) > weight(
        "medium", age_days=30, access_count=0
    )


def test_weight_edge_inputs() -> None:
    assert weight("low", age_days=-5, access_count=0) == 0.2  # clock skew counts as new
    with pytest.raises(InvalidArgs):
        weight("low", age_days=math.nan, access_count=0)
    with pytest.raises(InvalidArgs):
        weight("low", age_days=1, access_count=-1)
    with pytest.raises(InvalidArgs):
        weight("urgent", age_days=1, access_count=0)


def test_age_counts_from_last_access() -> None:
    now = 100 * MS_PER_DAY
    assert days_since_use(created_ms=0, accessed_ms=None, now_ms=now) == 100
    assert days_since_use(created_ms=0, accessed_ms=90 * MS_PER_DAY, now_ms=now) == 10
    assert days_since_use(created_ms=0, accessed_ms=0, now_ms=-5) == 0
    row = {"importance": 0.5, "created_ms": 0, "accessed_ms": 70 * MS_PER_DAY, "access_count": 0}
    assert drawer_weight(row, now_ms=now) == pytest.approx(0.25)


# -- pruning --------------------------------------------------------------------------------
rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "importance": st.one_of(importances, st.sampled_from(["critical", "high", "low"])),
            "weight": st.floats(0.0, 1.0, allow_nan=False),
        }
    ),
    max_size=40,
)


@given(rows_strategy, st.floats(0.0, 1.0), st.randoms(use_true_random=False))
def test_prune_never_selects_critical_or_high(
    raw: list[dict[str, Any]], threshold: float, rnd: random.Random
) -> None:
    rows = [{"id": i, **r} for i, r in enumerate(raw)]
    chosen = prune_candidates(rows, threshold=threshold)
    for row in chosen:
        assert importance_class(row["importance"]) in {"low", "medium"}
        assert row["weight"] < threshold
    expected = {
        r["id"]
        for r in rows
        if importance_class(r["importance"]) in {"low", "medium"} and r["weight"] < threshold
    }
    assert {r["id"] for r in chosen} == expected
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert prune_candidates(shuffled, threshold=threshold) == chosen


def test_prune_threshold_is_validated() -> None:
    for bad in (-0.1, 1.1, math.nan, True):
        with pytest.raises(InvalidArgs):
            prune_candidates([], threshold=bad)


@pytest.fixture
def drawers() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE TABLE drawers(id INTEGER PRIMARY KEY, importance REAL, created_ms INTEGER, "
        "accessed_ms INTEGER, access_count INTEGER)"
    )
    rnd = random.Random(7)
    day = MS_PER_DAY
    with conn:
        for i in range(300):
            conn.execute(
                "INSERT INTO drawers VALUES (?, ?, ?, ?, ?)",
                (
                    i,
                    rnd.choice([1.0, 0.8, 0.5, 0.2, rnd.random()]),
                    rnd.randrange(0, 400) * day,
                    rnd.choice([None, rnd.randrange(300, 400) * day]),
                    rnd.choice([0, 0, 1, 5, 50]),
                ),
            )
    yield conn
    conn.close()


def _rows(conn: apsw.Connection, now_ms: int) -> list[dict[str, Any]]:
    cols = ("id", "importance", "created_ms", "accessed_ms", "access_count")
    rows = [dict(zip(cols, r, strict=True)) for r in conn.execute("SELECT * FROM drawers")]
    for row in rows:
        row["weight"] = drawer_weight(row, now_ms=now_ms)
    return rows


def test_dry_run_equals_real_prune(drawers: apsw.Connection) -> None:
    now = 500 * MS_PER_DAY
    dry = [r["id"] for r in prune_candidates(_rows(drawers, now), threshold=0.05)]
    assert dry, "the fixture should have something to prune"

    with drawers:
        doomed = prune_candidates(_rows(drawers, now), threshold=0.05)
        drawers.executemany("DELETE FROM drawers WHERE id = ?", [(r["id"],) for r in doomed])
    assert [r["id"] for r in doomed] == dry

    left = _rows(drawers, now)
    assert {r["id"] for r in left}.isdisjoint(dry)
    assert not prune_candidates(left, threshold=0.05)
    # High memories decayed under the threshold were there and survived.
    assert any(r["weight"] < 0.05 and importance_class(r["importance"]) == "high" for r in left)


# -- near-duplicates ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("We use Postgres 15.", "We use Postgres 16."),
        ("The build takes 2 minutes.", "The build takes three minutes."),
        ("Deploy on Fridays.", "Never deploy on Fridays."),
        ("The login bug is fixed.", "The login bug isn't fixed."),
        ("Enable caching in staging.", "Disable caching in staging."),
        ("Run migrations before deploying.", "Run migrations after deploying."),
        ("Alice prefers tabs over spaces.", "Alice prefers spaces over tabs."),
        ("We moved from MySQL to Postgres.", "We moved from Postgres to MySQL."),
        ("Deploys happen on Tuesday.", "Deploys happen on Thursday."),
        ("Our CI runs on GitHub Actions.", "Our CI runs on GitLab CI."),
        ("The bug is in the login page.", "The bug is in the signup page."),
        ("Keep events for a year, compact weekly.", "Keep events for a month, compact daily."),
    ],
)
def test_guard_refuses_different_facts(new: str, old: str) -> None:
    assert not lexical_guard(new, old)
    assert not lexical_guard(old, new)
    assert not is_near_duplicate(0.99, new, old)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("We use Postgres 15 in production.", "Production runs on Postgres 15."),
        ("The build takes two minutes.", "The build takes 2 minutes."),
        ("Rate limit is 1,000 requests.", "The rate limit is 1000 requests."),
        ("Never deploy on Fridays.", "Don't deploy on Fridays."),
        (
            "The recomendation model is retrained weekly.",
            "The recommendation model is retrained weekly.",
        ),
        ("The user's favourite language is Rust.", "User's favorite language is Rust."),
        ("Every Tuesday morning we deploy.", "Deploys happen every Tuesday morning."),
        ("Bob owns the billing service.", "The billing service is owned by Bob."),
        ("We migrated from MySQL to Postgres.", "Last year we moved from MySQL to Postgres."),
        ("The ML team meets on Thursdays.", "ML team meeting: Thursdays."),
    ],
)
def test_guard_lets_rephrasings_through(new: str, old: str) -> None:
    assert lexical_guard(new, old)
    assert lexical_guard(old, new)
    assert is_near_duplicate(0.9, new, old)
    assert not is_near_duplicate(DEDUP_THRESHOLD - 0.01, new, old)


@pytest.fixture(scope="module")
def embed() -> Any:
    from fastembed import TextEmbedding

    model = TextEmbedding(
        model_name="sentence-transformers/all-MiniLM-L6-v2",
        specific_model_path=str(MODEL_DIR),
        local_files_only=True,
    )

    def cosine(a: str, b: str) -> float:
        va, vb = np.array(list(model.embed([a, b])), dtype=np.float64)
        return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))

    return cosine


@pytest.mark.slow
@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("The API gateway times out after 30 seconds.", "API gateway timeout is 30 seconds."),
        ("Never deploy on Fridays.", "Don't deploy on Fridays."),
        ("Alice prefers tabs over spaces.", "Alice likes tabs better than spaces."),
        ("Our CI runs on GitHub Actions.", "CI runs on Github actions."),
        ("Bob owns the billing service.", "The billing service is owned by Bob."),
        ("The user's favourite language is Rust.", "User's favorite language is Rust."),
    ],
)
def test_real_model_merges_near_duplicates(embed: Any, new: str, old: str) -> None:
    assert is_near_duplicate(embed(new, old), new, old)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("We use Postgres 15 in production.", "We use Postgres 16 in production."),
        ("Always squash commits before merging.", "Never squash commits before merging."),
        ("Alice prefers tabs over spaces.", "Alice prefers spaces over tabs."),
        ("The login bug is fixed.", "The login bug is not fixed yet."),
        ("The nightly backup runs at 2am UTC.", "The nightly backup runs at 4am UTC."),
        ("Feature flags are enabled in staging.", "Feature flags are disabled in staging."),
        ("The user prefers dark mode.", "The user prefers light mode."),
    ],
)
def test_real_model_keeps_different_facts_apart(embed: Any, new: str, old: str) -> None:
    cos = embed(new, old)
    # The embedding alone would merge these: the guard is what keeps them apart.
    assert cos >= DEDUP_THRESHOLD
    assert not is_near_duplicate(cos, new, old)
