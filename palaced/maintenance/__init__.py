"""Whole-palace jobs: backup, restore, doctor, repair, re-embedding, export/import, model loading.

Layers: docs/development.md."""
