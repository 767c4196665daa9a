"""The JSON(C) editor of ``palace init``: edits keep every untouched byte, errors say where."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from palace_client.agents.jsonc import JSONC, STRICT, JsonEditError, parse, rewrite


@pytest.mark.parametrize("text", [
    "{}", "{}\n", '{"a": 1}', '{\n  "a": [1, 2],\n  "b": {}\n}\n', '\ufeff{"x": {"y": []}}',
    '{\n\t"a": {\n\t\t"k": true // why\n\t}\n}', '{ /* c */ "a": 1 }', '{"a": [\n  1,\n  2,\n],}',
])
def test_editor_round_trips(text: str) -> None:
    data = parse(text, JSONC).value
    target = json.loads(json.dumps(data))
    target.setdefault("a", {}) if not isinstance(target.get("a"), dict) else None
    target["palace"] = {"command": "p", "args": ["mcp"], "env": {"K": "é"}}
    added = rewrite(text, target, JSONC)
    assert parse(added, JSONC).value == target
    assert rewrite(added, data, JSONC) == text


def test_editor_edits_arrays_and_values_in_place() -> None:
    text = '{\n  "l": ["a", "palace", "b"], // keep\n  "v": 1\n}\n'
    out = rewrite(text, {"l": ["a", "b", "c"], "v": 2}, JSONC)
    assert out == '{\n  "l": ["a", "b", "c"], // keep\n  "v": 2\n}\n'


@pytest.mark.parametrize(("text", "where"), [
    ('{"a": 1', "line 1, column 8: unexpected end of file"),
    ('{"a": 1 "b": 2}', "line 1, column 9: expected ',' or '}'"),
    ('{"a": 1, "a": 2}', "line 1, column 10: duplicate key 'a'"),
    ("{\n  'a': 1}", "line 2, column 3: expected a quoted key"),
    ('{"a": tru}', "line 1, column 7: unexpected 't'"),
    ('{} x', "line 1, column 4: unexpected text after the JSON value"),
    ('{"a": 1} /* open', "line 1, column 10: unterminated /* comment"),
])
def test_editor_errors_say_where(text: str, where: str) -> None:
    with pytest.raises(JsonEditError, match=re.escape(where)):
        parse(text, JSONC)


def _random_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.4:
        return rng.choice([1, "s", True, None, 2.5, "é"])
    if roll < 0.7:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def _layout(rng: random.Random, value: Any, unit: str, level: int, nl: str, jsonc: bool) -> str:
    """``value`` as JSON(C) in a random but valid layout (inline or not, comments, commas)."""
    pad, close = unit * (level + 1), unit * level
    if isinstance(value, dict | list) and value:
        items = [(json.dumps(k) + ": " if isinstance(value, dict) else "")
                 + _layout(rng, v, unit, level + 1, nl, jsonc)
                 for k, v in (value.items() if isinstance(value, dict) else enumerate(value))]
        tail = "," if jsonc and rng.random() < 0.3 else ""
        opener, closer = "{}" if isinstance(value, dict) else "[]"
        if rng.random() < 0.3:
            return opener + ", ".join(items) + tail + closer
        notes = ["", " // c", " /* b */"] if jsonc else [""]
        lines = [pad + it + ("," if i < len(items) - 1 else tail) + rng.choice(notes)
                 for i, it in enumerate(items)]
        return opener + nl + nl.join(lines) + nl + close + closer
    return json.dumps(value, ensure_ascii=False)


def test_adding_then_removing_an_entry_restores_any_layout() -> None:
    rng = random.Random(7)
    for _ in range(300):
        jsonc = rng.random() < 0.5
        doc = {f"k{i}": _random_value(rng, 1) for i in range(rng.randint(0, 4))}
        if rng.random() < 0.7:
            doc["servers"] = {f"s{i}": _random_value(rng, 2) for i in range(rng.randint(0, 3))}
        nl = rng.choice(["\n", "\r\n"])
        text = _layout(rng, doc, rng.choice(["  ", "    ", "\t"]), 0, nl, jsonc) + nl
        target = json.loads(json.dumps(doc))
        target.setdefault("servers", {})["palace"] = {"command": "p", "args": ["mcp"]}
        added = rewrite(text, target, JSONC if jsonc else STRICT)
        assert parse(added, JSONC if jsonc else STRICT).value == target
        assert "\n" not in added.replace("\r\n", "") or nl == "\n"
        assert rewrite(added, doc, JSONC if jsonc else STRICT) == text
