"""Caches beside the store, rebuilt from it: the usearch vector index and the keyword engine.

Layers: docs/development.md."""
