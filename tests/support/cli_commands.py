"""Every command of the ``palace`` CLI by its full name ("recall", "kg assert"), as click sees
them: for tests that walk the whole command tree."""

from __future__ import annotations

from collections.abc import Iterator

import click
import typer

from palace_client.cli import app


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{path} ")
        else:
            yield path, cmd


ROOT = typer.main.get_command(app)
COMMANDS: dict[str, click.Command] = dict(_commands(ROOT))  # type: ignore[arg-type]
