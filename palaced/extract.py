"""Rule-based extraction (no model): which sentences of a text record something durable.

In the spirit of ICM's "layer 0": cheap patterns, run on every captured exchange, that mark
the sentences recording a

* ``decision``: "we decided / chose / settled on / will use / are going with", "let's use",
  "the decision is";
* ``fix``: "fixed by", "the bug was", "root cause", "the fix is", "caused by", "workaround";
* ``architecture``: "architecture", "talks to", "depends on", "is responsible for", "is
  built on", "data flow", "layer", "microservice";
* ``config``: a port, a version pin, an environment variable being set, a config file or path
  that something is set in or lives in;
* ``preference``: "I prefer / I'd rather / I like", "always / never <verb>", "please always",
  "from now on", "don't ever".

Every pattern is in :data:`RULES`, one place. A marked text gets the tags of its categories
(filed as closet topics too, so a query naming "decision" finds them) and the importance of
its strongest category (:data:`IMPORTANCE`); an unmarked one keeps :data:`BASE_IMPORTANCE`,
below a drawer stored on purpose (medium, 0.5), so raw exchanges do not crowd the L1
essentials. Code blocks and tool lines (``→ Edit x``) are not prose and are not searched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASE_IMPORTANCE = 0.3
IMPORTANCE: dict[str, float] = {
    "decision": 0.6, "preference": 0.6, "fix": 0.55, "architecture": 0.55, "config": 0.5,
}
MAX_MARKED = 20  # sentences kept per text (they are reported, not stored)

_I = re.IGNORECASE
_WE = r"\b(?:we|i|the team)(?:'ve|'ll|'re| have| will| are| had)?"
RULES: dict[str, tuple[re.Pattern[str], ...]] = {
    "decision": (
        re.compile(_WE + r" (?:finally |eventually |now )?(?:decided|chose|chosen|picked|"
                   r"settled on|agreed|opted|went with|go with|going with|going to use|"
                   r"switched to|standardi[sz]ed on)\b", _I),
        re.compile(_WE + r" (?:use|adopt|keep|stick with|drop|replace)\b.{0,80}\b"
                   r"(?:instead of|rather than|from now on|going forward)\b", _I),
        re.compile(r"\b(?:let's|let us) (?:go with|use|stick with|keep|switch to|adopt)\b", _I),
        re.compile(r"\b(?:the |our |final )?decision (?:is|was|:)", _I),
        re.compile(r"\bwe(?:'ll| will) use\b", _I),
    ),
    "fix": (
        re.compile(r"\bfixed (?:it |this |that )?(?:by|with|in|via)\b", _I),
        re.compile(r"\bthe (?:bug|issue|problem|error|crash|failure|regression) "
                   r"(?:was|is|came from|comes from)\b", _I),
        re.compile(r"\broot[- ]cause", _I),
        re.compile(r"\bthe (?:real )?fix (?:is|was)\b", _I),
        re.compile(r"\b(?:caused|triggered) by\b", _I),
        re.compile(r"\bwork-?around\b", _I),
        re.compile(r"\bresolved (?:it |this |the \w+ )?(?:by|with)\b", _I),
    ),
    "architecture": (
        re.compile(r"\barchitecture\b", _I),
        re.compile(r"\b(?:talks|speaks|connects|writes|sends|publishes) to\b", _I),
        re.compile(r"\bdepends on\b", _I),
        re.compile(r"\b(?:is|are) responsible for\b", _I),
        re.compile(r"\b(?:is|are) (?:built|structured|organi[sz]ed|layered) (?:on|around|as|in)"
                   r"\b", _I),
        re.compile(r"\bdata ?flow\b|\bmicroservices?\b|\bevent bus\b|\bmessage queue\b", _I),
        re.compile(r"\b(?:storage|service|api|domain|presentation|data|persistence) layer\b",
                   _I),
    ),
    "config": (
        re.compile(r"\bports? :?\d{2,5}\b|\blocalhost:\d{2,5}\b|\b\d{1,3}(?:\.\d{1,3}){3}:\d{2,5}"
                   r"\b", _I),
        re.compile(r"\b(?:version|pinned?|upgraded?|downgraded?|requires?|bumped?)\b.{0,40}"
                   r"\bv?\d+\.\d+(?:\.\d+)?\b", _I),
        re.compile(r"\b(?i:set|export|configure[ds]?|define[ds]?)\b.{0,40}"
                   r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"),
        re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+=\S"),
        re.compile(r"\b(?:configured|set|stored|lives|located|defined|kept) (?:in|at|under)\b"
                   r".{0,60}(?:/[\w.-]+|\.(?:toml|ya?ml|json|ini|env|cfg|conf)\b)", _I),
        re.compile(r"\b[\w.-]+\.(?:toml|ya?ml|ini|env|cfg|conf)\b.{0,40}\b(?:sets?|holds?|"
                   r"contains?|configures?)\b", _I),
    ),
    "preference": (
        re.compile(r"\bI(?:'d| would)? (?:really |strongly )?(?:prefer|rather|like to|like "
                   r"it when|want you to|hate|dislike|don't like)\b", _I),
        re.compile(r"\b(?:always|never) (?:use|do|run|commit|push|add|write|put|call|ask|"
                   r"include|format|name|mock|skip|leave)\b", _I),
        re.compile(r"\bplease (?:always|never|don't|do not|stop)\b", _I),
        re.compile(r"\bfrom now on\b|\bdon't ever\b|\bmy preference\b|\bprefer(?:red)? style\b",
                   _I),
    ),
}

_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class Extraction:
    """What the rules found in a text: its tags, its importance and the marked sentences."""

    tags: tuple[str, ...]
    importance: float
    marked: tuple[tuple[str, str], ...]  # (tag, sentence), in text order


def sentences(text: str) -> list[str]:
    """The prose sentences of ``text``: code blocks and tool lines (``→ ...``) left out."""
    prose = _CODE_BLOCK.sub("\n", text)
    out = []
    for piece in _SENTENCE_END.split(prose):
        s = piece.strip()
        if len(s) >= 8 and not s.startswith("→"):
            out.append(s)
    return out


def extract(text: str) -> Extraction:
    """Mark the sentences of ``text`` that record a decision, fix, architecture, configuration
    or preference (see the module docstring). Pure; never raises."""
    marked: list[tuple[str, str]] = []
    found: dict[str, None] = {}
    for sentence in sentences(text):
        if len(sentence) > 1_000:
            sentence = sentence[:1_000]  # a run-on "sentence" (a pasted log): its head will do
        for tag, patterns in RULES.items():
            if any(p.search(sentence) for p in patterns):
                found.setdefault(tag)
                if len(marked) < MAX_MARKED:
                    marked.append((tag, sentence))
    tags = tuple(t for t in RULES if t in found)
    importance = max([BASE_IMPORTANCE, *(IMPORTANCE[t] for t in tags)])
    return Extraction(tags, importance, tuple(marked))
