"""The Python client: ``Client`` and its methods, request payloads, the agent a request
names and the palace a project uses.

Layers: docs/development.md."""
