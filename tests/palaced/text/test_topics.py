"""Rule-based topic extraction for closets (palaced.text.topics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.text.topics import (
    DEFAULT_LIMIT,
    extract_topics,
    fold_plural,
    normalize_topic,
    query_entities,
    query_topics,
    spelled,
)


def test_identifiers_hashtags_quotes_and_names() -> None:
    text = (
        "Fixed the bug in palaced/store/conn/db.py: fts_rank broke on Python 3.11 and HTTPServer "
        'v2.1.0 #bugfix. Talked to Melanie Smith from Bank of America about "vector index".'
    )
    topics = extract_topics(text, limit=20)
    for expected in ("palaced/store/conn/db.py", "fts_rank", "python 3.11", "httpserver", "v2.1.0",
                     "bugfix", "melanie smith", "bank of america", "vector index"):
        assert expected in topics, expected
    top = extract_topics(text)
    assert len(top) == DEFAULT_LIMIT
    assert "palaced/store/conn/db.py" in top and "fts_rank" in top
    assert all(t == t.lower() for t in topics)


def test_sentence_initial_and_stopwords_are_not_names() -> None:
    topics = extract_topics("Yesterday James went to New York City with his kids. "
                            "Then James visited museums.", limit=20)
    assert topics[0] == "james"  # twice, and a name where it is not sentence-initial
    assert "new york city" in topics
    assert "museum" in topics and "kid" in topics
    for noise in ("yesterday", "then", "with", "his", "yesterday james"):
        assert noise not in topics


def test_query_matches_drawer_keys() -> None:
    drawer = 'Caroline said, "I went to a LGBTQ support group yesterday and it was so powerful."'
    query = "When did Caroline go to the LGBTQ support group?"
    assert set(query_topics(query)) == {"caroline", "lgbtq", "support", "group"}
    assert set(query_topics(query)) <= set(extract_topics(drawer))


def test_multiword_names_also_yield_their_words() -> None:
    drawer = extract_topics("Met Melanie Smith at the conference.", limit=20)
    assert {"melanie smith", "melanie", "smith"} <= set(drawer)
    assert set(query_topics("What does Melanie do?")) & set(drawer) == {"melanie"}


def test_camel_snake_and_files() -> None:
    topics = extract_topics("Rename getUserName to get_user_name in UserService.java, "
                            "see XMLHttpRequest and README.md", limit=20)
    for expected in ("getusername", "get_user_name", "userservice.java", "xmlhttprequest",
                     "readme.md"):
        assert expected in topics


def test_normalisation() -> None:
    assert normalize_topic("  “Vector   Index” ") == "vector index"
    assert normalize_topic("#Tag") == "tag"
    assert normalize_topic("ＡＢＣ") == "abc"  # NFKC folds full-width letters
    assert [fold_plural(w) for w in ("groups", "stories", "classes", "boxes", "status", "kid",
                                     "analysis", "kids")] == [
        "group", "story", "class", "box", "status", "kid", "analysis", "kid"]


def test_empty_and_stopword_only() -> None:
    assert extract_topics("") == []
    assert extract_topics("and the of it is was") == []
    assert extract_topics("anything", limit=0) == []
    assert query_topics("what is it?") == []


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), limit=st.integers(min_value=0, max_value=12))
def test_never_raises_and_keys_are_normalised(text: str, limit: int) -> None:
    topics = extract_topics(text, limit=limit)
    assert len(topics) <= limit
    assert len(set(topics)) == len(topics)
    for topic in topics:
        assert topic and topic == topic.strip() and topic == normalize_topic(topic)


# -- the names a query asks about (recall's "nothing relevant" rule) ---------------------------
@pytest.mark.parametrize(("query", "names"), [
    ("What did Caroline research?", ["caroline"]),
    ("What is Caroline's identity?", ["caroline"]),  # possessive folded
    ("what port does staging Postgres use?", ["postgres"]),
    ("When did Melanie paint a sunrise?", ["melanie"]),
    ("Where did Caroline Smith move from?", ["caroline smith", "caroline", "smith"]),
    ("What LGBTQ events has Caroline joined?", ["lgbtq", "caroline"]),
    ("How does parse_config in config.py treat Python 3.11?",
     ["parse_config", "config.py", "python 3.11", "python"]),
    ("Which HTTPServer handles v1.2.3 requests?", ["httpserver", "v1.2.3"]),
    # Question words, sentence openers, weekdays and months are not names.
    ("What did we decide about the deploy schedule?", []),
    ("Where do I put the logs? Friday is fine.", []),
    ("Would she pursue writing in May?", []),
    ("", []),
])
def test_query_entities(query: str, names: list[str]) -> None:
    assert query_entities(query) == names


def test_spelled_gives_the_name_as_the_query_writes_it() -> None:
    assert spelled("What is caroline SMITH's job", "caroline smith") == "caroline SMITH"
    assert spelled("What did Caroline's sister say", "caroline") == "Caroline"
    assert spelled("nothing here", "caroline") == "caroline"
