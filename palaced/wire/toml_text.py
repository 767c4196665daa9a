"""Writing a TOML basic string: one quoting for every writer of TOML text (the daemon's config
edits, ``palace init``'s Codex config). Leaf module (stdlib only)."""

from __future__ import annotations


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (``"..."``, escapes for quotes, backslashes and control
    characters)."""
    out = ['"']
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
