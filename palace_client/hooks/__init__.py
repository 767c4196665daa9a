"""Agent hooks: dispatched before typer loads, so they start fast.

Layers: docs/development.md."""
