"""Recall: candidate search, ranking heuristics, fusion and packing into a budget.

Layers: docs/development.md."""
