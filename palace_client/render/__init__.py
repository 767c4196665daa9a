"""Plain-text rendering of daemon results, shared by the CLI and the MCP tools.

Layers: docs/development.md."""
