"""Who a client says it is: the agent sent in every request envelope.

In order: an explicit name (``Client(agent=...)``, ``palace --agent NAME``), then
``PALACE_AGENT``, then what the client knows of itself (the MCP bridge: the agent's name and
version from its ``initialize``), then the user (``user:<login>``). The daemon records it on
every write and checks it against the palace's policy. It is a claim, not a credential: any
process of the user can claim any name.
"""

from __future__ import annotations

import getpass
import os

from palaced.wire.errors import BadFrame, InvalidArgs
from palaced.wire.protocol import MAX_AGENT_CHARS, check_agent

ENV = "PALACE_AGENT"


def user_agent() -> str:
    """``user:<login>`` (``uid:<n>`` where no login name can be found)."""
    try:
        login = getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (containers)
        return f"uid:{os.getuid()}"
    return f"user:{login}"


def checked(agent: str, where: str = "agent") -> str:
    """``agent`` as the daemon will take it.

    Raises:
        InvalidArgs: not 1-200 printable characters (``details["arg"]`` is ``agent``).
    """
    try:
        return check_agent(agent)
    except BadFrame as exc:
        raise InvalidArgs(f"{where}: {exc.message}", details={"arg": "agent"}) from None


def resolve(explicit: str | None = None, fallback: str | None = None) -> str:
    """The agent of a client: ``explicit``, else ``PALACE_AGENT``, else ``fallback``, else
    ``user_agent()``.

    Raises:
        InvalidArgs: the chosen name is not 1-200 printable characters.
    """
    if explicit is not None:
        return checked(explicit)
    env = os.environ.get(ENV, "").strip()
    if env:
        return checked(env, ENV)
    return checked(fallback) if fallback else user_agent()


def mcp_agent(name: str, version: object) -> str:
    """``mcp:<name>/<version>`` from an MCP ``clientInfo`` (unprintable characters dropped,
    cut to the daemon's bound)."""
    text = "".join(ch for ch in name if ch.isprintable()).strip()
    if isinstance(version, str):
        ver = "".join(ch for ch in version if ch.isprintable()).strip()
        text = f"{text}/{ver}" if ver else text
    return f"mcp:{text}"[:MAX_AGENT_CHARS].strip()
