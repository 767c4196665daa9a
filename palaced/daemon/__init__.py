"""The process: the composition root, the socket server, the scheduler, service-manager glue.

Layers: docs/development.md."""
