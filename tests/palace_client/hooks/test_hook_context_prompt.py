"""``palace hook prompt`` recalls the words typed: Gemini CLI 0.61 sends the SessionStart hooks'
context in front of the session's first prompt in its BeforeAgent ``prompt`` (what the real
binary sent in tests/e2e/agents), which palace_client.hooks.prompt.parse_prompt drops
(palaced.wire.vocab.typed_prompt)."""

from __future__ import annotations

import json

from palace_client.hooks.prompt import parse_prompt
from palaced.wire.vocab import typed_prompt


def test_the_gemini_hook_context_is_not_the_prompt() -> None:
    sent = ("<hook_context>Wake-up context of palace 'proj' (530 of 800 tokens)\n\n## L1 · "
            "Essential\n- #18 [general/general] 2026-12-05\n  Essential note 14: the nightly "
            "build</hook_context>\n\nHow often does the deploy key rotate?")
    raw = json.dumps({"session_id": "4119238a", "cwd": "/p", "hook_event_name": "BeforeAgent",
                      "prompt": sent}).encode()
    assert parse_prompt(raw, "gemini")["prompt"] == "How often does the deploy key rotate?"


def test_a_prompt_without_hook_context_is_unchanged() -> None:
    for prompt in ("plain words", "  <hook_context> mentioned later", "a <hook_context>x"
                   "</hook_context> inside"):
        assert typed_prompt(prompt) == prompt
