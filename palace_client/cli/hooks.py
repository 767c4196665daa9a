"""``palace hook capture`` and ``palace hook prompt``: the Claude Code hooks, as typer documents
them.

Claude Code runs them at every turn, so ``palace_client.entry`` dispatches them to
``palace_client.hooks`` before typer is even imported; these commands are what ``--help`` (and
an unusual command line typer parses first) reaches, and they run the same code.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Hooks that agents run (installed by `palace init --hooks`).",
                  no_args_is_help=True)


@app.command("capture")
def capture(palace: str | None = typer.Option(
        None, "--palace", "-p",
        help="Palace to capture into (default: PALACE, else the project of "
             "CLAUDE_PROJECT_DIR, else of the hook input's cwd).")) -> None:
    """Queue a capture of the Claude Code session named by the hook input on stdin.

    Reads the hook input JSON (session_id, transcript_path, cwd, hook_event_name), asks the
    daemon to capture what is new in the transcript (in the background), and exits 0 within
    about 200 ms whatever happens, printing nothing: problems go to the clients' log
    (palace.log beside the daemon's log). Installed for PreCompact, Stop and SessionEnd.
    """
    from palace_client.hooks.capture import capture as run_hook

    raise typer.Exit(run_hook(["--palace", palace] if palace else []))


@app.command("prompt")
def prompt(palace: str | None = typer.Option(
        None, "--palace", "-p",
        help="Palace to recall in (default: PALACE, else the project of "
             "CLAUDE_PROJECT_DIR, else of the hook input's cwd).")) -> None:
    """Recall for the prompt in the hook input on stdin and print what to add to it.

    Reads the UserPromptSubmit input JSON (prompt, session_id, cwd) and, when the project's
    palace holds drawers relevant to the prompt that the session has not been shown (by the
    wake-up or an earlier prompt), prints them as Claude Code's additionalContext JSON,
    within [hooks] prompt_budget tokens (300). A miss, a missing palace or a daemon that is
    not running prints nothing; it never starts a daemon and exits 0 within [hooks]
    prompt_timeout_s (1 s) whatever happens. Installed for UserPromptSubmit.
    """
    from palace_client.hooks.prompt import prompt as run_hook

    raise typer.Exit(run_hook(["--palace", palace] if palace else []))
