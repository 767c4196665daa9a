"""``palace init --hooks`` for the agents beyond Claude Code: Codex CLI's ``hooks.json``,
Gemini CLI's ``settings.json``, Cursor's ``hooks.json`` and Copilot CLI's
``.github/hooks/palace.json``, at project and user scope, with the care ``init`` takes of
every file (comments, CRLF, the user's own hooks kept; idempotent; dry run; uninstall byte
for byte). Hermetic: ``init_support``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palace_client.agents.entries import AGENT_HOOK_EVENTS
from palace_client.agents.jsonc import COMMENTS, parse
from palace_client.agents.setup import backup_path, format_changes
from palace_client.agents.targets import detect_agents
from tests.support.init_support import World, dump, snapshot, world

__all__ = ["world"]


def hook_file(w: World, agent: str, scope: str) -> Path:
    """Where ``agent``'s hooks live in ``scope``."""
    base = w.project if scope == "project" else w.home
    return {
        "codex": base / ".codex" / "hooks.json",
        "gemini": base / ".gemini" / "settings.json",
        "cursor": base / ".cursor" / "hooks.json",
        "copilot": (w.project / ".github" if scope == "project" else w.home / ".copilot")
        / "hooks" / "palace.json",
    }[agent]


def commands(path: Path, agent: str) -> dict[str, list[str]]:
    """Event -> the commands of its hooks, read as the agent reads the file."""
    data: dict[str, Any] = parse(path.read_text(), COMMENTS).value
    hooks: dict[str, Any] = data.get("hooks", {})
    if agent in ("codex", "gemini"):
        return {e: [h["command"] for g in groups for h in g["hooks"]]
                for e, groups in hooks.items()}
    key = "bash" if agent == "copilot" else "command"
    return {e: [h[key] for h in entries] for e, entries in hooks.items()}


def expected(w: World, agent: str, scope: str, palace: str = "") -> dict[str, list[str]]:
    """palace's hooks for ``agent``: project files run ``palace`` from PATH, user files the
    absolute path of the ``palace`` that ran init."""
    exe = "palace" if scope == "project" else w.exe
    pin = f" --palace {palace}" if palace else ""
    return {event: [f"{exe} {' '.join(verb)}{pin}"]
            for event, verb in AGENT_HOOK_EVENTS[agent].items()}


AGENTS_SCOPES = [(a, s) for a in ("codex", "gemini", "cursor", "copilot")
                 for s in ("project", "user")]


@pytest.mark.parametrize(("agent", "scope"), AGENTS_SCOPES)
def test_hooks_are_created_then_removed_with_their_file(world: World, agent: str,
                                                       scope: str) -> None:
    before = snapshot(world.root)
    changes = world.run(agents=(agent,), scope=scope, hooks=True)
    path = hook_file(world, agent, scope)
    assert {c.action for c in changes} == {"created"}, changes
    assert str(path) in {c.target for c in changes}
    assert commands(path, agent) == expected(world, agent, scope)
    if agent in ("cursor", "copilot"):  # both formats want a version
        assert json.loads(path.read_text())["version"] == 1
    again = world.run(agents=(agent,), scope=scope, hooks=True)
    assert {c.action for c in again} == {"unchanged"}
    removed = world.run(agents=(agent,), scope=scope, uninstall=True)
    assert {c.action for c in removed} == {"deleted"}, removed
    assert snapshot(world.root) == before
    assert not path.parent.exists()  # the folders init created for it go too


def test_hook_commands_name_the_agent_and_the_pinned_palace(world: World) -> None:
    world.run(agents=("gemini",), scope="user", hooks=True, palace="notes")
    path = hook_file(world, "gemini", "user")
    assert commands(path, "gemini") == expected(world, "gemini", "user", "notes")
    assert commands(path, "gemini")["BeforeAgent"] == [
        f"{world.exe} hook prompt --agent gemini --palace notes"]


# The user's own hook files, as each agent reads them: Gemini's settings take comments;
# Codex, Cursor and Copilot read strict JSON.
SEEDS: dict[str, str] = {
    "codex": dump({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done",
                                                  "timeout": 5}]}],
                             "SessionStart": [{"matcher": "startup", "hooks": [
                                 {"type": "command", "command": "motd.sh"}]}]}}),
    "gemini": '// my settings\n{\n  "theme": "Dracula", // dark\n  "hooks": {\n'
              '    "AfterAgent": [{"matcher": "", "hooks": [{"type": "command", '
              '"command": "notify.sh", "name": "n"}]}]\n  }\n}\n',
    "cursor": dump({"version": 1, "hooks": {"sessionStart": [{"command": "./mine.sh"}],
                                            "stop": [{"command": "audit.sh"}]}}),
    "copilot": dump({"version": 1, "hooks": {"userPromptSubmitted": [
        {"type": "command", "bash": "log-prompt.sh", "timeoutSec": 5}]}}),
}
MINE = {"codex": {"Stop": ["say done"], "SessionStart": ["motd.sh"]},
        "gemini": {"AfterAgent": ["notify.sh"]},
        "cursor": {"sessionStart": ["./mine.sh"], "stop": ["audit.sh"]},
        "copilot": {"userPromptSubmitted": ["log-prompt.sh"]}}


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize(("agent", "scope"), AGENTS_SCOPES)
def test_users_hooks_comments_and_line_ends_are_kept(world: World, agent: str, scope: str,
                                                     crlf: bool) -> None:
    path = hook_file(world, agent, scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = SEEDS[agent].replace("\n", "\r\n") if crlf else SEEDS[agent]
    path.write_bytes(text.encode())
    before = snapshot(world.root)
    world.run(agents=(agent,), scope=scope, hooks=True)
    new = path.read_bytes()
    assert (b"\r\n" in new) == crlf and (b"\n" in new.replace(b"\r\n", b"")) != crlf
    if agent == "gemini":
        assert b"// my settings" in new and b"// dark" in new
    got = commands(path, agent)
    for event, ours in expected(world, agent, scope).items():
        assert got.pop(event) == MINE[agent].get(event, []) + ours, event
    assert got == {e: c for e, c in MINE[agent].items()
                   if e not in AGENT_HOOK_EVENTS[agent]}
    assert backup_path(path).read_bytes() == text.encode()  # the user's original, once
    after = snapshot(world.root)
    assert {c.action for c in world.run(agents=(agent,), scope=scope, hooks=True)} == {
        "unchanged"}
    assert snapshot(world.root) == after
    world.run(agents=(agent,), scope=scope, uninstall=True)
    assert snapshot(world.root) == before  # byte for byte, the backup gone with our hooks


def test_a_changed_hook_is_replaced_and_extra_keys_the_user_added_stay(world: World) -> None:
    path = hook_file(world, "cursor", "project")
    world.run(agents=("cursor",), hooks=True)
    data = json.loads(path.read_text())
    data["hooks"]["sessionStart"][0]["timeout"] = 5  # the user's tweak of palace's entry
    path.write_text(dump(data))
    assert {c.action for c in world.run(agents=("cursor",), hooks=True)} == {"unchanged"}
    world.run(agents=("cursor",), hooks=True, palace="other")  # a new command: replaced
    assert commands(path, "cursor") == expected(world, "cursor", "project", "other")


def test_dry_run_shows_the_hook_diffs_and_writes_nothing(world: World) -> None:
    before = snapshot(world.root)
    changes = world.run(agents=("codex", "copilot"), hooks=True, dry_run=True)
    assert snapshot(world.root) == before
    report = format_changes(changes, dry_run=True)
    assert f"would be created   {hook_file(world, 'codex', 'project')}" in report
    assert '+            "command": "palace hook prompt --agent codex"' in report
    assert '+        "bash": "palace hook wake-up --agent copilot"' in report
    # Codex runs a hook only once trusted: the change says how (not a later unchanged run).
    assert "note: Codex CLI runs new or changed hooks only once you trust them" in report
    world.run(agents=("codex",), hooks=True)
    again = format_changes(world.run(agents=("codex",), hooks=True))
    assert "unchanged" in again and "trust" not in again


def test_without_hooks_no_hook_file_is_written_and_uninstall_skips_missing_ones(
        world: World) -> None:
    changes = world.run(agents=("codex", "cursor", "copilot"))
    assert not any(c.target.endswith(("hooks.json", "palace.json")) for c in changes)
    assert not (world.project / ".codex" / "hooks.json").exists()
    removed = world.run(agents=("codex", "cursor", "copilot"), uninstall=True)
    assert not any(c.target.endswith(("hooks.json", "palace.json")) for c in removed)


def test_gemini_hooks_share_the_settings_file_with_the_server(world: World) -> None:
    world.run(agents=("gemini",), hooks=True)
    data = json.loads(hook_file(world, "gemini", "project").read_text())
    assert set(data) == {"mcpServers", "hooks"} and "palace" in data["mcpServers"]
    world.run(agents=("gemini",), uninstall=True)
    assert not hook_file(world, "gemini", "project").exists()


def test_copilot_is_detected_and_gets_its_mcp_config(world: World) -> None:
    (world.home / ".copilot").mkdir()
    assert detect_agents(world.home, world.project, lambda n: None, world.environ) == [
        "copilot"]
    world.run(agents=("copilot",), scope="user")
    user = json.loads((world.home / ".copilot" / "mcp-config.json").read_text())
    assert user["mcpServers"]["palace"] == {"type": "local", **world.user_entry(),
                                            "tools": ["*"]}
    world.run(agents=("copilot",))
    project = json.loads((world.project / ".github" / "mcp.json").read_text())
    assert project["mcpServers"]["palace"]["command"] == "palace"
    (local,) = world.run(agents=("copilot",), scope="local")
    assert local.action == "skipped"
    # COPILOT_HOME moves its user files, hooks included.
    world.environ["COPILOT_HOME"] = str(world.root / "cp")
    world.run(agents=("copilot-cli",), scope="user", hooks=True)
    assert (world.root / "cp" / "hooks" / "palace.json").exists()


def test_a_hooks_file_without_version_or_hooks_gets_them_back_out(world: World) -> None:
    path = hook_file(world, "cursor", "user")
    path.parent.mkdir(parents=True)
    path.write_text('{"theme": 1}')
    world.run(agents=("cursor",), scope="user", hooks=True)
    assert json.loads(path.read_text())["version"] == 1
    world.run(agents=("cursor",), scope="user", uninstall=True)
    assert path.read_text() == '{"theme": 1}'
    # A file of the user's own hooks holds nothing of palace's: uninstall leaves it alone.
    path.write_text(dump({"hooks": {"sessionStart": [], "stop": [{"command": "x"}]}}))
    before = path.read_bytes()
    assert {c.action for c in world.run(agents=("cursor",), scope="user", uninstall=True)} <= {
        "unchanged"}
    assert path.read_bytes() == before
