"""``palace model``: the model manifest and install, safe unpacking, the download.

Layers: docs/development.md."""
