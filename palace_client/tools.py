"""The MCP tools of the palace bridge: declarative specs, argument sanity checks, rendering.

Tool names, descriptions and JSON Schemas live only here. Each tool maps its arguments onto one
daemon op (``recall_all`` fans out over every palace); real validation is the daemon's
(``INVALID_ARGS``), so the bridge only checks JSON types. Results are rendered as plain text
for an agent; failures become ``isError`` results the agent can act on, never protocol errors.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from palaced.errors import DaemonUnreachable, InternalError, PalaceError, ShuttingDown

DEFAULT_PALACE = "default"
NUDGE_AFTER = 10
NUDGE_TEXT = (
    "(palace hint: nothing was stored for a while. If you learned a durable fact, decision, "
    "preference or outcome, save it now with the `remember` tool.)"
)
_SLUG_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_SLUG = 64


class DaemonClient(Protocol):
    """What the tools need from ``palace_client.Client`` (tests inject a fake)."""

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]: ...

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]: ...

    def list_palaces(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


# -- palace naming ------------------------------------------------------------------------------
def slugify(text: str) -> str:
    """Return ``text`` as a palace name: lowercase kebab-case, 1-64 chars, or "" if nothing is left.

    Accents are folded to ASCII, camelCase boundaries become hyphens, and every run of other
    characters becomes one hyphen.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", ascii_text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", spaced)
    slug = re.sub(r"[^a-z0-9]+", "-", spaced.lower()).strip("-")
    return slug[:_MAX_SLUG].rstrip("-")


def is_palace_name(name: str) -> bool:
    """True if ``name`` is a valid palace name (lowercase kebab-case, 1-64 chars)."""
    return len(name) <= _MAX_SLUG and _SLUG_RE.fullmatch(name) is not None


def find_project_root(start: Path) -> Path | None:
    """Return the nearest directory at or above ``start`` holding ``.git`` (dir or file)."""
    current = start
    for candidate in (current, *current.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def palace_name_for(start: Path, home: Path | None = None) -> str:
    """Derive the palace name of the project containing ``start``.

    The git root's directory name, slugified; outside a git repository the directory itself,
    except the home directory and the filesystem root, which map to ``"default"``.
    """
    start = start.expanduser().absolute()
    root = find_project_root(start)
    if root is None:
        home = (home or Path.home()).absolute()
        if start == home or start == Path(start.anchor):
            return DEFAULT_PALACE
        root = start
    return slugify(root.name) or DEFAULT_PALACE


def default_palace(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """The palace of the current project: from ``CLAUDE_PROJECT_DIR`` if set, else the cwd."""
    env = os.environ if environ is None else environ
    project_dir = env.get("CLAUDE_PROJECT_DIR")
    try:
        start = Path(project_dir) if project_dir else (cwd or Path.cwd())
        return palace_name_for(start)
    except OSError:  # the cwd was deleted, or the home directory is unknown
        return DEFAULT_PALACE


# -- specs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its name, agent-facing description, input schema and behaviour hints."""

    name: str
    title: str
    description: str
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    @property
    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {k: dict(v) for k, v in self.properties.items()},
            "additionalProperties": False,
        }
        if self.required:
            schema["required"] = list(self.required)
        return schema

    def to_mcp(self) -> dict[str, Any]:
        """The tool as a ``tools/list`` entry."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }


_WING = {"type": "string", "description": "Broad area the drawer belongs to, e.g. 'backend', "
         "'people', 'ops'."}
_ROOM = {"type": "string", "description": "Topic inside the wing, e.g. 'auth', 'deploy', "
         "'release-process'."}
_TAGS = {"type": "array", "items": {"type": "string"},
         "description": "Free-form labels; a drawer matches when it has all the given tags."}
_TOP_K = {"type": "integer", "minimum": 1, "maximum": 100,
          "description": "Maximum number of drawers to return (default 10)."}
_BUDGET = {"type": "integer", "minimum": 1,
           "description": "Token budget for the returned context (the daemon's default, about "
           "1500 tokens, when omitted)."}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="remember",
        title="Remember",
        description=(
            "Store one durable memory (a 'drawer') in this project's palace so that future "
            "sessions and other agents can recall it. Use it for decisions and their reasons, "
            "facts about the codebase or people, user preferences, conventions, and outcomes of "
            "work. Write one self-contained statement per call (include names and dates; no "
            "'it'/'this' without context) and file it under a room (and optionally a wing). "
            "Storing the exact same text twice is harmless: the existing drawer id is returned."
        ),
        properties={
            "text": {"type": "string", "minLength": 1,
                     "description": "The memory itself, self-contained and specific."},
            "room": _ROOM,
            "wing": _WING,
            "tags": _TAGS,
            "importance": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "0 = trivia, 0.5 = normal (default), 1 = critical; "
                           "important drawers surface first in wake_up and recall."},
            "occurred_at": {"type": "string",
                            "description": "When it happened, ISO 8601 (e.g. '2025-03-14' or "
                            "'2025-03-14T09:30:00Z'); defaults to now."},
        },
        required=("text",),
        idempotent=True,
    ),
    ToolSpec(
        name="recall",
        title="Recall",
        description=(
            "Search this project's palace for memories relevant to a query (hybrid keyword + "
            "semantic search) and return them as context sections with drawer ids, rooms and "
            "scores. Call it before answering questions about past work, decisions or "
            "preferences, and before redoing something that may have been done already. "
            "Narrow with wing/room/tags; use `levels` and `budget` to control how much context "
            "comes back."
        ),
        properties={
            "query": {"type": "string", "minLength": 1,
                      "description": "What you want to know, in natural language or keywords."},
            "budget": _BUDGET,
            "levels": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3},
                       "description": "Context levels to include: 0 identity, 1 essential "
                       "story (most important/recent), 2 recent drawers of the given room/tags, "
                       "3 search results for the query. Default: all."},
            "deep": {"type": "boolean",
                     "description": "Search more thoroughly (slower); use when a normal recall "
                     "missed something you expect to exist."},
            "top_k": _TOP_K,
            "wing": _WING,
            "room": _ROOM,
            "tags": _TAGS,
        },
        required=("query",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="recall_all",
        title="Recall across all palaces",
        description=(
            "Search every palace on this machine (all projects), not just this project's, and "
            "return the best matches merged by score, each labelled with its palace. Use it "
            "for knowledge that may have been stored while working on another project."
        ),
        properties={
            "query": {"type": "string", "minLength": 1,
                      "description": "What you want to know, in natural language or keywords."},
            "top_k": _TOP_K,
        },
        required=("query",),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="wake_up",
        title="Wake up",
        description=(
            "Load the essential context of this project's palace: its identity and the most "
            "important and recent memories, packed into a token budget. Call it once at the "
            "start of a session or task, before doing anything else."
        ),
        properties={"budget": _BUDGET},
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="forget",
        title="Forget",
        description=(
            "Permanently delete one drawer from this project's palace by its id (as shown by "
            "recall or list_drawers). Use it for memories that are wrong or obsolete; to "
            "correct a memory, remember the corrected text and forget the old drawer."
        ),
        properties={"id": {"type": "integer", "minimum": 1,
                           "description": "The drawer id, e.g. 42 for '#42'."}},
        required=("id",),
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_drawers",
        title="List drawers",
        description=(
            "List the drawers of this project's palace, newest first, optionally only one wing "
            "or room. Pages with limit/offset; the result says which offset comes next."
        ),
        properties={
            "wing": _WING,
            "room": _ROOM,
            "limit": {"type": "integer", "minimum": 1, "maximum": 500,
                      "description": "Page size (default 50)."},
            "offset": {"type": "integer", "minimum": 0,
                       "description": "Number of drawers to skip (default 0)."},
        },
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="list_palaces",
        title="List palaces",
        description="List every palace (one per project) stored on this machine.",
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="palace_info",
        title="Palace info",
        description=(
            "Show this project's palace: its name, drawer counts, embedding model and index "
            "state."
        ),
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="status",
        title="Daemon status",
        description=(
            "Show the palace daemon's status: version, uptime, whether the embedding model is "
            "loaded, and per-palace counts. Useful when other tools report errors."
        ),
        read_only=True,
        idempotent=True,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}


# -- argument sanity ----------------------------------------------------------------------------
class ToolArgumentError(ValueError):
    """Tool arguments are not the JSON types the tool's schema declares."""


_JSON_TYPES: dict[str, str] = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "array": "an array", "object": "an object",
}


def _coerce(value: Any, schema: Mapping[str, Any], where: str) -> Any:
    kind = schema.get("type")
    ok: bool
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "integer":
        # Some clients serialise every number as a float; 5.0 is still the integer 5.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "array":
        ok = isinstance(value, list)
        if ok and "items" in schema:
            value = [_coerce(v, schema["items"], f"{where}[{i}]") for i, v in enumerate(value)]
    else:
        ok = True
    if not ok:
        raise ToolArgumentError(
            f"argument '{where}' must be {_JSON_TYPES.get(str(kind), kind)}, "
            f"got {json.dumps(value)[:80]}"
        )
    return value


def check_arguments(spec: ToolSpec, arguments: object) -> dict[str, Any]:
    """Return ``arguments`` checked against the JSON types of ``spec``'s schema.

    ``null`` optional values are dropped (agents often send them for "not given").

    Raises:
        ToolArgumentError: not an object, an unknown or missing key, or a wrong JSON type.
    """
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    unknown = sorted(k for k in arguments if k not in spec.properties)
    if unknown:
        allowed = ", ".join(spec.properties) or "none"
        raise ToolArgumentError(
            f"unknown argument(s) {', '.join(map(repr, unknown))}; allowed: {allowed}"
        )
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None and key not in spec.required:
            continue
        out[key] = _coerce(value, spec.properties[key], key)
    missing = [k for k in spec.required if k not in out]
    if missing:
        raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
    return out


# -- rendering ----------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _format_score(score: Any) -> str:
    return f"{score:.3f}" if isinstance(score, int | float) else str(score)


def _format_when(item: Mapping[str, Any]) -> str | None:
    value = item.get("occurred_ms") or item.get("occurred_at") or item.get("created_ms")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d")
    return str(value) if value else None


def render_drawer(item: Mapping[str, Any], *, compact: bool = False,
                  show_palace: bool = False) -> str:
    """Render one drawer (recall item, list entry) as text: id, place, score, date, text."""
    place = "/".join(str(item[k]) for k in ("wing", "room") if item.get(k))
    if show_palace and item.get("palace"):
        place = f"{item['palace']}:{place}" if place else str(item["palace"])
    head: list[str] = []
    # Only real drawers (integer ids) can be passed to forget; synthetic items have no "#".
    if isinstance(item.get("id"), int):
        head.append(f"#{item['id']}")
    if place:
        head.append(f"[{place}]")
    if item.get("score") is not None:
        head.append(f"score {_format_score(item['score'])}")
    when = _format_when(item)
    if when:
        head.append(when)
    if item.get("tags"):
        head.append("tags " + ",".join(map(str, item["tags"])))
    text = str(item.get("text", ""))
    if compact:
        return " ".join([*head, _one_line(text)]).strip()
    body = "\n".join("  " + line for line in text.splitlines()) or "  (empty)"
    return ("- " + " ".join(head) + "\n" + body) if head else body


def _render_items(items: Iterable[Mapping[str, Any]], compact: bool,
                  show_palace: bool = False) -> list[str]:
    return [render_drawer(item, compact=compact, show_palace=show_palace) for item in items]


def render_sections(sections: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    """Render recall/wake-up sections: one heading per level, then its drawers."""
    lines: list[str] = []
    for section in sections:
        items = list(section.get("items") or [])
        title = section.get("title") or "Memories"
        level = section.get("level")
        heading = f"L{level} · {title}" if level is not None else str(title)
        lines.append(heading if compact else f"## {heading}")
        lines.extend(_render_items(items, compact) if items else ["(nothing)"])
        if not compact:
            lines.append("")
    return lines


def _render_tree(value: Any, indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                lines.append(f"{pad}{key}:")
                lines.extend(_render_tree(item, indent + 1))
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item:
                sub = _render_tree(item, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(f"{pad}{_scalar(value)}")
    return lines


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, bool | Mapping | list):
        return json.dumps(value, default=str)
    return str(value)


def render_error(exc: BaseException) -> str:
    """Text of an ``isError`` tool result: error name, message, details and what to do."""
    if isinstance(exc, ToolArgumentError):
        return f"Error INVALID_ARGS: {exc}. Fix the arguments (see the tool's input schema)."
    if isinstance(exc, OSError):
        exc = DaemonUnreachable(f"lost the connection to palaced: {exc}")
    elif not isinstance(exc, PalaceError):
        exc = InternalError(f"{type(exc).__name__}: {exc}")
    lines = [f"Error {exc.name} ({exc.code}): {exc.message}"]
    if exc.details:
        lines.append("details: " + json.dumps(exc.details, sort_keys=True, default=str))
    hint = _ERROR_HINTS.get(exc.name)
    if hint is None and exc.retryable:
        hint = "This is temporary; retry in a moment."
    if hint:
        lines.append(hint)
    return "\n".join(lines)


_ERROR_HINTS = {
    "INVALID_ARGS": "Fix the arguments named above and call the tool again.",
    "MEMORY_NOT_FOUND": "No drawer has that id here; find ids with recall or list_drawers.",
    "PALACE_NOT_FOUND": "See the existing palaces with list_palaces.",
    "TEXT_TOO_LARGE": "Split the text into several smaller, self-contained drawers.",
    "INVALID_CONTENT": "Fix the text or date and call the tool again.",
}


# -- running tools ------------------------------------------------------------------------------
def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` with one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


class Toolbox:
    """Runs the palace tools for one bridge process against a lazily created client.

    Args:
        client_factory: returns the daemon client; called on the first tool call only.
        palace: the palace the palace-scoped tools act on; created on first use.
        compact: render one line per drawer.
        nudge_after: tool calls without a ``remember`` before the store hint is appended.
    """

    def __init__(self, client_factory: Callable[[], DaemonClient], palace: str, *,
                 compact: bool = False, nudge_after: int = NUDGE_AFTER) -> None:
        self.palace = palace
        self.compact = compact
        self.source = "mcp"
        self._factory = client_factory
        self._client: DaemonClient | None = None
        self._palace_ready = False
        self._nudge_after = nudge_after
        self._calls_since_remember = 0
        self._runners: dict[str, Callable[[dict[str, Any]], str]] = {
            "remember": self._remember, "recall": self._recall, "recall_all": self._recall_all,
            "wake_up": self._wake_up, "forget": self._forget, "list_drawers": self._list_drawers,
            "list_palaces": self._list_palaces, "palace_info": self._palace_info,
            "status": self._status,
        }

    @staticmethod
    def list_tools() -> list[dict[str, Any]]:
        """Every tool as ``tools/list`` entries, in their stable order."""
        return [spec.to_mcp() for spec in TOOLS]

    @staticmethod
    def has_tool(name: str) -> bool:
        return name in TOOLS_BY_NAME

    def call(self, name: str, arguments: object) -> dict[str, Any]:
        """Run tool ``name`` and return its ``CallToolResult``; failures become ``isError``.

        Raises:
            KeyError: there is no tool of that name (a protocol error, not a tool error).
        """
        spec = TOOLS_BY_NAME[name]
        try:
            args = check_arguments(spec, arguments)
            text = self._runners[name](args)
        except (PalaceError, ToolArgumentError, OSError) as exc:
            return text_result(render_error(exc), is_error=True)
        if name == "remember":
            self._calls_since_remember = 0
        else:
            self._calls_since_remember += 1
            if self._calls_since_remember >= self._nudge_after:
                self._calls_since_remember = 0
                text = f"{text}\n\n{NUDGE_TEXT}"
        return text_result(text)

    def close(self) -> None:
        """Close the daemon connection, if one was opened."""
        if self._client is not None:
            self._client.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _daemon(self) -> DaemonClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def _op(self, op: str, palace: str | None, args: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
        client = self._daemon()
        if palace == self.palace and not self._palace_ready:
            client.create_palace(palace, exist_ok=True)
            self._palace_ready = True
        try:
            return client.call(op, palace, args or {})
        except ShuttingDown:
            # The daemon is restarting: a fresh connection reaches (or starts) its successor.
            client.close()
            return client.call(op, palace, args or {})

    # -- tools ------------------------------------------------------------------------------
    def _remember(self, args: dict[str, Any]) -> str:
        result = self._op("memory.remember", self.palace, {**args, "source": self.source})
        where = "/".join(str(args[k]) for k in ("wing", "room") if args.get(k))
        place = f" [{where}]" if where else ""
        if result.get("created", True):
            return f"Stored drawer #{result['id']}{place} in palace '{self.palace}'."
        return (f"Already stored as drawer #{result['id']} in palace '{self.palace}' "
                "(identical text); nothing changed.")

    def _recall(self, args: dict[str, Any]) -> str:
        result = self._op("memory.recall", self.palace, args)
        return self._render_recall(args["query"], result)

    def _render_recall(self, query: str, result: Mapping[str, Any]) -> str:
        meta = [f"mode {result['mode']}"] if result.get("mode") else []
        if result.get("tokens_used") is not None:
            meta.append(f"{result['tokens_used']} tokens")
        if result.get("truncated"):
            meta.append("truncated to budget")
        head = f"Recall {json.dumps(query, ensure_ascii=False)} in palace '{self.palace}'"
        head += f" ({', '.join(meta)})" if meta else ""
        sections = result.get("sections")
        results = list(result.get("results") or [])
        if sections and any(s.get("items") for s in sections):
            body = render_sections(sections, self.compact)
        elif results:
            body = _render_items(results, self.compact)
        else:
            return (f"{head}\nNo drawers matched. Try other words, drop filters, or search every "
                    "palace with recall_all.")
        if result.get("notice"):
            body.append(f"({result['notice']})")
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(body).rstrip()

    def _recall_all(self, args: dict[str, Any]) -> str:
        client = self._daemon()
        top_k = int(args.get("top_k", 10))
        merged: list[dict[str, Any]] = []
        skipped: list[str] = []
        palaces = [str(p["name"]) for p in client.list_palaces()]
        for name in palaces:
            try:
                result = client.call("memory.recall", name, args)
            except PalaceError as exc:
                skipped.append(f"{name} ({exc.name}: {exc.message})")
                continue
            merged.extend({**item, "palace": name} for item in result.get("results") or [])
        merged.sort(key=lambda item: float(item.get("score") or 0.0), reverse=True)
        merged = merged[:top_k]
        head = (f"Recall {json.dumps(args['query'], ensure_ascii=False)} across "
                f"{len(palaces)} palace(s)")
        lines = [head]
        if merged:
            if not self.compact:
                lines.append("")
            lines.extend(_render_items(merged, self.compact, show_palace=True))
        else:
            lines.append("No drawers matched in any palace.")
        if skipped:
            lines.append("Skipped: " + "; ".join(skipped))
        return "\n".join(lines)

    def _wake_up(self, args: dict[str, Any]) -> str:
        result = self._op("memory.wake_up", self.palace, args)
        head = f"Wake-up context of palace '{self.palace}'"
        if result.get("tokens_used") is not None:
            head += f" ({result['tokens_used']} tokens)"
        sections = list(result.get("sections") or [])
        if not any(s.get("items") for s in sections):
            return (f"{head}\nThe palace is empty so far. Store durable facts and decisions with "
                    "remember as you learn them.")
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(render_sections(sections, self.compact)).rstrip()

    def _forget(self, args: dict[str, Any]) -> str:
        self._op("memory.forget", self.palace, args)
        return f"Forgot drawer #{args['id']} in palace '{self.palace}'."

    def _list_drawers(self, args: dict[str, Any]) -> str:
        result = self._op("memory.list", self.palace, args)
        drawers = list(result.get("drawers") or [])
        total = result.get("total", len(drawers))
        offset = int(args.get("offset", 0))
        if not drawers:
            return f"No drawers in palace '{self.palace}' at offset {offset} (total {total})."
        lines = [f"Drawers {offset + 1}-{offset + len(drawers)} of {total} in palace "
                 f"'{self.palace}', newest first"]
        if not self.compact:
            lines.append("")
        lines.extend(_render_items(drawers, self.compact))
        if result.get("next_offset") is not None:
            lines.append(f"More: call list_drawers with offset={result['next_offset']}.")
        return "\n".join(lines)

    def _list_palaces(self, args: dict[str, Any]) -> str:
        palaces = self._daemon().list_palaces()
        if not palaces:
            return f"No palaces yet; '{self.palace}' is created on the first remember."
        lines = [f"{len(palaces)} palace(s); this project's is '{self.palace}':"]
        for entry in palaces:
            extra = ", ".join(f"{k} {_scalar(v)}" for k, v in entry.items()
                              if k not in ("name", "path") and not isinstance(v, Mapping | list))
            mark = " (this project)" if entry.get("name") == self.palace else ""
            lines.append(f"- {entry.get('name')}{mark}" + (f": {extra}" if extra else ""))
        return "\n".join(lines)

    def _palace_info(self, args: dict[str, Any]) -> str:
        info = self._op("palace.info", self.palace)
        return "\n".join([f"Palace '{self.palace}':", *_render_tree(info, 1)])

    def _status(self, args: dict[str, Any]) -> str:
        status = self._daemon().call("daemon.status")
        return "\n".join(["Palace daemon status:", *_render_tree(status, 1)])
