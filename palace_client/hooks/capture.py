"""``palace hook capture``: the hook that has the daemon capture an agent's session.

Installed by ``palace init --hooks`` for Claude Code's ``PreCompact``, ``Stop`` and
``SessionEnd`` events, and the equivalents of Codex CLI, Gemini CLI and Copilot CLI
(``--agent codex``, ``gemini``, ``copilot``: ``palace_client.hooks.agents``, whose rows name
the input's fields and the transcript's ``format``). The agent writes the hook input on
stdin (Claude Code: ``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``); the
hook sends ``capture.transcript`` without ``wait`` (the daemon only queues it) and exits. It
must never cost the agent's turn anything:

* it always exits 0 and prints nothing (a ``Stop`` hook's stdout is read by Claude Code);
* an input that names no transcript, or one that does not exist (``claude mcp list`` fires
  ``SessionEnd`` for a session that never wrote one), is a silent no-op: nothing sent, nothing
  logged;
* it takes at most about ``BUDGET_S`` of wall time: every socket wait is bounded by what is
  left of it. Like ``palace mcp`` it is dispatched before typer and rich are imported
  (``palace_client.entry``);
* when the daemon is not running, does not answer in time or is BUSY, it starts a detached
  delivery process (``python -m palace_client.hooks.capture --deliver``) that starts the daemon as
  any client does, sends the request and logs a failure, and returns at once. The request
  (palace, transcript path, session id) reaches it on a pipe on its stdin, never on its
  command line, which every local user can read in ``ps`` for as long as it runs;
* anything that goes wrong (bad input, an error from the daemon) becomes one line in the
  clients' log, ``<state_dir>/palace.log`` beside the daemon's ``palaced.log``.

What it stores is authored ``hook:<agent>`` (``hook:claude`` without ``--agent``,
``hook:codex``...), else ``PALACE_AGENT`` when set: a palace's policy (``palace policy set
write ...``) allows or denies each agent's capture by that name. Copilot CLI's ``sessionEnd``
input names no transcript, only its ``sessionId``: the path is derived from it
(``palace_client.hooks.agents.copilot_transcript``), and since Copilot writes the session's
last events after that hook, the capture always goes through the detached delivery, which
first waits (``SETTLE_S`` at most) for the agent's end marker (``session.shutdown``) in the
file.

The palace is ``--palace``, else ``PALACE``, else the project of ``CLAUDE_PROJECT_DIR``, else
of the input's ``cwd``, else of the working directory (``palace_client.api.projects``: by the
project's path, as the CLI and the MCP bridge choose it; created by the capture, a write, when
it does not exist).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from palace_client.hooks.agents import AGENTS, DEFAULT_AGENT, agent_hooks, field, hook_author

BUDGET_S = 0.2  # wall time the hook may take, start-up included
STDIN_WAIT_S = 0.1  # how long to wait for the hook input to arrive
DELIVER_STDIN_WAIT_S = 10.0  # how long the delivery waits for the request on its stdin
SETTLE_S = 15.0  # how long a session-end delivery waits for the agent's last write
SETTLE_POLL_S = 0.05
MAX_INPUT = 1 << 20  # bytes of hook input read at most
OP = "capture.transcript"
CLIENT_NAME = "palace-hook"


class HookInputError(ValueError):
    """The hook input is not what Claude Code sends (the message says what is wrong)."""


def log_line(message: str) -> None:
    """Append one line to the clients' log; never raises (the hook must exit 0 regardless)."""
    try:
        from palaced.wire.paths import resolve
        from palaced.wire.private import make_private_dirs

        path = resolve().client_log_file
        make_private_dirs(path.parent)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        line = f"{stamp} pid {os.getpid()} {' '.join(message.split())}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except Exception:  # nowhere left to report to
        pass


def log_failure(what: str, exc: BaseException) -> None:
    """Log why a hook (``what``: "hook capture Stop"...) did nothing: a refusal of the daemon
    with its code, bad input as such, anything else as unexpected; never raises."""
    from palaced.wire.errors import PalaceError

    if isinstance(exc, PalaceError):
        log_line(f"{what}: {exc.message} [{exc.name}]")
    elif isinstance(exc, HookInputError):
        log_line(f"{what}: {exc}")
    else:
        log_line(f"{what}: unexpected {type(exc).__name__}: {exc}")


def read_input(stdin_fd: int, wait_s: float = STDIN_WAIT_S) -> bytes:
    """The hook input on ``stdin_fd``: what arrives until end of file, at most ``wait_s``.

    Raises:
        HookInputError: stdin is a terminal, or nothing complete arrived in time.
    """
    if os.isatty(stdin_fd):
        raise HookInputError("stdin is a terminal, not hook input from Claude Code")
    deadline = time.monotonic() + wait_s
    chunks: list[bytes] = []
    size = 0
    while size < MAX_INPUT:
        left = deadline - time.monotonic()
        if left <= 0:
            raise HookInputError("the hook input did not end in time")
        ready, _, _ = select.select([stdin_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(stdin_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def hook_object(raw: bytes) -> dict[str, Any]:
    """The hook input as a JSON object, lone surrogates (a string cut inside an emoji) as
    U+FFFD; every hook reads its own fields from it.

    Raises:
        HookInputError: not a JSON object.
    """
    from palaced.wire.protocol import loads_json

    try:
        data = loads_json(raw)
    except ValueError:
        raise HookInputError(f"hook input is not JSON ({len(raw)} bytes)") from None
    if not isinstance(data, dict):
        raise HookInputError("hook input is not a JSON object")
    return data


def parse_input(raw: bytes, agent: str = DEFAULT_AGENT) -> dict[str, Any]:
    """The fields the hook uses, under the names ``agent`` gives them
    (``palace_client.hooks.agents``): ``transcript_path`` (absolute; "" when the input names
    none), ``session_id``, ``cwd``, ``hook_event_name``.

    Raises:
        HookInputError: not a JSON object.
    """
    shape = agent_hooks(agent)
    data = hook_object(raw)
    path = field(data, shape.transcript_keys) or ""
    session = field(data, shape.session_keys)
    derived = False
    if not path.strip() and session and shape.session_transcript is not None:
        # Copilot's sessionEnd names only its session: its transcript is at a known place.
        path = shape.session_transcript(session) or ""
        derived = bool(path)
    if not path.strip():
        path = ""  # a session with no transcript: nothing to capture (``capture`` returns)
    cwd = field(data, shape.cwd_keys)
    if path:
        path = os.path.expanduser(path)
        if not os.path.isabs(path):
            path = os.path.join(cwd or os.getcwd(), path)
        path = os.path.abspath(path)
    event = data.get("hook_event_name")
    return {"transcript_path": path, "session_id": session, "derived": derived,
            "cwd": cwd, "event": event if isinstance(event, str) else "?"}


def palace_for(pinned: str | None, cwd: str | None) -> str:
    """The palace to capture into (see the module docstring)."""
    if pinned:
        return pinned
    if os.environ.get("PALACE"):
        return os.environ["PALACE"]
    from palace_client.api.projects import current_project  # ~5 ms: only when needed
    from palace_client.api.slug import DEFAULT_PALACE

    try:
        # A new project's notice goes to the clients' log: the hook prints nothing.
        return current_project(cwd=Path(cwd) if cwd else None, warn=log_line).name
    except OSError:  # the working directory was deleted
        return DEFAULT_PALACE


def has_transcript(path: str) -> bool:
    """Whether there is a transcript to capture: False when the input names none, or one that
    does not exist (``claude mcp list`` ends a "session" that never wrote one). A silent
    no-op, not a SOURCE_UNREADABLE line in the log at every such command."""
    return bool(path) and os.path.lexists(path)


def request_args(hook: dict[str, Any], agent: str = DEFAULT_AGENT) -> dict[str, Any]:
    """The ``capture.transcript`` arguments for one hook input of ``agent``: its transcript's
    ``format`` for an agent other than Claude Code (whose format is the daemon's default).

    Raises:
        HookInputError: palace cannot read ``agent``'s transcripts.
    """
    fmt = agent_hooks(agent).capture_format
    if fmt is None:
        raise HookInputError(f"palace cannot read {agent}'s transcripts: nothing captured")
    args: dict[str, Any] = {"path": hook["transcript_path"], "create": True}
    if hook["session_id"]:
        args["session_id"] = hook["session_id"]
    if fmt != DEFAULT_AGENT:
        args["format"] = fmt
    return args


def author(agent: str) -> str:
    """Who a capture of ``agent``'s hook is stored as: ``PALACE_AGENT``, else
    ``hook:<agent>`` (``hook:claude``, ``hook:codex``...; a palace's policy matches it).

    Raises:
        InvalidArgs: ``PALACE_AGENT`` is not a valid agent name.
    """
    from palace_client.api.identity import resolve as resolve_agent

    return resolve_agent(fallback=hook_author(agent))


def _send(palace: str, args: dict[str, Any], deadline: float, agent: str) -> None:
    """Send the request to a running daemon as ``agent``, every wait bounded by
    ``deadline``.

    Raises:
        ConnectionError, OSError: no daemon, or it did not answer in time.
        DaemonUnreachable: it did not accept or handshake in time.
        Busy: it has no connection slot free (the request did not run).
        PalaceError: the daemon refused the request.
    """
    from palace_client.transport.connection import Connection, same_store
    from palaced.wire.paths import resolve

    paths = resolve()
    left = max(deadline - time.monotonic(), 0.01)
    conn = Connection.open(paths.socket, CLIENT_NAME, timeout=left)
    try:
        if not os.environ.get("PALACE_SOCKET"):
            same_store(conn, paths)
        conn.set_timeout(max(deadline - time.monotonic(), 0.01))
        conn.call(OP, palace, args, agent=agent)
    finally:
        conn.close()


def settle_from(path: str, agent: str) -> dict[str, Any] | None:
    """What a delivery of ``agent``'s session-end capture of ``path`` waits for: the
    agent's end marker written past the file's size now (None: the agent has no marker)."""
    marker = agent_hooks(agent).end_marker
    if marker is None:
        return None
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    return {"offset": size, "marker": marker.decode()}


def wait_settled(path: str, settle: dict[str, Any], limit_s: float = SETTLE_S) -> bool:
    """Wait until ``settle["marker"]`` is in ``path`` past ``settle["offset"]`` (the agent
    has written the session's end), at most ``limit_s``; whether it came. Never raises."""
    deadline = time.monotonic() + limit_s
    marker = str(settle.get("marker", "")).encode()
    offset = settle.get("offset", 0)
    offset = offset if isinstance(offset, int) and offset >= 0 else 0
    while marker:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(offset - len(marker), 0))
                if marker in fh.read():
                    return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(SETTLE_POLL_S)
    return False


def _defer(palace: str, args: dict[str, Any], agent: str,
           settle: dict[str, Any] | None = None) -> None:
    """Start a detached process that starts the daemon if needed and delivers the request.

    The request goes to it on a pipe (its stdin): argv is readable by every local user
    (``/proc/PID/cmdline``, ``ps``), and it names the project, the transcript's path and the
    session. A pipe is private to the two processes and leaves no file behind.

    Raises:
        OSError: the process could not be started, or it died before reading the request.
    """
    import subprocess  # only on this path: it costs the hook a few milliseconds to import

    payload = json.dumps({"palace": palace, "args": args, "agent": agent,
                          "settle": settle}).encode()
    proc = subprocess.Popen(  # our own interpreter and module
        [sys.executable, "-m", "palace_client.hooks.capture", "--deliver"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, start_new_session=True, cwd="/")
    stdin = proc.stdin
    assert stdin is not None  # stdin=PIPE
    try:
        # Fits the pipe's buffer (64 KiB on Linux) unless the input is absurd; then the
        # write waits for the child, which reads it before importing anything heavy.
        stdin.write(payload)
    finally:
        stdin.close()


def deliver(payload: bytes | str) -> int:
    """The detached delivery: connect (starting the daemon, waiting for it) and send."""
    from palace_client.api.client import Client
    from palaced.wire.errors import PalaceError

    try:
        request = json.loads(payload)
        path = request["args"]["path"]
        if isinstance(request.get("settle"), dict) and not wait_settled(
                path, request["settle"]):
            if not has_transcript(path):
                return 0  # a session that never wrote its file: nothing to capture
            log_line("hook capture (deferred): the session's end was not written within "
                     f"{SETTLE_S:.0f} s; capturing what is there")
        # The hook's author (older hooks sent none: the client's default then).
        with Client(client_name=CLIENT_NAME, agent=request.get("agent")) as client:
            client.call(OP, request["palace"], request["args"])
    except PalaceError as exc:
        log_line(f"hook capture (deferred): {exc.message} [{exc.name}]")
    except Exception as exc:  # a detached process: the log is all there is
        log_line(f"hook capture (deferred): {type(exc).__name__}: {exc}")
    return 0


def hook_options(argv: Sequence[str], verb: str = "capture") -> tuple[str | None, str]:
    """``--palace NAME`` (``-p NAME``, ``--palace=NAME``) and ``--agent NAME``
    (``--agent=NAME``; default ``claude``) of ``argv`` (of ``palace hook <verb>``).

    Raises:
        HookInputError: any other argument, or an agent palace has no hooks for.
    """
    pinned = None
    agent = DEFAULT_AGENT
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("--palace", "-p") and args:
            pinned = args.pop(0)
        elif arg.startswith("--palace="):
            pinned = arg.split("=", 1)[1]
        elif arg == "--agent" and args:
            agent = args.pop(0)
        elif arg.startswith("--agent="):
            agent = arg.split("=", 1)[1]
        else:
            raise HookInputError(f"unknown argument {arg!r} (usage: palace hook {verb} "
                                 "[--palace NAME] [--agent NAME])")
    if agent not in AGENTS:
        raise HookInputError(f"unknown agent {agent!r} (one of {', '.join(AGENTS)})")
    return pinned, agent


def palace_arg(argv: Sequence[str], verb: str = "capture") -> str | None:
    """``--palace NAME`` of ``argv`` (``hook_options``, whose errors it raises)."""
    return hook_options(argv, verb)[0]


def capture(argv: Sequence[str], stdin_fd: int = 0, started: float | None = None) -> int:
    """Run the hook; always returns 0 (failures are logged, see the module docstring)."""
    from palaced.wire.errors import Busy, DaemonUnreachable

    deadline = (started if started is not None else time.monotonic()) + BUDGET_S
    event = "?"
    try:
        pinned, agent = hook_options(argv)
        hook = parse_input(read_input(stdin_fd), agent)
        event = hook["event"]
        # A session-end capture of a derived path (Copilot's) may come before the agent has
        # even created the file: its delivery waits for it.
        if not hook["transcript_path"] or not (hook["derived"]
                                               or has_transcript(hook["transcript_path"])):
            return 0
        args = request_args(hook, agent)
        palace = palace_for(pinned, hook["cwd"])
        who = author(agent)
        settle = settle_from(args["path"], agent) if hook["derived"] else None
        if settle is not None:
            # A session-end hook (Copilot's) may run before the agent has flushed the
            # session to its file: the delivery waits for the agent's last write, then sends.
            _defer(palace, args, who, settle)
            return 0
        try:
            _send(palace, args, deadline - 0.03, who)
        except (OSError, ConnectionError, Busy, DaemonUnreachable) as exc:
            # Not sent, or not answered within the budget (a handshake slower than what is
            # left of it, BUSY: no connection slot free, which ran nothing): the delivery has
            # the time to start the daemon, wait for it and retry.
            _defer(palace, args, who)
            log_line(f"hook capture {event}: daemon not reached ({exc.__class__.__name__}: "
                     f"{exc}); delivering in the background")
    except BaseException as exc:  # a hook must never fail the agent's turn
        log_failure(f"hook capture {event}", exc)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m palace_client.hooks.capture [--deliver | capture args]`` (``--deliver`` reads the
    request on stdin)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--deliver"]:
        try:
            # Written whole by the hook before it returned: a generous wait, never needed.
            request = read_input(0, DELIVER_STDIN_WAIT_S)
        except (OSError, HookInputError) as exc:
            log_line(f"hook capture (deferred): cannot read the request: {exc}")
            return 0
        return deliver(request)
    return capture(args)


if __name__ == "__main__":
    sys.exit(main())
