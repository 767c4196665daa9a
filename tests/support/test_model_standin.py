"""The model stand-in of tests/support/model_standin.py, over HTTP in-process: each API's answer
to a plain prompt, to a "remember: X" prompt with the tool declared (a tool call) and to a tool
result (the final text), and the recorded bodies."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.support.model_standin import ModelStandin


def post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.headers["Content-Type"]), resp.read()


def sse(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in data.decode().splitlines()
            if line.startswith("data: ")]


def test_anthropic_messages_script() -> None:
    tools = [{"name": "mcp__palace__remember", "input_schema": {}}]
    with ModelStandin() as s:
        url = s.url + "/v1/messages?beta=true"
        # Claude Code puts a "system" message after the user's: the user's turn counts.
        ask: dict[str, Any] = {"model": "m", "stream": True, "tools": tools, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "<r>ctx</r>"},
                                         {"type": "text", "text": "remember: blue is best"}]},
            {"role": "system", "content": "hook context"}]}
        ctype, data = post(url, ask)
        assert ctype == "text/event-stream"
        events = sse(data)
        assert events[1]["content_block"]["name"] == "mcp__palace__remember"
        assert json.loads(events[2]["delta"]["partial_json"]) == {"text": "blue is best"}
        assert events[4]["delta"]["stop_reason"] == "tool_use"
        result = {**ask, "messages": [*ask["messages"], {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]}
        assert sse(post(url, result)[1])[2]["delta"]["text"] == s.script.final_text
        # No such tool declared, or not streamed: a plain JSON text answer.
        _, data = post(url, {**ask, "stream": False, "tools": []})
        assert json.loads(data)["content"] == [{"type": "text", "text": s.script.plain_text}]
        assert [r.body["stream"] for r in s.requests] == [True, True, False]
        assert "hook context" in s.bodies_text()


def test_openai_responses_script_with_a_codex_namespace() -> None:
    tools = [{"type": "function", "name": "exec_command"},
             {"type": "namespace", "name": "mcp__palace",
              "tools": [{"type": "function", "name": "remember"}]}]
    with ModelStandin() as s:
        url = s.url + "/v1/responses"
        ask: dict[str, Any] = {"model": "m", "stream": True, "tools": tools, "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                                  "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "remember: tea at 4"}]}]}
        events = sse(post(url, ask)[1])
        call = events[-1]["response"]["output"][0]
        assert (call["type"], call["namespace"], call["name"]) == (
            "function_call", "mcp__palace", "remember")
        assert json.loads(call["arguments"]) == {"text": "tea at 4"}
        result = {**ask, "input": [*ask["input"], call, {"type": "function_call_output",
                                                         "call_id": call["call_id"],
                                                         "output": "ok"}]}
        done = sse(post(url, result)[1])[-1]["response"]["output"][0]
        assert done["content"][0]["text"] == s.script.final_text


def test_gemini_generate_content_script() -> None:
    tools = [{"functionDeclarations": [{"name": "mcp_palace_remember"}]}]
    with ModelStandin() as s:
        base = s.url + "/v1beta/models/gemini-2.5-flash"
        ask: dict[str, Any] = {"tools": tools, "contents": [{"role": "user", "parts": [
            {"text": "remember: lunch is at noon"}]}]}
        chunk = sse(post(base + ":streamGenerateContent?alt=sse", ask)[1])[0]
        part = chunk["candidates"][0]["content"]["parts"][0]
        assert part == {"functionCall": {"name": "mcp_palace_remember",
                                         "args": {"text": "lunch is at noon"}}}
        result = {**ask, "contents": [*ask["contents"], {"role": "model", "parts": [part]},
                                      {"role": "user", "parts": [{"functionResponse": {}}]}]}
        _, data = post(base + ":generateContent", result)
        assert json.loads(data)["candidates"][0]["content"]["parts"] == [
            {"text": s.script.final_text}]
        assert len(s.requests) == 2
        s.clear()
        assert s.requests == []
