"""``palace hook prompt``'s pure parts: its settings, the session file (untrusted, private,
bounded, pruned) and what it cuts from a recall's text (the e2e tests run the process)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from palace_client.hooks import prompt as hook


def test_settings_default_and_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    assert hook.settings(config) == (300, 1.0)  # no file
    config.write_text("[hooks]\nprompt_budget = 120\nprompt_timeout_s = 0.5\n")
    assert hook.settings(config) == (120, 0.5)
    # Out of bound or of the wrong type: the default (check-config reports the file).
    config.write_text("[hooks]\nprompt_budget = 0\nprompt_timeout_s = true\n")
    assert hook.settings(config) == (300, 1.0)
    config.write_text("[hooks\n")
    assert hook.settings(config) == (300, 1.0)


def test_the_session_file_is_private_bounded_and_per_palace(tmp_path: Path) -> None:
    path = hook.state_path("../../etc/passwd", tmp_path)
    assert path.parent == tmp_path / hook.STATE_DIR and ".." not in path.name
    assert hook.load_seen(path, "p") is None
    hook.save_seen(path, "p", range(hook.MAX_SEEN + 50), new=True)
    assert path.stat().st_mode & 0o777 == 0o600
    seen = hook.load_seen(path, "p")
    assert seen is not None and len(seen) == hook.MAX_SEEN
    assert hook.load_seen(path, "other") is None  # another palace's ids mean nothing here


def test_a_session_file_not_ours_counts_as_a_new_session(tmp_path: Path) -> None:
    path = hook.state_path("s", tmp_path)
    path.parent.mkdir(parents=True)
    for content in ("not json", "[1]", '{"palace": "p", "seen": "1,2"}', "x" * 100_000):
        path.write_text(content)
        assert hook.load_seen(path, "p") is None
    path.write_text('{"palace": "p", "seen": [1, "2", true, 3.5, 4]}')
    assert hook.load_seen(path, "p") == {1, 4}
    secret = tmp_path / "secret"
    secret.write_text('{"palace": "p", "seen": [9]}')
    path.unlink()
    path.symlink_to(secret)
    assert hook.load_seen(path, "p") is None  # never read through a link


def test_prune_drops_old_and_surplus_files(tmp_path: Path) -> None:
    now = time.time()
    old = tmp_path / "old.json"
    old.write_text("{}")
    os.utime(old, (now - hook.KEEP_S - 10, now - hook.KEEP_S - 10))
    fresh = [tmp_path / f"f{i}.json" for i in range(hook.MAX_SESSIONS + 3)]
    for i, f in enumerate(fresh):
        f.write_text("{}")
        os.utime(f, (now - i, now - i))
    hook.prune(tmp_path, now)
    left = {p.name for p in tmp_path.iterdir()}
    assert "old.json" not in left and len(left) == hook.MAX_SESSIONS
    assert {f"f{i}.json" for i in range(hook.MAX_SESSIONS)} == left  # the newest kept


def test_injected_text_drops_seen_and_weak_drawers() -> None:
    # As the daemon sends it: #2 is under the floor, in ``results`` but not in the text.
    result = {"nothing_relevant": False,
              "text": "Recall in palace 'p' (mode keyword, 40 of 300 tokens)\nBest matches\n"
                      "#1 [a/b] score 0.9 one\n#12 [a/b] score 0.8 twelve",
              "sections": [{"level": None, "title": "Best matches", "items": [
                  {"id": 1, "text": "one"}, {"id": 12, "text": "twelve"},
                  {"id": 2, "text": "two", "below_floor": True}]}]}
    text, shown = hook.injected_text(result, {1})
    assert shown == {12}
    assert text.splitlines()[-1] == "#12 [a/b] score 0.8 twelve" and "#1 " not in text
    assert hook.injected_text(result, {1, 12}) == ("", set())
    # A section whose drawers are all dropped loses its heading.
    two = {**result, "text": result["text"] + "\nL2 · Where the query points\n#7 [a/b] seven",
           "sections": [*result["sections"], {"level": 2, "title": "Where the query points",
                                              "items": [{"id": 7, "text": "seven"}]}]}
    text, shown = hook.injected_text(two, {7, 1})
    assert shown == {12} and "L2" not in text and "Best matches" in text
    assert hook.injected_text({**result, "nothing_relevant": True}, set()) == ("", set())
    assert json.loads(hook.output("x")) == {"hookSpecificOutput": {
        "hookEventName": "UserPromptSubmit", "additionalContext": "x"}}


def test_injected_text_keeps_the_current_fact_the_daemon_shows() -> None:
    """A drawer under the floor that the daemon put in the text (the newer side of a shown
    drawer's open conflict) is injected with it; one under the floor alone is not."""
    result = {"nothing_relevant": False,
              "text": "Recall in palace 'p' (mode keyword, 40 of 300 tokens)\nBest matches\n"
                      "#12 [a/b] score 0.8 (conflicts with #2, newer) twelve\n"
                      "#2 [a/b] score 0.1 two",
              "sections": [{"level": None, "title": "Best matches", "items": [
                  {"id": 12, "text": "twelve", "conflicts_with": 2},
                  {"id": 2, "text": "two", "below_floor": True},
                  {"id": 3, "text": "three", "below_floor": True}]}]}
    text, shown = hook.injected_text(result, set())
    assert shown == {12, 2} and text.splitlines()[-1] == "#2 [a/b] score 0.1 two"
    assert hook.injected_text(result, {12}) == ("", set())
