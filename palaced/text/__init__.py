"""Pure text understanding: topics, chunks, rules, relevance, dates, transcripts.

Layers: docs/development.md."""
