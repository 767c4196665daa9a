"""Questions that ask for a set, and answers spread over rooms.

"Which cities has John been to?", "What books have we read?", "How many times did the
deploy fail?", "Do both of them like hiking?": the answer is several memories, usually told
at different times, so in different rooms (sessions). The ranking's room feedback lifts a
strong room's drawers together, which is right for a question one memory answers and wrong
for these: the first ten places fill with one session's turns. For a set question ranking
spreads the order over rooms (``RankParams.set_spread``): the best ``RankParams.set_keep``
drawers stay where they are (often one of them lists the whole set), and every other drawer
is placed with its score lowered by a share of the score range for each better-placed drawer
of its room. Pure functions.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping

# "how many", or what/which + up to three words + a plural noun (or "people", "children")
# + perhaps one word + an auxiliary: "What books has John read?", "Which places did we
# visit?"; "What kind of pet does she have?" (no plural) does not match. Words ending in
# "s" that are not plurals ("is", "was", "does", "his") are not taken for one.
_NOT_PLURAL = r"(?!(?:is|was|does|has|this|its|his|hers|yours|ours|theirs)\b)"
SET_QUESTION = re.compile(
    r"^\W*(?:how many\b"
    r"|(?:what|which)(?: " + _NOT_PLURAL + r"[\w'-]+){0,3}? "
    r"(?:" + _NOT_PLURAL + r"[\w-]+s|people|children)(?: [\w'-]+)?? "
    r"(?:has|have|does|do|did|are|were)\b)"
    r"|\bboth\b",
    re.IGNORECASE)


def asks_for_set(query: str) -> bool:
    """Whether ``query`` asks for several things (a list, a count, "both")."""
    return SET_QUESTION.search(query) is not None


def spread_over_rooms(scores: Mapping[int, float], room_of: Mapping[int, object],
                      share: float, keep: int = 0) -> dict[int, float]:
    """Scores that keep the best ``keep`` drawers where they are and place the others best
    first with ``share`` × the score range taken off a drawer for each better-placed drawer
    of its room (greedy, so the result is still a ranking: each placed score is at most the
    one before it). A drawer with no room is its own room. ``share`` 0 returns the scores
    unchanged.

    Raises:
        ValueError: ``share < 0`` or ``keep < 0``.
    """
    if share < 0 or keep < 0:
        raise ValueError(f"share and keep must be >= 0, got {share}, {keep}")
    if not share or len(scores) <= max(keep, 1):
        return dict(scores)
    penalty = share * ((max(scores.values()) - min(scores.values())) or 1.0)
    best = sorted(scores, key=lambda i: (-scores[i], i))
    out = {i: scores[i] for i in best[:keep]}
    placed: dict[object, int] = {}
    for i in best[:keep]:
        room = room_of.get(i, ("", i))
        placed[room] = placed.get(room, 0) + 1
    by_room: dict[object, list[tuple[float, int]]] = {}
    for i in best[keep:]:  # best first, so each room's list is too
        by_room.setdefault(room_of.get(i, ("", i)), []).append((-scores[i], i))
    # One heap entry per room: its best unplaced drawer, at the penalty it has now (a room's
    # penalty changes only when one of its own drawers is placed).
    heap = [(heads[0][0] + placed.get(room, 0) * penalty, heads[0][1], room)
            for room, heads in by_room.items()]
    heapq.heapify(heap)
    taken = dict.fromkeys(by_room, 0)
    while heap:
        neg, i, room = heapq.heappop(heap)
        out[i] = -neg
        placed[room] = placed.get(room, 0) + 1
        taken[room] += 1
        heads = by_room[room]
        if taken[room] < len(heads):
            s, j = heads[taken[room]]
            heapq.heappush(heap, (s + placed[room] * penalty, j, room))
    return out
