"""``palace init``: registering the MCP bridge with the coding agents on this machine.

* ``setup``: options, applying plans and reporting (``init_agents``);
* ``targets``: which agents exist and which files each scope edits;
* ``entries``: the bridge command per scope, its ``env``, the hook command;
* ``plans``: planning the edit of one JSON/TOML config file; ``jsonc``: JSON(C) edited as
  text; ``codex_toml``: Codex's TOML;
* ``safe_write``: atomic writes and one-time backups;
* ``command``: the ``palace init`` command.

Nothing is imported here, so that the other ``palace`` commands do not load these modules.
"""
