"""``palace hook wake-up``: the session-start hook that opens a session with the palace's
wake-up (its identity, L0, and essential drawers, L1), printed in the agent's shape.

Installed by ``palace init --hooks`` for Codex CLI's and Gemini CLI's ``SessionStart``,
Cursor's and Copilot CLI's ``sessionStart`` (``--agent NAME``; the shapes are in
``palace_client.hooks.agents``). Claude Code's ``SessionStart`` runs ``palace wake-up``,
whose plain text Claude Code adds as it is; this command prints the same text as Claude
Code's JSON when ``--agent claude`` (the default).

It reads the hook input on stdin for the session's working directory (``cwd``, Cursor's
``workspace_roots``), chooses the palace as the other hooks do (``--palace``, else
``PALACE``, else the project of the input's directory) and asks the daemon for the
wake-up, starting the daemon if it is not running (as ``palace wake-up`` does: a session
start is where the hooks bring it up). Like the other hooks it never costs the session
anything: it always exits 0, prints nothing when there is nothing to add (a palace not
created yet, an empty wake-up) or when anything goes wrong, and logs what went wrong to the
clients' log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from palace_client.hooks.agents import agent_hooks, field
from palace_client.hooks.capture import (
    CLIENT_NAME,
    HookInputError,
    hook_object,
    hook_options,
    log_failure,
    log_line,
    palace_for,
    read_input,
)


def parse_start(raw: bytes, agent: str) -> dict[str, Any]:
    """The fields the hook uses, under the names ``agent`` gives them: ``cwd`` and
    ``session_id`` (None when absent; an empty input is a session with neither).

    Raises:
        HookInputError: input that is not a JSON object.
    """
    if not raw.strip():
        return {"cwd": None, "session_id": None}
    shape = agent_hooks(agent)
    data = hook_object(raw)
    return {"cwd": field(data, shape.cwd_keys), "session_id": field(data, shape.session_keys)}


def output(text: str, agent: str) -> str:
    """The hook's stdout for ``text``: ``agent``'s JSON for context added at session start.

    Raises:
        HookInputError: ``agent`` takes no context at session start.
    """
    build = agent_hooks(agent).start
    if build is None:
        raise HookInputError(f"{agent}'s session-start hook cannot add context")
    return json.dumps(build(text))


def wake_text(palace: str) -> str:
    """The palace's wake-up text ("" for a palace that does not exist yet), as
    ``palace wake-up`` prints it (same op, same defaults).

    Raises:
        PalaceError: the daemon could not be reached or refused.
    """
    from palace_client.api.client import Client
    from palaced.wire.errors import PalaceNotFound

    with Client(client_name=CLIENT_NAME) as client:
        try:
            return str(client.call("memory.wake_up", palace, {}).get("text") or "")
        except PalaceNotFound:
            return ""  # a brand-new project: reads never create a palace


def wake_up(argv: Sequence[str], stdin_fd: int = 0) -> int:
    """Run the hook; always returns 0 (failures are logged, see the module docstring)."""
    try:
        pinned, agent = hook_options(argv, "wake-up")
        try:
            hook = parse_start(read_input(stdin_fd), agent)
        except HookInputError as exc:  # run by hand, or an agent that sent nothing usable
            log_line(f"hook wake-up: {exc}; the working directory's project is used")
            hook = {"cwd": None, "session_id": None}
        text = wake_text(palace_for(pinned, hook["cwd"]))
        if text:
            sys.stdout.write(output(text, agent) + "\n")
            sys.stdout.flush()
    except BaseException as exc:  # a hook must never fail the session's start
        log_failure("hook wake-up", exc)
    return 0


if __name__ == "__main__":
    sys.exit(wake_up(sys.argv[1:]))
