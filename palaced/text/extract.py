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

Every pattern is in :data:`RULES` (and :data:`CASED`, the few that need capitals), one
place. A marked text gets the tags of its categories
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

# Patterns are matched against the lowercased text (a case-insensitive regex is several times
# slower), so they are written in lower case; CASED ones need capitals (environment variable
# names) and see the text as it is.
_WE = r"\b(?:we|i|the team)(?:'ve|'ll|'re| have| will| are| had)?"
RULES: dict[str, tuple[str, ...]] = {
    "decision": (
        _WE + r" (?:finally |eventually |now )?(?:decided|chose|chosen|picked|settled on|"
        r"agreed|opted|went with|go with|going with|going to use|switched to|"
        r"standardi[sz]ed on)\b",
        _WE + r" (?:use|adopt|keep|stick with|drop|replace)\b.{0,80}\b"
        r"(?:instead of|rather than|from now on|going forward)\b",
        r"\b(?:let's|let us) (?:go with|use|stick with|keep|switch to|adopt)\b",
        r"\b(?:the |our |final )?decision (?:is|was|:)",
        r"\bwe(?:'ll| will) use\b",
    ),
    "fix": (
        r"\bfixed (?:it |this |that )?(?:by|with|in|via)\b",
        r"\bthe (?:bug|issue|problem|error|crash|failure|regression) "
        r"(?:was|is|came from|comes from)\b",
        r"\broot[- ]cause",
        r"\bthe (?:real )?fix (?:is|was)\b",
        r"\b(?:caused|triggered) by\b",
        r"\bwork-?around\b",
        r"\bresolved (?:it |this |the \w+ )?(?:by|with)\b",
    ),
    "architecture": (
        r"\barchitecture\b",
        r"\b(?:talks|speaks|connects|writes|sends|publishes) to\b",
        r"\bdepends on\b",
        r"\b(?:is|are) responsible for\b",
        r"\b(?:is|are) (?:built|structured|organi[sz]ed|layered) (?:on|around|as|in)\b",
        r"\bdata ?flow\b|\bmicroservices?\b|\bevent bus\b|\bmessage queue\b",
        r"\b(?:storage|service|api|domain|presentation|data|persistence) layer\b",
    ),
    "config": (
        r"\bports? :?\d{2,5}\b|\blocalhost:\d{2,5}\b|\b\d{1,3}(?:\.\d{1,3}){3}:\d{2,5}\b",
        r"\b(?:version|pinned?|upgraded?|downgraded?|requires?|bumped?)\b.{0,40}"
        r"\bv?\d+\.\d+(?:\.\d+)?\b",
        r"\b(?:configured|set|stored|lives|located|defined|kept) (?:in|at|under)\b"
        r".{0,60}(?:/[\w.-]+|\.(?:toml|ya?ml|json|ini|env|cfg|conf)\b)",
        r"\b[\w.-]+\.(?:toml|ya?ml|ini|env|cfg|conf)\b.{0,40}\b(?:sets?|holds?|contains?|"
        r"configures?)\b",
    ),
    "preference": (
        r"\bi(?:'d| would)? (?:really |strongly )?(?:prefer|rather|like to|like it when|"
        r"want you to|hate|dislike|don't like)\b",
        r"\b(?:always|never) (?:use|do|run|commit|push|add|write|put|call|ask|include|"
        r"format|name|mock|skip|leave)\b",
        r"\bplease (?:always|never|don't|do not|stop)\b",
        r"\bfrom now on\b|\bdon't ever\b|\bmy preference\b|\bprefer(?:red)? style\b",
    ),
}
CASED: dict[str, tuple[str, ...]] = {
    "config": (
        r"\b(?:[Ss]et|[Ee]xport|[Cc]onfigure[ds]?|[Dd]efine[ds]?)\b.{0,40}"
        r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b",
        r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+=\S",
    ),
}


def _joined(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns))


# One scan of the whole text first (most exchanges mark nothing and cost just that), then one
# search per category per sentence.
_BY_TAG = {tag: _joined(patterns) for tag, patterns in RULES.items()}
_CASED_BY_TAG = {tag: _joined(patterns) for tag, patterns in CASED.items()}
_ANY = _joined(tuple(p for patterns in RULES.values() for p in patterns))
_CASED_ANY = _joined(tuple(p for patterns in CASED.values() for p in patterns))
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
    return _sentences(_CODE_BLOCK.sub("\n", text))


def _sentences(prose: str) -> list[str]:
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
    prose = _CODE_BLOCK.sub("\n", text)
    if not _ANY.search(prose.lower()) and not _CASED_ANY.search(prose):
        return Extraction((), BASE_IMPORTANCE, ())
    for sentence in _sentences(prose):
        if len(sentence) > 1_000:
            sentence = sentence[:1_000]  # a run-on "sentence" (a pasted log): its head will do
        lower = sentence.lower()
        for tag, pattern in _BY_TAG.items():
            cased = _CASED_BY_TAG.get(tag)
            if pattern.search(lower) or (cased is not None and cased.search(sentence)):
                found.setdefault(tag)
                if len(marked) < MAX_MARKED:
                    marked.append((tag, sentence))
    tags = tuple(t for t in RULES if t in found)
    importance = max([BASE_IMPORTANCE, *(IMPORTANCE[t] for t in tags)])
    return Extraction(tags, importance, tuple(marked))
