"""``palace hook prompt``: the Claude Code ``UserPromptSubmit`` hook that recalls for a prompt,
and its equivalent for the other agents that can add context to a prompt (``--agent``:
Codex CLI's ``UserPromptSubmit``, Gemini CLI's ``BeforeAgent``, Copilot CLI's
``userPromptSubmitted``; their input fields and output shapes in ``palace_client.hooks.agents``).

Claude Code writes the hook input on stdin (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, ``prompt``) before the model sees the prompt; what the hook prints as
``{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ...}}``
is added to the model's context. The hook recalls the prompt in the project's palace (chosen
as ``palace hook capture`` chooses it, ``palace_client.hooks.capture.palace_for``) and
prints the recall's text only when it is not a miss (``nothing_relevant`` false), cut to
the drawers that pass the relevance floor. The drawers the session has been shown already
are left out by the daemon before it packs (``memory.recall`` ``exclude``), so the budget
goes to drawers the session has not seen.

It sits before every prompt, so it must never cost the user anything:

* it always exits 0, and prints nothing unless it has memories to inject;
* the whole run is bounded by ``[hooks] prompt_timeout_s`` (1 s by default; every socket wait
  is bounded by what is left of it) and its text by ``[hooks] prompt_budget`` tokens (300);
* it never starts a daemon: a start (model load included) takes far longer than a prompt
  may wait. With no daemon it returns at once (the SessionStart wake-up and the capture
  hooks start one); a missing palace injects nothing (reads never create one);
* the prompt is untrusted input: its JSON strings are cleaned of lone surrogates
  (``palaced.wire.protocol.loads_json``) and only its first ``MAX_PROMPT_CHARS`` are asked.

What the session has seen, the drawers of the wake-up (fetched once, on the session's first
prompt, as the SessionStart hook shows them) and of earlier injections, is kept per session
in a small private file under ``<state_dir>/prompt-sessions`` (its name a hash of the session
id; at most ``MAX_SEEN`` ids; files unused for ``KEEP_S`` pruned). The file is untrusted on
read: anything but the expected shape counts as a new session.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from palace_client.hooks.agents import DEFAULT_AGENT, agent_hooks, field
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

MAX_PROMPT_CHARS = 2_000  # of a prompt, recalled at most: its start says what it is about
TOP_K = 5  # drawers recalled per prompt (the budget cuts further)
OUTPUT_RESERVE_S = 0.02  # of the time box, kept for writing the answer
MAX_SEEN = 1_000  # drawer ids remembered per session
MAX_STATE_BYTES = 64 * 1024  # a session file read at most
KEEP_S = 7 * 86_400.0  # a session file unused this long is pruned
MAX_SESSIONS = 500  # session files kept at most (the least recently used go first)
STATE_DIR = "prompt-sessions"


def settings(config_file: Path | None = None) -> tuple[int, float]:
    """``[hooks] prompt_budget`` and ``prompt_timeout_s`` of the config file; the default of
    a key that is missing, of the wrong type or out of its bound (``palaced check-config``
    reports those: the hook must not fail the prompt over them)."""
    from palace_client.api.config_file import config_section
    from palaced.wire.paths import resolve
    from palaced.wire.vocab import HOOK_SETTINGS

    table = config_section(config_file or resolve().config_file, "hooks",
                           lambda why: log_line(f"hook prompt: {why}; defaults used"))
    values: dict[str, float] = {}
    for key, (default, low, high) in HOOK_SETTINGS.items():
        value = table.get(key)
        ok = (isinstance(value, int | float) and not isinstance(value, bool)
              and low < value <= high)
        values[key] = value if ok else default  # type: ignore[assignment]
    return int(values["prompt_budget"]), float(values["prompt_timeout_s"])


def parse_prompt(raw: bytes, agent: str = DEFAULT_AGENT) -> dict[str, Any]:
    """The fields the hook uses, under the names ``agent`` gives them
    (``palace_client.hooks.agents``): ``prompt`` (the words typed, without the hook context
    Gemini CLI puts in front of a session's first prompt, cut to ``MAX_PROMPT_CHARS``),
    ``session_id``, ``cwd``.

    Raises:
        HookInputError: not a JSON object with a string ``prompt``.
    """
    from palaced.wire.vocab import typed_prompt

    shape = agent_hooks(agent)
    data = hook_object(raw)
    prompt = next((data[k] for k in shape.prompt_keys if isinstance(data.get(k), str)), None)
    if prompt is None:
        raise HookInputError("hook input has no prompt")
    return {"prompt": typed_prompt(prompt)[:MAX_PROMPT_CHARS],
            "session_id": field(data, shape.session_keys),
            "cwd": field(data, shape.cwd_keys)}


# -- what the session has seen ------------------------------------------------------------------
def state_path(session_id: str, state_dir: Path | None = None) -> Path:
    """The session's file: a hash of its id (an id is untrusted: never a path of its own)."""
    from palaced.wire.paths import resolve

    base = state_dir or resolve().state_dir
    name = hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:32]
    return base / STATE_DIR / f"{name}.json"


def load_seen(path: Path, palace: str) -> set[int] | None:
    """The drawer ids of ``palace`` the session was shown, or None for a new session (no
    file, another palace's, or one that is not what this hook writes)."""
    if not os.path.lexists(path):
        return None
    from palaced.wire.errors import PalaceError
    from palaced.wire.safe_files import read_regular

    try:
        data = json.loads(read_regular(path, MAX_STATE_BYTES)[0])
    except (OSError, PalaceError, ValueError) as exc:
        log_line(f"hook prompt: session file ignored ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(data, dict) or data.get("palace") != palace:
        return None
    seen = data.get("seen")
    if not isinstance(seen, list):
        return None
    return {i for i in seen if isinstance(i, int) and not isinstance(i, bool)}


def save_seen(path: Path, palace: str, seen: Iterable[int], *, new: bool) -> None:
    """Write the session's file (private, replaced whole; the last ``MAX_SEEN`` ids); a new
    session's first write also prunes the old files. Never raises: the next prompt would
    only repeat a drawer."""
    from palaced.wire.private import make_private_dirs
    from palaced.wire.safe_files import private_file

    try:
        make_private_dirs(path.parent)
        if new:
            prune(path.parent)
        ids = sorted(set(seen))[-MAX_SEEN:]
        with private_file(path) as out:
            json.dump({"palace": palace, "seen": ids}, out)
    except Exception as exc:  # a hook must never fail the prompt
        log_line(f"hook prompt: cannot write the session file ({type(exc).__name__}: {exc})")


def prune(directory: Path, now: float | None = None) -> None:
    """Delete session files unused for ``KEEP_S``, then the least recently used beyond
    ``MAX_SESSIONS``."""
    now = time.time() if now is None else now
    files: list[tuple[float, str]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                files.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    files.sort(reverse=True)
    for i, (mtime, file) in enumerate(files):
        if now - mtime > KEEP_S or i >= MAX_SESSIONS:
            try:
                os.unlink(file)
            except FileNotFoundError:
                pass


# -- the recall ---------------------------------------------------------------------------------
def drawer_ids(result: dict[str, Any]) -> set[int]:
    """The ids of the drawers in a recall's or a wake-up's sections."""
    return {it["id"] for s in result.get("sections") or [] for it in s.get("items") or []
            if isinstance(it.get("id"), int)}


def injected_text(result: dict[str, Any], seen: set[int]) -> tuple[str, set[int]]:
    """What a recall injects and the drawers in it: its text, which holds the drawers that
    reach the relevance floor and the newer side of a shown drawer's open conflict (the
    daemon's choice, ``recall._over_floor``: not decided twice), or "" when no drawer in it
    reaches the floor, or on a miss. The drawers ``seen`` were excluded by the daemon before
    packing (``exclude``); any still there are dropped.

    The recall is compact, one line per drawer (``#ID [place] ...``): dropping a drawer
    drops its line, so the text stays within the budget it was packed to. With no line
    dropped (no drawer under the floor), its heading's token count is the text's exact
    count; with some, an upper bound.
    """
    from palaced.wire.recall_text import section_heading

    if result.get("nothing_relevant"):
        return "", set()
    sections = result.get("sections") or []
    items = [it for s in sections for it in s.get("items") or [] if isinstance(it.get("id"), int)]
    lines = str(result.get("text") or "").splitlines()
    marks = {line.split(" ", 1)[0] for line in lines if line.startswith("#")}
    keep = {it["id"] for it in items if f"#{it['id']}" in marks and it["id"] not in seen}
    if not any(not it.get("below_floor") for it in items if it["id"] in keep):
        return "", set()
    drop = {f"#{it['id']} " for it in items if it["id"] not in keep}
    # A section left with no item loses its heading too (concepts and facts are items).
    emptied = {section_heading(s, " · ") for s in sections
               if not any(it.get("id") in keep or not isinstance(it.get("id"), int)
                          for it in s.get("items") or [])}
    lines = [line for line in lines
             if line not in emptied and not any(line.startswith(mark) for mark in drop)]
    return "\n".join(lines), keep


def recall(palace: str, hook: dict[str, Any], budget: int, deadline: float,
           state_dir: Path | None = None) -> str:
    """The text to inject for one prompt ("" for none), the session's file updated.

    Raises:
        ConnectionError, OSError: no daemon, or it did not answer in time.
        PalaceError: the daemon refused (PALACE_NOT_FOUND for a palace not created yet).
    """
    from palace_client.api.identity import resolve as resolve_agent
    from palace_client.transport.connection import Connection, same_store
    from palaced.wire.args import MAX_ID
    from palaced.wire.errors import InvalidArgs
    from palaced.wire.paths import resolve
    from palaced.wire.vocab import MAX_EXCLUDE

    paths = resolve()
    session = hook["session_id"]
    path = state_path(session, state_dir) if session else None
    seen = load_seen(path, palace) if path else None
    new = seen is None
    conn = Connection.open(paths.socket, CLIENT_NAME,
                           timeout=max(deadline - time.monotonic(), 0.01))
    try:
        if not os.environ.get("PALACE_SOCKET"):
            same_store(conn, paths)
        agent = resolve_agent()

        def call(op: str, args: dict[str, Any]) -> dict[str, Any]:
            conn.set_timeout(max(deadline - time.monotonic(), 0.01))
            return conn.call(op, palace, args, agent=agent)

        if seen is None:
            # The session's first prompt: what its SessionStart wake-up showed (the same
            # op and defaults as `palace wake-up`) counts as seen.
            seen = drawer_ids(call("memory.wake_up", {})) if path else set()
        # Left out before packing: the budget is spent on drawers the session has not seen.
        # Over the cap (a long session), the newest drawers are the likelier to come back.
        # The session file is untrusted: an id no drawer can have would fail every recall.
        exclude = sorted(i for i in seen if 0 < i <= MAX_ID)[-MAX_EXCLUDE:]
        args = {"query": hook["prompt"], "top_k": TOP_K, "levels": [2], "budget": budget,
                "compact": True, "for_agent": True, "exclude": exclude}
        try:
            result = call("memory.recall", args)
        except InvalidArgs:
            from palaced.wire.specs import SPEC_DIGEST  # the error path only: ~9 ms import

            if conn.server_info.get("spec") == SPEC_DIGEST:
                raise
            # A palaced started before an upgrade knows no ``exclude``: recall without it
            # (what the session saw is still cut from the text below) rather than go
            # without memories until the daemon restarts.
            result = call("memory.recall", {k: v for k, v in args.items() if k != "exclude"})
    finally:
        conn.close()
    text, shown = injected_text(result, seen)
    if path is not None and (shown or new):
        save_seen(path, palace, seen | shown, new=new)
    return text


def output(text: str, agent: str = DEFAULT_AGENT) -> str:
    """The hook's stdout for ``text``: ``agent``'s JSON for context added to a prompt
    (Claude Code's ``hookSpecificOutput.additionalContext`` by default).

    Raises:
        HookInputError: ``agent``'s prompt hook cannot add context.
    """
    build = agent_hooks(agent).prompt
    if build is None:
        raise HookInputError(f"{agent}'s prompt hook cannot add context")
    return json.dumps(build(text))


def prompt(argv: Sequence[str], stdin_fd: int = 0, started: float | None = None) -> int:
    """Run the hook; always returns 0 (failures are logged, see the module docstring)."""
    from palaced.wire.errors import PalaceNotFound

    start = started if started is not None else time.monotonic()
    try:
        pinned, agent = hook_options(argv, "prompt")
        if agent_hooks(agent).prompt is None:
            raise HookInputError(f"{agent}'s prompt hook cannot add context")
        budget, timeout = settings()
        deadline = start + timeout - OUTPUT_RESERVE_S
        hook = parse_prompt(read_input(stdin_fd, max(min(0.1, deadline - time.monotonic()),
                                                     0.001)), agent)
        if not hook["prompt"].strip():
            return 0
        palace = palace_for(pinned, hook["cwd"])
        text = recall(palace, hook, budget, deadline)
        if text and time.monotonic() < start + timeout:
            sys.stdout.write(output(text, agent) + "\n")
            sys.stdout.flush()
    except PalaceNotFound:
        pass  # a project with no memories yet: nothing to inject
    except (FileNotFoundError, ConnectionRefusedError):
        pass  # no daemon running: usual before a session started one, not worth a log line
    except (ConnectionError, OSError) as exc:
        # Not in time, or gone mid-request: the prompt goes on without memories.
        log_line(f"hook prompt: daemon not reached ({type(exc).__name__}: {exc})")
    except BaseException as exc:  # a hook must never fail the prompt
        log_failure("hook prompt", exc)
    return 0


if __name__ == "__main__":
    sys.exit(prompt(sys.argv[1:]))
