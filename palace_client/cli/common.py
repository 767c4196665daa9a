"""What every ``palace`` command shares: exit codes, common options, the client, output.

Options and arguments that carry an op's argument are made by ``op_option``/``op_argument``
from the op's spec (``palaced.specs``): their default and numeric range are the daemon's, so
the CLI cannot drift from it. An out-of-range value is a usage error (exit 2) before any
request is sent.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from palaced import errors as E
from palaced.specs import SPECS, Arg, client_bounds

if TYPE_CHECKING:
    from palace_client.client import Client

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_INVALID = 5
EXIT_EXISTS = 6
EXIT_RETRY = 7
EXIT_MISMATCH = 8

PalaceOpt = typer.Option(None, "--palace", "-p", envvar="PALACE",
                         help="Palace name (or set PALACE).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")

# ``op_option(..., default=SPEC)`` (the default) takes the spec's default.
SPEC: Any = object()


def op_arg(op: str, arg: str) -> Arg:
    """The spec of argument ``arg`` of op ``op``.

    Raises:
        KeyError: no such op or argument (a renamed argument fails when the CLI loads).
    """
    return SPECS[op].args[arg]


def _range(spec: Arg) -> dict[str, Any]:
    if spec.kind not in ("int", "float", "intlist"):
        return {}
    lo, hi = client_bounds(spec)
    return {"min": lo, "max": hi}


def op_option(op: str, arg: str, *flags: str, default: Any = SPEC, help: str = "",
              **kwargs: Any) -> Any:
    """A typer option for argument ``arg`` of ``op``: its default and range from the spec.

    ``default=None`` means "not given: the daemon applies its default" (for options whose
    presence matters, such as ``recall --budget``). ``help`` defaults to the argument's help.

    Raises:
        KeyError: no such op or argument.
    """
    spec = op_arg(op, arg)
    value = copy.copy(spec.default) if default is SPEC else default
    return typer.Option(value, *flags, help=help or spec.help or None,
                        **{**_range(spec), **kwargs})


def op_argument(op: str, arg: str, *, help: str = "", **kwargs: Any) -> Any:
    """A required typer argument for argument ``arg`` of ``op``, with the spec's range.

    Raises:
        KeyError: no such op or argument.
    """
    spec = op_arg(op, arg)
    return typer.Argument(..., help=help or spec.help or None, **{**_range(spec), **kwargs})


def exit_code_for(exc: E.PalaceError) -> int:
    """Map a PalaceError to the CLI's exit code."""
    if isinstance(exc, E.DaemonUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, E.PalaceNotFound | E.MemoryNotFound | E.FactNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, E.PalaceExists):
        return EXIT_EXISTS
    if isinstance(exc, E.EmbedderMismatch):
        return EXIT_MISMATCH
    if isinstance(exc, E.LoadError):
        return EXIT_RETRY
    if isinstance(exc, E.ProtocolError | E.ContentError | E.InvalidPalaceName):
        return EXIT_INVALID
    return EXIT_ERROR


def emit(data: Any, as_json: bool, human: Callable[[Any], None]) -> None:
    """Print ``data`` as one JSON document, or with ``human``."""
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    else:
        human(data)


def echo_lines(lines: Iterable[str]) -> None:
    """Print each line."""
    for line in lines:
        typer.echo(line)


def fail(exc: E.PalaceError, as_json: bool) -> NoReturn:
    """Report ``exc`` (on stderr, and as a JSON document with ``--json``) and exit.

    Raises:
        typer.Exit: always, with the error's exit code.
    """
    if as_json:
        sys.stdout.write(json.dumps({"ok": False, "error": exc.to_wire()}, default=str) + "\n")
    typer.echo(f"palace: error: {exc.message} [{exc.name}]", err=True)
    raise typer.Exit(exit_code_for(exc))


@contextmanager
def client(as_json: bool, *, autostart: bool = True) -> Iterator[Client]:
    """A daemon client for one command; its PalaceErrors end the command (see ``fail``)."""
    # Imported here so that `palace --help` and usage errors never load the connection code.
    from palace_client.client import Client

    c = Client(client_name="palace-cli", autostart=autostart)
    try:
        yield c
    except E.PalaceError as exc:
        fail(exc, as_json)
    finally:
        c.close()


def need_palace(palace: str | None, as_json: bool) -> str:
    """``palace``, or fail with INVALID_ARGS when no palace was given."""
    if not palace:
        fail(E.InvalidArgs("no palace given: pass --palace NAME or set PALACE"), as_json)
    return palace
