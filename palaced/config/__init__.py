"""The daemon's configuration: defaults < config.toml < environment, with bounds.

Layers: docs/development.md."""
