"""What an op spec is: ``OpSpec`` (arguments, palace need, retry class) and ``RetryRule``.

Leaf module (stdlib + the wire leaf ``args``), importable by thin clients. The specs
themselves are in ``palaced.specs`` (and ``palaced.memoir_specs``), whose docstring explains
the retry classes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from palaced.args import Arg


# -- retry classes (see the module docstring) -------------------------------------------------
class Retry(enum.Enum):
    """How a client may resend an op whose reply was lost."""

    SAFE = "safe"
    CONVERGE = "converge"
    NEVER = "never"


DoneResult = Callable[["str | None", Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class RetryRule:
    """The retry class of one op and, for CONVERGE, how to resend and read the answer."""

    kind: Retry
    # CONVERGE: the error code that, on a retry, means the lost attempt already did it ...
    done_code: int | None = None
    # ... and the result reported then, from the request's palace and args.
    done_result: DoneResult | None = None
    # CONVERGE: args merged into the resent request.
    retry_args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


SAFE = RetryRule(Retry.SAFE)
NEVER = RetryRule(Retry.NEVER)


@dataclass(frozen=True)
class OpSpec:
    """What one op accepts: its arguments, whether it needs a palace, and how it behaves.

    ``read_only`` ops change nothing; ``retry`` says whether and how a client may resend the
    op after a lost reply (no default: every op must decide). ``permission`` is what the
    palace's policy must grant the caller (``vocab.PERMISSIONS``; "" for none).
    """

    name: str
    args: Mapping[str, Arg] = field(default_factory=dict)
    palace: str = "none"  # "none" | "required" | "optional" (none: every palace)
    doc: str = ""
    read_only: bool = False
    retry: RetryRule = field(kw_only=True)
    permission: str = field(default="", kw_only=True)
