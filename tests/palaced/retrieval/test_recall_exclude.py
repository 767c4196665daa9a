"""``memory.recall``'s ``exclude``: the drawers a caller was already shown are left out of the
ranking before the levels are chosen and packed, so the next ones take their places (the
prompt hook's seen drawers). In-process palace, the hashing embedder; the argument's bounds
through the op spec's decoder."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import recall
from palaced.store.rows import drawers as m
from palaced.wire.args import decode_args
from palaced.wire.errors import InvalidArgs
from palaced.wire.specs import SPECS
from palaced.wire.vocab import MAX_EXCLUDE
from tests.palaced.palace.test_palace_unit import services


@pytest.fixture
async def palace(tmp_path: Path) -> AsyncIterator[Palace]:
    p = await Palace.open("excl", tmp_path / "excl", services(tmp_path, HashEmbedder()))
    yield p
    await p.aclose()


def drawer_ids(got: recall.RecallResult) -> list[int]:
    """The drawer ids of every packed section, in order."""
    return [int(it["id"]) for s in got.sections.to_wire()["sections"] for it in s["items"]
            if isinstance(it["id"], int)]


@pytest.mark.anyio
async def test_excluded_drawers_leave_every_section_and_the_next_take_their_places(
        palace: Palace) -> None:
    ids = [int((await writes.remember(palace, m.NewDrawer(
        text=f"Kafka broker {i} listens on port {9090 + i} in the staging cluster",
        room="kafka", importance=0.9 if i == 0 else 0.5)))["id"]) for i in range(8)]
    query = "which port does the kafka broker listen on in staging?"
    whole = await recall.recall(palace, recall.RecallRequest(
        query=query, top_k=3, levels=(1, 2, 3), budget=4000))
    first = [int(r["id"]) for r in whole.results]
    assert len(first) == 3 and set(first) <= set(ids)
    assert ids[0] in drawer_ids(whole)  # the essential one is in L1 (or a hit)
    shown = frozenset([*first[:2], ids[0]])
    got = await recall.recall(palace, recall.RecallRequest(
        query=query, top_k=3, levels=(1, 2, 3), budget=4000, exclude=shown))
    after = [int(r["id"]) for r in got.results]
    # Still three hits (the ranking's next ones), none of them excluded, and no section
    # (essentials, L2, L3) shows an excluded drawer.
    assert len(after) == 3 and not shown & set(after)
    assert first[2] in after
    assert drawer_ids(got) and not shown & set(drawer_ids(got))
    assert not shown & {int(i) for i in re.findall(r"#(\d+)", got.sections.text)}


@pytest.mark.anyio
async def test_excluding_every_match_is_a_miss(palace: Palace) -> None:
    did = int((await writes.remember(palace, m.NewDrawer(
        text="The email queue runs on RabbitMQ 3.13, port 5673", room="queues")))["id"])
    query = "which RabbitMQ port does the email queue use?"
    hit = await recall.recall(palace, recall.RecallRequest(query=query, levels=(2,)))
    assert not hit.nothing_relevant and [r["id"] for r in hit.results] == [did]
    got = await recall.recall(palace, recall.RecallRequest(query=query, levels=(2,),
                                                           exclude=frozenset({did})))
    assert got.nothing_relevant and did not in drawer_ids(got) and not got.results


def test_exclude_is_bounded_by_the_op_spec() -> None:
    spec = SPECS["memory.recall"]
    assert decode_args(spec, {"query": "q"})["exclude"] == []
    assert decode_args(spec, {"query": "q", "exclude": [1, 2]})["exclude"] == [1, 2]
    assert decode_args(spec, {"query": "q", "exclude": list(range(1, MAX_EXCLUDE + 1))})
    for bad in (list(range(1, MAX_EXCLUDE + 2)), [0], [-3], [2**63], ["7"], [True], [1.5],
                7, "1,2"):
        with pytest.raises(InvalidArgs):
            decode_args(spec, {"query": "q", "exclude": bad})
