"""The LoCoMo benchmark's metric, on a tiny hand-made conversation (no LoCoMo data)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "locomo.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_locomo", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


locomo = _load()

# Invented for this test: two sessions, six turns, three questions (one without evidence).
SAMPLE: dict[str, Any] = {
    "sample_id": "Conv 7",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_2_date_time": "12:05 am on 2 February, 2024",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "The bakery opened."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "I bought rye bread there."},
        ],
        "session_1_date_time": "9:30 pm on 31 January, 2024",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "What is its name?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "Her name is Miso."},
            {"speaker": "Ben", "dia_id": "D1:4", "text": "Cute!", "blip_caption": "a cat"},
        ],
    },
    "qa": [
        {"question": "What is the cat called?", "answer": "Miso",
         "evidence": ["D1:1", "D1:3"], "category": 1},
        {"question": "Where did Ana buy bread?", "answer": "the bakery",
         "evidence": ["D2:1; D2:2", "D", "D9:9"], "category": 2},
        {"question": "Does Ben like dogs?", "answer": "unknown",
         "evidence": [], "category": 5},
    ],
}


def test_build_drawers_in_conversation_order() -> None:
    drawers = locomo.build_drawers(SAMPLE["conversation"])
    assert [d.dia_id for d in drawers] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"]
    first = drawers[0].item
    assert first == {
        "text": 'Ana said, "I adopted a cat."',
        "wing": "locomo",
        "room": "session_1",
        "tags": [],
        "importance": 0.5,
        "source": "locomo:D1:1",
        "occurred_at": "2024-01-31T21:30:00Z",
    }
    assert drawers[4].item["room"] == "session_2"
    assert drawers[4].item["occurred_at"] == "2024-02-02T00:05:00Z"


@pytest.mark.parametrize(("stamp", "iso"), [
    ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00Z"),
    ("12:00 pm on 1 June, 2023", "2023-06-01T12:00:00Z"),
    ("12:59 am on 1 June, 2023", "2023-06-01T00:59:00Z"),
    ("10:37 am on 27 June, 2023", "2023-06-27T10:37:00Z"),
])
def test_parse_locomo_date(stamp: str, iso: str) -> None:
    assert locomo.parse_locomo_date(stamp) == iso


@pytest.mark.parametrize("bad", ["", "8 May 2023", "13:00 pm on 8 May, 2023",
                                 "1:00 pm on 31 Smarch, 2023", "1:00 pm on 30 February, 2023"])
def test_parse_locomo_date_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        locomo.parse_locomo_date(bad)


def test_evidence_normalisation() -> None:
    known = {"D1:1", "D11:26", "D8:6", "D9:17"}
    ids, dropped = locomo.parse_evidence(["D8:6; D9:17", "D", "D:11:26", "D1:1", "D1:1",
                                          "D10:19"], known)
    assert ids == ["D8:6", "D9:17", "D11:26", "D1:1"]
    assert dropped == ["D", "D10:19"]
    assert locomo.session_of("D12:3") == "session_12"


def test_questions_gold() -> None:
    questions = locomo.build_questions(SAMPLE)
    assert [q.gold_turns for q in questions] == [("D1:1", "D1:3"), ("D2:1", "D2:2"), ()]
    assert [q.gold_sessions for q in questions] == [("session_1",), ("session_2",), ()]
    assert questions[1].dropped_evidence == ("D", "D9:9")
    assert [q.category for q in questions] == [1, 2, 5]


def test_recall_at_k() -> None:
    assert locomo.recall_at_k(["a", "b", "c"], ["c", "x"], 2) == 0.0
    assert locomo.recall_at_k(["a", "b", "c"], ["c", "x"], 3) == 0.5
    assert locomo.recall_at_k([], [], 1) == 1.0
    assert locomo.recall_at_k(["a"], ["a", "a"], 1) == 1.0
    with pytest.raises(ValueError):
        locomo.recall_at_k(["a"], ["a"], 0)


def test_evaluate_with_a_fake_ranking() -> None:
    questions = locomo.build_questions(SAMPLE)
    rankings = [
        # q1 gold D1:1, D1:3: D1:3 at rank 2, D1:1 at rank 7 (never in the top 5)
        ["D2:1", "D1:3", "D2:2", "D1:2", "D1:4", "D2:1", "D1:1"],
        # q2 gold D2:1, D2:2: D2:2 first, D2:1 absent
        ["D2:2", "D1:1"],
        # q3 has no evidence: 1.0 whatever is retrieved
        [],
    ]
    report = locomo.evaluate(questions, rankings)
    # turn level    q1: @1 0, @5 1/2, @10 1   q2: @1 1/2, @5 1/2, @10 1/2   q3: 1, 1, 1
    assert report["questions"] == 3
    assert report["turn"] == pytest.approx({
        "recall@1": (0 + 0.5 + 1) / 3,
        "recall@5": (0.5 + 0.5 + 1) / 3,
        "recall@10": (1 + 0.5 + 1) / 3,
    })
    # session level q1 sessions ranked [2, 1]: @1 0, @5 1; q2 [2, 1]: 1, 1; q3: 1, 1
    assert report["session"] == pytest.approx({
        "recall@1": (0 + 1 + 1) / 3,
        "recall@5": 1.0,
        "recall@10": 1.0,
    })
    by_cat = report["by_category"]
    assert list(by_cat) == ["1", "2", "5"]
    assert by_cat["1"]["questions"] == 1
    assert by_cat["1"]["turn"] == pytest.approx({"recall@1": 0, "recall@5": 0.5,
                                                 "recall@10": 1})
    assert by_cat["2"]["session"]["recall@1"] == 1.0
    assert by_cat["5"]["turn"]["recall@1"] == 1.0
    assert locomo.session_ranking(rankings[0]) == ["session_2", "session_1"]
    with pytest.raises(ValueError):
        locomo.evaluate(questions, rankings[:2])


def test_percentile_and_palace_name() -> None:
    assert locomo.percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert locomo.percentile([10.0], 95) == 10.0
    assert locomo.percentile(list(map(float, range(101))), 95) == 95.0
    assert math.isnan(locomo.percentile([], 50))
    assert locomo.palace_name(SAMPLE["sample_id"]) == "locomo-conv-7"
    assert locomo.palace_name("conv-26") == "locomo-conv-26"
