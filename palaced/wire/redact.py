"""Secret redaction: replace credentials in a text with ``[REDACTED:<kind>]`` before it is stored.

Leaf module (stdlib only, a pure function), importable by thin clients: everything palace
captures or imports from elsewhere (Claude Code transcripts, chat exports) passes through
:func:`redact` first, whichever side reads it.

Two kinds of rules, all in :data:`RULES` (in the order they run):

* *shapes* of well-known credentials, recognised wherever they appear: OpenAI (``sk-``,
  ``sk-proj-``) and Anthropic (``sk-ant-``) API keys, GitHub tokens (``ghp_``, ``gho_``,
  ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``), AWS access key ids (``AKIA...``), Slack
  tokens (``xox?-``) and webhooks, Google API keys (``AIza...``), Stripe keys, JWTs, bearer
  and basic ``Authorization`` credentials, PEM private key blocks, and the password of a
  connection string (``postgres://user:PASSWORD@host``);
* *assignments* ``NAME=value``, ``NAME: value`` or ``"NAME": "value"`` whose name has a part
  (split at ``_``, ``-``, ``.`` and camelCase) that says secret, token, password (``passwd``,
  ``pwd``), key (``apikey``), credential(s) or auth. Only the value is replaced, and only
  when it looks like a secret rather than prose or configuration: one token of at least 6
  characters holding a digit, a symbol or mixed case (or 16+ characters), not a path, a
  ``$VARIABLE``/``${...}``/``<placeholder>`` reference, a boolean or a short number. So
  ``API_KEY=sk9f...`` and ``password: hunter22`` are redacted, while "the key: value pairs",
  "Primary key: id", "keyboard: Logitech" and ``max_tokens: 4096`` are left alone.

The shapes run first; a value they already replaced is not counted again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Replacer = Callable[["re.Match[str]"], str]
Rule = Callable[[str], tuple[str, int]]


def _tag(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# A PEM private key block: its header, then up to the first END line after it, or (a block cut
# short, no END line) its header and base64 lines. Matched by :func:`_private_keys` in one pass
# rather than by one pattern: a lazy ``.*?END`` rescans to the end of the text for every header
# when no END line follows, quadratic in a text of repeated headers.
_PEM_HEADER = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ ){0,3})PRIVATE KEY( BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")
_PEM_CUT_BODY = re.compile(r"(?:[ \t]*\r?\n(?:[A-Za-z-]+:[^\n]*|[A-Za-z0-9+/=]{8,}))*")


def _private_keys(text: str) -> tuple[str, int]:
    """``text`` with every PEM private key block replaced, and how many were (linear time)."""
    parts: list[str] = []
    pos = count = 0
    ends_left = True  # False once a search found no END line: none follows any later header
    while (header := _PEM_HEADER.search(text, pos)) is not None:
        block = _PEM_END.search(text, header.end()) if ends_left else None
        if block is None:
            ends_left = False
            block = _PEM_CUT_BODY.match(text, header.end())  # matches, if only the empty string
        parts += (text[pos:header.start()], _tag("private_key"))
        pos = block.end() if block is not None else header.end()
        count += 1
    if not count:
        return text, 0
    parts.append(text[pos:])
    return "".join(parts), count


# (kind, pattern, group to replace: 0 the whole match, else that group only). Each pattern runs
# in time linear in the text: no unbounded repetition is rescanned from each of many starts.
PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("anthropic_key", re.compile(r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(
        r"(?<![\w-])sk-(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z0-9_-]*\d)"
        r"(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{20,}"), 0),
    ("stripe_key", re.compile(r"(?<![\w-])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("github_token", re.compile(
        r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"), 0),
    ("aws_access_key", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![A-Z0-9])"),
     0),
    ("slack_webhook", re.compile(
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+"), 0),
    ("slack_token", re.compile(r"(?<![\w-])xox[abposre]-[A-Za-z0-9-]{10,}"), 0),
    ("google_api_key", re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}"), 0),
    ("jwt", re.compile(
        r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("bearer_token", re.compile(
        r"(?i)\b(?:bearer|authorization:[ \t]*token)[ \t]+"
        r"((?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("basic_auth", re.compile(r"(?i)\bbasic\s+((?=[A-Za-z0-9+/]*\d)[A-Za-z0-9+/]{12,}={0,2})"),
     1),
    ("password", re.compile(
        r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@'\"]{1,100}:([^\s@/'\"]{1,200})@[\w.-]"), 1),
)

# -- assignments -------------------------------------------------------------------------------
_SECRET_PARTS = {
    "secret": "secret", "secrets": "secret", "token": "token", "password": "password",
    "passwd": "password", "pwd": "password", "passphrase": "password", "key": "key",
    "apikey": "key", "credential": "secret", "credentials": "secret", "auth": "token",
}
_ASSIGNMENT = re.compile(
    # possessive: giving back name characters never helps (none is a quote, blank or separator),
    # and retrying them made every start inside a long word cost 64 steps more
    r"""(?P<name>["']?[A-Za-z][A-Za-z0-9_.-]{0,63}+["']?)"""
    r"""(?P<sep>[ \t]*(?::=|=>|=|:)[ \t]*)"""
    # an unquoted value does not end in sentence punctuation
    r"""(?P<value>"[^"\n]{1,500}"|'[^'\n]{1,500}'"""
    r"""|[^\s,;'"()\[\]{}<>]{0,499}[^\s,;'"()\[\]{}<>.:!?])""")
# Cheap first look: no assignment can be a secret's without one of these words in the text.
_SECRET_WORDS = re.compile(r"secret|token|passw|pwd|passphrase|key|credential|auth")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NOT_SECRET = frozenset({"true", "false", "null", "none", "nil", "yes", "no", "on", "off",
                         "undefined", "required", "optional", "string", "str", "int"})


def _secret_kind(name: str) -> str | None:
    """The kind named by an assignment's name (``DB_PASSWORD`` -> ``password``), or None."""
    parts: list[str] = []
    for piece in re.split(r"[_.\-]+", name.strip("\"'")):
        parts.extend(p.lower() for p in _CAMEL.findall(piece))
    for part in reversed(parts):
        if part in _SECRET_PARTS:
            return _SECRET_PARTS[part]
    return None


def _looks_secret(value: str) -> bool:
    """Whether an assigned value looks like a credential rather than prose or a setting."""
    v = value.strip("\"'").strip()
    if len(v) < 6 or " " in v or v.lower() in _NOT_SECRET or v.startswith("[REDACTED:"):
        return False
    if v[0] in "$<{%/~." or (v.startswith(("http://", "https://")) and "@" not in v):
        return False  # a reference, a placeholder, a path or a plain URL
    if v.isdigit():
        return len(v) >= 8
    has_digit = any(c.isdigit() for c in v)
    # Separators alone make an identifier (user_id, read-only), not a secret.
    has_symbol = any(not c.isalnum() and c not in "_-." for c in v)
    mixed = any(c.isupper() for c in v[1:]) and any(c.islower() for c in v)
    return has_digit or has_symbol or mixed or (len(v) >= 16 and v.isalnum())


def _assignment(match: re.Match[str], counter: list[int]) -> str:
    kind = _secret_kind(match.group("name"))
    value = match.group("value")
    if kind is None or not _looks_secret(value):
        return match.group(0)
    counter[0] += 1
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{_tag(kind)}{quote}"


def _shape(kind: str, pattern: re.Pattern[str], group: int) -> Rule:
    """The rule replacing ``pattern``'s matches (or only their ``group``) with ``kind``'s tag."""
    def rule(text: str) -> tuple[str, int]:
        count = 0

        def replace(m: re.Match[str]) -> str:
            nonlocal count
            count += 1
            if group == 0:
                return _tag(kind)
            start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
            whole = m.group(0)
            return whole[:start] + _tag(kind) + whole[end:]

        return pattern.sub(replace, text), count
    return rule


def _assignments(text: str) -> tuple[str, int]:
    """``text`` with the value of every secret assignment replaced, and how many were."""
    counter = [0]
    if _SECRET_WORDS.search(text.lower()):  # lowercased: a case-blind regex is far slower
        text = _ASSIGNMENT.sub(lambda m: _assignment(m, counter), text)
    return text, counter[0]


# Every rule, in the order :func:`redact` applies them (the shapes before the assignments): its
# name and a function returning the text with its matches replaced and how many were.
RULES: tuple[tuple[str, Rule], ...] = (
    ("private_key", _private_keys),
    *((kind, _shape(kind, pattern, group)) for kind, pattern, group in PATTERNS),
    ("assignment", _assignments),
)


def redact(text: str) -> tuple[str, int]:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``, and how many were.

    Pure and total: never raises, and a text without secrets comes back unchanged (the same
    string, count 0). See the module docstring for what counts as a secret. Linear in the
    length of the text (tests/palaced/wire/test_redact.py bounds every rule on adversarial input).
    """
    if not text:
        return text, 0
    count = 0
    for _name, rule in RULES:
        text, found = rule(text)
        count += found
    return text, count
