"""Memory rules: importance, decay weight, prune selection and near-duplicate detection.

Pure functions over numbers, texts and drawer rows (no SQL, no I/O, no anyio), so the same
rule serves remember's near-duplicate check, recall ranking, decay, the prune op and its dry
run, and the health report. The async verbs that apply them are in ``upkeep`` and ``writes``.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from palaced.wire.errors import InvalidArgs, quote
from palaced.wire.vocab import IMPORTANCE_PRESETS

# Class boundaries sit halfway between neighbouring presets.
_CLASS_FLOORS: tuple[tuple[float, str], ...] = ((0.9, "critical"), (0.65, "high"), (0.35, "medium"))

HALF_LIFE_DAYS = 30.0
# Multiplier of the base decay rate per importance class: 0 never decays.
DECAY_RATE: dict[str, float] = {"critical": 0.0, "high": 0.5, "medium": 1.0, "low": 2.0}
PRUNABLE_CLASSES = frozenset({"low", "medium"})
MS_PER_DAY = 86_400_000

# Cosine similarity of all-MiniLM-L6-v2 vectors at or above which a new memory may repeat one
# in the same room; is_near_duplicate also requires lexical_guard. Measured with
# `python bench/dedup_threshold.py` (int8 ONNX model) on 53 hand-written near-duplicate pairs
# (rephrasings, typo fixes, reordered words) and 57 related-but-different pairs:
#   near-duplicates: min 0.757, p10 0.855, median 0.936, max 0.993
#   different facts: min 0.526, p10 0.649, median 0.898, max 0.991 (numbers, negations and
#   swapped words score 0.93-0.99: cosine alone cannot separate them at any threshold < 1)
#   cosine alone at 0.85: 50/53 duplicates caught, 35/57 different pairs merged
#   with lexical_guard:   0.85 catches 47/53 and merges 0/57; the highest different pair the
#   guard lets through scores 0.803 (annually/invoice vs monthly/credit card), so 0.81 is the
#   lowest zero-merge threshold here and 0.85 keeps a margin: a missed merge stores one extra
#   drawer, a wrong merge loses a memory.
DEDUP_THRESHOLD = 0.85
PREVIEW_CHARS = 120  # of a drawer's text in prune and health reports


def parse_importance(value: float | str) -> float:
    """Return an importance in 0..1 from a preset name or a number.

    Accepts ``critical``/``high``/``medium``/``low`` (any case), numbers in 0..1, and strings
    of such numbers.

    Raises:
        InvalidArgs: anything else (other names, booleans, NaN, numbers outside 0..1).
    """
    number: float
    if isinstance(value, str):
        name = value.strip().lower()
        if name in IMPORTANCE_PRESETS:
            return IMPORTANCE_PRESETS[name]
        try:
            number = float(name)
        except ValueError:
            raise _bad_importance(value) from None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_importance(value)
    else:
        number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise _bad_importance(value)
    return number


def _bad_importance(value: object) -> InvalidArgs:
    names = ", ".join(IMPORTANCE_PRESETS)
    return InvalidArgs(
        f"importance must be one of {names} or a number in 0..1, not {quote(value, 80)}",
        details={"importance": quote(value, 80)},
    )


def importance_class(value: float | str) -> str:
    """The class (``critical``, ``high``, ``medium`` or ``low``) an importance falls in.

    Raises:
        InvalidArgs: ``value`` is not a valid importance (see ``parse_importance``).
    """
    number = parse_importance(value)
    for floor, name in _CLASS_FLOORS:
        if number >= floor:
            return name
    return "low"


def weight(importance: float | str, *, age_days: float, access_count: int) -> float:
    """The current weight of a memory, in 0..importance.

    ``weight = importance * 2 ** (-rate * age_days / (1 + ln(1 + access_count)) / 30)``

    where ``rate`` is 0 for critical (never decays), 0.5 for high (half-life 60 days),
    1 for medium (30 days) and 2 for low (15 days). Each use stretches the half-life by a
    diminishing amount: 1 access → ×1.69, 10 → ×3.4, 100 → ×5.6. ``age_days`` counts from the
    last access, or from creation if never accessed (``days_since_use``); negative ages (clock
    skew) count as 0.

    Raises:
        InvalidArgs: invalid importance, a non-finite age or a negative access count.
    """
    number = parse_importance(importance)
    if not math.isfinite(age_days):
        raise InvalidArgs("age_days must be finite", details={"age_days": repr(age_days)})
    if access_count < 0:
        raise InvalidArgs("access_count must be >= 0", details={"access_count": access_count})
    rate = DECAY_RATE[importance_class(number)]
    effective_age = max(age_days, 0.0) / (1.0 + math.log1p(access_count))
    return number * math.exp2(-rate * effective_age / HALF_LIFE_DAYS)


def days_since_use(*, created_ms: int, accessed_ms: int | None, now_ms: int) -> float:
    """Days from the last access (or creation, if never accessed) to ``now_ms``, at least 0."""
    last = created_ms if accessed_ms is None else max(accessed_ms, created_ms)
    return max(now_ms - last, 0) / MS_PER_DAY


def drawer_weight(drawer: Mapping[str, Any], *, now_ms: int) -> float:
    """``weight`` of a drawer row with importance, created_ms, accessed_ms and access_count.

    Raises:
        InvalidArgs: the row holds an invalid importance or access count.
        KeyError: a column is missing from the row.
    """
    return weight(
        drawer["importance"],
        age_days=days_since_use(
            created_ms=drawer["created_ms"], accessed_ms=drawer["accessed_ms"], now_ms=now_ms
        ),
        access_count=drawer["access_count"],
    )


def check_threshold(threshold: float) -> float:
    """A prune or stale threshold as a float.

    Raises:
        InvalidArgs: not a number in 0..1.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not (
        0.0 <= threshold <= 1.0
    ):
        raise InvalidArgs("threshold must be a number in 0..1", details={"threshold": threshold})
    return float(threshold)


def preview(text: str) -> str:
    """A drawer's text on one line, cut to PREVIEW_CHARS (for reports)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


RowT = TypeVar("RowT", bound=Mapping[str, Any])


def prune_candidates(rows: Iterable[RowT], *, threshold: float) -> list[RowT]:
    """The rows to prune: low or medium importance with ``weight`` below ``threshold``.

    Critical and high memories are never selected, whatever their weight. The result is
    ordered by weight then id, so it does not depend on input order and a dry run over the
    same rows lists exactly what a real run deletes.

    Raises:
        InvalidArgs: ``threshold`` outside 0..1, or a row with an invalid importance.
        KeyError: a row lacks ``id``, ``importance`` or ``weight``.
    """
    if isinstance(threshold, bool) or not (
        isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0
    ):
        raise InvalidArgs("threshold must be a number in 0..1", details={"threshold": threshold})
    chosen = [
        row
        for row in rows
        if importance_class(row["importance"]) in PRUNABLE_CLASSES and row["weight"] < threshold
    ]
    chosen.sort(key=lambda row: (row["weight"], row["id"]))
    return chosen


# -- near-duplicates ------------------------------------------------------------------------
_WORDS = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve".split()
    )
} | {"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "hundred": "100"}
_NEGATIONS = frozenset(
    "not no never none nobody nothing nowhere neither nor without cannot".split()
)
# Each pair: words of one meaning vs words of the opposite. Texts that each use a different
# side are contradictory even when the embedding calls them near-identical.
_OPPOSITES: tuple[tuple[frozenset[str], frozenset[str]], ...] = tuple(
    (frozenset(a.split()), frozenset(b.split()))
    for a, b in (
        ("enable enabled enables enabling", "disable disabled disables disabling"),
        ("allow allowed allows allowing", "deny denied denies denying forbid forbidden"),
        ("increase increased increases increasing", "decrease decreased decreases decreasing"),
        ("always", "never sometimes"),
        ("pass passes passed passing", "fail fails failed failing"),
        ("before", "after"),
        ("more higher larger bigger", "less fewer lower smaller"),
        ("min minimum", "max maximum"),
        ("true", "false"),
        ("on", "off"),
        ("open opened", "close closed"),
        ("start started starts", "stop stopped stops"),
        ("add added adds", "remove removed removes"),
        ("include included includes", "exclude excluded excludes"),
        ("accept accepted accepts", "reject rejected rejects"),
        ("success succeeded successful", "failure unsuccessful"),
    )
)
# Words whose two sides cannot be swapped without changing the meaning ("X over Y").
_DIRECTIONAL = frozenset("over to from than into vs versus instead".split())
_FUNCTION_WORDS = frozenset(
    "a an the of in on at for by with as is are was were be been it its this that these those "
    "we i you he she they our my your their his her".split()
)
_SPELLING_VARIANT_RATIO = 0.75
_SUFFIXES = ("ing", "ed", "es", "s", "ly")
_CALENDAR = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april "
    "may june july august september october november december".split()
)


def _tokens(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).replace("’", "'")
    # "Tom's" is "Tom" (possessive or "is") for every rule here; "don't" keeps its "n't".
    return [t[:-2] if t.lower().endswith("'s") else t for t in _WORDS.findall(folded)]


def _numbers(text: str, words: list[str]) -> set[str]:
    found = set(_NUMBER.findall(_THOUSANDS.sub("", text)))
    found.update(_NUMBER_WORDS[w] for w in words if w in _NUMBER_WORDS)
    return found


def _is_negation(word: str) -> bool:
    return word in _NEGATIONS or word.endswith("n't")


def _is_function_word(word: str) -> bool:
    return word in _FUNCTION_WORDS or _is_negation(word)


def _negated(words: list[str]) -> bool:
    return any(_is_negation(w) for w in words)


def _names(tokens: list[str]) -> set[str]:
    """Proper nouns, weekdays and months: capitalised words not opening a sentence."""
    out = {t.lower() for t in tokens if t.lower() in _CALENDAR}
    out.update(t.lower() for i, t in enumerate(tokens) if i > 0 and len(t) > 1 and t[:1].isupper())
    return out


def _directed_pairs(words: list[str]) -> set[tuple[str, str]]:
    """(left, right) content words around each directional word: "tabs over spaces"."""
    content = [
        (i, w) for i, w in enumerate(words) if w not in _FUNCTION_WORDS and w not in _DIRECTIONAL
    ]
    pairs = set()
    for i, w in enumerate(words):
        if w in _DIRECTIONAL:
            left = [c for j, c in content if j < i]
            right = [c for j, c in content if j > i]
            if left and right:
                pairs.add((left[-1], right[0]))
    return pairs


def lexical_guard(new_text: str, old_text: str) -> bool:
    """Whether two texts are free of the cheap signs of different facts.

    Embeddings place "Postgres 15" next to "Postgres 16" and "deploy on Fridays" next to
    "never deploy on Fridays"; so the texts must agree on the numbers they mention (digits or
    number words up to twelve), on being negated or not, on not using opposite words
    (enable/disable, before/after, ...) and on the order of the words around directional
    ones ("tabs over spaces" is not "spaces over tabs"); neither may name a proper noun,
    weekday or month the other lacks while the other names one it lacks; and they must not
    be one sentence with words swapped in place (``_words_replaced_in_place``).
    """
    new_tokens, old_tokens = _tokens(new_text), _tokens(old_text)
    new_words = [t.lower() for t in new_tokens]
    old_words = [t.lower() for t in old_tokens]
    if _numbers(new_text, new_words) != _numbers(old_text, old_words):
        return False
    if _negated(new_words) != _negated(old_words):
        return False
    new_set, old_set = set(new_words), set(old_words)
    for side_a, side_b in _OPPOSITES:
        new_a, new_b = bool(new_set & side_a), bool(new_set & side_b)
        old_a, old_b = bool(old_set & side_a), bool(old_set & side_b)
        if (new_a and not new_b and old_b and not old_a) or (
            new_b and not new_a and old_a and not old_b
        ):
            return False
    old_pairs = _directed_pairs(old_words)
    if any((right, left) in old_pairs for left, right in _directed_pairs(new_words)):
        return False
    only_new = _names(new_tokens) - old_set
    only_old = _names(old_tokens) - new_set
    if only_new and only_old:
        return False
    return not _words_replaced_in_place(new_words, old_words)


def _words_replaced_in_place(new_words: list[str], old_words: list[str]) -> bool:
    """The same sentence with some words swapped one for one, not all by spelling variants.

    "The bug is in the login page" vs "... the signup page", "keeps events for a year and
    compacts weekly" vs "for a month ... daily": when a memory is restated word for word
    except in a few slots of the same length, those slots are the news. Typo fixes
    ("recomendation") and spelling variants ("favourite", "meets"/"meeting") stay
    duplicates; rephrasings add, drop or move words and are not affected.
    """
    # Negations are left out and number words read as digits: lexical_guard has already
    # matched the texts' polarity and numbers.
    new_seq = [_NUMBER_WORDS.get(w, w) for w in new_words if not _is_function_word(w)]
    old_seq = [_NUMBER_WORDS.get(w, w) for w in old_words if not _is_function_word(w)]
    changes = [
        op
        for op in difflib.SequenceMatcher(None, new_seq, old_seq, autojunk=False).get_opcodes()
        if op[0] != "equal"
    ]
    # Only slot-for-slot swaps: a rephrasing adds, drops or regroups words somewhere.
    if not changes or any(op[0] != "replace" or op[2] - op[1] != op[4] - op[3] for op in changes):
        return False
    return any(
        difflib.SequenceMatcher(
            None,
            " ".join(_stem(w) for w in new_seq[i1:i2]),
            " ".join(_stem(w) for w in old_seq[j1:j2]),
        ).ratio()
        < _SPELLING_VARIANT_RATIO
        for _, i1, i2, j1, j2 in changes
    )


def _stem(word: str) -> str:
    """Drop one inflection suffix, so "meets" and "meeting" compare as "meet"."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def is_near_duplicate(
    cos_sim: float, new_text: str, old_text: str, *, threshold: float = DEDUP_THRESHOLD
) -> bool:
    """Whether ``new_text`` repeats ``old_text``: cosine at or above ``threshold`` and the
    texts pass ``lexical_guard``.

    ``cos_sim`` is the cosine similarity of their all-MiniLM-L6-v2 embeddings.
    """
    return cos_sim >= threshold and lexical_guard(new_text, old_text)


_PUNCT = re.compile(r"[^\w]+", re.UNICODE)


def duplicate_key(text: str) -> str:
    """Text reduced to its words: NFKC, case-folded, punctuation and spacing ignored."""
    return " ".join(_PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def exact_duplicates(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Pairs of ``(oldest id, id)`` among ``rows`` (with ``id`` and ``text``, oldest first)
    whose texts have the same words (``duplicate_key``).

    A group of k copies is reported as k - 1 pairs against its oldest drawer.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        key = duplicate_key(r["text"])
        if key:
            groups[key].append(r["id"])
    return [(ids[0], other) for ids in groups.values() for other in ids[1:]]
