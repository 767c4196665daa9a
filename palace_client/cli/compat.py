"""Keeps typer's argument help visible under click 8.5.

typer (up to at least 0.24) stores an argument's ``help`` on the click parameter *before*
calling ``click.Argument.__init__``, and click 8.5's ``Parameter.__init__`` sets ``help``
itself (to ``None`` for arguments), so every argument's help vanished from ``--help``. The
patch below sets it again after the constructor. It is a no-op where the two already agree,
and is applied once, when ``palace_client.cli`` is imported (before any command is built).
"""

from __future__ import annotations

import functools
from typing import Any

from typer.core import TyperArgument


def keep_argument_help() -> None:
    """Make ``TyperArgument`` keep the ``help`` it is given (idempotent)."""
    init = TyperArgument.__init__
    if getattr(init, "_keeps_help", False):
        return

    @functools.wraps(init)
    def __init__(self: TyperArgument, *args: Any, help: str | None = None,
                 **kwargs: Any) -> None:
        init(self, *args, help=help, **kwargs)
        if help and not self.help:
            self.help = help

    __init__._keeps_help = True  # type: ignore[attr-defined]
    TyperArgument.__init__ = __init__  # type: ignore[method-assign]
