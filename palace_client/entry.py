"""The ``palace`` console script: ``palace mcp`` goes straight to the bridge, ``palace hook
capture`` straight to the hook, the rest to the CLI.

Agents spawn ``palace mcp`` at every session start, and the time until ``tools/list`` is
answered is part of every session's start: importing typer and rich for it would add about
40-50 ms. So when ``mcp`` is the first argument (and no help is asked for, which typer
renders), the bridge's own small argument parser takes the command line; its options are the
same as the typer command's (``palace_client.mcp.command``), which documents them. The same
goes for ``hook capture``, which Claude Code runs after every turn and which must return
within 200 ms (``palace_client.hooks.capture``; documented by ``palace_client.cli.hooks``), for
``hook prompt``, which runs before every prompt (``palace_client.hooks.prompt``), and for
``hook wake-up``, which opens every session of the agents other than Claude Code
(``palace_client.hooks.wake``).
"""

from __future__ import annotations

import sys
import time

_STARTED = time.monotonic()  # the hook's time budget counts from here


def main() -> None:
    """Console-script entry point of ``palace``."""
    args = sys.argv[1:]
    if args[:1] == ["mcp"] and not {"-h", "--help"} & set(args[1:]):
        from palace_client.mcp.stdio import main as bridge_main

        sys.exit(bridge_main(args[1:]))
    if args[:2] == ["hook", "capture"] and not {"-h", "--help"} & set(args[2:]):
        from palace_client.hooks.capture import capture

        sys.exit(capture(args[2:], started=_STARTED))
    if args[:2] == ["hook", "prompt"] and not {"-h", "--help"} & set(args[2:]):
        from palace_client.hooks.prompt import prompt

        sys.exit(prompt(args[2:], started=_STARTED))
    if args[:2] == ["hook", "wake-up"] and not {"-h", "--help"} & set(args[2:]):
        from palace_client.hooks.wake import wake_up

        sys.exit(wake_up(args[2:]))
    from palace_client.cli import main as cli_main

    cli_main()
