"""``bench/soak.py``'s expiry check: a recall renews a drawer's ttl by default
(``recall_extends_ttl``), so a short-ttl drawer a recall returned before its expiry may be
read after it; one that no recall returned in time may not."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("soak")
    finally:
        sys.path.remove(str(BENCH))


def _late_read(soak: ModuleType, recalled_at_ms: int | None) -> tuple[dict[str, int], int]:
    """A short-ttl drawer surely expired at 1000 ms is read at 2000 ms; a recall sent at
    ``recalled_at_ms`` returned it before. Returns (violations, renewed late reads)."""
    shared = soak.Shared(["p"], deadline=float("inf"), max_ops=10)
    worker = soak.Worker(0, Path("/nonexistent.sock"), ["p"], shared, 10, 1, soak.WEIGHTS)
    shared.record("p", 7, soak.Event("created", 0.0, "note", expires_sure_ms=1000))
    if recalled_at_ms is not None:
        shared.mark_recalled("p", [7], recalled_at_ms)
    worker.check_item("p", 7, "note", 1.0, 2000, "recall")
    worker.settle_expired()
    return dict(worker.violations), worker.counts["ttl_renewed_reads"]


def test_a_read_after_expiry_is_a_violation_unless_a_recall_renewed_it(
        soak: ModuleType) -> None:
    assert _late_read(soak, None) == ({"recall_expired": 1}, 0)
    assert _late_read(soak, 500) == ({}, 1)  # recalled before its expiry: maybe renewed
    assert _late_read(soak, 1500) == ({"recall_expired": 1}, 0)  # too late to renew it
