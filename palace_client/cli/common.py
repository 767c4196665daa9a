"""What every ``palace`` command shares: exit codes, common options, the client, output.

Options and arguments that carry an op's argument are made by ``op_option``/``op_argument``
from the op's spec (``palaced.wire.specs``): their default and numeric range are the daemon's, so
the CLI cannot drift from it. An out-of-range value is a usage error (exit 2) before any
request is sent. They also remember which op argument they carry, so that an error the daemon
reports about an argument (``details["arg"] == "top_k"``) names the command's flag
(``--top-k``) instead: see ``flag_names`` and ``fail``.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click
import typer

from palaced.wire import errors as E
from palaced.wire.args import Arg, client_bounds
from palaced.wire.specs import SPECS

if TYPE_CHECKING:
    from palace_client.api.client import Client

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_INVALID = 5
EXIT_EXISTS = 6
EXIT_RETRY = 7
EXIT_MISMATCH = 8
EXIT_NO_SERVICE_MANAGER = 9
EXIT_SKIPPED = 10
EXIT_UNHEALTHY = 11
EXIT_FORBIDDEN = 12

# ``op_option(..., default=SPEC)`` (the default) takes the spec's default.
SPEC: Any = object()
# id(option or argument info) -> (the info, op, op argument): which op argument a command
# parameter carries. The info is kept so that an id cannot be reused by another object.
_CARRIES: dict[int, tuple[Any, str, str]] = {}


def _carrying(info: Any, op: str, arg: str) -> Any:
    """``info`` (a typer option or argument), noted as carrying ``arg`` of ``op``."""
    _CARRIES[id(info)] = (info, op, arg)
    return info


# Every op that takes a palace gets it from this option ("" stands for any op).
PalaceOpt = _carrying(typer.Option(None, "--palace", "-p", envvar="PALACE",
                                   help="Palace name (or set PALACE; default: the "
                                        "project's palace)."),
                      "", "palace")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")


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
              unset: str = "", ranged: bool = True, **kwargs: Any) -> Any:
    """A typer option for argument ``arg`` of ``op``: its default and range from the spec.

    ``default=None`` means "not given: the daemon applies its default" (for options whose
    presence matters, such as ``recall --budget``). ``help`` defaults to the argument's help.
    ``unset`` says in ``--help`` what happens when an option without a default is not given
    (``[default: (all wings)]``). ``ranged=False`` leaves the range out, for an option the
    command parses from text (``recall --levels 0,1``).

    Raises:
        KeyError: no such op or argument.
    """
    spec = op_arg(op, arg)
    value = copy.copy(spec.default) if default is SPEC else default
    if unset:
        kwargs.setdefault("show_default", unset)
    return _carrying(typer.Option(value, *flags, help=help or spec.help or None,
                                  **{**(_range(spec) if ranged else {}), **kwargs}), op, arg)


def op_argument(op: str, arg: str, *, help: str = "", default: Any = ..., **kwargs: Any
                ) -> Any:
    """A typer argument for argument ``arg`` of ``op``, with the spec's range; required unless
    a ``default`` is given (``None`` for a variadic one the command completes itself).

    Raises:
        KeyError: no such op or argument.
    """
    spec = op_arg(op, arg)
    return _carrying(typer.Argument(default, help=help or spec.help or None,
                                    **{**_range(spec), **kwargs}), op, arg)


def flag_names(command: click.Command | None) -> dict[str, str]:
    """How ``command`` names the op arguments it carries: ``{"top_k": "--top-k", ...}``.

    An option is named by its first long flag, an argument by its metavar (``QUERY``).
    Parameters not made by ``op_option``/``op_argument`` (or ``PalaceOpt``) are left out.
    """
    callback = getattr(command, "callback", None)
    if command is None or callback is None:
        return {}
    try:
        signature = inspect.signature(inspect.unwrap(callback))
    except (TypeError, ValueError):
        return {}
    params = {p.name: p for p in command.params}
    names: dict[str, str] = {}
    for name, parameter in signature.parameters.items():
        carried = _CARRIES.get(id(parameter.default))
        if carried is None or carried[0] is not parameter.default or name not in params:
            continue
        param = params[name]
        if isinstance(param, click.Option):
            shown = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        else:
            shown = param.human_readable_name
        names.setdefault(carried[2], shown)
    return names


def flag_message(message: str, arg: str, shown: str) -> str:
    """``message`` about protocol argument ``arg``, naming ``shown`` (``--top-k``) instead.

    ``"memory.recall: argument 'top_k' must be 1..1000"`` becomes ``"--top-k must be
    1..1000"``; a bare mention (``"bad ttl ..."``) is replaced too, unless the argument's name
    is a short word that could be English (``a``, ``at``, ``id``).
    """
    name = re.escape(arg)
    text = re.sub(rf"^[\w.]+: (?=(?:item \d+ of )?argument '{name}')", "", message)
    text = re.sub(rf"\bargument '{name}'", lambda _: shown, text)
    if len(arg) > 2:
        text = re.sub(rf"(?<![\w'-]){name}(?![\w'-])", lambda _: shown, text)
    return text


def exit_code_for(exc: E.PalaceError) -> int:
    """Map a PalaceError to the CLI's exit code."""
    if isinstance(exc, E.DaemonUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, E.UsageError):
        return EXIT_USAGE
    if isinstance(exc, E.PalaceNotFound | E.MemoryNotFound | E.FactNotFound
                  | E.MemoirNotFound | E.ConceptNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, E.PalaceExists | E.MemoirExists | E.ConceptExists):
        return EXIT_EXISTS
    if isinstance(exc, E.Forbidden):
        return EXIT_FORBIDDEN
    if isinstance(exc, E.EmbedderMismatch):
        return EXIT_MISMATCH
    if isinstance(exc, E.LoadError):
        return EXIT_RETRY
    if isinstance(exc, E.ProtocolError | E.ContentError | E.InvalidPalaceName
                  | E.BackupInvalid):
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


def report(exc: E.PalaceError, as_json: bool) -> int:
    """Print ``exc``: ``palace: error: MESSAGE [NAME]`` on stderr and, with ``as_json``, the
    error document on stdout. Returns the exit code.

    An error about an argument of the request (``details["arg"]``) names the running
    command's flag for it; the JSON document keeps ``details.arg`` and adds ``details.flag``.
    """
    message = exc.message
    wire = exc.to_wire()
    arg = exc.details.get("arg")
    ctx = click.get_current_context(silent=True)
    flags = flag_names(ctx.command if ctx else None)
    shown = flags.get(arg) if isinstance(arg, str) else None
    if shown:
        message = flag_message(message, str(arg), shown)
        wire["details"] = {**wire.get("details", {}), "flag": shown}
    # An error that names several arguments (``nothing to update: give text, wing, ...``)
    # lists them all in ``details["args"]``.
    more = exc.details.get("args")
    for other in more if isinstance(more, list) else ():
        if isinstance(other, str) and other != arg and other in flags:
            message = flag_message(message, other, flags[other])
    wire["message"] = message
    if as_json:
        sys.stdout.write(json.dumps({"ok": False, "error": wire}, default=str) + "\n")
    typer.echo(f"palace: error: {message} [{exc.name}]", err=True)
    return exit_code_for(exc)


def fail(exc: E.PalaceError, as_json: bool) -> NoReturn:
    """Report ``exc`` (see ``report``) and end the command with its exit code.

    Raises:
        typer.Exit: always, with the error's exit code.
    """
    raise typer.Exit(report(exc, as_json))


@contextmanager
def client(as_json: bool, *, autostart: bool = True) -> Iterator[Client]:
    """A daemon client for one command; its PalaceErrors end the command (see ``fail``)."""
    # Imported here so that `palace --help` and usage errors never load the connection code.
    from palace_client.api.client import Client

    try:
        c = Client(client_name="palace-cli", autostart=autostart)
    except E.PalaceError as exc:
        fail(exc, as_json)
    try:
        yield c
    except E.PalaceError as exc:
        fail(_explained(exc), as_json)
    finally:
        c.close()
        for name in c.created:  # stderr: a script reading stdout (or --json) is not disturbed
            typer.echo(f"(created palace '{name}': its first write)", err=True)


def need_palace(palace: str | None, as_json: bool) -> str:
    """``palace`` (``--palace`` or ``PALACE``), else the project's palace, chosen as the MCP
    bridge and the hooks choose it (``CLAUDE_PROJECT_DIR``, else the working directory's
    project: ``palace_client.api.projects``)."""
    if palace:
        return palace
    from palace_client.api.projects import current_project
    from palace_client.api.slug import DEFAULT_PALACE

    try:
        chosen = current_project()
    except OSError:  # the working directory was deleted
        return DEFAULT_PALACE
    where = (f"the project at {chosen.root}" if chosen.root is not None
             else "the home directory (no project)")
    _DERIVED[chosen.name] = f"'{chosen.name}' is the palace of {where}"
    return chosen.name


# The palaces need_palace derived in this process, and why: a "no palace named" answer for
# one of them says where the name came from and how the palace comes to exist.
_DERIVED: dict[str, str] = {}


def _explained(exc: E.PalaceError) -> E.PalaceError:
    why = (_DERIVED.get(str(exc.details.get("palace")))
           if isinstance(exc, E.PalaceNotFound) else None)
    if why is None:
        return exc
    return E.PalaceNotFound(f"no palace {exc.details['palace']!r} yet: {why}; the first "
                            "write to it (`palace remember`) creates it, or pass --palace NAME",
                            details=exc.details)
