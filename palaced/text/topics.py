"""Topic extraction: a few normalised topic keys per drawer, by rules (no model, no deps).

A drawer's topics are filed in its *closets* (the ``closets`` table); recall boosts drawers
filed under a topic the query names.

The daemon stores ``closets(topic, drawer_id)`` rows from :func:`extract_topics` and matches a
query's :func:`query_topics` against them with exact equality, so both sides go through the
same normalisation: lowercase, Unicode NFKC, surrounding punctuation stripped, whitespace
collapsed, and a light plural fold for plain words ("groups" -> "group"). Multiword names are
kept whole ("caroline smith") and each of their words also competes as a single-word topic, so
a query naming only "Caroline" still meets the drawer.

Salience = kind weight x (1 + ln(frequency)) + a small bonus for longer and earlier terms.
Kind weights: identifiers (snake_case, CamelCase, file.py, v1.2.3), hashtags and quoted terms
beat multiword names, which beat single capitalised names, which beat plain keywords.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

DEFAULT_LIMIT = 8
QUERY_LIMIT = 16

_KIND_WEIGHT = {
    "identifier": 3.0,
    "hashtag": 3.0,
    "quoted": 2.5,
    "name": 2.5,  # multiword capitalised name
    "proper": 2.0,  # single capitalised word not at a sentence start
    "keyword": 1.0,
}

_STOPWORDS = frozenset(
    """
    a about above after again against ago ah all almost also although always am among an and
    another any anyone anything anyway are aren around as at away back be became because been
    before being below between both but by came can cannot could couldn did didn do does doesn
    doing don done down during each either else enough etc even ever every everyone everything
    few for from further get gets getting give go goes going gone got gotta had hadn has hasn
    have haven having he hello her here hers herself hey hi him himself his how however i if in
    into is isn it its itself just know last later least less let like likely made make makes
    making many may maybe me might mine more most much must my myself need needs never new next
    no nor not nothing now of off oh ok okay on once one only onto or other others otherwise our
    ours ourselves out over own per perhaps please pretty quite rather really right said same
    say says see seem seems shall she should shouldn since so some someone something sometimes
    soon still such sure take tell than thank thanks that the their theirs them themselves then
    there these they thing things think this those though through thus to today together too
    took toward towards try under until up upon us use used using very via want wants was wasn
    way we well went were weren what whatever when where whether which while who whom whose why
    will with within without won would wouldn yeah yes yet you your yours yourself yourselves
    lot lots gonna wanna kind sort stuff bit guess mean means feel felt look looks looking
    great good nice cool awesome glad sorry wow hmm um uh yesterday tomorrow tonight
    none null true false self cls def elif args kwargs str int bool
    """.split()
)
# Capitalised words that start sentences or mark time; never names on their own.
_NOT_NAMES = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday january february march april may
    june july august september october november december yesterday tomorrow tonight today
    mr mrs ms dr
    """.split()
) | _STOPWORDS

_FILE_EXTS = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|toml|yaml|yml|ini|cfg|conf|md|rst|txt|csv|"
    "tsv|html|htm|css|scss|sh|bash|zsh|fish|ps1|bat|c|h|cc|cpp|hpp|cxx|rs|go|java|kt|kts|swift|"
    "rb|php|pl|lua|r|sql|db|sqlite|xml|proto|lock|log|env|cfg|gradle|tf|vue|svelte|dart|scala|"
    "ex|exs|erl|hs|ml|clj|zig|nim|jl|pdf|png|jpg|jpeg|gif|svg|mp3|mp4|wav|zip|gz|tar|whl|dll|so"
)
_IDENTIFIER_RES = (
    # paths and file names: src/app/main.py, README.md, .bashrc-like dotted names with an ext
    re.compile(rf"(?<![\w.])(?:[\w-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:{_FILE_EXTS})(?![\w])",
               re.IGNORECASE),
    # snake_case and SCREAMING_SNAKE (at least one inner underscore)
    re.compile(r"(?<!\w)[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?!\w)"),
    # CamelCase / camelCase / HTTPServer: a lower-to-upper or acronym-to-word transition
    re.compile(r"(?<!\w)(?:[A-Z]+[a-z0-9]+(?:[A-Z][a-z0-9]*)+|[A-Z]{2,}[a-z][A-Za-z0-9]*"
               r"|[a-z]+[0-9]*(?:[A-Z][a-z0-9]*)+)(?!\w)"),
    # versions: v1.2, 1.2.3, 3.11.0rc1
    re.compile(r"(?<![\w.])(?:v\d+(?:\.\d+)+|\d+\.\d+\.\d+)(?:[-+.]?[A-Za-z]+\d*)?(?![\w.])"),
)
# "Python 3.11", "Node 20": a capitalised word followed by a version number.
_NAMED_VERSION_RE = re.compile(r"(?<!\w)([A-Z][A-Za-z+#]*)\s+(v?\d+(?:\.\d+)+)(?![\w.])")
_HASHTAG_RE = re.compile(r"(?<![\w#])#([^\W\d_][\w-]*)")
_QUOTED_RE = re.compile(
    r"\"([^\"\n]{2,60})\"|“([^”\n]{2,60})”|`([^`\n]{2,60})`|(?<!\w)'([^'\n]{2,60})'(?!\w)"
)
_CAP_WORD = r"[A-Z][\w'’-]*"
# Two or more capitalised words, allowing lowercase particles ("Bank of America").
_PARTICLE = r"(?:of|de|da|van|von|der|la|le|del|the|and)"
_NAME_RE = re.compile(rf"(?<![\w'’]){_CAP_WORD}(?:\s+(?:{_PARTICLE}\s+)?{_CAP_WORD})+")
_WORD_RE = re.compile(r"[^\W_][\w'’-]*")
_SPACE_RE = re.compile(r"\S+")
# Stopwords that legitimately open multiword names ("New York", "Great Britain").
_NAME_OPENERS = frozenset({"new", "great"})
# After these (and blanks) a capital letter says nothing about being a name.
_SENTENCE_OPENERS = frozenset(".!?:;\"“‘(\n\r")
_MAX_QUOTED_WORDS = 5


@dataclass
class _Candidate:
    topic: str
    kind: str
    count: int
    first: int  # character offset of the first occurrence


def normalize_topic(term: str) -> str:
    """Return the closet key of ``term``: NFKC, lowercase, trimmed, whitespace collapsed.

    Returns "" when nothing meaningful is left.
    """
    text = unicodedata.normalize("NFKC", term).lower().replace("’", "'")
    text = " ".join(text.split())
    return text.strip(" \t\"'`“”‘’.,;:!?()[]{}<>-#")


def fold_plural(word: str) -> str:
    """Fold an English plural to its singular by suffix rules ("groups" -> "group").

    Deliberately crude and symmetric: the same fold runs on drawers and queries.
    """
    if len(word) < 4 or not word.isalpha():
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "zzes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "'s")):
        return word[:-1]
    return word


def extract_topics(text: str, *, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Return up to ``limit`` distinct topic keys of ``text``, most salient first.

    Topics are normalised keywords and entities: identifiers, hashtags, quoted terms,
    capitalised (multiword) names and non-stopword words. Never raises; "" gives [].
    """
    if limit <= 0 or not text:
        return []
    candidates = _candidates(text)
    scored = sorted(candidates.values(), key=lambda c: (-_salience(c, len(text)), c.first))
    return [c.topic for c in scored[:limit]]


def query_topics(query: str, *, limit: int = QUERY_LIMIT) -> list[str]:
    """Return the topic keys to look up for ``query`` (same normalisation as drawers).

    Broader than :func:`extract_topics`: every entity and every non-stopword word of the
    query, up to ``limit``, most salient first. Never raises.
    """
    return extract_topics(query, limit=limit)


ENTITY_KINDS = frozenset({"identifier", "hashtag", "name", "proper"})


def query_entities(query: str) -> list[str]:
    """The named things ``query`` asks about, as normalised keys in query order.

    The identifiers, hashtags, multiword names and single capitalised words (not at a
    sentence start, not question or function words) of :func:`extract_topics`' rules; plain
    keywords and quoted phrases are not names. "What did Caroline's sister research?" gives
    ``["caroline"]``. Never raises.
    """
    if not query:
        return []
    found = [c for c in _candidates(query).values() if c.kind in ENTITY_KINDS]
    return [c.topic for c in sorted(found, key=lambda c: c.first)]


def spelled(query: str, name: str) -> str:
    """``name`` (a key of :func:`query_entities`) as ``query`` spells it ("Caroline")."""
    words = [re.escape(w) for w in name.split()]
    m = re.search(r"(?<!\w)" + r"\s+".join(words), query, re.IGNORECASE) if words else None
    return m.group() if m else name


def _salience(c: _Candidate, text_len: int) -> float:
    weight = _KIND_WEIGHT[c.kind]
    length_bonus = 0.25 * min(len(c.topic), 12) / 12
    position_bonus = 0.25 * (1.0 - c.first / max(text_len, 1))
    return weight * (1.0 + math.log(c.count)) + length_bonus + position_bonus


def _candidates(text: str) -> dict[str, _Candidate]:
    found: dict[str, _Candidate] = {}
    # One byte per character, 1 where an identifier/hashtag/quote already claimed the text.
    covered = bytearray(len(text))

    def add(raw: str, kind: str, pos: int, *, fold: bool = False) -> None:
        topic = normalize_topic(raw)
        if fold:
            topic = fold_plural(topic)
        min_len = 3 if kind == "keyword" else 2
        if len(topic) < min_len or topic in _STOPWORDS or topic.replace(".", "").isdigit():
            return
        existing = found.get(topic)
        if existing is None:
            found[topic] = _Candidate(topic, kind, 1, pos)
            return
        existing.count += 1
        if _KIND_WEIGHT[kind] > _KIND_WEIGHT[existing.kind]:
            existing.kind = kind
        existing.first = min(existing.first, pos)

    for m in _HASHTAG_RE.finditer(text):
        add(m.group(1), "hashtag", m.start())
        _cover(covered, m.span())
    for m in _QUOTED_RE.finditer(text):
        inner = next(g for g in m.groups() if g is not None)
        if len(inner.split()) <= _MAX_QUOTED_WORDS:
            add(inner, "quoted", m.start())
            if len(inner.split()) == 1:
                _cover(covered, m.span())  # its word must not count a second time
    for m in _NAMED_VERSION_RE.finditer(text):
        if m.group(1).lower() not in _NOT_NAMES:
            add(f"{m.group(1)} {m.group(2)}", "identifier", m.start())
    for pattern in _IDENTIFIER_RES:
        for m in pattern.finditer(text):
            if not _inside(m.span(), covered):
                add(m.group(), "identifier", m.start())
                _cover(covered, m.span())
    mid_caps = {m.group() for m in _WORD_RE.finditer(text)
                if m.group()[0].isupper() and not _at_sentence_start(text, m.start())}
    for m in _NAME_RE.finditer(text):
        words = [(w.start(), w.group()) for w in _SPACE_RE.finditer(m.group())]
        # A sentence-initial capital is not evidence of a name: drop leading common words.
        while (words and _strip_possessive(words[0][1]).lower() in _NOT_NAMES
               and (len(words) == 1 or words[0][1].lower() not in _NAME_OPENERS)):
            words.pop(0)
        while words and _strip_possessive(words[-1][1]).lower() in _NOT_NAMES:
            words.pop()
        if (len(words) >= 3 and _at_sentence_start(text, m.start() + words[0][0])
                and words[0][1].lower() not in _NAME_OPENERS and words[0][1] not in mid_caps):
            words.pop(0)  # "Met Melanie Smith": the opener is only capitalised by position
        span = (m.start() + words[0][0], m.end()) if words else (m.end(), m.end())
        if len(words) >= 2 and not _overlaps(span, covered):
            add(" ".join(_strip_possessive(w) for _, w in words), "name", span[0])
    for m in _WORD_RE.finditer(text):
        if _inside(m.span(), covered):
            continue
        word = _strip_possessive(m.group()).strip("'’-")
        if not word:
            continue
        if not word[0].isupper():
            add(word, "keyword", m.start(), fold=True)
        elif len(word) > 1 and word.isupper() and word.isalpha():
            add(word, "proper", m.start())  # acronyms such as LGBTQ or NASA
        elif word.lower() in _NOT_NAMES or _at_sentence_start(text, m.start()):
            # Capitalised words are never plural-folded: "James" must not become "jame".
            add(word, "keyword", m.start())
        else:
            add(word, "proper", m.start())
    return found


def _strip_possessive(word: str) -> str:
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _at_sentence_start(text: str, pos: int) -> bool:
    i = pos - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in _SENTENCE_OPENERS


def _cover(covered: bytearray, span: tuple[int, int]) -> None:
    covered[span[0]:span[1]] = b"\x01" * (span[1] - span[0])


def _inside(span: tuple[int, int], covered: bytearray) -> bool:
    return span[0] < span[1] and covered.find(0, span[0], span[1]) == -1


def _overlaps(span: tuple[int, int], covered: bytearray) -> bool:
    return covered.find(1, span[0], span[1]) != -1
