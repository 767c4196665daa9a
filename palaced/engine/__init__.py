"""The embedding model, token counting and the daemon-wide services built on them.

Layers: docs/development.md."""
