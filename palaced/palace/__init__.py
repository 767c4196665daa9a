"""One open palace (its handle, directory, team flavour, reads) and the registry of them.

Layers: docs/development.md."""
