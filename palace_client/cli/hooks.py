"""``palace hook capture``, ``palace hook prompt`` and ``palace hook wake-up``: the agents'
hooks, as typer documents them.

Agents run them at every turn, so ``palace_client.entry`` dispatches them to
``palace_client.hooks`` before typer is even imported; these commands are what ``--help`` (and
an unusual command line typer parses first) reaches, and they run the same code.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Hooks that agents run (installed by `palace init --hooks`).",
                  no_args_is_help=True)


def _agent_option(verb: str) -> str:
    return typer.Option(  # type: ignore[no-any-return]
        "claude", "--agent",
        help=f"The agent running the hook, whose input and output shapes {verb} uses: "
             "claude, codex, gemini, cursor or copilot.")


def _argv(palace: str | None, agent: str) -> list[str]:
    return (["--palace", palace] if palace else []) + ["--agent", agent]


@app.command("capture")
def capture(palace: str | None = typer.Option(
        None, "--palace", "-p",
        help="Palace to capture into (default: PALACE, else the project of "
             "CLAUDE_PROJECT_DIR, else of the hook input's cwd)."),
            agent: str = _agent_option("the capture")) -> None:
    """Queue a capture of the agent session named by the hook input on stdin.

    Reads the hook input JSON (session_id, transcript_path, cwd, hook_event_name), asks the
    daemon to capture what is new in the transcript (in the background), and exits 0 within
    about 200 ms whatever happens, printing nothing: problems go to the clients' log
    (palace.log beside the daemon's log). Installed for Claude Code's PreCompact, Stop and
    SessionEnd, and the equivalents of Codex CLI, Gemini CLI and Copilot CLI (--agent
    codex, gemini, copilot).
    """
    from palace_client.hooks.capture import capture as run_hook

    raise typer.Exit(run_hook(_argv(palace, agent)))


@app.command("prompt")
def prompt(palace: str | None = typer.Option(
        None, "--palace", "-p",
        help="Palace to recall in (default: PALACE, else the project of "
             "CLAUDE_PROJECT_DIR, else of the hook input's cwd)."),
           agent: str = _agent_option("the prompt hook")) -> None:
    """Recall for the prompt in the hook input on stdin and print what to add to it.

    Reads the UserPromptSubmit input JSON (prompt, session_id, cwd) and, when the project's
    palace holds drawers relevant to the prompt that the session has not been shown (by the
    wake-up or an earlier prompt), prints them as the agent's added context (Claude Code's
    additionalContext JSON by default), within [hooks] prompt_budget tokens (300). A miss,
    a missing palace or a daemon that is not running prints nothing; it never starts a
    daemon and exits 0 within [hooks] prompt_timeout_s (1 s) whatever happens. Installed
    for Claude Code's and Codex CLI's UserPromptSubmit, Gemini CLI's BeforeAgent and
    Copilot CLI's userPromptSubmitted.
    """
    from palace_client.hooks.prompt import prompt as run_hook

    raise typer.Exit(run_hook(_argv(palace, agent)))


@app.command("wake-up")
def wake_up(palace: str | None = typer.Option(
        None, "--palace", "-p",
        help="Palace to wake up (default: PALACE, else the project of CLAUDE_PROJECT_DIR, "
             "else of the hook input's cwd)."),
            agent: str = _agent_option("the wake-up")) -> None:
    """Print the palace's wake-up as the agent's session-start context.

    Reads the session-start input JSON on stdin (cwd, or Cursor's workspace_roots) and
    prints what `palace wake-up` prints, the palace's identity and essential drawers, in
    the agent's JSON for context added at session start. Starts the daemon if needed;
    prints nothing for a palace not created yet or on any failure, and always exits 0.
    Installed for the session start of Codex CLI, Gemini CLI, Cursor and Copilot CLI
    (Claude Code's runs `palace wake-up`).
    """
    from palace_client.hooks.wake import wake_up as run_hook

    raise typer.Exit(run_hook(_argv(palace, agent)))
