"""Conflicting memories: whether a new drawer restates an older one with another value.

"Alice owns the payment gateway" then "Bob owns the payment gateway"; "the API listens on
port 8080" then "... on port 9090"; "the cache is enabled" then "... disabled"; "Alice owns
the gateway" then "Alice no longer owns the gateway". The embedding places such pairs close
together (cosine 0.8-0.96 with all-MiniLM-L6-v2) and cannot tell them from repeats, so
remember compares the texts of its nearest neighbours (cosine at least
``CONFLICT_SIMILARITY``, same wing) with the rule here. No model, no LLM: the rule reuses the
near-duplicate guard's token helpers (``rules``) and fires only when

* the two texts are about the same thing: most of their content words are shared once the
  differing values are set aside (``SAME_SUBJECT``), and
* the differing parts are values: each text names a value the other lacks (proper names,
  weekdays and months, numbers), or one text negates what the other states, or they use
  opposite words (enabled/disabled, allow/deny...).

A text that only *adds* values or words ("... and also the refunds service", "port 8080 and
the admin UI on 8081") adds detail: it is no conflict (``adds_detail`` says so). Long texts
(transcripts, notes of several facts) are not compared: a rule over word sets is only
precise on short statements (``MAX_CHARS``). Pure functions (layer 3).
"""

from __future__ import annotations

from palaced.text.rules import (
    _CALENDAR,
    _OPPOSITES,
    _is_function_word,
    _is_negation,
    _numbers,
    _stem,
    _tokens,
)

# Cosine (all-MiniLM-L6-v2) at or above which a neighbour is compared at all. Same-subject
# restatements with another value measured 0.75-0.96 (bench/evolving_facts.py's pairs and the
# issue's examples); 0.70 leaves a margin, the word rule does the rest.
CONFLICT_SIMILARITY = 0.70
# Share of content words and values two texts must have in common to be about the same
# thing: Jaccard over stemmed words and values, a swapped value counting as shared.
SAME_SUBJECT = 0.55
MAX_CHARS = 400  # texts longer than this (either side) are never compared
# Words that mark a change of state beside a negation ("no longer", "not anymore"): they do
# not count as content a negated restatement adds.
_CHANGE_MARKERS = frozenset(
    "longer anymore now currently still any more yet since".split())
# Function words the near-duplicate guard keeps (it compares word order) but a comparison of
# content words must not count.
_GLUE = frozenset(
    "to from into onto and or but also has have had will would should can could do does did "
    "so just".split())
# Sentence openers that are not names though capitalised: a capitalised first word is read
# as a name ("Bob owns the gateway") unless it is one of these common openers.
_OPENERS = frozenset(
    """a an the this that these those there here it its we i you he she they our my your
    their his her all any each every some no not never always please use using run deploy
    build make set add remove keep check avoid prefer do don't does did is are was were be
    when if after before since until then also and but or so for from in on at by to with
    as of new old current currently today yesterday tomorrow now note remember""".split())
# Opposite-word pairs strong enough to contradict a statement (``rules._OPPOSITES`` also holds
# weak ones, on/off, before/after, more/less, that two statements may use about different
# parts of one fact).
_STRONG_OPPOSITES = tuple(
    pair for pair in _OPPOSITES
    if pair[0] & frozenset({"enable", "allow", "always", "pass", "true", "accept", "include",
                            "add", "start", "success", "increase"}))


def _split(text: str) -> tuple[set[str], set[str], bool, set[str]]:
    """``(values, words, negated, all_lower)`` of ``text``: the values it names (names,
    calendar words, numbers), its other content words (stemmed), whether it is negated, and
    every word lowercased."""
    tokens = _tokens(text)
    lower = [t.lower() for t in tokens]
    # A number among the first two content words names the subject ("Sprint 2 goal met",
    # "Q3 roadmap", "v2 API"): a word of it, not a value stated about it.
    content = [w for w in lower if not _is_function_word(w) and w not in _GLUE]
    naming = {w for w in content[:2] if any(ch.isdigit() for ch in w)}
    named = {n for w in naming for n in _numbers(w, [w])}
    values = _numbers(text, lower) - named
    for i, (tok, low) in enumerate(zip(tokens, lower, strict=True)):
        if low in _CALENDAR:
            values.add(low)
        elif len(tok) > 1 and tok[:1].isupper() and (i > 0 or low not in _OPENERS):
            values.add(low)
    words = {_stem(w) for w in content
             if w not in values and (w in naming or not w.isdigit())
             and w not in _CHANGE_MARKERS}
    return values, words, any(_is_negation(w) for w in lower), set(lower)


def conflict_reason(new_text: str, old_text: str) -> str | None:
    """Why ``new_text`` contradicts ``old_text`` (a short phrase naming the differing
    values: "Bob vs Alice", "9090 vs 8080", "negated", "disabled vs enabled"), or None when
    it does not: different subjects, added detail, paraphrase, or a text over ``MAX_CHARS``.

    The caller has checked the pair's cosine (``CONFLICT_SIMILARITY``); this looks at words.
    """
    if len(new_text) > MAX_CHARS or len(old_text) > MAX_CHARS:
        return None
    new_vals, new_words, new_neg, new_all = _split(new_text)
    old_vals, old_words, old_neg, old_all = _split(old_text)
    only_new, only_old = new_vals - old_vals, old_vals - new_vals
    # About the same thing: words and values mostly shared, a value swapped for another
    # counting as one slot both texts fill ("Bob"/"Alice", "9090"/"8080").
    swapped = min(len(only_new), len(only_old))
    mine, theirs = new_words | new_vals, old_words | old_vals
    same = (len(mine & theirs) + swapped) / max(len(mine | theirs) - swapped, 1)
    if same < SAME_SUBJECT:
        return None
    if only_new and only_old:
        return f"{' '.join(sorted(only_new))} vs {' '.join(sorted(only_old))}"
    if new_neg != old_neg:
        # A negated restatement adds nothing but the negation: "Alice no longer owns the
        # gateway" against "Alice owns the gateway integration"; "owns the gateway, not the
        # refunds service" adds a fact and is left alone.
        neg_words, pos_words = (new_words, old_words) if new_neg else (old_words, new_words)
        neg_vals, pos_vals = (new_vals, old_vals) if new_neg else (old_vals, new_vals)
        if neg_words <= pos_words and neg_vals <= pos_vals:
            return "negated" if new_neg else "no longer negated"
        return None
    for side_a, side_b in _STRONG_OPPOSITES:
        for one, other in ((side_a, side_b), (side_b, side_a)):
            said, unsaid = new_all & one, old_all & other
            if said and unsaid and not new_all & other and not old_all & one:
                return f"{min(said)} vs {min(unsaid)}"
    return None


def adds_detail(new_text: str, old_text: str) -> bool:
    """Whether ``new_text`` says something ``old_text`` does not: a content word or value the
    old text lacks ("Alice owns the gateway and also the refunds service")."""
    new_vals, new_words, _, _ = _split(new_text)
    old_vals, old_words, _, _ = _split(old_text)
    return bool((new_words - old_words) or (new_vals - old_vals))


def covers(new_text: str, old_text: str) -> bool:
    """Whether ``new_text`` holds every content word and value of ``old_text``."""
    new_vals, new_words, _, _ = _split(new_text)
    old_vals, old_words, _, _ = _split(old_text)
    return old_words <= new_words and old_vals <= new_vals
