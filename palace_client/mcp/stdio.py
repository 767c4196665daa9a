"""The MCP bridge's stdio transport: the read loop, ``serve``, ``run`` and ``main``.

Loop: a reader thread splits stdin into messages and hands the client's answers to the
bridge's own requests straight to the bridge (a tool call may be waiting for one); every
other message goes, in order, to the main thread, which answers requests one at a time and
is the only writer of stdout.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from palace_client.api.config_file import config_section
from palace_client.api.projects import default_palace, project_dir_palace
from palace_client.mcp.bridge import INVALID_REQUEST, PARSE_ERROR, Bridge, _error, _log, encode
from palace_client.mcp.toolbox import DaemonClient, Toolbox
from palaced.wire.errors import InvalidArgs, PalaceError, UsageError
from palaced.wire.paths import resolve
from palaced.wire.protocol import loads_json
from palaced.wire.specs import TOOLSETS_HELP, parse_toolsets

MAX_LINE = 16 * 1024 * 1024
READ_CHUNK = 64 * 1024
INBOX_SIZE = 32  # messages read ahead of the one being answered
# Some clients (Windows tools, editors' "UTF-8 with BOM") start the stream with a byte order
# mark; JSON has none, so the first message would be a parse error.
UTF8_BOM = b"\xef\xbb\xbf"


class _Stop(BaseException):
    """Raised by the signal handler to leave the read loop (never caught as an error)."""


class _LoopState:
    def __init__(self) -> None:
        self.writing = False
        self.stop = False


def _chunks(stdin: BinaryIO) -> Iterator[bytes]:
    """What arrives on ``stdin``, as it arrives.

    A real file is read with ``os.read`` on its descriptor: an unbuffered read holds no lock
    of the ``sys.stdin`` object, so the daemonic reader thread cannot block the interpreter's
    shutdown.
    """
    try:
        fd: int | None = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    while True:
        chunk = os.read(fd, READ_CHUNK) if fd is not None else stdin.read(READ_CHUNK)
        if not chunk:
            return
        yield chunk


def _lines(stdin: BinaryIO) -> Iterator[bytes | None]:
    """The lines of ``stdin`` without their newline (the last one may lack it); ``None`` for
    a line longer than ``MAX_LINE`` bytes, which is skipped without being held in memory."""
    held = bytearray()
    skipping = False
    for chunk in _chunks(stdin):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if skipping:
                skipping = False
            elif len(held) + end - start > MAX_LINE:
                yield None
            else:
                held += chunk[start:end]
                yield bytes(held)
            held.clear()
            start = end + 1
        if not skipping:
            held += chunk[start:]
            if len(held) > MAX_LINE:
                held.clear()
                skipping = True
                yield None
    if held and not skipping:
        yield bytes(held)


_Inbox = queue.Queue[tuple[str, Any]]


def _read_loop(bridge: Bridge, stdin: BinaryIO, inbox: _Inbox) -> None:
    """Reader thread: decode every input line (a BOM before the first is dropped); answers
    to the bridge's own requests go to the bridge at once, everything else to the main
    thread, in order."""
    first = True
    try:
        for line in _lines(stdin):
            if first and line is not None:
                line = line.removeprefix(UTF8_BOM)
            first = False
            if line is None:
                inbox.put(("answer", encode(_error(
                    None, INVALID_REQUEST, f"Invalid Request: longer than {MAX_LINE} bytes"))))
                continue
            if not line.strip():
                continue
            try:
                message = loads_json(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                # RecursionError: nesting deeper than the decoder's stack, e.g. 100,000 "[";
                # a parse error like any other, never the end of the session.
                inbox.put(("answer", encode(_error(None, PARSE_ERROR, f"Parse error: {exc}"))))
                continue
            if not bridge.accept_response(message):
                inbox.put(("message", message))
    except Exception:  # a read error ends the input like EOF does
        traceback.print_exc(file=sys.stderr)
    finally:
        bridge.input_closed()
        inbox.put(("eof", None))


def serve(bridge: Bridge, stdin: BinaryIO, stdout: BinaryIO,
          state: _LoopState | None = None) -> None:
    """Read messages from ``stdin`` and write answers to ``stdout`` until EOF.

    Returns on end of input or when the peer closed ``stdout`` (broken pipe).
    """
    state = state or _LoopState()
    inbox: _Inbox = queue.Queue(maxsize=INBOX_SIZE)

    def write(data: bytes) -> None:
        # A stop signal during a write must not cut a line in half.
        state.writing = True
        try:
            stdout.write(data)
            stdout.flush()
        except BrokenPipeError:
            state.stop = True
        finally:
            state.writing = False

    bridge.send = lambda message: write(encode(message))
    for message in bridge.outgoing:
        write(encode(message))
    bridge.outgoing.clear()
    threading.Thread(target=_read_loop, args=(bridge, stdin, inbox), name="palace-mcp-reader",
                     daemon=True).start()
    while not state.stop:
        kind, item = inbox.get()
        if kind == "eof":
            return
        answer = item if kind == "answer" else bridge.answer(item)
        if answer is not None:
            write(answer)


def _claim_stdout() -> BinaryIO:
    """Return a private writer on the real stdout and point fd 1 (and ``sys.stdout``) at stderr.

    Stray prints and library output then land on stderr and can never corrupt the protocol.
    """
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "wb")


def _set_signal_handlers(state: _LoopState | None) -> None:
    """Make SIGINT/SIGTERM/SIGHUP stop the loop, or (``None``) ignore them while cleaning up."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler: Callable[[int, FrameType | None], None] | signal.Handlers = signal.SIG_IGN
    if state is not None:
        def stop(signum: int, frame: FrameType | None) -> None:
            state.stop = True
            if not state.writing:
                raise _Stop

        handler = stop
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _default_client() -> DaemonClient:
    # Imported on the first tool call only: tools/list never needs the connection code.
    from palace_client.api.client import Client

    return Client(client_name="palace-mcp")


def served_toolsets(tools: str | None, config_file: Path | None = None) -> tuple[str, ...]:
    """The toolsets the bridge serves: ``tools`` (``--tools``) when given, else ``tools`` of
    the ``[mcp]`` table of the config file (``config_file``, default the one
    ``palaced.wire.paths`` resolves), else ``core`` alone.

    A config file that cannot be read or parsed is the daemon's to report (it refuses to
    start with it): the bridge says so on stderr and serves ``core``.

    Raises:
        UsageError: ``tools`` names an unknown toolset.
        InvalidArgs: ``[mcp] tools`` is not a string or names an unknown toolset.
    """
    if tools is not None:
        try:
            return parse_toolsets(tools)
        except InvalidArgs as exc:
            raise UsageError(f"--tools: {exc.message}", details=exc.details) from None
    path = config_file or resolve().config_file
    value = config_section(path, "mcp",
                           lambda why: _log(f"{why}; serving the core tools")).get("tools")
    if value is not None and not isinstance(value, str):
        raise InvalidArgs(f"bad config file {path}: [mcp] tools must be a string such as "
                          f"\"kg,memoir\", got {value!r}", details={"file": str(path)})
    try:
        return parse_toolsets(value)
    except InvalidArgs as exc:
        raise InvalidArgs(f"bad config file {path}: [mcp] tools {exc.message}",
                          details={"file": str(path), **exc.details}) from None


def start_error(exc: PalaceError) -> int:
    """Report an error that stops the bridge before it serves; its exit code (2 for a
    usage error, 5 for a bad config, as the CLI's)."""
    sys.stderr.write(f"palace: error: {exc.message} [{exc.name}]\n")
    return 2 if isinstance(exc, UsageError) else 5


def run(palace: str | None = None, compact: bool = False,
        client_factory: Callable[[], DaemonClient] = _default_client,
        tools: str | None = None) -> int:
    """Serve MCP on this process's stdin/stdout until EOF, SIGINT, SIGTERM or SIGHUP.

    Args:
        palace: the palace to use. Default: ``CLAUDE_PROJECT_DIR``'s project, else the
            project of the client's first root (when it advertises roots), else the
            working directory's project.
        compact: render one line per drawer.
        client_factory: builds the daemon client on the first tool call.
        tools: the opt-in toolsets, comma-separated (see ``served_toolsets``).

    Returns:
        The process exit code (0 on every clean shutdown; see ``start_error``).
    """
    try:
        toolsets = served_toolsets(tools)
    except PalaceError as exc:
        return start_error(exc)
    state = _LoopState()
    stdout = _claim_stdout()
    decided = palace or project_dir_palace()
    toolbox = Toolbox(client_factory, decided or default_palace(), compact=compact,
                      toolsets=toolsets)
    try:
        _set_signal_handlers(state)
        serve(Bridge(toolbox, roots=decided is None), sys.stdin.buffer, stdout, state)
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        _set_signal_handlers(None)
        toolbox.close()
        try:
            stdout.close()
        except BrokenPipeError:
            pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m palace_client.mcp [--palace NAME] [--compact] [--tools SETS]``."""
    parser = argparse.ArgumentParser(prog="palace mcp", description="Palace MCP stdio server.")
    parser.add_argument("--palace", default=None,
                        help="palace to use (default: the project's, from CLAUDE_PROJECT_DIR, "
                             "else the client's first root, else the current directory)")
    parser.add_argument("--compact", action="store_true", help="one line per drawer")
    parser.add_argument("--tools", default=None,
                        help=f"{TOOLSETS_HELP} (default: [mcp] tools of config.toml, else "
                             "core alone)")
    ns = parser.parse_args(argv)
    return run(ns.palace, ns.compact, tools=ns.tools)


if __name__ == "__main__":
    sys.exit(main())
