"""What changes a palace: writes, edits, trash, upkeep, policy, audit, graph, memoirs.

Layers: docs/development.md."""
