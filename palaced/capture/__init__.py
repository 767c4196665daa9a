"""Transcripts into drawers: exchanges filed as drawers, ingest, the background worker.

Layers: docs/development.md."""
