"""What the daemon and its clients share: the protocol, the op specs, errors, names and
limits, paths, privacy, redaction and the export format. Imports nothing else of palaced.

Layers: docs/development.md."""
