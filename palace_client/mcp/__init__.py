"""The MCP stdio bridge: agents reach palace through it (``palace mcp``).

* ``bridge``: the JSON-RPC server on stdin/stdout (``run``), which also settles the palace
  (``--palace``, ``CLAUDE_PROJECT_DIR``, the client's roots, the working directory);
* ``toolbox``: runs the tools against the daemon and words their results;
* ``tools``: the tools' names, descriptions and hints; ``schema``: their input schemas,
  derived from ``palaced.wire.specs``, and the argument checks; ``results``: result shapes;
* ``command``: the ``palace mcp`` command.

Nothing is imported here: the bridge's cold start (spawn → ``tools/list``) stays short, and
neither typer nor rich is loaded on the bridge path.
"""
