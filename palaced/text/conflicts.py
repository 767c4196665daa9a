"""Conflicting memories: whether a new drawer restates an older one with another value.

"Alice owns the payment gateway" then "Bob owns the payment gateway"; "the API listens on
port 8080" then "... on port 9090"; "the cache is enabled" then "... disabled"; "Alice owns
the gateway" then "Alice no longer owns the gateway". The embedding places such pairs close
together (cosine 0.8-0.96 with all-MiniLM-L6-v2) and cannot tell them from repeats, so
remember compares the texts of its nearest neighbours (cosine at least
``CONFLICT_SIMILARITY``, same wing) with the rule here. No model, no LLM: the rule reuses the
near-duplicate guard's token helpers (``rules``) and fires only when

* the two texts are about the same thing: no content word of one is missing from the other
  while the other has one of its own, beyond the words of a state and its change ("uses",
  "runs on", "upgraded", "now owns", "took over": ``_STATE_WORDS``), and most content words
  and values are shared (``SAME_SUBJECT``); and
* the differing parts are values: each text names a value the other lacks (proper names,
  weekdays and months, numbers; a name opening both texts, their subject, only for a
  single-valued statement: an owner, a lead), or the new text announces a change naming the
  old value and the new one ("switched from A to B", "took over from A"), or one text negates
  what the other states, or they use opposite words (enabled/disabled, allow/deny...).

A text that only *adds* values or words ("... and also the refunds service", "port 8080 and
the admin UI on 8081") adds detail: it is no conflict (``adds_detail`` says so). Long texts
(transcripts, notes of several facts) are not compared: a rule over word sets is only
precise on short statements (``MAX_CHARS``). Pure functions (layer 3).
"""

from __future__ import annotations

from functools import lru_cache

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


# Verbs and nouns of a state or of its change: two statements of one fact may word the state
# differently ("uses" / "runs on" / "upgraded to" / "now owns" / "took over"), so these may
# differ between them; any other content word that each text has and the other lacks means
# they are about different things ("inventory service" / "catalog service").
_STATE_WORDS = frozenset(_stem(w) for w in (
    "use uses used using run runs running ran upgraded upgrade downgraded moved move "
    "migrated switched switch changed change replaced replace took take over became become "
    "owns own owned owner ownership leads lead led lead manages managed maintains maintained "
    "heads headed picked chose chosen decided decide adopted went going set sits lives "
    "listens listen is are was were be been dropped drop left leaving instead new"
).split())
# Without the model's similarity (``strict``: candidates found by their words alone), two
# statements must also state the same kind of thing: one of ownership (an owner, a lead) and
# one of what a thing runs on, uses or listens on are about different facts of one subject
# ("Marco now owns the invoicing gateway." / "The invoicing gateway runs on port 8081.").
_OWNING = frozenset(_stem(w) for w in (
    "owns own owned owner ownership leads lead led manages managed maintains maintained "
    "heads headed took take over became become").split())
_NEUTRAL = frozenset(_stem(w) for w in (
    "is are was were be been new instead changed change decided decide set went going "
    "picked chose chosen adopted").split())
# A name swapped as a sentence's subject ("Bob ..." / "Alice ...") is a conflict only when
# the statement is single-valued: one owner, one lead ("Eli prefers RFCs" / "Kofi prefers
# RFCs" are two people's facts).
_SINGLE_VALUED = frozenset(_stem(w) for w in (
    "owns owner ownership owned leads lead heads manages maintains responsible charge "
    "assigned point contact").split())
# A text that says its new value is one more ("also", "too") adds, it does not replace.
_ADDING = frozenset("also too additionally another".split())
# Words announcing that a value replaced another ("switched from A to B", "took over from A").
_CHANGE = frozenset(_stem(w) for w in (
    "switched moved migrated replaced took instead dropped left changed upgraded "
    "downgraded").split())
# The words of the opposite pairs: a swap of them is the contradiction itself.
_OPPOSITE_WORDS = frozenset(_stem(w) for a, b in _STRONG_OPPOSITES for w in a | b)
_ACRONYM_MAX = 5  # an all-capitals word this short (API, SDK, UI) names a kind, not a value


def _is_name(tok: str, low: str, first: bool) -> bool:
    """A proper noun: capitalised, not an acronym of a kind (API), not a common opener."""
    if len(tok) < 2 or not tok[:1].isupper():
        return False
    if tok.isupper() and len(tok) <= _ACRONYM_MAX:
        return False
    # "Moved the worker to ...", "Ownership of ...": a capitalised verb or noun of state.
    return not first or (low not in _OPENERS and _stem(low) not in _STATE_WORDS | _CHANGE)


@lru_cache(maxsize=4096)  # remember compares one new text with up to 10 neighbours
def _split(text: str
           ) -> tuple[frozenset[str], frozenset[str], bool, frozenset[str], str | None]:
    """``(values, words, negated, all_lower, lead)`` of ``text``: the values it names (names,
    calendar words, numbers), its other content words (stemmed), whether it is negated, every
    word lowercased, and the name opening it (its subject), if any."""
    tokens = _tokens(text)
    lower = [t.lower() for t in tokens]
    # A number among the first two content words names the subject ("Sprint 2 goal met",
    # "Q3 roadmap", "v2 API"): a word of it, not a value stated about it. So does a number
    # before the statement's first word of state ("Kafka broker 5 listens on port 9095",
    # "node 3 runs ..."): numbered instances are different things, not one thing's values.
    content = [w for w in lower if not _is_function_word(w) and w not in _GLUE]
    verb = next((i for i, w in enumerate(content) if _stem(w) in _STATE_WORDS | _CHANGE),
                0)
    naming = {w for w in content[:max(2, verb)] if any(ch.isdigit() for ch in w)}
    named = {n for w in naming for n in _numbers(w, [w])}
    values = _numbers(text, lower) - named
    lead = None
    for i, (tok, low) in enumerate(zip(tokens, lower, strict=True)):
        if low in _CALENDAR:
            values.add(low)
        elif _is_name(tok, low, i == 0):
            values.add(low)
            lead = low if i == 0 else lead
    words = {_stem(w) for w in content
             if w not in values and (w in naming or not w.isdigit())
             and w not in _CHANGE_MARKERS}
    return (frozenset(values), frozenset(words), any(_is_negation(w) for w in lower),
            frozenset(lower), lead)


def _kinds(words: frozenset[str]) -> set[str]:
    """The kinds of statement ``words`` make: owning, running (uses, runs on, listens...)."""
    state = words & _STATE_WORDS - _NEUTRAL
    return {"own" if w in _OWNING else "run" for w in state}


def conflict_reason(new_text: str, old_text: str, *, strict: bool = False) -> str | None:
    """Why ``new_text`` contradicts ``old_text`` (a short phrase naming the differing
    values: "bob vs alice", "9090 vs 8080", "negated", "disabled vs enabled"), or None when
    it does not: different subjects, added detail, paraphrase, or a text over ``MAX_CHARS``.

    The caller has checked the pair's cosine (``CONFLICT_SIMILARITY``); this looks at words.
    ``strict`` is for a pair found without that check (by shared words): then both must
    state the same kind of thing (``_OWNING``), and neither text may have a content word the
    other lacks (beyond those of a state) but for a negation of a part of the other.
    """
    if len(new_text) > MAX_CHARS or len(old_text) > MAX_CHARS:
        return None
    new_vals, new_words, new_neg, new_all, new_lead = _split(new_text)
    old_vals, old_words, old_neg, old_all, old_lead = _split(old_text)
    # A value in one text written as a plain word in the other ("Postgres" / "postgres") is
    # the same in both: neither a differing value nor a differing word.
    new_vals = new_vals - {v for v in new_vals if _stem(v) in old_words}
    old_vals = old_vals - {v for v in old_vals if _stem(v) in new_words}
    new_words = new_words - {_stem(v) for v in old_vals}
    old_words = old_words - {_stem(v) for v in new_vals}
    # Different things: each text has a content word the other lacks, beyond the words of
    # a state and its change.
    free = _STATE_WORDS | _OPPOSITE_WORDS
    extra_new, extra_old = new_words - old_words - free, old_words - new_words - free
    if extra_new and extra_old:
        return None
    if strict:
        kinds_new, kinds_old = _kinds(new_words), _kinds(old_words)
        if kinds_new and kinds_old and not kinds_new & kinds_old:
            return None
    only_new, only_old = new_vals - old_vals, old_vals - new_vals
    # About the same thing: words (but those of state) and values mostly shared, a value
    # swapped for another counting as one slot both texts fill ("Bob"/"Alice", "9090"/"8080").
    swapped = min(len(only_new), len(only_old))
    mine, theirs = (new_words - _STATE_WORDS) | new_vals, (old_words - _STATE_WORDS) | old_vals
    same = (len(mine & theirs) + swapped) / max(len(mine | theirs) - swapped, 1)
    if same < SAME_SUBJECT:
        return None
    if new_neg != old_neg:
        # A negated restatement adds nothing but the negation: "Alice no longer owns the
        # gateway" against "Alice owns the gateway integration"; "owns the gateway, not the
        # refunds service" adds a fact and is left alone.
        neg_words, pos_words = (new_words, old_words) if new_neg else (old_words, new_words)
        neg_vals, pos_vals = (new_vals, old_vals) if new_neg else (old_vals, new_vals)
        if neg_words <= pos_words and neg_vals <= pos_vals:
            return "negated" if new_neg else "no longer negated"
        return None
    if new_all & _ADDING or (strict and (extra_new or extra_old)):
        return None
    reason = f"{' '.join(sorted(only_new))} vs {' '.join(sorted(only_old))}"
    if only_new and only_old:
        leads = {new_lead, old_lead} - {None}
        if leads and leads <= only_new | only_old and not (
                (new_words | old_words) & _SINGLE_VALUED):
            return None  # two subjects' facts: "Eli prefers RFCs" / "Kofi prefers RFCs"
        return reason
    if only_new and old_vals and old_vals <= new_vals and {_stem(w) for w in new_all} & _CHANGE:
        # "We switched feature flags from LaunchDarkly to Unleash" after "We use LaunchDarkly
        # for feature flags": the new text names the old value and the one replacing it.
        return f"{' '.join(sorted(only_new))} replaces {' '.join(sorted(old_vals))}"
    for side_a, side_b in _STRONG_OPPOSITES:
        for one, other in ((side_a, side_b), (side_b, side_a)):
            said, unsaid = new_all & one, old_all & other
            if said and unsaid and not new_all & other and not old_all & one:
                return f"{min(said)} vs {min(unsaid)}"
    return None


def _content(text: str) -> frozenset[str]:
    """Every content word and value of ``text``, values also stemmed: a word capitalised in
    one text and not in the other ("Postgres" / "postgres") is the same word."""
    values, words, _, _, _ = _split(text)
    return words | values | {_stem(v) for v in values}


def adds_detail(new_text: str, old_text: str) -> bool:
    """Whether ``new_text`` says something ``old_text`` does not: a content word or value the
    old text lacks ("Alice owns the gateway and also the refunds service")."""
    return bool(_content(new_text) - _content(old_text))


def covers(new_text: str, old_text: str) -> bool:
    """Whether ``new_text`` holds every content word and value of ``old_text``."""
    return _content(old_text) <= _content(new_text)
