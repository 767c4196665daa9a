"""The one place imported texts pass through before they are sent: secret redaction.

Every ledger importer (markdown, chatgpt...) sends each drawer text through :func:`redact`
first (``runner.run``); restores of an export do not (an export holds what its palace held).
The rules are the daemon's own (``palaced.wire.redact``, a wire leaf), so text captured by the
daemon (Claude Code transcripts) and text imported here are masked alike.
"""

from __future__ import annotations

from palaced.wire.redact import redact

__all__ = ["redact"]
