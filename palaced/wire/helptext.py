"""Help text of the ``palace`` and ``palaced`` commands as written, at any terminal width.

Shared by both command lines (the client imports only this layer). Nothing here imports rich:
``palaced run`` loads this module on every start, and rich is loaded only to print help.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import typer
from typer.models import ParameterInfo


def plain_help(group: typer.Typer, seen: set[int] | None = None) -> None:
    """Make every help text of ``group`` print as written, at any width.

    Rich help keeps a docstring's single line breaks, so a paragraph wrapped at 96 columns in
    the source came out ragged at 80 (or split a command's summary in the listing
    mid-sentence): each paragraph becomes one line for rich to wrap. And rich reads ``[...]``
    as markup, which ate ``[trash]`` and ``[stores.NAME]``: brackets are escaped (help text
    here never uses markup). ``seen`` keeps options shared by many commands (``--json``) from
    being escaped twice.
    """
    if seen is None:  # the top group: its own help too
        seen = set()
        if isinstance(group.info.help, str):
            group.info.help = reflowed(group.info.help)
        if group.registered_callback is not None:
            _escape_options(group.registered_callback.callback, seen)
    for info in group.registered_commands:
        info.help = reflowed(info.help or inspect.getdoc(info.callback) or "")
        _escape_options(info.callback, seen)
    for sub in group.registered_groups:
        if sub.help:
            sub.help = reflowed(sub.help)
        if sub.typer_instance is not None:
            if isinstance(sub.typer_instance.info.help, str):
                sub.typer_instance.info.help = reflowed(sub.typer_instance.info.help)
            plain_help(sub.typer_instance, seen)


def _escape_options(callback: Callable[..., Any] | None, seen: set[int]) -> None:
    """Escape the rich markup in the help of ``callback``'s options and arguments."""
    for parameter in inspect.signature(callback).parameters.values() if callback else ():
        param = parameter.default
        if isinstance(param, ParameterInfo) and param.help and id(param) not in seen:
            seen.add(id(param))
            param.help = escape(param.help)


# What rich would read as the start of a markup tag (``[bold]``, ``[trash]``, ``[/]``, ``[#fff]``,
# ``[@click]``): the same test as rich.markup.escape, whose backslash prints nothing.
_TAG = re.compile(r"\[(?=[a-z#/@])")


def escape(text: str) -> str:
    """``text`` with every ``[`` that would open a rich markup tag escaped."""
    return _TAG.sub(r"\\[", text)


def reflowed(text: str) -> str:
    """``text`` with each paragraph on one line and rich markup escaped."""
    return "\n\n".join(" ".join(p.split()) for p in escape(text).split("\n\n"))
