"""The bounds of the config file's numbers: how one is declared, checked and described.

Leaf module (stdlib only) of ``palaced.config.settings`` and ``palaced.config.team_settings``: every
numeric key declares both ends next to its definition (``bounds``, a dataclass field's metadata or
``config.Key.bound``); ``out_of_bound`` checks a value at load and in ``palaced
check-config``, and ``describe_bound`` words it for the error and for docs/configuration.md.
"""

from __future__ import annotations

import math
from typing import Any


def bounds(low: float, high: float, *, strict: bool = True) -> dict[str, Any]:
    """The bound of a numeric key (``Key.bound``, a field's metadata): ``> low`` (``>= low``
    unless ``strict``) and ``<= high``."""
    return {"bound": low, "strict": strict, "max": high}


def _number(x: float) -> str:
    """A bound as written in a message or the docs: ``604800``, ``0.1``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def describe_bound(bound: dict[str, Any]) -> str:
    """A bound in words: ``> 0 and <= 604800`` (docs/gen.py shows the same)."""
    above = f"{'>' if bound['strict'] else '>='} {_number(bound['bound'])}"
    return above if bound.get("max") is None else f"{above} and <= {_number(bound['max'])}"


def out_of_bound(value: Any, bound: Any) -> str:
    """What is wrong with number ``value`` under ``bound`` (``{"bound", "strict"}`` and an
    optional inclusive ``"max"``, see ``bounds``), or "". NaN and infinities never pass."""
    if "bound" not in bound:
        return ""
    low, strict, high = bound["bound"], bound["strict"], bound.get("max")
    ok = (value > low if strict else value >= low) and (high is None or value <= high)
    if ok and math.isfinite(value):
        return ""
    return f"must be {describe_bound(bound)}, got {value!r}"
