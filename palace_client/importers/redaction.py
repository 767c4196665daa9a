"""The one place imported texts pass through before they are sent: secret redaction.

Every ledger importer (markdown, chatgpt, claude-code...) sends each drawer text through
:func:`redact` first (``runner.run``); restores of an export do not (an export holds what its
palace held). Until the daemon's redaction rules are wired here, texts pass unchanged.
"""

from __future__ import annotations


def redact(text: str) -> tuple[str, int]:
    """``text`` with its secrets masked, and how many were masked."""
    return text, 0
