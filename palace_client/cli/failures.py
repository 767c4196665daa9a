"""Every way a ``palace`` command can fail ends the same way: one line on stderr, one JSON
document on stdout with ``--json``, and a documented exit code; never a traceback.

Typer reports its own usage errors (an unknown option, a missing argument, a bad value) in a
box on stderr and nothing on stdout; so the CLI runs typer in non-standalone mode and turns
what escapes it into ``USAGE_ERROR`` (exit 2) and the other error documents here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from palace_client.cli.common import EXIT_ERROR, report
from palaced.wire import errors as E

EXIT_INTERRUPTED = 130  # what typer exits with on Ctrl-C, the shell's 128 + SIGINT


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON output (``--json`` before any ``--``).

    Read from the raw arguments: a command line typer could not parse says nothing else.
    """
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def usage_error(exc: click.ClickException) -> E.UsageError:
    """A click usage error as palace's ``UsageError``: click's message and the help hint;
    ``details`` name the command, its usage line and the parameter at fault."""
    ctx: click.Context | None = getattr(exc, "ctx", None)
    details: dict[str, Any] = {}
    message = exc.format_message()
    if ctx is not None:
        details["command"] = ctx.command_path
        details["usage"] = ctx.get_usage()
        message += f" (see `{ctx.command_path} -h`)"
    param: click.Parameter | None = getattr(exc, "param", None)
    if param is not None and param.name:
        details["param"] = param.name
    return E.UsageError(message, details=details)


def _show_usage(exc: click.ClickException) -> None:
    """Show a usage error the way typer does in standalone mode (for humans)."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich
        exc.show()
    else:
        rich_utils.rich_format_error(exc)


def _stdout_flushed() -> bool:
    """Flush stdout; False if its reader is gone (``| head``): the rest then goes to
    /dev/null, so that the interpreter's own flush at exit does not complain either."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return False
    return True


def run(app: Any, prog: str, args: Sequence[str] | None = None) -> int:
    """Run the typer ``app`` and return the exit code, reporting every failure cleanly.

    ``PALACE_DEBUG=1`` lets an unexpected exception (a bug) through with its traceback.
    """
    argv = list(sys.argv[1:] if args is None else args)
    as_json = wants_json(argv)
    try:
        rv = app(args=argv, prog_name=prog, standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except click.UsageError as exc:
        if as_json:
            code = report(usage_error(exc), as_json)
        else:
            _show_usage(exc)
            code = exc.exit_code
    except click.ClickException as exc:
        report(E.ClientError(exc.format_message()), as_json)
        code = exc.exit_code
    except click.Abort:
        report(E.ClientError("aborted"), as_json)
        code = EXIT_ERROR
    except E.PalaceError as exc:
        code = report(exc, as_json)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = EXIT_ERROR
    except Exception as exc:
        if os.environ.get("PALACE_DEBUG"):
            raise
        code = report(E.ClientError(
            f"unexpected {type(exc).__name__}: {exc} (a bug in palace; run it again with "
            "PALACE_DEBUG=1 to see the traceback)", details={"exception": type(exc).__name__}),
            as_json)
    if code == EXIT_INTERRUPTED:
        # Typer turns Ctrl-C into this exit code; say so, in the document too.
        report(E.ClientError("interrupted"), as_json)
    if not _stdout_flushed() and code == 0:
        code = EXIT_ERROR  # what typer exits with when the pipe breaks during the command
    return code
