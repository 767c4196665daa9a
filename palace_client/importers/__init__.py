"""``palace import``: bringing memories in from files, with one runner for every format.

* ``runner``: what an importer yields (``Unit``, ``Problem``), the counts (``Tally``) and the
  loop that feeds a sink, shows progress and reports (``run``, ``report``);
* ``sinks``: where units go: the import ledger (``LedgerSink``: a source per file or
  conversation, replaced when its content hash changes) or a restore (``RestoreSink``);
* ``progress``: a progress bar with counts and rate on a terminal, nothing otherwise;
* ``redaction``: the one call every imported text goes through before it is sent;
* the formats: ``jsonl`` (a palace export), ``chatgpt`` (``conversations.json``),
  ``markdown`` (a directory of ``.md``/``.txt``/``.rst``, split by ``sections``);
* ``transcripts``: coding agents' session transcripts (Claude Code, Codex CLI, Gemini CLI),
  which the daemon reads itself (the op the capture hooks use), so they have their own loop
  and report through the same ``Tally``.

Formats and behaviour: ``docs/importing.md``.
"""
