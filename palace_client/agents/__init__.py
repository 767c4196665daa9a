"""``palace init``: registering the MCP bridge with the coding agents on this machine.

* ``setup``: which agents exist, what to write for each, and applying it (``init_agents``);
* ``plans``: planning the edit of one JSON/TOML config file; ``codex_toml``: Codex's TOML;
* ``safe_write``: atomic writes and one-time backups;
* ``command``: the ``palace init`` command.

Nothing is imported here, so that the other ``palace`` commands do not load these modules.
"""
