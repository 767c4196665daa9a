"""Rule-based extraction (``palaced.text.extract``): each category is marked, plain chat is not."""

from __future__ import annotations

import pytest

from palaced.text.extract import BASE_IMPORTANCE, IMPORTANCE, extract, sentences


@pytest.mark.parametrize(("text", "tag"), [
    ("After the benchmark we decided to use Postgres 16 for the event store.", "decision"),
    ("We'll go with uv instead of pip-tools.", "decision"),
    ("Let's stick with the monorepo layout.", "decision"),
    ("The decision is final: no ORM.", "decision"),
    ("Fixed by pinning numpy below 2.", "fix"),
    ("The bug was an off-by-one in the pager.", "fix"),
    ("Root cause: the cache key ignored the locale.", "fix"),
    ("The crash was caused by a stale lock file.", "fix"),
    ("The web frontend talks to the api gateway over gRPC.", "architecture"),
    ("The billing service depends on the ledger.", "architecture"),
    ("Staging Postgres listens on port 5433.", "config"),
    ("We pinned fastapi to version 0.110.2 last week.", "config"),
    ("Set DATABASE_URL before running the migrations.", "config"),
    ("The retry limits are configured in config/settings.toml.", "config"),
    ("I prefer tabs over spaces.", "preference"),
    ("Never commit directly to main.", "preference"),
    ("Please always run ruff before pushing.", "preference"),
    ("From now on answer in French.", "preference"),
])
def test_each_category_is_marked(text: str, tag: str) -> None:
    found = extract(text)
    assert tag in found.tags
    assert (tag, text) in found.marked
    assert found.importance == max(IMPORTANCE[t] for t in found.tags)


@pytest.mark.parametrize("text", [
    "Thanks, that looks good.",
    "Can you show me the contents of the README?",
    "Here is the file you asked for.",
    "I ran the tests and they pass now.",
    "What does this function return?",
    "",
])
def test_ordinary_chat_is_not_marked(text: str) -> None:
    found = extract(text)
    assert found.tags == () and found.marked == ()
    assert found.importance == BASE_IMPORTANCE


def test_code_blocks_and_tool_lines_are_not_prose() -> None:
    text = ("Here is the change.\n```python\n# we decided to use port 8080\nPORT=8080\n```\n"
            "→ Bash: export API_TOKEN_NAME=x && never use this\nAll done now.")
    assert extract(text).tags == ()
    assert sentences(text) == ["Here is the change.", "All done now."]


def test_several_categories_in_one_exchange_keep_text_order() -> None:
    text = ("User: the login test is flaky again. I prefer a real fix over retries.\n\n"
            "Assistant: The root cause was a shared temp dir. Fixed by giving each test its "
            "own. We decided to run the suite with -p no:randomly.")
    found = extract(text)
    assert found.tags == ("decision", "fix", "preference")
    assert [t for t, _ in found.marked] == ["preference", "fix", "fix", "decision"]
    assert found.importance == 0.6
