"""``palace init`` file hygiene: JSONC, CRLF, indentation, malformed files, backups (issue 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palace_client.agents.jsonc import JSONC, parse
from palace_client.agents.setup import BACKUP_SUFFIX, backup_path
from tests.support.init_support import PROJECT_ENTRY, World, dump, snapshot, world

__all__ = ["world"]

JSONC_TEXT = """\
{
\t// my servers
\t"servers": {
\t\t"other": {"type": "stdio", "command": "o"}, /* inline */
\t},
\t"inputs": [],  // trailing comma above and a comment here
}
"""


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_jsonc_is_read_and_written_with_comments_kept(world: World) -> None:
    vscode = write(world.project / ".vscode" / "mcp.json", JSONC_TEXT)
    gemini_text = JSONC_TEXT.replace("servers", "mcpServers").replace(
        "}, /* inline */", "} /* inline */").replace("[],  //", "[]  //")
    gemini = write(world.project / ".gemini" / "settings.json", gemini_text)
    changes = world.run(agents=("vscode", "gemini"))
    assert [c.action for c in changes] == ["updated", "updated"], changes
    for path, key in ((vscode, "servers"), (gemini, "mcpServers")):
        text = path.read_text()
        assert text.startswith(JSONC_TEXT.split("/* inline */")[0].replace("servers", key))
        assert "/* inline */" in text and "// trailing comma above" in text
        data = parse(text, JSONC).value
        entry = {k: v for k, v in data[key]["palace"].items() if k != "type"}
        assert entry == PROJECT_ENTRY
        assert '\n\t\t"palace": {\n\t\t\t"' in text  # the file's own tab indentation
    world.run(agents=("vscode", "gemini"), uninstall=True)
    assert vscode.read_text() == JSONC_TEXT and gemini.read_text() == gemini_text
    assert not backup_path(vscode).exists()


def test_gemini_takes_comments_but_not_trailing_commas(world: World) -> None:
    text = '{\n  // mine\n  "mcpServers": {"a": {"command": "a"},}\n}\n'
    gemini = write(world.project / ".gemini" / "settings.json", text)
    (change,) = world.run(agents=("gemini",))
    assert change.action == "error" and "line 3, column 39: a trailing comma" in change.detail
    assert gemini.read_text() == text


def test_strict_json_clients_refuse_comments_and_keep_the_file(world: World) -> None:
    cursor = write(world.project / ".cursor" / "mcp.json", '{\n  // c\n  "mcpServers": {}\n}\n')
    (change,) = world.run(agents=("cursor",))
    assert change.action == "error"
    assert "line 2, column 3: a comment" in change.detail
    assert cursor.read_text() == '{\n  // c\n  "mcpServers": {}\n}\n'
    assert not backup_path(cursor).exists()


def test_truncated_json_is_blamed_on_truncation_not_comments(world: World) -> None:
    text = '{\n  "mcpServers": {\n    "other": {"command": "x"'
    for rel in (".cursor/mcp.json", ".vscode/mcp.json"):
        path = write(world.project / rel, text)
        (change,) = world.run(agents=(rel.split("/")[0][1:],))
        assert change.action == "error"
        assert "line 3, column 29: unexpected end of file (is it truncated?)" in change.detail
        assert "comment" not in change.detail
        assert path.read_text() == text and not backup_path(path).exists()


def test_crlf_and_indentation_are_kept(world: World) -> None:
    original = (b'{\r\n    "mcpServers" : {\r\n        "other": { "command": "x" }\r\n    },'
                b'\r\n    "zzz": [1,2]\r\n}\r\n')
    path = write(world.project / ".mcp.json", original)
    world.run(agents=("claude",))
    data = path.read_bytes()
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert data.startswith(b'{\r\n    "mcpServers" : {\r\n        "other": { "command": "x" },'
                           b'\r\n        "palace": {\r\n            "command": "palace",')
    assert data.endswith(b'    },\r\n    "zzz": [1,2]\r\n}\r\n')
    world.run(agents=("claude",), uninstall=True)
    assert path.read_bytes() == original


def test_codex_array_of_tables_is_a_clear_error(world: World) -> None:
    text = '[[mcp_servers]]\nname = "x"\ncommand = "y"\n'
    for scope, path in (("user", world.home / ".codex" / "config.toml"),
                        ("project", world.project / ".codex" / "config.toml")):
        write(path, text)
        for uninstall in (False, True):
            (change,) = world.run(agents=("codex",), scope=scope, uninstall=uninstall)
            assert change.action == "error"
            assert "array of tables ([[mcp_servers]])" in change.detail
            assert path.read_text() == text


@pytest.mark.parametrize("text", ['mcp_servers = "x"\n', "[mcp_servers]\npalace = 3\n",
                                  '[mcp_servers.palace]\ncommand = "p"\nenv = "x"\n'])
def test_codex_other_odd_shapes_are_errors(world: World, text: str) -> None:
    path = write(world.project / ".codex" / "config.toml", text)
    (change,) = world.run(agents=("codex",))
    assert change.action == "error" and "by hand" in change.detail
    assert path.read_text() == text


def test_codex_crlf_is_kept(world: World) -> None:
    original = b'model = "o3"\r\n\r\n[mcp_servers.other]\r\ncommand = "o"\r\n'
    path = write(world.project / ".codex" / "config.toml", original)
    world.run(agents=("codex",))
    data = path.read_bytes()
    assert data.startswith(original) and b"\n" not in data.replace(b"\r\n", b"")
    world.run(agents=("codex",), uninstall=True)
    assert path.read_bytes() == original


def test_uninstall_of_a_file_palace_created_leaves_nothing(world: World) -> None:
    settings = world.project / ".claude" / "settings.local.json"
    world.run(agents=("claude",))
    world.run(agents=("claude",), hooks=True)  # a second run that changes the file
    assert not backup_path(settings).exists()  # palace's own content is no backup
    world.run(agents=("claude",), uninstall=True)
    assert not settings.exists() and not (world.project / ".mcp.json").exists()


def test_a_backup_an_older_palace_took_of_its_own_content_is_disregarded(world: World) -> None:
    settings = world.project / ".claude" / "settings.local.json"
    world.run(agents=("claude",))
    legacy = settings.with_name(settings.name + BACKUP_SUFFIX)  # beside it, as it was
    legacy.write_text(settings.read_text())  # what the old `init` left
    world.run(agents=("claude",), uninstall=True)
    assert not settings.exists() and not legacy.exists()


def test_user_additions_to_a_file_palace_created_survive_uninstall(world: World) -> None:
    path = world.project / ".mcp.json"
    world.run(agents=("claude",))
    data = json.loads(path.read_text())
    data["mcpServers"]["mine"] = {"command": "m"}
    path.write_text(dump(data))
    world.run(agents=("claude",), uninstall=True)
    assert json.loads(path.read_text()) == {"mcpServers": {"mine": {"command": "m"}}}


def test_the_backup_is_the_users_original_taken_once(world: World) -> None:
    path = write(world.project / ".claude" / "settings.local.json",
                 '{"permissions": {"allow": []}}\n')
    world.run(agents=("claude",))
    world.run(agents=("claude",), hooks=True)
    world.run(agents=("claude",), hooks=True, palace="other")
    assert backup_path(path).read_text() == '{"permissions": {"allow": []}}\n'
    world.run(agents=("claude",), uninstall=True)
    assert path.read_text() == '{"permissions": {"allow": []}}\n'
    assert not backup_path(path).exists()


def test_an_empty_container_the_user_had_is_kept(world: World) -> None:
    path = write(world.project / ".claude" / "settings.local.json",
                 '{\n  "enabledMcpjsonServers": [],\n  "hooks": {}\n}\n')
    world.run(agents=("claude",), hooks=True)
    world.run(agents=("claude",), uninstall=True)
    assert path.read_text() == '{\n  "enabledMcpjsonServers": [],\n  "hooks": {}\n}\n'


def test_nothing_written_on_error_anywhere(world: World) -> None:
    write(world.project / ".cursor" / "mcp.json", '{"mcpServers": {"a": 1,}}')
    before = snapshot(world.root)
    (change,) = world.run(agents=("cursor",))
    assert change.action == "error" and "trailing comma" in change.detail
    assert snapshot(world.root) == before
