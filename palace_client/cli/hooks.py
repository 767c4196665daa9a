"""``palace hook capture``: the Claude Code hook, as typer documents it.

Claude Code runs it after every turn, so ``palace_client.entry`` dispatches it to
``palace_client.hooks.capture`` before typer is even imported; this command is what ``--help`` (and
an unusual command line typer parses first) reaches, and it runs the same code.
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
