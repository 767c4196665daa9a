"""Questions and their replies: a drawer that asks a question does not answer it.

In a remembered conversation the memory that best matches a question is often the turn
that asked it ("What are their names?"), while the answer is the turn after it in the same
room ("Luna and Oliver!"). Ranking moves part of a question-drawer's score to the drawer
that follows it (``RankParams.reply_lift``), in proportion to how much of the drawer is the
question: "I went camping last week. Have you been?" says something itself. Pure
functions; the text comes from the store.
"""

from __future__ import annotations

import re

TAIL_CHARS = 400  # characters of a drawer's end read for its closing questions

_CLOSE = re.compile(r"[\s\"'”’)\]»]+$")  # closing quotes and brackets after the last mark
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+")


def question_share(tail: str, length: int) -> float:
    """The share (0-1) of a drawer of ``length`` characters, ending with ``tail``, taken by
    the questions it closes with: 0 when its last sentence is not a question."""
    text = _CLOSE.sub("", tail)
    if not text.endswith("?") or length <= 0:
        return 0.0
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() < len(text) and "?" not in m.group():
            start = m.end()  # the questions start after the last statement
    unread = max(0, length - len(tail))  # the drawer's text before the tail read
    return (len(text) - start) / (len(text) + unread)
