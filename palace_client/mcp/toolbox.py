"""The MCP tools of the palace bridge: running them against the daemon and wording the results.

Each tool maps its arguments onto one daemon op: ``recall`` with ``scope='all'`` runs
``memory.recall_all``, ``kg_query`` with ``history=true`` runs ``graph.timeline`` and with
``depth`` ``graph.neighbors``, ``memoir`` and ``upkeep`` run the op their ``action`` names
(``memoir_tool``, ``upkeep_tool``); ``get`` and ``rooms`` read drawers whole and the
palace's wings and rooms (``reading``). Only the tools of the served toolsets are
listed; a call to another one says which toolset holds it and how to add it.
Results are rendered as plain text for an agent (``palace_client.render.results``); failures become
``isError`` results the agent can act on (``results``), never protocol errors. The tools'
names, descriptions and schemas live in ``tools``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from palace_client.mcp.memoir_tool import run_memoir
from palace_client.mcp.reading import run_get, run_rooms
from palace_client.mcp.results import forgotten_text, render_error, text_result
from palace_client.mcp.schema import ToolArgumentError, check_arguments
from palace_client.mcp.tools import (
    GET_MAX_TOKENS,
    RETIRED,
    TOOLS_BY_NAME,
    TOOLSET_OF,
    tools_of,
)
from palace_client.mcp.upkeep_tool import RESOLVE_BY_UPKEEP, consolidation_hint, run_upkeep
from palace_client.render.results import (
    describe_entity,
    excerpt,
    format_time,
    remember_notes,
    render_fact,
    render_facts,
    render_items,
    render_neighbours,
)
from palaced.wire.errors import PalaceError, PalaceNotFound, ShuttingDown
from palaced.wire.specs import SPECS
from palaced.wire.vocab import MULTI_VALUED

NUDGE_AFTER = 10
NUDGE_TEXT = (
    "(palace hint: nothing was stored for a while. If you learned a durable fact, decision, "
    "preference or outcome, save it now with the `remember` tool.)"
)
# What "\n\n" + NUDGE_TEXT adds to a text, in cl100k tokens with a margin: a recall or wake-up
# gets the nudge only when its budget has that much room left (tests/test_recall_budget.py).
NUDGE_TOKENS = 40


class DaemonClient(Protocol):
    """What the tools need from ``palace_client.Client`` (tests inject a fake)."""

    agent: str

    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]: ...

    def create_palace(self, name: str, *, exist_ok: bool = False) -> dict[str, Any]: ...

    def list_palaces(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


# Tools that store something: calling one resets the remember nudge.
_STORING_TOOLS = frozenset({"remember", "kg_assert"})


class Toolbox:
    """Runs the palace tools for one bridge process against a lazily created client.

    Args:
        client_factory: returns the daemon client; called on the first tool call only.
        palace: the palace the palace-scoped tools act on; created by the first write to it
            (the client's rule, ``projects.CREATES_PALACE``); until then reads answer that it
            holds nothing yet.
        compact: render one line per drawer.
        nudge_after: tool calls without a ``remember`` before the store hint is appended.
        toolsets: the toolsets served (``palaced.wire.specs.parse_toolsets``).
    """

    def __init__(self, client_factory: Callable[[], DaemonClient], palace: str, *,
                 compact: bool = False, nudge_after: int = NUDGE_AFTER,
                 toolsets: tuple[str, ...] = ("core",)) -> None:
        self._palace = palace
        self.compact = compact
        self.toolsets = toolsets
        self._served = {spec.name for spec in tools_of(toolsets)}
        self.source = "mcp"
        self.agent: str | None = None  # who the requests come from (the bridge sets it)
        self._factory = client_factory
        self._client: DaemonClient | None = None
        self._nudge_after = nudge_after
        self._calls_since_remember = 0
        self._room: int | None = None  # tokens a budgeted answer left unused (for the nudge)
        self._runners: dict[str, Callable[[dict[str, Any]], str]] = {
            "remember": self._remember, "recall": self._recall, "wake_up": self._wake_up,
            "forget": self._forget, "list_drawers": self._list_drawers,
            "get": lambda args: run_get(self._op, self.palace, args, GET_MAX_TOKENS),
            "rooms": lambda args: run_rooms(self._op, self.palace),
            "upkeep": lambda args: run_upkeep(self._op, self.palace, args),
            "kg_assert": self._kg_assert, "kg_query": self._kg_query,
            "kg_invalidate": self._kg_invalidate,
            "memoir": lambda args: run_memoir(self._op, self.palace, args, self.compact),
        }

    @property
    def palace(self) -> str:
        """The palace the palace-scoped tools act on."""
        return self._palace

    @palace.setter
    def palace(self, name: str) -> None:
        if name != self._palace:
            self._palace = name

    def list_tools(self) -> list[dict[str, Any]]:
        """The served tools as ``tools/list`` entries, in their stable order."""
        return [spec.to_mcp() for spec in tools_of(self.toolsets)]

    @staticmethod
    def has_tool(name: str) -> bool:
        """True for a tool of any toolset and for a retired one (the call of a tool not
        served, or retired, is an ``isError`` result saying what to do)."""
        return name in TOOLS_BY_NAME or name in RETIRED

    def call(self, name: str, arguments: object) -> dict[str, Any]:
        """Run tool ``name`` and return its ``CallToolResult``; failures become ``isError``.

        A retired tool's call is an ``isError`` result naming what replaced it.

        Raises:
            KeyError: there is no tool of that name (a protocol error, not a tool error).
        """
        if name in RETIRED:
            return text_result(f"Error: the tool '{name}' was retired; {RETIRED[name]}.",
                               is_error=True)
        spec = TOOLS_BY_NAME[name]
        if name not in self._served:
            toolset = TOOLSET_OF[name]
            return text_result(
                f"Error: the tool '{name}' is in the toolset '{toolset}', which this palace "
                f"server does not offer. The user can add it: `palace mcp --tools {toolset}` "
                f"(or `palace init --tools {toolset}`, or `tools = \"{toolset}\"` under [mcp] "
                "in palace's config.toml), then restart the server.", is_error=True)
        try:
            args = check_arguments(spec, arguments)
            self._room = None
            text = self._runners[name](args)
        except PalaceNotFound as exc:
            if exc.details.get("palace") != self.palace:
                return text_result(render_error(exc), is_error=True)
            # A read before the first write: the project simply has no memories yet.
            text = (f"Palace '{self.palace}' holds nothing yet (this project's first "
                    "remember creates it). Store durable facts and decisions with remember.")
        except (PalaceError, ToolArgumentError, OSError) as exc:
            return text_result(render_error(exc), is_error=True)
        if name in _STORING_TOOLS:
            self._calls_since_remember = 0
        else:
            self._calls_since_remember += 1
            if self._calls_since_remember >= self._nudge_after and (
                    self._room is None or self._room >= NUDGE_TOKENS):
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
        if self.agent is not None:
            self._client.agent = self.agent
        return self._client

    def _op(self, op: str, palace: str | None, args: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
        client = self._daemon()
        try:
            return client.call(op, palace, args or {})
        except ShuttingDown:
            # The daemon is restarting: a fresh connection reaches (or starts) its successor.
            client.close()
            return client.call(op, palace, args or {})

    # -- tools ------------------------------------------------------------------------------
    def _remember(self, args: dict[str, Any]) -> str:
        payload = {**args, "source": self.source}
        old = args.get("supersedes")
        if old is not None:
            # A correction is by nature close to the drawer it replaces: merging it into that
            # drawer would silently drop the correction.
            payload.setdefault("dedup", False)
        result = self._op("memory.remember", self.palace, payload)
        text = self._remembered(args, result, old)
        notes = remember_notes(result, RESOLVE_BY_UPKEEP if "upkeep" in self._served
                               else "(forget #{id}, or keep both)")
        text = " ".join([text, *notes])
        hint = result.get("consolidate")
        if not hint or "upkeep" not in self._served:  # the hint is a call of upkeep
            return text
        return f"{text}\n{consolidation_hint(hint)}"

    def _remembered(self, args: dict[str, Any], result: Mapping[str, Any], old: Any) -> str:
        where = "/".join(str(args[k]) for k in ("wing", "room") if args.get(k))
        place = f" [{where}]" if where else ""
        did = result["id"]
        if result.get("deduplicated"):
            sim = result.get("similarity")
            how = f" (similarity {sim:.2f})" if isinstance(sim, int | float) else ""
            text = (f"Refreshed existing drawer #{did}{place} instead of storing a "
                    f"near-duplicate{how} in palace '{self.palace}'. If this really is a "
                    "different memory, call remember again with dedup=false; if it updates "
                    f"#{did}, call it with supersedes={did}.")
        elif result.get("created", True):
            text = f"Stored drawer #{did}{place} in palace '{self.palace}'."
            if result.get("pending_chunks"):
                text += (f" Its {result['pending_chunks']} chunks are being embedded in the "
                         "background; until then recall finds it by its words.")
            if old is not None:
                return (f"{text} It supersedes drawer #{old}, which is kept as history and no "
                        "longer recalled.")
            return text
        else:
            text = (f"Already stored as drawer #{did} in palace '{self.palace}' "
                    "(identical text); nothing changed.")
        if old is not None:
            text += f" Drawer #{old} was not superseded."
        return text

    def _recall(self, args: dict[str, Any]) -> str:
        if args.pop("scope", "palace") == "all":
            return self._recall_all(args)
        # The daemon renders the text and fits all of it into the budget (recall_text).
        return self._budgeted(self._op("memory.recall", self.palace, self._layout(args)))

    def _layout(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` asking the daemon for this bridge's layout (one line per drawer or not),
        its excerpts naming the get tool an agent has."""
        return {**args, "for_agent": True, **({"compact": True} if self.compact else {})}

    def _budgeted(self, result: Mapping[str, Any]) -> str:
        """A recall's or wake-up's text as the daemon rendered and counted it, noting the
        room its budget has left."""
        self._room = int(result.get("budget", 0)) - int(result.get("tokens_used", 0))
        return str(result["text"])

    def _recall_all(self, args: dict[str, Any]) -> str:
        """``recall`` over every palace in one ``memory.recall_all`` op (one relevance scale).

        The tool's palace-only arguments (budget, levels, deep) do not apply across palaces and
        are dropped rather than refused, so one schema serves both scopes.
        """
        accepted = SPECS["memory.recall_all"].args
        result = self._daemon().call(
            "memory.recall_all", None, {k: v for k, v in args.items() if k in accepted})
        merged = list(result.get("results") or [])
        searched = list(result.get("palaces") or [])
        head = (f"Recall {json.dumps(args['query'], ensure_ascii=False)} across "
                f"{len(searched)} palace(s); this project's is '{self.palace}'")
        if result.get("mode"):
            head += f" (mode {result['mode']})"
        lines = [head]
        if merged and not result.get("nothing_relevant"):
            if not self.compact:
                lines.append("")
            lines.extend(render_items(merged, self.compact, show_palace=True))
        elif merged:
            lines.append(f"nothing relevant in any palace for: {args['query']}")
        else:
            lines.append("No drawers matched in any palace.")
        skipped = [f"{s['palace']} ({s['error']}: {s['message']})"
                   for s in result.get("skipped") or []]
        if skipped:
            lines.append("Skipped: " + "; ".join(skipped))
        return "\n".join(lines)

    def _wake_up(self, args: dict[str, Any]) -> str:
        return self._budgeted(self._op("memory.wake_up", self.palace, self._layout(args)))

    def _forget(self, args: dict[str, Any]) -> str:
        result = self._op("memory.forget", self.palace, args)
        until = format_time(result.get("restorable_until_ms"))
        return forgotten_text(result, int(args["id"]), self.palace, until)

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
        lines.extend(render_items([_cut(d) for d in drawers], self.compact))
        if result.get("next_offset") is not None:
            lines.append(f"More: call list_drawers with offset={result['next_offset']}.")
        return "\n".join(lines)

    # -- knowledge graph --------------------------------------------------------------------
    def _kg_assert(self, args: dict[str, Any]) -> str:
        # type, definition and labels describe the subject (graph.describe), after the fact.
        describe: dict[str, Any] = {k: args.pop(k) for k in ("type", "definition", "labels")
                                    if k in args}
        result = self._op("graph.assert", self.palace, {**args, "source_agent": self.source})
        fact = result["fact"]
        lines = [f"Recorded fact in palace '{self.palace}':",
                 render_fact(fact, compact=self.compact)]
        if describe:
            entity = self._op("graph.describe", self.palace,
                              {"entity": args["subject"], **describe})["entity"]
            lines.append(f"{entity['name']} is described: " + describe_entity(entity))
        predicate = str(fact.get("predicate"))
        multi = args.get("multi")
        if not (multi if multi is not None else predicate in MULTI_VALUED):
            lines.append(f"('{predicate}' holds one value at a time: asserting it closes "
                         "the previous value's interval; kg_query with history=true shows "
                         "the history.)")
        return "\n".join(lines)

    def _kg_invalidate(self, args: dict[str, Any]) -> str:
        result = self._op("graph.invalidate", self.palace, args)
        fact = result["fact"]
        return "\n".join([
            f"Fact #{fact.get('id')} is closed in palace '{self.palace}' (kept as history):",
            render_fact(fact, compact=self.compact)])

    def _facts_block(self, head: str, facts: list[Mapping[str, Any]]) -> str:
        sep = "\n" if self.compact else "\n\n"
        return head + sep + "\n".join(render_facts(facts, self.compact))

    def _kg_query(self, args: dict[str, Any]) -> str:
        history = args.pop("history", False)
        if args.get("depth") is not None:
            if history:
                raise ToolArgumentError("give either depth or history=true, not both")
            return self._kg_neighbors({"entity": args.pop("subject"), **args})
        if args.get("relation") is not None:
            raise ToolArgumentError("relation filters the walk of depth: give depth too")
        args.pop("relation", None)
        if history:
            if args.get("as_of") is not None:
                raise ToolArgumentError("give either as_of or history=true, not both")
            return self._kg_history(args)
        result = self._op("graph.query", self.palace, args)
        subject = str(args["subject"])
        if result.get("entity") is None:
            return self._unknown_entity(subject)
        name = str(result["entity"].get("name") or subject)
        when = (f"valid at {format_time(result['as_of_ms'])}"
                if result.get("as_of_ms") is not None else "true now")
        facts = list(result.get("facts") or [])
        described = describe_entity(result["entity"])
        about = f"'{name}' ({described})" if described else f"'{name}'"
        if not facts:
            return (f"No facts about {about} {when} in palace '{self.palace}'. kg_query with "
                    "history=true shows its full history.")
        return self._facts_block(f"Facts about {about} {when} in palace '{self.palace}' "
                                 f"({len(facts)}):", facts)

    def _kg_history(self, args: dict[str, Any]) -> str:
        result = self._op("graph.timeline", self.palace, args)
        subject = str(args["subject"])
        if result.get("entity") is None:
            return self._unknown_entity(subject)
        name = str(result["entity"].get("name") or subject)
        facts = list(result.get("facts") or [])
        if not facts:
            return f"No facts mention '{name}' in palace '{self.palace}'."
        return self._facts_block(f"History of '{name}' in palace '{self.palace}' "
                                 f"({len(facts)} facts, oldest first):", facts)

    def _kg_neighbors(self, args: dict[str, Any]) -> str:
        result = self._op("graph.neighbors", self.palace, args)
        entity = str(args["entity"])
        if result.get("entity") is None:
            return self._unknown_entity(entity)
        return "\n".join(render_neighbours(result, self.palace, int(args.get("depth", 1)),
                                           args.get("relation"), self.compact))

    def _unknown_entity(self, name: str) -> str:
        return (f"'{name}' is not in the knowledge graph of palace '{self.palace}' yet "
                "(record facts about it with kg_assert).")


# list_drawers shows a long drawer's start (get reads it whole): ten of them, the default
# page, stay under 1,000 tokens (tests/palace_client/mcp/test_mcp_toolsets.py).
LIST_EXCERPT_CHARS = 200
LIST_EXCERPT_LINES = 3


def _cut(drawer: dict[str, Any]) -> dict[str, Any]:
    """``drawer`` with a long text cut to its start and marked as an excerpt (``get`` has all).

    A listing is for finding drawers; a 200k-character text printed whole would fill the
    agent's context with one memory.
    """
    text = str(drawer.get("text", ""))
    start = excerpt(text, LIST_EXCERPT_CHARS, LIST_EXCERPT_LINES)
    if start is None:
        return drawer
    return {**drawer, "text": start, "excerpt": True, "chars": len(text)}
