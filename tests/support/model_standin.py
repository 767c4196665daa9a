"""A local stand-in for the model APIs of coding agents, so that a real agent binary runs a
real session offline.

``ModelStandin`` is a threaded HTTP server on 127.0.0.1 that speaks just enough of three APIs
for Claude Code, Codex CLI and Gemini CLI:

* the Anthropic Messages API (``POST /v1/messages``, SSE when ``stream`` is set, plus
  ``/v1/messages/count_tokens``);
* the OpenAI Responses API (``POST /v1/responses``, SSE), with an empty ``GET /v1/models``;
* the Gemini API (``POST /v1beta/models/M:streamGenerateContent`` (SSE with ``alt=sse``),
  ``:generateContent`` and ``:countTokens``).

It records every request (path and JSON body: ``requests``, ``bodies_text``) so that a test can
assert what reached the model, and follows a tiny script, the same for every API:

* when the last turn carries a tool result, it answers with a final text (``final_text``);
* else, when the last user turn's text matches ``trigger`` (a regex with one group) and the
  request declares a tool named ``tool`` (or ending in ``_tool``, ``-tool`` or ``.tool``, as
  agents prefix MCP tools with their server's name), it calls that tool with
  ``{argument: <the group>}``;
* else it answers ``plain_text``.

It knows nothing of palace beyond the tool name and argument of its script.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Script:
    """What the stand-in answers: see the module docstring."""

    tool: str = "remember"
    argument: str = "text"
    # At a line's start: context an agent adds to the turn (a recall quoting an earlier
    # "User: remember: ..." exchange) must not trigger it.
    trigger: str = r"(?m)^remember: ([^\n<]+)"
    final_text: str = "Stored that in memory."
    plain_text: str = "Noted."


@dataclass
class Recorded:
    """One request the stand-in received."""

    method: str
    path: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The body as JSON text (what a test greps for what reached the model)."""
        return json.dumps(self.body, ensure_ascii=False)


@dataclass(frozen=True)
class Turn:
    """The model's view of a request's last turn, whatever the API."""

    user_text: str
    after_tool: bool
    tools: tuple[str, ...]


@dataclass(frozen=True)
class Reply:
    """What to answer: a text, or a call of ``tool_name`` with ``tool_args``."""

    text: str = ""
    tool_name: str = ""
    tool_args: dict[str, Any] = field(default_factory=dict)


def decide(script: Script, turn: Turn) -> Reply:
    """Apply ``script`` to ``turn`` (the module docstring's rules)."""
    if turn.after_tool:
        return Reply(text=script.final_text)
    match = re.search(script.trigger, turn.user_text)
    if match:
        # Agents prefix an MCP server's tools: mcp__palace__remember, mcp_palace_remember,
        # palace-remember, or a namespace (Codex).
        for name in turn.tools:
            if re.fullmatch(rf"(.*[_.-])?{re.escape(script.tool)}", name):
                return Reply(tool_name=name, tool_args={script.argument: match.group(1).strip()})
    return Reply(text=script.plain_text)


def _texts(value: Any) -> Iterator[str]:
    """Every ``text`` string in a content value (a string or a list of blocks)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for block in value:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


# -- the three APIs' last turns -----------------------------------------------------------

def anthropic_turn(body: dict[str, Any]) -> Turn:
    """The last turn of a Messages API request."""
    # Claude Code may put "system" messages after the user's: the turn is the last user one.
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    last = users[-1] if users else {}
    content = last.get("content")
    after = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    tools = tuple(str(t.get("name", "")) for t in body.get("tools") or [])
    return Turn("\n".join(_texts(content)), after, tools)


def responses_turn(body: dict[str, Any]) -> Turn:
    """The last turn of a Responses API request: the items after the last model output."""
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    tail: list[dict[str, Any]] = []
    for item in reversed(items):
        if item.get("role") == "user" or item.get("type") == "function_call_output":
            tail.append(item)
            continue
        break
    after = any(i.get("type") == "function_call_output" for i in tail)
    text = "\n".join(t for i in reversed(tail) for t in _texts(i.get("content")))
    return Turn(text, after, tuple(_responses_tools(body)))


def _responses_tools(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The functions a Responses API request declares: ``{full name: (namespace, name)}``.
    Codex declares an MCP server's tools as a ``namespace`` tool (``mcp__palace``) holding
    functions; a call names the function and its namespace."""
    out: dict[str, tuple[str, str]] = {}
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace":
            for fn in tool.get("tools") or []:
                out[f"{tool.get('name')}__{fn.get('name')}"] = (str(tool.get("name")),
                                                                str(fn.get("name")))
        elif tool.get("name"):
            out[str(tool["name"])] = ("", str(tool["name"]))
    return out


def gemini_turn(body: dict[str, Any]) -> Turn:
    """The last turn of a generateContent request."""
    contents = body.get("contents") or []
    last = contents[-1] if contents else {}
    parts = last.get("parts") or []
    after = any("functionResponse" in p for p in parts)
    text = "\n".join(str(p["text"]) for p in parts if "text" in p)
    tools = tuple(str(d.get("name", "")) for t in body.get("tools") or []
                  for d in t.get("functionDeclarations") or [])
    return Turn(text, after, tools)


# -- the answers --------------------------------------------------------------------------

def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


def anthropic_answer(body: dict[str, Any], reply: Reply) -> tuple[str, bytes]:
    """A Messages API answer: (content type, bytes), streamed when asked."""
    msg_id = "msg_" + uuid.uuid4().hex[:20]
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    if reply.tool_name:
        block: dict[str, Any] = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
                                 "name": reply.tool_name, "input": reply.tool_args}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": reply.text}
        stop = "end_turn"
    model = str(body.get("model", "standin"))
    if not body.get("stream"):
        return "application/json", json.dumps({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": None,
            "usage": usage}).encode()
    if reply.tool_name:
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.tool_args)}
    else:
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": reply.text}
    return "text/event-stream", _sse([
        ("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": start}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def responses_answer(body: dict[str, Any], reply: Reply) -> tuple[str, bytes]:
    """A Responses API answer as SSE."""
    resp_id = "resp_" + uuid.uuid4().hex[:20]
    if reply.tool_name:
        namespace, name = _responses_tools(body)[reply.tool_name]
        item: dict[str, Any] = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:20],
                                "call_id": "call_" + uuid.uuid4().hex[:20],
                                "name": name, "status": "completed",
                                "arguments": json.dumps(reply.tool_args)}
        if namespace:
            item["namespace"] = namespace
    else:
        item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:20], "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
    response = {"id": resp_id, "object": "response", "model": body.get("model", "standin"),
                "status": "in_progress", "output": []}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 15}
    return "text/event-stream", _sse([
        ("response.created", {"type": "response.created", "response": response}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done",
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": {
            **response, "status": "completed", "output": [item], "usage": usage}}),
    ])


def gemini_answer(reply: Reply, *, stream: bool) -> tuple[str, bytes]:
    """A generateContent answer: one SSE chunk when streaming, else the JSON response."""
    part = ({"functionCall": {"name": reply.tool_name, "args": reply.tool_args}}
            if reply.tool_name else {"text": reply.text})
    chunk = {"candidates": [{"content": {"role": "model", "parts": [part]},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                               "totalTokenCount": 15},
             "modelVersion": "standin"}
    if stream:
        return "text/event-stream", _sse([(None, chunk)])
    return "application/json", json.dumps(chunk).encode()


class ModelStandin:
    """The server: ``with ModelStandin() as s: ... s.url ... s.requests``."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self._lock = threading.Lock()
        self._requests: list[Recorded] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a test reads ``requests``, not stderr

            def do_GET(self) -> None:
                standin._record(self, None)
                path = urlsplit(self.path).path
                if path.endswith("/models"):
                    self._send(200, "application/json", b'{"object": "list", "data": [], '
                               b'"models": []}')
                else:
                    self._send(404, "application/json", b'{"error": "not found"}')

            def do_HEAD(self) -> None:
                self._send(200, "text/plain", b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                standin._record(self, body)
                ctype, data = standin.answer(urlsplit(self.path), body)
                self._send(200 if data else 404, ctype, data or b'{"error": "not found"}')

            def _send(self, status: int, ctype: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        with self._lock:
            self._requests.append(Recorded(handler.command, handler.path, body,
                                           dict(handler.headers.items())))

    @property
    def requests(self) -> list[Recorded]:
        """Every request so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        """Forget the recorded requests (between sessions)."""
        with self._lock:
            self._requests.clear()

    def bodies_text(self) -> str:
        """All recorded request bodies as one JSON text."""
        return "\n".join(r.text for r in self.requests)

    def answer(self, url: Any, body: Any) -> tuple[str, bytes]:
        """The answer to a POST of ``body`` to ``url`` ((content type, b"") when unknown)."""
        path: str = url.path
        if not isinstance(body, dict):
            return "application/json", b""
        if path.endswith("/messages/count_tokens"):
            return "application/json", b'{"input_tokens": 10}'
        if path.endswith("/messages"):
            return anthropic_answer(body, decide(self.script, anthropic_turn(body)))
        if path.endswith("/responses"):
            return responses_answer(body, decide(self.script, responses_turn(body)))
        if path.endswith(":countTokens"):
            return "application/json", b'{"totalTokens": 10}'
        if path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
            reply = decide(self.script, gemini_turn(body))
            return gemini_answer(reply, stream=path.endswith(":streamGenerateContent"))
        return "application/json", b""

    def __enter__(self) -> ModelStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
