"""The client side agrees with the op specs (``palaced.wire.specs``), the one definition of what
every op accepts.

* MCP input schemas are generated from the specs; checked here against the specs by rules
  written independently of the generator, with the deliberate narrowings listed;
* CLI options take their defaults and ranges from the specs; checked here for every command
  that runs an op (names, defaults, ranges, required arguments), renames listed;
* ``Client`` methods are written by hand; checked here: keyword names and defaults.

A new tool, command or method that runs an op must be added to the tables below, so nothing
escapes the checks.
"""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest

from palace_client.api.client import Client
from palace_client.mcp.schema import ToolSpec, op_property
from palace_client.mcp.tools import GET_MAX_TOKENS, GET_MIN_TOKENS, GET_TOKENS, LIST_PAGE, TOOLS
from palaced.wire.args import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STR, NO_LIMIT, Arg
from palaced.wire.specs import MAX_BUDGET, MAX_TOP_K, SPECS
from palaced.wire.vocab import IMPORTANCE_PRESETS, MAX_DEPTH, TYPED_RELATIONS
from tests.support.cli_commands import COMMANDS as CLI_COMMANDS

STRUCTURAL = 2**53  # maxima at or beyond this are structural (MAX_ID): clients omit them


def _expected_bounds(arg: Arg) -> tuple[float | None, float | None]:
    return arg.min, arg.max if arg.max is not None and arg.max < STRUCTURAL else None


# -- MCP ----------------------------------------------------------------------------------------
JSON_TYPE = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
             "strlist": "array", "intlist": "array", "list": "array"}
# Keywords a tool sets on purpose to something stricter than the op's spec, and why.
MCP_NARROWED: dict[tuple[str, str], dict[str, Any]] = {
    # Claude Code refuses a tool result over 25,000 tokens; below 200 the lines around the
    # texts (charged their bytes) leave no room for one.
    ("get", "max_tokens"): {"minimum": GET_MIN_TOKENS, "maximum": GET_MAX_TOKENS},
}
# Defaults a tool sets instead of the op's, and why.
MCP_DEFAULTS: dict[tuple[str, str], Any] = {
    ("list_drawers", "limit"): LIST_PAGE,  # a page under 1,000 tokens (the op's 50: ~5,000)
    ("get", "max_tokens"): GET_TOKENS,  # the op has none: a whole drawer, up to 200k chars
}
# Union kinds offered whole, as an anyOf of their members, and why: an importance is a preset
# name (as the CLI's --importance takes) or a number on the 0-1 scale they are points of.
_IMPORTANCE = [{"type": "string", "enum": list(IMPORTANCE_PRESETS)},
               {"type": "number", "minimum": 0.0, "maximum": 1.0}]
MCP_UNIONS = {("remember", "importance"): _IMPORTANCE, ("upkeep", "importance"): _IMPORTANCE}
# Empty texts and names are refused by the daemon's content checks; the schema says so.
MCP_NON_EMPTY = {("remember", "text"), ("recall", "query"), ("kg_assert", "subject"),
                 ("kg_assert", "predicate"), ("kg_assert", "object"), ("kg_query", "subject"),
                 ("memoir", "name"), ("memoir", "definition"), ("memoir", "new_name")}
# Properties an enum narrows to the only values the daemon accepts, and why.
MCP_ENUMS = {("memoir", "relation"): list(TYPED_RELATIONS)}  # the nine typed relations
# Properties only the tool knows (no op argument), and why.
MCP_TOOL_ONLY = {
    ("recall", "scope"): "'all' runs memory.recall in every palace and merges the results",
    ("kg_query", "history"): "true runs graph.timeline instead of graph.query",
    ("kg_query", "depth"): "given, runs graph.neighbors (its bounds, from 1) instead",
    ("memoir", "action"): "picks the memoir op the tool runs (tools.MEMOIR_ACTIONS)",
    ("upkeep", "action"): "picks the op the tool runs (tools.UPKEEP_ACTIONS)",
    ("get", "ids"): "the drawers to read: memory.get runs once per id, within max_tokens",
}
# Tool-only properties without a default: absent means "not that way" (plain query), or the
# property is required.
MCP_NO_DEFAULT = {("kg_query", "depth"), ("memoir", "action"), ("upkeep", "action"),
                  ("get", "ids")}
# Required op arguments a tool sends from a tool-only property.
MCP_SENT_FROM = {("get", "id"): "ids"}
# Properties whose name says it all: no description, so tools/list stays short.
MCP_UNDESCRIBED = {"text", "query", "subject", "entity", "source_url", "top_k", "wing", "room",
                   "tags", "limit", "offset", "budget", "depth", "memoir", "definition",
                   "relation", "action", "description", "id", "importance", "summary"}


def _expected_schema(tool: str, name: str, arg: Arg, json_type: str) -> dict[str, Any]:
    """What a property for ``arg`` must say, from the spec alone (plus the listed narrowings).

    Published: no length limits (checked by the bridge and the daemon, not advertised) and
    no defaults that say "nothing" (false, "", []).
    """
    want: dict[str, Any] = {"type": json_type}
    lo, hi = _expected_bounds(arg)
    bounds = {k: v for k, v in (("minimum", lo), ("maximum", hi)) if v is not None}
    if json_type in ("integer", "number"):
        want.update(bounds)
    if json_type == "array":
        if arg.kind == "strlist":
            want["items"] = {"type": "string"}
        elif arg.kind == "intlist":
            want["items"] = {"type": "integer", **bounds}
    default = MCP_DEFAULTS.get((tool, name), arg.default)
    if not any(default == e and type(default) is type(e) for e in (None, False, "", [])):
        want["default"] = default
    if (tool, name) in MCP_NON_EMPTY:
        want["minLength"] = 1
    if (tool, name) in MCP_ENUMS:
        want["enum"] = MCP_ENUMS[tool, name]
    want.update(MCP_NARROWED.get((tool, name), {}))
    return want


def _op_of(tool: ToolSpec, name: str) -> str:
    op = tool.params[name].op or tool.op
    assert op in SPECS, f"{tool.name}.{name} names no op"
    return op


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_mcp_schema_is_the_op_spec(tool: ToolSpec) -> None:
    # The ops the tool runs: its actions', or its own and those its params come from.
    ops = set(tool.actions.values()) if tool.actions else {
        tool.op, *(p.op for p in tool.params.values() if p.op)}
    assert ops <= set(SPECS), f"{tool.name} names no op"
    assert {(tool.name, k) for k in tool.extra} <= set(MCP_TOOL_ONLY), (
        "tool-only properties: list them here with their reason")
    schema = tool.input_schema
    for name, prop in schema["properties"].items():
        if name in tool.extra:
            assert prop.get("description") or "enum" in prop, name
            assert ("default" in tool.properties[name]) != ((tool.name, name) in MCP_NO_DEFAULT)
            continue
        op = _op_of(tool, name)
        assert op in ops, f"{tool.name}.{name} comes from {op}, which the tool never runs"
        arg = SPECS[op].args[name]
        if "anyOf" in prop:
            assert prop["anyOf"] == MCP_UNIONS[tool.name, name], name
            assert [m["type"] for m in prop["anyOf"]] == [
                JSON_TYPE[k] for k in arg.kind.split("|")], name
            assert prop.get("default") == arg.default, name
            continue
        # A union kind ("str|int") is otherwise offered as one of its members.
        assert prop["type"] in {JSON_TYPE[k] for k in arg.kind.split("|")}, name
        got = {k: v for k, v in prop.items() if k != "description"}
        assert got == _expected_schema(tool.name, name, arg, prop["type"]), name
        assert prop.get("description") or name in MCP_UNDESCRIBED, (
            f"{tool.name}.{name} has no description")
        # The bridge still checks the limits it does not publish.
        full = tool.properties[name]
        if json_type_limit := {"string": "maxLength", "array": "maxItems"}.get(prop["type"]):
            limit = arg.max_len or (DEFAULT_MAX_STR if prop["type"] == "string"
                                    else DEFAULT_MAX_ITEMS)
            assert full.get(json_type_limit) == (None if limit == NO_LIMIT else limit), name
    if tool.actions:
        assert schema["required"] == list(tool.extra_required) == ["action"]
        for op in ops:
            missing = {k for k, a in SPECS[op].args.items() if a.required} - set(tool.params)
            assert not missing, f"{tool.name} cannot send the required {missing} of {op}"
    else:
        op_spec = SPECS[str(tool.op)]
        assert schema.get("required", []) == [
            k for k in tool.params if _op_of(tool, k) == tool.op and op_spec.args[k].required
        ] + list(tool.extra_required)
        assert all(k in MCP_SENT_FROM.values() for k in tool.extra_required)
        missing = {k for k, a in op_spec.args.items() if a.required and MCP_SENT_FROM.get(
            (tool.name, k)) not in tool.extra_required} - set(tool.params)
        assert not missing, f"{tool.name} cannot send the required {missing}"
    assert tool.read_only == all(SPECS[op].read_only for op in ops), (
        "a tool is read-only exactly when its ops are")


def test_mcp_bounds_are_the_daemons() -> None:
    """The bounds that once disagreed with the daemon (issue 9)."""
    props = {t.name: t.input_schema["properties"] for t in TOOLS}
    assert props["recall"]["top_k"]["maximum"] == MAX_TOP_K
    assert props["kg_query"]["depth"]["minimum"] == 1
    assert props["kg_query"]["depth"]["maximum"] == MAX_DEPTH
    assert props["memoir"]["depth"]["maximum"] == MAX_DEPTH
    assert props["wake_up"]["budget"]["minimum"] == 0
    assert props["wake_up"]["budget"]["maximum"] == MAX_BUDGET
    assert props["wake_up"]["budget"]["default"] == SPECS["memory.wake_up"].args["budget"].default
    assert props["list_drawers"]["limit"]["maximum"] == SPECS["memory.list"].args["limit"].max


def test_op_property_refuses_to_widen_the_spec() -> None:
    assert op_property("memory.recall", "top_k", minimum=5)["minimum"] == 5
    with pytest.raises(ValueError, match="below"):
        op_property("memory.recall", "top_k", minimum=0)
    with pytest.raises(ValueError, match="above"):
        op_property("memory.recall", "top_k", maximum=MAX_TOP_K + 1)
    with pytest.raises(ValueError, match="narrowing"):
        op_property("memory.recall", "top_k", multipleOf=2)
    with pytest.raises(ValueError, match="kind"):
        op_property("memory.remember", "ttl", kind="float")
    with pytest.raises(ValueError, match="enum"):
        op_property("graph.link", "relation", enum=["x" * 65])
    with pytest.raises(KeyError):
        op_property("memory.recall", "topk")


# -- CLI ----------------------------------------------------------------------------------------
# Every command that runs an op; commands outside both tables fail the test.
CLI_OPS: dict[str, str] = {
    "create": "palace.create", "list": "palace.list", "info": "palace.info",
    "delete": "palace.delete", "reembed": "palace.reembed",
    "remember": "memory.remember", "remember-many": "memory.remember_many",
    "recall": "memory.recall", "wake-up": "memory.wake_up", "get": "memory.get",
    "forget": "memory.forget", "drawers": "memory.list", "update": "memory.update",
    "status": "daemon.status", "daemon start": "daemon.status", "daemon stop": "daemon.stop",
    "daemon status": "daemon.status", "daemon restart": "daemon.stop",
    "decay": "memory.decay", "prune": "memory.prune", "consolidate": "memory.consolidate",
    "health": "memory.health",
    "conflicts list": "memory.conflicts", "conflicts resolve": "memory.resolve_conflict",
    "doctor": "palace.doctor", "backup": "palace.backup", "restore": "palace.restore",
    "kg assert": "graph.assert", "kg link": "graph.link", "kg invalidate": "graph.invalidate",
    "kg query": "graph.query", "kg timeline": "graph.timeline",
    "kg neighbors": "graph.neighbors", "kg path": "graph.path", "kg search": "graph.search",
    "kg describe": "graph.describe",
    "restore-drawer": "memory.restore", "trash list": "memory.trash", "merge": "memory.merge",
    "trash empty": "memory.empty_trash", "audit": "palace.audit", "policy show": "palace.policy",
    "policy set": "palace.policy_set",
    "export": "palace.export",
    "model load": "model.load", "model use": "model.use", "model list": "daemon.status",
    "memoir create": "memoir.create", "memoir list": "memoir.list", "memoir show": "memoir.show",
    "memoir delete": "memoir.delete", "memoir add-concept": "memoir.add_concept",
    "memoir refine": "memoir.refine", "memoir search": "memoir.search",
    "memoir inspect": "memoir.inspect", "memoir link": "memoir.link",
    "memoir unlink": "memoir.unlink", "memoir update": "memoir.update",
    "memoir rename-concept": "memoir.rename_concept",
    "memoir delete-concept": "memoir.delete_concept",
    "hook capture": "capture.transcript", "import claude-code": "capture.transcript",
    "import codex": "capture.transcript", "import gemini": "capture.transcript",
    "import copilot": "capture.transcript",
    "hook wake-up": "memory.wake_up",
}
# Commands that run a second op when their first one's required argument is left out: the
# selectors of `forget` (no drawer id) send memory.forget_many, `restore-drawer --batch`
# memory.restore_batch; their other parameters are that op's arguments.
CLI_ALSO: dict[str, str] = {"forget": "memory.forget_many",
                            "restore-drawer": "memory.restore_batch"}
# Commands that run several ops (an import: palace.create, then palace.restore or the
# source.* ops of the import ledger; model fetch and import install the model's files, then
# send model.load (import: model.check for a model that is not the configured one); hook
# prompt: memory.wake_up on a session's first prompt, then memory.recall with the hook's own
# fixed arguments), or none.
CLI_NOT_OPS = {"mcp", "init", "service install", "service uninstall", "service status",
               "uninstall", "import jsonl", "import chatgpt", "import markdown",
               "model fetch", "model import", "project", "hook prompt", "serve", "ui"}
# CLI parameters named otherwise than the op argument they carry.
CLI_RENAMES = {"tag": "tags", "when": "occurred_at", "obj": "object", "drawer_id": "id",
               "fact_id": "id", "concept": "name", "conflict_id": "id", "merge": "text"}
# CLI parameters that are no op argument: palace selection, output, confirmation.
# ("all_palaces": `recall --all` sends memory.recall_all instead; "file": where `export`
# writes; "location": `import claude-code|codex|gemini|copilot` expands files or
# directories into transcripts;
# "clear_tags": `update --clear-tags` sends tags=[]; "nobody": `policy set --nobody` sends an
# empty agents list; "agent": the agent running a hook, whose input and output shapes it
# uses and, for `hook capture`, whose transcript format it sends; "supersede", "keep_both":
# `conflicts resolve` sends them as resolution.)
CLI_ONLY = {"palace", "as_json", "yes", "name", "all_palaces", "file", "location", "clear_tags",
            "nobody", "agent", "supersede", "keep_both"}
# Defaults the CLI chooses on purpose.
CLI_DEFAULTS: dict[tuple[str, str], Any] = {("drawers", "limit"): 20,  # a terminal page
                                            ("trash list", "limit"): 20}
# Op arguments the CLI takes from elsewhere than a parameter.
CLI_ELSEWHERE = {("remember-many", "items"),  # JSONL on stdin
                 ("hook capture", "path"),  # the hook input on stdin
                 ("import claude-code", "path"),  # each transcript found under PATH
                 ("import codex", "path"), ("import gemini", "path"),
                 ("import copilot", "path"),
                 ("conflicts resolve", "resolution")}  # --supersede, --keep-both or --merge
# Op arguments a command does not offer, and why. Every other argument of a command's op must
# be one of its parameters: a new optional argument of an op fails the test until its command
# takes it or it is listed here (recall's and list's since/until went unseen a session).
_CAPTURE_SET = "set by the command: format from the agent, session and wing from the transcript"
CLI_UNEXPOSED: dict[tuple[str, str], str] = {
    **{(c, a): _CAPTURE_SET for c in ("hook capture", "import claude-code", "import codex",
                                      "import gemini", "import copilot")
       for a in ("format", "session_id", "wing", "project_wing", "create", "wait")},
    ("hook capture", "dry_run"): "a hook captures; `palace import ... --dry-run` previews",
    ("export", "cursor"): "the command pages through the whole palace itself",
    ("export", "limit"): "the command pages through the whole palace itself",
    **{(c, a): "shapes the text for an agent's context (MCP, hooks); the CLI prints for a person"
       for c in ("recall", "wake-up") for a in ("compact", "for_agent")},
    ("recall", "exclude"): "an agent's paging past drawers already shown (MCP)",
    **{("hook wake-up", a): "the hook's own fixed arguments for an agent's session start"
       for a in ("budget", "compact", "for_agent")},
    ("remember", "expires_at"): "--ttl sets the expiry, as a duration",
    ("get", "max_tokens"): "cuts the text to a count of the daemon's tokenizer's tokens, an "
                           "agent's context unit (the MCP get tool's bound); a person at a "
                           "terminal pages a long drawer (`palace get ID | less`) and sees "
                           "first lines in `palace drawers`",
}
# Parameters parsed by the CLI before sending (the daemon checks their values).
CLI_PARSED = {("recall", "levels"): "--levels 0,1,3", ("remember", "importance"): "0.5 or high",
              ("policy set", "agents"): "GLOB... or --nobody (an empty list)",
              ("update", "importance"): "0.5 or high"}




def test_every_cli_command_is_mapped() -> None:
    assert set(CLI_COMMANDS) == set(CLI_OPS) | CLI_NOT_OPS


def _cli_kind(param: click.Parameter) -> str:
    """The op argument kind a CLI parameter yields."""
    kinds = [(click.types.BoolParamType, "bool"), (click.types.IntParamType, "int"),
             (click.types.FloatParamType, "float"), (click.types.StringParamType, "str")]
    kind = next(k for t, k in kinds if isinstance(param.type, t))
    return f"{kind}list" if param.multiple or param.nargs == -1 else kind


def _same_default(cli: Any, spec: Any) -> bool:
    """``cli`` is the spec's default, or stands for "not given" (the daemon's default)."""
    if cli is None or cli == spec:
        return True
    return cli in ([], ()) and spec in (None, [])


@pytest.mark.parametrize("command", sorted(CLI_OPS))
def test_cli_options_are_the_op_spec(command: str) -> None:
    op = SPECS[CLI_OPS[command]]
    seen: set[str] = set()
    for param in CLI_COMMANDS[command].params:
        assert param.name is not None
        if param.name in CLI_ONLY:
            continue
        name = CLI_RENAMES.get(param.name, param.name)
        also = SPECS[CLI_ALSO[command]] if command in CLI_ALSO else None
        carrier = op if name in op.args or also is None else also
        assert name in carrier.args, f"{command}: {param.name} is no argument of {op.name}"
        seen.add(name)
        arg = carrier.args[name]
        default = CLI_DEFAULTS.get((command, name), arg.default)
        if (command, name) in CLI_PARSED:
            continue  # a string the command parses; the daemon checks the value
        if also is not None and arg.required and not param.required:
            default = None  # left out: the command sends the other op
        else:
            assert param.required == arg.required, (command, name)
        assert _same_default(param.default, default), (command, name, param.default, default)
        kind = _cli_kind(param)
        assert kind in arg.kind.split("|"), (command, name, kind)  # the kind, or a member
        if kind not in ("int", "float", "intlist"):
            continue
        lo, hi = _expected_bounds(arg)
        if lo is not None or hi is not None:
            assert isinstance(param.type, click.IntRange | click.FloatRange), (command, name)
            assert (param.type.min, param.type.max) == (lo, hi), (command, name)
    required = {k for k, a in op.args.items() if a.required}
    if command in CLI_ALSO:
        required |= {k for k, a in SPECS[CLI_ALSO[command]].args.items() if a.required}
    missing = required - seen - {n for c, n in CLI_ELSEWHERE if c == command}
    assert not missing, f"{command} cannot send the required {missing}"
    offered = set(op.args) | (set(SPECS[CLI_ALSO[command]].args) if command in CLI_ALSO
                              else set())
    named = {CLI_RENAMES.get(str(p.name), str(p.name)) for p in CLI_COMMANDS[command].params}
    unexposed = offered - seen - named - {n for c, n in CLI_ELSEWHERE if c == command}
    listed = {n for c, n in CLI_UNEXPOSED if c == command}
    assert unexposed <= listed, (f"{command} does not offer {sorted(unexposed - listed)}: "
                                 "add options (op_option) or list them in CLI_UNEXPOSED")
    assert not listed - unexposed, f"{command} offers {sorted(listed - unexposed)} now"


def test_cli_parsed_parameters_exist() -> None:
    for command, name in CLI_PARSED:
        assert name in {p.name for p in CLI_COMMANDS[command].params}


# -- Client -------------------------------------------------------------------------------------
CLIENT_OPS: dict[str, str] = {
    "create_palace": "palace.create", "delete_palace": "palace.delete",
    "list_palaces": "palace.list", "palace_info": "palace.info", "reembed": "palace.reembed",
    "remember": "memory.remember", "remember_ex": "memory.remember",
    "remember_many": "memory.remember_many", "remember_many_ex": "memory.remember_many",
    "recall": "memory.recall",
    "recall_ex": "memory.recall", "recall_all": "memory.recall_all",
    "wake_up": "memory.wake_up", "get": "memory.get", "update": "memory.update",
    "forget": "memory.forget", "drawers": "memory.list",
    "status": "daemon.status", "stop_daemon": "daemon.stop",
    "kg_assert": "graph.assert", "kg_invalidate": "graph.invalidate",
    "kg_query": "graph.query", "kg_timeline": "graph.timeline", "kg_link": "graph.link",
    "kg_neighbors": "graph.neighbors", "kg_path": "graph.path", "kg_search": "graph.search",
    "kg_describe": "graph.describe",
    "decay": "memory.decay", "prune": "memory.prune", "consolidate": "memory.consolidate",
    "health": "memory.health",
    "conflicts": "memory.conflicts", "resolve_conflict": "memory.resolve_conflict",
    "restore_drawer": "memory.restore", "trash": "memory.trash",
    "empty_trash": "memory.empty_trash", "audit": "palace.audit", "policy": "palace.policy",
    "forget_many": "memory.forget_many", "restore_batch": "memory.restore_batch",
    "merge": "memory.merge",
    "set_policy": "palace.policy_set",
    "export": "palace.export", "import_records": "palace.import_records",
    "sources": "source.list", "sync_source": "source.sync", "drop_source": "source.drop",
    "doctor": "palace.doctor", "backup": "palace.backup", "restore": "palace.restore",
    "memoir_create": "memoir.create", "memoir_list": "memoir.list", "memoir_show": "memoir.show",
    "memoir_delete": "memoir.delete", "memoir_add_concept": "memoir.add_concept",
    "memoir_refine": "memoir.refine", "memoir_search": "memoir.search",
    "memoir_inspect": "memoir.inspect", "memoir_link": "memoir.link",
    "memoir_unlink": "memoir.unlink", "memoir_update": "memoir.update",
    "memoir_rename_concept": "memoir.rename_concept",
    "memoir_delete_concept": "memoir.delete_concept",
    "capture_transcript": "capture.transcript",
}
CLIENT_PLUMBING = {"call", "close", "server_info", "agent"}
# Client parameters named otherwise than the op argument they carry; None: the request's
# palace (not an argument).
CLIENT_RENAMES: dict[str, str | None] = {"palace": None, "name": None, "obj": "object",
                                         "drawer_id": "id", "fact_id": "id", "digest": "hash",
                                         "concept": "name", "conflict_id": "id"}


def test_every_client_method_is_mapped() -> None:
    # Client's own methods and those of its mixins (transfer, admin, memoirs, governance).
    public = {n for cls in Client.__mro__[:-1] for n, v in vars(cls).items()
              if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    assert public == set(CLIENT_OPS) | CLIENT_PLUMBING


@pytest.mark.parametrize("method", sorted(CLIENT_OPS))
def test_client_keywords_are_the_op_spec(method: str) -> None:
    op = SPECS[CLIENT_OPS[method]]
    seen: set[str] = set()
    for param in list(inspect.signature(getattr(Client, method)).parameters.values())[1:]:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            continue  # passed through as is: named by the caller after the spec
        name = CLIENT_RENAMES.get(param.name, param.name)
        if name is None:
            continue
        assert name in op.args, f"Client.{method}: {param.name} is no argument of {op.name}"
        seen.add(name)
        arg = op.args[name]
        if param.default is inspect.Parameter.empty:
            continue  # positional: always sent
        assert not arg.required, f"Client.{method}: {name} is required by {op.name}"
        assert _same_default(param.default, arg.default), (method, name, param.default)
    required = {k for k, a in op.args.items() if a.required}
    assert required <= seen, f"Client.{method} cannot send {required - seen}"
