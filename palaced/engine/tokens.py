"""Token counting for context budgets: exact ``cl100k_base`` when its BPE file is at hand.

The daemon runs on machines that may never reach the internet, so loading never downloads and
never raises: it tries an explicit BPE file, then tiktoken's cache (a directory passed in, then
``TIKTOKEN_CACHE_DIR``), and otherwise falls back to a ``ceil(len(text) / 4)`` estimate whose
``reason`` says why. Every candidate file is checked against the sha256 tiktoken itself pins.

The ranks are parsed here rather than with ``tiktoken.load.load_tiktoken_bpe`` on purpose: that
function copies every local file it reads into tiktoken's cache directory (``/tmp`` by default)
and raises when a configured cache directory is not writable. The format is the same one it
parses (``base64(token) rank`` per line) and tests/palaced/engine/test_tokens.py checks both agree.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
import re
import threading
from pathlib import Path
from typing import Any

from cachetools import LRUCache

CL100K_NAME = "cl100k_base"
FALLBACK_NAME = "chars/4-estimate"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# tiktoken caches a blob under the sha1 of its URL (tiktoken.load.read_file_cached).
CL100K_CACHE_NAME = hashlib.sha1(CL100K_URL.encode()).hexdigest()

# Copied from tiktoken_ext.openai_public.cl100k_base() (tiktoken 0.14), which cannot be called
# offline because it downloads the ranks itself.
_CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_CHARS_PER_TOKEN = 4
COUNT_CACHE_SIZE = 20_000
COUNT_CACHE_MAX_CHARS = 20_000  # longer texts are rare and would pin memory
# A text at least this long is counted by its lines (``_PIECES``), each remembered.
PIECES_MIN_CHARS = 400
# Where a text splits into pieces whose cl100k_base counts add up to its own: after the last
# newline of a run of whitespace, before spaces or tabs and a visible ASCII character. Every
# match of _CL100K_PAT_STR that holds a newline ends on one (newlines only trail punctuation
# or whitespace; letters' optional lead is no newline) and none reaches past whitespace, so
# one ends at such a point, whether the text goes on (``\s*[\r\n]``, greedy) or not
# (``\s++$``): the pre-tokenizer's chunks, hence the tokens, are the same. A rendered answer
# is a piece per heading, per drawer's head and per line of its text (the same in every
# recall that shows it), counted once while the packing search and the stated count
# re-render the rest.
_PIECES = re.compile(r"(?<=\n)(?=[ \t]*[!-~])")


class Tokenizer:
    """Counts and truncates text in tokens, exactly (cl100k_base) or by estimate.

    Build it with :meth:`load` (or :meth:`fallback`). Attributes:
        name: ``"cl100k_base"`` or ``"chars/4-estimate"``.
        exact: True when counts are real cl100k_base token counts.
        reason: why the estimate is in use (None when exact).
        source: the BPE file the exact encoding was read from (None for the estimate).

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text, never refused.
    """

    def __init__(self, encoding: Any | None, *, reason: str | None = None,
                 source: Path | None = None) -> None:
        self._enc = encoding
        # Recall packs the same drawers (L1, popular hits) again and again; counting them is
        # ~1 ms of every recall on the event loop without this memo. Bounded, thread-safe.
        self._counts: LRUCache[str, int] = LRUCache(maxsize=COUNT_CACHE_SIZE)
        self._counts_lock = threading.Lock()
        self.name = CL100K_NAME if encoding is not None else FALLBACK_NAME
        self.exact = encoding is not None
        self.reason = None if encoding is not None else (reason or "no tokenizer configured")
        self.source = source

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, exact={self.exact}, reason={self.reason!r})"

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def load(cls, bpe_file: Path | None = None, cache_dir: Path | None = None) -> Tokenizer:
        """Return the exact cl100k_base tokenizer if its ranks are available offline.

        Tries, in order: ``bpe_file``; ``cache_dir / CL100K_CACHE_NAME``;
        ``$TIKTOKEN_CACHE_DIR / CL100K_CACHE_NAME``. A candidate that is missing, unreadable or
        fails the pinned sha256 is skipped. Never touches the network and never raises: when
        no candidate works it returns the chars/4 estimate with ``reason`` listing why.
        """
        candidates: list[tuple[str, Path]] = []
        if bpe_file is not None:
            candidates.append(("bpe_file", Path(bpe_file).expanduser()))
        if cache_dir is not None:
            candidates.append(("cache_dir", Path(cache_dir).expanduser() / CL100K_CACHE_NAME))
        env_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
        if env_dir:
            candidates.append(
                ("TIKTOKEN_CACHE_DIR", Path(env_dir).expanduser() / CL100K_CACHE_NAME)
            )
        if not candidates:
            return cls.fallback(
                "no cl100k_base BPE file configured and no tiktoken cache directory given"
            )
        problems: list[str] = []
        for label, path in candidates:
            try:
                encoding = _build_encoding(path)
            except Exception as exc:  # any failure here must degrade, not crash the daemon
                problems.append(f"{label} {path}: {exc}")
                continue
            return cls(encoding, source=path)
        return cls.fallback("cl100k_base unavailable (" + "; ".join(problems) + ")")

    @classmethod
    def fallback(cls, reason: str) -> Tokenizer:
        """Return the ``ceil(len(text) / 4)`` estimator, reporting ``reason``."""
        return cls(None, reason=reason)

    # -- use --------------------------------------------------------------------------------
    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` (0 for the empty string)."""
        if self._enc is None:
            return math.ceil(len(text) / _CHARS_PER_TOKEN)
        with self._counts_lock:
            cached = self._counts.get(text)
        if cached is None:
            if len(text) >= PIECES_MIN_CHARS and "\n" in text:
                pieces = _PIECES.split(text)
                cached = (sum(map(self.count, pieces)) if len(pieces) > 1
                          else len(self._enc.encode_ordinary(text)))
            else:
                cached = len(self._enc.encode_ordinary(text))
            if len(text) <= COUNT_CACHE_MAX_CHARS:
                with self._counts_lock:
                    self._counts[text] = cached
        return cached

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` we find whose count is <= ``max_tokens``.

        Cuts on token boundaries and never splits a character; ``max_tokens <= 0`` gives "".
        """
        if max_tokens <= 0:
            return ""
        if self._enc is None:
            return text[: max_tokens * _CHARS_PER_TOKEN]
        ids = self._enc.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text
        n = max_tokens
        while n > 0:
            # "ignore" drops a multi-byte character cut in half by the token boundary.
            prefix: str = self._enc.decode_bytes(ids[:n]).decode("utf-8", errors="ignore")
            # BPE is not prefix-stable, so re-count rather than trust the slice length.
            if self.count(prefix) <= max_tokens:
                return prefix
            n -= 1
        return ""


def _build_encoding(path: Path) -> Any:
    """Return a cl100k_base ``tiktoken.Encoding`` from the rank file at ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: the file's sha256 is not the pinned one, or a line does not parse.
        ImportError: tiktoken is not installed.
    """
    import tiktoken

    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CL100K_SHA256:
        raise ValueError(f"sha256 {digest[:16]}… is not cl100k_base's {CL100K_SHA256[:16]}…")
    ranks = parse_tiktoken_bpe(data)
    return tiktoken.Encoding(
        name=CL100K_NAME,
        pat_str=_CL100K_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=dict(_CL100K_SPECIAL_TOKENS),
    )


def parse_tiktoken_bpe(data: bytes) -> dict[bytes, int]:
    """Parse tiktoken's rank format (``base64(token) rank`` per line) into a rank map.

    Raises:
        ValueError: a non-empty line is not ``<base64> <int>``.
    """
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"line {lineno} is not '<base64> <rank>'") from exc
    return ranks
