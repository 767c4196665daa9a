"""Generate the reference parts of ``docs/`` from the code, so they cannot drift from it.

    python docs/gen.py           # rewrite the generated files and sections
    python docs/gen.py --check   # exit 1 and name the stale files, write nothing

What it writes:

* ``docs/cli.md`` (whole file): the real ``--help`` of every ``palace`` and ``palaced``
  command, rendered in-process by typer at a fixed width of 100 columns without colour;
* ``docs/protocol.md``: the error table (``palaced/wire/errors.py``), the CLI exit codes
  (``palace_client/cli/``) and the op specs (``palaced/wire/specs.py``);
* ``docs/configuration.md``: every ``config.toml`` key (read from ``palaced/config/settings.py``) and
  every environment variable the code reads (scanned from ``palaced/`` and ``palace_client/``);
* ``docs/python-api.md``: the methods of ``palace_client.Client``;
* ``docs/agents.md``: the MCP tools (``palace_client/mcp/tools.py``);
* ``docs/benchmarks.md``: the tuning constants, with their current value and ``file:line``;
* ``systemd/palaced.socket``, ``systemd/palaced.service``, ``launchd/dev.palace.palaced.plist``
  (whole files): what ``palace service install`` writes (``palace_client/service/units.py``),
  with systemd specifiers and placeholders instead of one user's paths.

Inside hand-written files, generated text sits between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->``. Facts the code does not state (what a config key or an
environment variable means, the measurement behind a constant) live in the tables below; a key,
variable or op the code gains without an entry here stops the generator with a message saying
what to add. ``tests/project/test_docs.py`` fails while a committed file differs from what this writes.
Deterministic, no daemon, no network; about a second.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
if str(REPO) not in sys.path:  # `python docs/gen.py` documents this checkout
    sys.path.insert(0, str(REPO))

HELP_WIDTH = 100
REGENERATE = "python docs/gen.py"

# -- facts the code does not state ----------------------------------------------------------------
# [section] key -> meaning. Types and defaults come from palaced/config/settings.py itself.
CONFIG_MEANINGS: dict[tuple[str, str], str] = {
    ("embedder", "model"): "Embedding model: a short name of palace's catalog (`minilm`, "
        "`mpnet`, `bge-small`...: `palace model list`) or any fastembed model name; "
        "`palace model use NAME` writes it and switches the running daemon "
        "([operations.md](operations.md#choosing-a-model)). `\"none\"`, `\"off\"` or `\"\"` "
        "turns embedding off: keyword-only recall, no model is loaded.",
    ("embedder", "model_path"): "Directory holding a local copy of the model (`model.onnx` or "
        "another `*.onnx`, plus `tokenizer.json` and the other tokenizer files); loaded with "
        "`local_files_only`, never downloaded. For offline machines. `~` is expanded. It "
        "names one model's files: `palace model use` comments it out when it switches.",
    ("embedder", "threads"): "ONNX intra- and inter-op threads; unset or 0 lets onnxruntime "
        "choose.",
    ("embedder", "allow_download"): "Whether the daemon may download the model into "
        "`<state_dir>/models` when it is not cached (only after a TCP probe of the model hub, "
        "`HF_ENDPOINT` honoured, succeeds).",
    ("tokenizer", "bpe_file"): "The `cl100k_base.tiktoken` file (sha256-checked) for exact "
        "token counts; without it budgets use a `ceil(chars / 4)` estimate.",
    ("limits", "max_frame"): "Largest protocol frame in bytes, checked before a frame is read; "
        "larger ones get `FRAME_TOO_LARGE` and the connection closes. Sent to clients in the "
        "hello answer.",
    ("limits", "max_text_chars"): "Longest drawer text or consolidation summary, in characters "
        "(`TEXT_TOO_LARGE` beyond).",
    ("limits", "max_batch"): "Most items in one `memory.remember_many` request.",
    ("limits", "request_timeout_s"): "Deadline of a request without `timeout_ms` (`TIMEOUT` "
        "after it).",
    ("limits", "max_request_timeout_s"): "Cap on the `timeout_ms` a client may ask for.",
    ("limits", "idle_close_s"): "A palace unused this long is closed (index saved, files "
        "released) and reopened on the next request.",
    ("limits", "checkpoint_idle_s"): "Seconds without a write before a palace's background "
        "work runs: index save, WAL checkpoint, pending embeddings, daily decay, expiry sweep. "
        "(Long texts a remember left to the background are embedded at once, and under writes "
        "that never pause the index is still saved every 20 s.)",
    ("limits", "max_connections"): "Open client connections at most; past them (and the "
        "reserve) a connection gets `BUSY` and is closed (palace's clients retry it with "
        "backoff until their deadline).",
    ("limits", "reserve_connections"): "Connections accepted beyond `max_connections` that may "
        "only run `daemon.status` and `daemon.stop`, so the owner can always see and stop a "
        "daemon whose normal slots are full.",
    ("limits", "max_open_palaces"): "Open palaces at most. 0 (the default): as many as the "
        "open-files limit leaves room for (the daemon raises its soft `RLIMIT_NOFILE` to the "
        "hard limit at start, keeps room for `max_connections` + `reserve_connections` + 64 "
        "descriptors, and counts 12 per palace, 9 per team palace); a larger value is capped "
        "by that budget. Opening one more closes the least recently used idle palace (index "
        "saved, as `idle_close_s` does); a palace with a request in flight is never closed.",
    ("limits", "handshake_timeout_s"): "Seconds from accept to a complete `daemon.hello`; a "
        "slower peer gets `TIMEOUT` and is closed.",
    ("limits", "frame_timeout_s"): "Seconds from a frame's first byte to its last (plus 1 s per "
        "MiB); a stalled sender gets `TIMEOUT` and is closed.",
    ("backup", "dir"): "Where `palace backup` writes when no `--to` is given, as "
        "`<dir>/<palace>/<UTC time>/`; an absolute path (`~` is expanded). Unset: "
        "`<data_dir>/backups`.",
    ("backup", "keep"): "Backups of each palace `palace backup` keeps (1-1000) when no `--keep` "
        "is given; older ones are deleted after each backup.",
    ("limits", "connection_idle_s"): "A connection with no request for this long is closed "
        "(clients reconnect on their next call).",
    ("limits", "keyword_engine_min_drawers"): "Palaces with at least this many drawers run "
        "unfiltered keyword searches on the keyword engine (a BM25 top-k cache, "
        "`keywords.bin`, built in the background) instead of FTS5's bm25; `0`: every palace.",
    ("trash", "keep_days"): "Days a forgotten, pruned or expired drawer stays in its palace's "
        "trash, restorable with `palace restore-drawer`; then the daemon deletes it for good "
        "(on time while the palace is open, else when it is next opened). `0`: nothing is "
        "kept, forgetting deletes at once. Fractions are allowed.",
    ("audit", "keep_days"): "Days an audit log entry is kept; older ones are dropped.",
    ("audit", "max_entries"): "Most audit log entries kept per palace; the oldest beyond are "
        "dropped.",
    ("mcp", "tools"): "The MCP toolsets `palace mcp` serves besides `core`, comma-separated: "
        "`kg`, `memoir`, `upkeep` or `all` (docs/agents.md); `palace mcp --tools` wins. Read "
        "by the bridge, checked by the daemon like every key.",
    ("hooks", "prompt_budget"): "Tokens `palace hook prompt` (Claude Code's UserPromptSubmit "
        "hook) may add to a prompt: the budget of its recall (docs/agents.md). Read by the "
        "hook, checked by the daemon.",
    ("hooks", "prompt_timeout_s"): "The whole wall time of `palace hook prompt`, start-up "
        "included: past it, the prompt goes on without memories. Read by the hook, checked by "
        "the daemon.",
    ("upkeep", "consolidate_hint_at"): "A room holding this many active, unconsolidated "
        "drawers makes `remember` (CLI, MCP) and `health` suggest consolidating it; 0 never.",
    ("upkeep", "promote_after"): "Every this many recalls that return a drawer raise its "
        "importance one preset step (low -> medium -> high); 0 never.",
    ("upkeep", "promote_max"): "The importance a promotion never goes past (0.8 = high: a "
        "promoted drawer still decays, slowly).",
    ("upkeep", "recall_extends_ttl"): "A recall that returns a drawer with a `ttl` (or "
        "`expires_at`) pushes its expiry to the recall's time plus that lifetime.",
    ("team", "statement_timeout_s"): "Team palaces (PostgreSQL, [teams.md](teams.md)): every "
        "statement's `statement_timeout`; one that runs longer fails with the retryable "
        "`STORE_UNAVAILABLE`. Named connections are `[stores.NAME]` tables holding one `url` "
        "(a libpq URL without a password), used as `palace create P --store NAME`, "
        "optionally a read `replica` (same form) and `pooler = \"transaction\"` behind "
        "PgBouncer's transaction pooling.",
    ("team", "replica_max_lag_s"): "Team palaces with a read `replica`: how stale its reads "
        "may be. Each palace reads the primary's change counter at least this often, and the "
        "replica serves reads only once it has replayed that far (and every write of this "
        "daemon); else the primary serves them. 0: every read goes to the primary.",
    ("team", "connect_timeout_s"): "Team palaces: how long opening a connection may take; a "
        "server that cannot be reached within it fails the request with `STORE_UNAVAILABLE` "
        "(the daemon reconnects by itself once it is back).",
}

# Environment variables: name -> (who reads it, meaning). The names are found in the code.
ENV_MEANINGS: dict[str, tuple[str, str]] = {
    "PALACE_HOME": ("daemon, clients", "Put everything under this directory: palaces in "
                    "`palaces/`, state in `state/`, `config.toml`, the socket in `run/` (or "
                    "`/tmp/palace-<uid>-<hash>/` when that path is too long for a socket). Each "
                    "home has its own daemon."),
    "PALACE_SOCKET": ("daemon, clients", "Use this socket path; its directory also holds the "
                      "daemon's lock file (`<socket name>.lock`, so sockets in one directory "
                      "get one daemon each) and must be yours and private (0700, no symlink): "
                      "`/tmp/x.sock` is refused. An explicit socket also skips the clients' "
                      "data-directory check."),
    "PALACE_CONFIG": ("daemon", "Read this config file instead of `<config_dir>/config.toml`."),
    "PALACE_EMBED_MODEL": ("daemon", "Overrides `[embedder] model`; `none`, `off`, `0` or empty "
                           "means keyword-only."),
    "PALACE_EMBED_MODEL_PATH": ("daemon", "Overrides `[embedder] model_path` (empty: no local "
                                "path)."),
    "PALACE_TIKTOKEN_FILE": ("daemon", "Overrides `[tokenizer] bpe_file`: the "
                             "`cl100k_base.tiktoken` file (empty: none, the chars/4 estimate)."),
    "TIKTOKEN_CACHE_DIR": ("daemon", "tiktoken's cache directory, searched for "
                           "`9b5ad71b2ce5302211f9c61530b329a4922fc6a4` (tiktoken's cache name of "
                           "`cl100k_base`) after `<state_dir>/tiktoken/`."),
    "HF_ENDPOINT": ("daemon, `palace model fetch`", "Model hub (a mirror) probed before a "
                    "download, and the one `palace model fetch` downloads from; default "
                    "`https://huggingface.co`."),
    "MALLOC_MMAP_THRESHOLD_": ("daemon", "glibc's mmap threshold; when set the daemon keeps "
                               "it, else it pins it at 128 KiB (freed large buffers go back "
                               "to the system at once)."),
    "MALLOC_ARENA_MAX": ("daemon", "glibc's number of malloc arenas; when set the daemon keeps "
                         "it, else it caps them at 2 (less freed memory held per thread)."),
    "GLIBC_TUNABLES": ("daemon", "glibc's tunables; a `glibc.malloc.mmap_threshold` or "
                       "`glibc.malloc.arena_max` in it is kept as the two variables above."),
    "PALACE": ("`palace` CLI", "Default palace of the commands that take `--palace`."),
    "PALACE_AGENT": ("clients", "Who the requests come from (as `palace --agent`): recorded "
                     "on every write and in the audit log, checked against the palace's "
                     "policy. Default: the MCP client's `name/version` for `palace mcp`, "
                     "else `user:<login>`."),
    "PALACE_CONNECT_TIMEOUT": ("clients", "Seconds to connect to the daemon and complete the "
                               "handshake (default 10); a daemon that accepts and stays silent "
                               "longer fails the call with `DAEMON_UNREACHABLE`. > 0 and "
                               "<= 604800 (a week), like `PALACE_REQUEST_TIMEOUT`; another "
                               "value is a `CLIENT_ERROR` naming the variable."),
    "PALACE_REQUEST_TIMEOUT": ("clients", "Seconds a request may run when the command sets "
                               "none (default: the daemon's `request_timeout_s`); the client "
                               "waits 10 s more for the answer, then fails with `TIMEOUT` "
                               "(reads, idempotent writes) or `OUTCOME_UNKNOWN` (other writes)."),
    "PALACE_DEBUG": ("`palace` CLI", "When set, an unexpected exception (a bug) shows its "
                     "traceback instead of a one-line `CLIENT_ERROR`."),
    "CLAUDE_PROJECT_DIR": ("every `palace` command without `--palace`, `palace mcp`, "
                           "`palace hook capture`",
                           "Project directory whose git root's palace is the default palace "
                           "(else the MCP client's first root, or the hook input's `cwd`, else "
                           "the current directory; [agents.md](agents.md#which-palace))."),
    "CLAUDE_CONFIG_DIR": ("`palace import claude-code`", "Claude Code's configuration "
                          "directory; its `projects/` holds the session transcripts imported "
                          "by default (default `~/.claude`)."),
    "GEMINI_CLI_HOME": ("`palace import gemini`", "Where Gemini CLI keeps `.gemini/` (default "
                        "the home directory); its `tmp/*/chats/` hold the chats imported by "
                        "default."),
    "XDG_CONFIG_HOME": ("`palace init`, `palace service`", "Where VS Code's user `mcp.json` is "
                        "looked for on Linux, and where the systemd user units are written "
                        "(`systemd/user/`; default `~/.config`). `palace service install` also "
                        "copies it, `XDG_DATA_HOME` and `XDG_STATE_HOME` into the service "
                        "when set, so that the service daemon resolves the same paths."),
    "CODEX_HOME": ("`palace init`, `palace import codex`", "Codex CLI's home (default "
                   "`~/.codex`); its `sessions/` holds the rollouts imported by default."),
    "COPILOT_HOME": ("`palace init`, `palace import copilot`, `palace hook capture`",
                     "GitHub Copilot CLI's home (default `~/.copilot`); its `session-state/` "
                     "holds the session logs imported by default, and the one a `sessionEnd` "
                     "hook's `sessionId` names."),
    "HOME": ("`palace init`, `palace service`, `palace uninstall`", "The home whose agent "
             "configs the user and local scopes edit, and where the service files go."),
    "PATH": ("`palace init`, `palace service`", "Searched for the agents' commands (`claude`, "
             "`code`, `cursor`, ...), which mark them installed, for `palace`, and for "
             "`systemctl` / `launchctl`."),
    "LISTEN_PID": ("daemon", "Socket activation (systemd, `sd_listen_fds(3)`): the pid the "
                   "passed sockets are meant for; palaced serves them only when it is its own."),
    "LISTEN_FDS": ("daemon", "Socket activation: how many listening sockets systemd passed from "
                   "fd 3 on; palaced serves the one named `palaced` (or the only one) instead of "
                   "binding its socket. Removed from the environment once read."),
    "LISTEN_FDNAMES": ("daemon", "Socket activation: the passed sockets' names "
                       "(`FileDescriptorName=`), colon-separated."),
    "NOTIFY_SOCKET": ("daemon", "systemd's notification socket (`Type=notify`; a path or "
                      "`@abstract` name): palaced sends `READY=1` once it serves, `STATUS=` "
                      "lines and `STOPPING=1` at shutdown. Removed from the environment once "
                      "read."),
    "WATCHDOG_USEC": ("daemon", "systemd's watchdog deadline (`WatchdogSec=`): palaced sends "
                      "`WATCHDOG=1` every half of it while its event loop runs."),
    "WATCHDOG_PID": ("daemon", "The pid `WATCHDOG_USEC` is meant for (ignored when not "
                     "palaced's)."),
}


# Tuning constants: (file, symbol, what was measured). Value and line come from the code.
TUNING: list[tuple[str, str, str]] = [
    ("palaced/retrieval/params.py", "RankParams.pool",
     "Candidates taken from each list. LoCoMo dev turn R@1/5/10 through the daemon: pool 60 "
     ".396/.726/.819, pool 100 .401/.730/.823 (room scores need a deep enough pool)."),
    ("palaced/retrieval/params.py", "RankParams.lexical_weight",
     "With `vector_weight`. LoCoMo dev turn R@1/5/10, context ±1: 0.5/0.5 .376/.684/.786, "
     "0.6/0.4 .389/.697/.797; context ±2 and room weight 0.4: 0.7/0.3 .395/.730/.823, "
     "0.75/0.25 .401/.730/.823. Queries with no keyword hit rank by vectors alone. The "
     "weights of a model without fitted ones (`params_for`)."),
    ("palaced/retrieval/params.py", "RankParams.vector_weight", "See `lexical_weight`."),
    ("palaced/retrieval/params.py", "params_for",
     "A palace ranks with its model's fusion weights (`ModelEntry.fusion` in "
     "`palaced/wire/models.py`), fitted by `bench/rank_cv.py --sweep vector --model NAME` "
     "(vector weight 0-0.8, keyword 1 minus it; leave-one-conversation-out on LoCoMo dev, "
     "objective turn R@1+R@5+R@10 + session R@1), the folds' median stored. MiniLM int8: "
     "0.25/0.4/0.3/0.3/0.3, stored 0.3 (held out turn .496/.770/.843, session R@1 .745); "
     "mpnet int8: 0.35/0.4/0.4/0.4/0.4, stored 0.4 (held out .515/.783/.847, .751). "
     "docs/benchmarks.md, \"Model choice and fewer rules\"."),
    ("palaced/retrieval/params.py", "RankParams.room_support",
     "The rooms a recall names (its `rooms`) rank by their best drawer plus this share of "
     "their next `room_top_n` - 1 (scores before the reply and time steps); the drawers' "
     "order is their own (the room feedback that lifted a strong room's drawers was removed). "
     "`bench/rank_cv.py --sweep support`, LoCoMo dev MiniLM session R@1/5: 0 .742/.906, 0.1 "
     ".747/.907, 0.2 .746/.905 (leave-one-conversation-out: 0.1 in 4 of 5 folds)."),
    ("palaced/retrieval/params.py", "RankParams.room_top_n", "See `room_support`."),
    ("palaced/retrieval/params.py", "RankParams.when_boost",
     "Share of the score range a candidate that states a time (`palaced/retrieval/when.py`) gains when "
     "the query asks when or how long, after rooms are scored. `bench/rank_cv.py --sweep "
     "when`, LoCoMo dev turn R@1/5/10 with `date_boost` 0.3: none .419/.729/.828, 0.1 "
     ".425/.731/.829, 0.2 .431/.730/.829, 0.3 .431/.731/.830 (chosen in every "
     "leave-one-conversation-out fold); temporal R@1 .647 -> .715; sessions unchanged."),
    ("palaced/retrieval/params.py", "RankParams.date_boost",
     "Share of the score range a candidate about a month or year the query names gains (its "
     "own date or a resolved relative time). `bench/rank_cv.py --sweep date`, LoCoMo dev turn "
     "R@1/5/10 and session R@1 with `when_boost` 0.3: none .427/.729/.828, .734; 0.1 "
     ".429/.730/.829, .738; 0.3 .431/.731/.830, .741; 0.5 .431/.730/.829 (a conversation "
     "loses .005 R@5/R@10); leave-one-conversation-out picks 0.3 in 4 of 5 folds."),
    ("palaced/retrieval/params.py", "RankParams.neighbour_vector",
     "A vector hit's cosine gains this times the mean cosine of its ±2 room neighbours (the "
     "drawers of its keyword context) before fusion. `bench/rank_cv.py --sweep nvec`, LoCoMo "
     "dev turn R@1/5/10, session R@1: none .431/.731/.830, .741; 0.3 .440/.739/.833, .746; 0.5 "
     ".445/.741/.832, .746; 1.0 .441/.741/.833, .745; leave-one-conversation-out picks 0.5 in "
     "4 of 5 folds (held out .445/.739/.832); multi-hop R@10 .463 -> .454. Cost at 11k "
     "drawers: p50 +2.3 to +2.6 ms per rank (`--cost --cost-with nvec=0`)."),
    ("palaced/retrieval/params.py", "RankParams.question_drop",
     "A candidate among the best 30 that closes with a question (`palaced/retrieval/replies.py`) gives "
     "its place to the drawer after it in its room (raised to its score; for a \"when\" "
     "query only a reply that states a time) and loses this times its question share of the "
     "score range. `bench/rank_cv.py --sweep qdrop`, LoCoMo dev turn R@1/5/10: none "
     ".445/.741/.832, 0.05 .501/.763/.842, 0.1 .500/.762/.844, 0.3 .499/.766/.845 "
     "(leave-one-conversation-out: 0.3 in 4 of 5 folds); sessions unchanged. Cost at 11k drawers: p50 +0.4 to +0.5 ms per rank, p95 +0.7 to +1.0 "
     "ms (`--cost --cost-with qdrop=0`)."),
    ("palaced/retrieval/params.py", "RankParams.reply_lift",
     "Share of the score range a candidate among the best 30 gains when the drawer before "
     "it in its room closes with a question: a reply (not for a \"when\" query). "
     "`bench/rank_cv.py --sweep rlift`, LoCoMo dev turn R@1/5/10: none .499/.766/.849, 0.05 "
     ".499/.770/.850, 0.1 .506/.772/.856, 0.15 .503/.771/.856, 0.2 .500/.770/.856 "
     "(leave-one-conversation-out: 0.1 in 3 of 5 folds, 0.15 in 2; held out .502/.769/.854); "
     "sessions unchanged."),
    ("palaced/retrieval/params.py", "RankParams.hop_weight",
     "Weight of the second hop's BM25 list (names the best 3 drawers mention) against the "
     "query's own. LoCoMo dev turn R@1/5/10: no hop .401/.730/.823, 0.15 .404/.731/.824, 0.3 "
     ".409/.727/.824, 0.5 .416/.726/.824, 0.8 .410/.725/.823; leave-one-conversation-out picks "
     "0.5 for R@1+R@5+R@10 and 0.15 for R@5 (benchmarks.md, \"Connecting the dots\")."),
    ("palaced/retrieval/params.py", "RankParams.access_weight",
     "Share of the score range a drawer gains from use (full at 20 recalls). "
     "`bench/access.py`, LoCoMo dev turn R@1/5/10, fresh .415/.728/.826: 0.025 organic use "
     ".415/.729/.824, every question asked twice .414/.728/.825, gold turns used before "
     ".421/.734/.827; 0.05 twice .410/.729/.825 (R@1 -.005), gold .428/.739/.831."),
    ("palaced/palace/keywords.py", "REBUILD_MAX",
     "The keyword engine is rebuilt once 5 % of the palace (at least 2,000, at most this many "
     "drawers) changed since its build: each search scores the changed rows that hold its "
     "words. `bench/bm25_scale.py --overlay 5000`, 100k drawers: engine p50/p95 2.0/3.4 ms "
     "CPU right after the build, 3.4/5.2 ms after 5,000 remembers (5,400 rows changed)."),
    ("palaced/index/vectors.py", "EXACT_SEARCH_MAX",
     "Vector index keys up to which a search scans every vector exactly instead of walking "
     "the HNSW graph (which misses a few vectors even when searched for with their own "
     "vector: 1 of 2,000 at 10k, 5 of 2,000 at 50k). `bench/exact_search.py`, k = 200: "
     "exact 0.09 / 0.44 / 0.80 / 2.16 ms at 1k / 10k / 20k / 50k vectors, the graph 0.09 / "
     "0.10 / 0.10 / 0.22 ms."),
    ("palaced/store/lookup/search.py", "SUBSTRING_SCAN",
     "Substring matches ranked at most (newest first). `bench/substring.py`, 10k drawers: "
     "a miss of both searches 0.069 ms (0.035 without the fallback), a rare substring "
     "0.35 ms, one in most drawers 1.53 ms p50 (2.9 ms at 100k); the trigram index adds "
     "20 % to the database."),
    ("palaced/store/lookup/context.py", "CONTEXT_NEIGHBOURS",
     "Drawers on each side (same room, time order) indexed as a drawer's BM25 context. LoCoMo "
     "dev turn R@5/R@10: ±1 .712/.807, ±2 .731/.825 (context weight 0.5)."),
    ("palaced/store/lookup/search.py", "COLUMN_WEIGHTS",
     "bm25 column weights: text, neighbour context, date words. Turn R@5, context ±1: no "
     "context .653, 0.35 .706, 0.5 .712; date words 0 -> 0.6: .689 -> .706. With context ±2, "
     "0.4 balances R@1 (.401) against R@5/R@10 (.730/.823). Issue 33, with the room feedback "
     "gone (`bench/rank_cv.py --sweep context`): leave-one-conversation-out keeps 0.4 "
     "(held out MiniLM .497/.773/.845, mpnet .515/.782/.847: no better)."),
    ("palaced/store/lookup/search.py", "BM25_K1",
     "BM25's k1. FTS5's bm25() fixes k1 at 1.2; `bm25_weights` scales the column weights by "
     "1.2 / k1, which is BM25 with k1 up to one constant per query (the fusion z-scores the "
     "list); the keyword engine and PostgreSQL take the same weights. `bench/rank_cv.py "
     "--sweep k1`, LoCoMo dev turn R@1/5/10, session R@1, 1.2 -> 0.9: MiniLM "
     ".498/.773/.847, .747 -> .502/.776/.846, .748; mpnet int8 .516/.784/.849, .752 -> "
     ".517/.791/.852, .753; leave-one-conversation-out picks 0.6-0.9 in every fold of both "
     "models (docs/benchmarks.md, \"Model choice and fewer rules\")."),
    ("palaced/store/lookup/search.py", "TermStats.MIN_DOCS",
     "Terms in more than half of the drawers carry no BM25 weight and are dropped from the "
     "keyword query in palaces of at least this many drawers: Zipfian 10k palace 6.5 -> 1.9 ms "
     "per query. Smaller palaces keep them (LoCoMo dev, ~600-drawer palaces: turn R@1 .401 "
     "with them, .399 without)."),
    ("palaced/engine/embedder.py", "BATCH_SIZE",
     "Texts sorted by length, embedded this many at a time. LoCoMo turns (~150 chars), 2 cores: "
     "batch 16 138 texts/s, 64 131/s, 256 53/s, unsorted 64 25/s."),
    ("palaced/engine/embedder.py", "_stop_spinning",
     "ONNX thread spinning off: embedding + BM25 in parallel 11.2 ms with spinning, 6.8 ms "
     "without (sequential 8.9 ms), 2 cores."),
    ("palaced/text/rules.py", "DEDUP_THRESHOLD",
     "Cosine at or above which a new memory may repeat one in its room (plus a lexical guard). "
     "`bench/dedup_threshold.py`, int8 model, 53 near-duplicate and 57 different pairs: "
     "near-duplicates min .757, median .936; different facts min .526, median .898, up to .991. "
     "Cosine alone at .85 catches 50/53 and merges 35/57; with the guard .85 catches 47/53 and "
     "merges 0/57 (lowest zero-merge threshold .81)."),
    ("palaced/text/chunking.py", "chunk_text",
     "Windows of at most 200 estimated wordpieces (the model saw 256 in training; fastembed "
     "truncates beyond). The estimate is within a few percent on chat text (median "
     "real/estimate 0.95) and under-counts code by ~15 % at p95."),
    ("palaced/palace/handle.py", "COMPACT_MIN_DEAD",
     "Tombstones before an idle-time index compaction (and a twentieth of the index); a "
     "compaction rebuilds from a read snapshot at ~0.5 s per 1,000 vectors on 2 cores while "
     "writes go on, then catches up under the write lock."),
    ("palaced/palace/handle.py", "SAVE_INTERVAL_S",
     "Under writes that never pause, the vector index is still saved this often (and never "
     "more than a tenth of the time): a kill -9 replays at most this long of writes. "
     "`bench/scale.py --drawers 50000`: 500 remembers in 23 s, then kill -9: 58 vectors "
     "replayed (a save fell inside them), first recall 0.41 s; before: full rebuild, 132 s."),
    ("palaced/index/vectors.py", "INDEX_DTYPE",
     "Half-precision vectors in the HNSW index (SQLite keeps float32). 100k vectors, 2 cores: "
     "file 92 MB instead of 169 MB, load 73 ms instead of 114, add 2,150/s instead of 1,400/s "
     "(random unit vectors); LoCoMo dev R@1/5/10 unchanged (.401/.730/.823)."),
    ("palaced/memory/writes.py", "INLINE_MAX_CHUNKS",
     "Longer texts (~9,000 characters) are embedded in the background after the remember "
     "returns: 16 windows are ~0.5 s of model time on 2 quiet cores (~30/s). "
     "`bench/bigmem.py`: 200,000 characters answer in 0.59 s instead of 38 s (vectors in "
     "after 20 s), 1,000-5,000 as before (inline)."),
    ("palaced/store/lookup/search.py", "COMMON_SHARE",
     "With `SPLIT_MIN_POSTINGS`: the two-part keyword search of large palaces. "
     "`bench/bm25_scale.py`, 100k Zipfian drawers, 120 queries: p50 40 -> 14 ms, p95 98 -> "
     "41 ms, exact top-10 kept 100 %, top-100 98 %; LoCoMo dev turns among 100k drawers: BM25 "
     "R@1/5/10 .364/.660/.757 either way. Forced on LoCoMo's own ~600-drawer palaces (not "
     "done: the split needs 10,000 common postings) it would cost R@1 .401 -> .385."),
    ("palaced/store/lookup/search.py", "SPLIT_MIN_POSTINGS", "See `COMMON_SHARE`."),
    ("palaced/retrieval/search.py", "NARROW_OVERFETCH",
     "A keyword search narrowed by wing, room or tags asks the keyword engine for this many "
     "times its limit and keeps the matching drawers (exact when at least the limit match). "
     "`bench/bm25_scale.py --db`, the 100k needle palace, a wing of four: CPU p50 / p95 "
     "14.7 / 40.3 ms on FTS5, 8.3 / 11.3 ms on the engine, every query served by it."),
    ("palaced/retrieval/search.py", "NARROW_SET_MAX",
     "A wing or room the over-fetch leaves short, of at most this many drawers, has each of "
     "them scored by the engine (the cap of a filtered vector search's exact scan). The same "
     "bench, a room of 1/200: 246.7 / 925.8 ms on FTS5, 5.7 / 13.4 ms, exact top 10 kept "
     "100 %."),
    ("palaced/retrieval/recall_caches.py", "TEXT_MAPS_CHARS",
     "Word maps of long drawers kept per open palace: 1.4 MB per 150,000 characters, so "
     "~37 MB at most. "
     "`bench/bigmem.py`: with one 150,000-character drawer, deep recall 25 ms instead of "
     "423 ms (16 ms without the drawer); a 150k map takes 30-85 ms to build, once."),
    ("palaced/maintenance/reembed.py", "BACKGROUND_SHARE",
     "Share of the time the background re-embedding after a model change embeds. "
     "`bench/reembed.py --drawers 1000`, 2 shared cores (load ~10), recalls and writes on "
     "another palace without pause: share 1.0 re-embeds 42 drawers/s, recall p50 20.0 ms "
     "(4.9 after the pass), remember p50 62 ms (11); share 0.5 20 drawers/s, recall p50 7.9 ms "
     "(5.2), remember p50 28 ms (14). Alone, share 0.5 re-embeds 31 drawers/s there."),
    ("palaced/engine/tokens.py", "COUNT_CACHE_SIZE",
     "Token counts memoised: without it counting is ~1 ms of every recall."),
    ("palaced/retrieval/fusion.py", "normalize",
     "Plain float math: `statistics.pstdev`'s exact fractions cost ~0.3 ms per list."),
    ("palaced/ops/drawers.py", "op_remember",
     "Topic extraction of a long text takes up to ~150 ms: it runs in a worker thread."),
]


# -- helpers ----------------------------------------------------------------------------------
class GenError(RuntimeError):
    """The code has something this generator cannot document without a human."""


def _first_paragraph(doc: str | None) -> str:
    text = inspect.cleandoc(doc or "").split("\n\n", 1)[0]
    return " ".join(text.split()).replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def replace_sections(text: str, sections: dict[str, str], where: str) -> str:
    """``text`` with each ``BEGIN/END GENERATED: name`` region holding ``sections[name]``."""
    for name, body in sections.items():
        pattern = re.compile(rf"(<!-- BEGIN GENERATED: {re.escape(name)} -->\n)(.*?)"
                             rf"(<!-- END GENERATED: {re.escape(name)} -->)", re.S)
        if len(pattern.findall(text)) != 1:
            raise GenError(f"{where}: needs exactly one BEGIN/END GENERATED: {name} pair")
        text = pattern.sub(lambda m, b=body: m.group(1) + b.rstrip("\n") + "\n" + m.group(3),
                           text)
    return text


# -- CLI ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _plain_rich() -> Iterator[None]:
    """Typer's rich help at a fixed width, without colour, whatever the terminal."""
    import typer.rich_utils as ru

    saved = (ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM)
    ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM = HELP_WIDTH, False, None
    try:
        yield
    finally:
        ru.MAX_WIDTH, ru.FORCE_TERMINAL, ru.COLOR_SYSTEM = saved


def _command_paths(group: Any) -> list[tuple[list[str], str]]:
    """Every command path of a click group, in the order ``--help`` lists them."""
    import click

    out: list[tuple[list[str], str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append((path, cmd.get_short_help_str(limit=200) if path else ""))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name])

    walk(group, [])
    return out


# Unset while rendering help: an env var default or a terminal size must not leak into it.
_HELP_ENV_UNSET = ("PALACE", "PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "COLUMNS", "LINES",
                   "TERMINAL_WIDTH", "FORCE_COLOR", "NO_COLOR")


def _help_text(app: Any, prog: str, path: list[str]) -> str:
    from typer.testing import CliRunner

    env: dict[str, str | None] = dict.fromkeys(_HELP_ENV_UNSET)
    res = CliRunner().invoke(app, [*path, "--help"], prog_name=prog, env=env)
    if res.exit_code != 0:
        raise GenError(f"{prog} {' '.join(path)} --help exited {res.exit_code}: {res.output}")
    lines = [ln.rstrip() for ln in res.output.splitlines()]
    return "\n".join(lines).strip("\n")


def render_cli() -> str:
    import typer.main

    from palace_client.cli import app as palace_app
    from palaced.cli import app as palaced_app

    parts = [
        "# CLI reference",
        "",
        f"<!-- GENERATED by `{REGENERATE}` from the real `--help`; do not edit by hand. -->",
        "",
        "Every command of `palace` (the client) and `palaced` (the daemon), with its `--help` as "
        f"printed at {HELP_WIDTH} columns. Exit codes and error names: "
        "[protocol.md](protocol.md#exit-codes). Every `palace` command that talks to the daemon "
        "takes `--json` and then prints exactly one JSON document on stdout, also for errors "
        "(`{\"ok\": false, \"error\": {...}}`), usage errors included (`USAGE_ERROR`, exit "
        "2). No command prints a traceback.",
        "",
    ]
    bodies: list[str] = []
    index: list[str] = []
    with _plain_rich():
        for prog, app in (("palace", palace_app), ("palaced", palaced_app)):
            for path, short in _command_paths(typer.main.get_command(app)):
                title = " ".join([prog, *path])
                anchor = title.replace(" ", "-")
                index.append(f"- [`{title}`](#{anchor})" + (f": {short}" if short else ""))
                bodies += [f"## {title}", "", "```text", f"$ {title} --help",
                           _help_text(app, prog, path), "```", ""]
    return "\n".join([*parts, *index, "", *bodies]).rstrip("\n") + "\n"


# -- errors, exit codes, ops ------------------------------------------------------------------
def _exit_meanings() -> dict[int, str]:
    """The exit-code table of the ``palace_client.cli`` docstring, checked against EXIT_*."""
    from palace_client import cli
    from palace_client.cli import common

    meanings: dict[int, str] = {}
    for line in (cli.__doc__ or "").splitlines():
        m = re.match(r"^(\d+)\s{2,}(\S.*)$", line)
        if m:
            meanings[int(m.group(1))] = m.group(2).replace("``", "`")
    constants = {v for k, v in vars(common).items()
                 if k.startswith("EXIT_") and isinstance(v, int)}
    if set(meanings) != constants:
        raise GenError("palace_client/cli/__init__.py: the docstring's exit-code table "
                       f"{sorted(meanings)} and the EXIT_* constants {sorted(constants)} differ")
    return meanings


def _error_classes() -> list[type[Any]]:
    from palaced.wire import errors

    return [cls for _, cls in sorted(errors.error_classes().items())]


def render_errors() -> str:
    from palace_client.cli.common import exit_code_for
    from palaced.wire import errors

    rows = [[str(cls.code), f"`{cls.name}`", f"`{cls.__name__}`",
             "yes" if cls.retryable else "no", str(exit_code_for(cls("x"))),
             _first_paragraph(cls.__doc__)] for cls in _error_classes()]
    bases = sorted((cls.code // 100 * 100, cls) for cls in errors.PalaceError.__subclasses__()
                   if cls.__module__ == errors.__name__)
    base_line = ", ".join(f"{code}-{code + 99} `{cls.__name__}`" for code, cls in bases)
    return (_table(["code", "name", "Python class", "retryable", "CLI exit", "meaning"], rows)
            + f"\n\nRange base classes (what an unknown code maps to): {base_line}.\n")


def render_exit_codes() -> str:
    from palace_client.cli.common import exit_code_for

    by_exit: dict[int, list[str]] = {}
    for cls in _error_classes():
        by_exit.setdefault(exit_code_for(cls("x")), []).append(f"`{cls.name}`")
    rows = [[str(code), meaning, ", ".join(by_exit.get(code, [])) or "-"]
            for code, meaning in sorted(_exit_meanings().items())]
    return _table(["exit", "meaning", "errors that exit with it"], rows) + "\n"


def _arg_text(name: str, arg: Any) -> str:
    text = f"`{name}` {arg.kind}"
    if arg.required:
        text += " (required)"
    elif arg.default not in (None, [], ""):
        text += f" = {json.dumps(arg.default)}"
    bounds = []
    if arg.min is not None or arg.max is not None:
        lo = "" if arg.min is None else f"{arg.min:g}"
        hi = "" if arg.max is None else f"{arg.max:g}"
        bounds.append(f"{lo}..{hi}")
    if arg.max_len is not None:
        bounds.append(f"len <= {arg.max_len}")
    return text + (f" [{', '.join(bounds)}]" if bounds else "")


def render_ops() -> str:
    from palaced.wire.specs import SPECS

    rows = []
    for name in sorted(SPECS):
        op = SPECS[name]
        about = op.doc
        if not about:
            raise GenError(f"op {name} has no doc: give its OpSpec(...) in palaced/wire/specs.py a doc=")
        args = "; ".join(_arg_text(n, a) for n, a in op.args.items()) or "-"
        need = {"required": "yes", "optional": "optional"}.get(op.palace, "no")
        rows.append([f"`{name}`", need, op.permission or "-", about, args])
    return _table(["op", "palace", "permission", "what it does", "args"], rows) + "\n"


# -- configuration --------------------------------------------------------------------------
def _config_keys() -> list[tuple[str, str, str, str]]:
    """``(section, key, type, default)`` of every key of ``palaced.config.settings.SCHEMA``."""
    from palaced.config import settings as config
    from palaced.config.bounds import describe_bound

    rows = []
    for section, keys in config.SCHEMA.items():
        for key, spec in keys.items():
            kind = spec.kind
            if spec.bound:
                kind += " " + describe_bound(spec.bound)
            if spec.default is None:
                default = "unset"
            elif isinstance(spec.default, bool):
                default = str(spec.default).lower()
            else:
                default = json.dumps(spec.default)
            rows.append((section, key, kind, default))
    return rows


def render_config_keys() -> str:
    rows = []
    for section, key, kind, default in _config_keys():
        meaning = CONFIG_MEANINGS.get((section, key))
        if meaning is None:
            raise GenError(f"config key [{section}] {key} is undocumented: add it to "
                           "CONFIG_MEANINGS in docs/gen.py")
        shown = default if default == "unset" else f"`{default}`"
        rows.append([f"`[{section}]`", f"`{key}`", kind, shown, meaning])
    return _table(["section", "key", "type", "default", "meaning"], rows) + "\n"


_ENV_GETTERS = {"get", "getenv", "pop"}


def _env_names() -> dict[str, list[str]]:
    """Every constant environment variable name read in palaced/ and palace_client/."""
    found: dict[str, list[str]] = {}

    def add(name: str, where: str) -> None:
        found.setdefault(name, [])
        if where not in found[name]:
            found[name].append(where)

    for pkg in ("palaced", "palace_client"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Call):
                    func = node.func
                    base = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
                    attr = func.attr if isinstance(func, ast.Attribute) else getattr(
                        func, "id", "")
                    if (attr in _ENV_GETTERS and ("environ" in base or base in ("env", "os"))
                            and node.args and isinstance(node.args[0], ast.Constant)
                            and isinstance(node.args[0].value, str)):
                        add(node.args[0].value, rel)
                    for kw in node.keywords:
                        if (kw.arg == "envvar" and isinstance(kw.value, ast.Constant)
                                and isinstance(kw.value.value, str)):
                            add(kw.value.value, rel)
                elif (isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value)
                      and isinstance(node.slice, ast.Constant)
                      and isinstance(node.slice.value, str)):
                    add(node.slice.value, rel)
    return found


def render_env() -> str:
    names = _env_names()
    missing = sorted(set(names) - set(ENV_MEANINGS))
    if missing:
        raise GenError(f"environment variable(s) {', '.join(missing)} are read by the code but "
                       "undocumented: add them to ENV_MEANINGS in docs/gen.py")
    rows = [[f"`{name}`", ENV_MEANINGS[name][0], ENV_MEANINGS[name][1],
             ", ".join(f"`{w}`" for w in names[name])]
            for name in ENV_MEANINGS if name in names]
    return _table(["variable", "read by", "effect", "read in"], rows) + "\n"


# -- Python API and MCP tools -----------------------------------------------------------------
def _signature(fn: Callable[..., Any], name: str | None = None) -> str:
    sig = inspect.signature(fn)
    params = []
    star_done = False
    for p in list(sig.parameters.values())[1:]:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        if p.kind is p.VAR_KEYWORD:
            params.append(f"**{p.name}")
        elif p.default is p.empty:
            params.append(p.name)
        else:
            params.append(f"{p.name}={p.default!r}")
    ret = sig.return_annotation
    ret_text = "" if ret is sig.empty else f" -> {ret}".replace("'", "")
    return f"{name or fn.__name__}({', '.join(params)}){ret_text}"


def render_python_api() -> str:
    from palace_client import Client

    init = _signature(Client.__init__, "Client").removesuffix(" -> None")
    lines = [f"- `{init}`: {_first_paragraph(Client.__doc__)}"]
    # Client's methods in their order in the class (the MRO kept for subclasses).
    members = {n: m for cls in reversed(Client.__mro__[:-1]) for n, m in cls.__dict__.items()}
    order = [n for cls in Client.__mro__[:-1] for n in cls.__dict__]
    for name in dict.fromkeys(order):
        member = members[name]
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            lines.append(f"- `{name}` (property): {_first_paragraph(member.__doc__)}")
            continue
        doc = _first_paragraph(member.__doc__) or {
            "close": "Close the connection (also done by `with Client() as c:`)."}.get(name)
        if not doc:
            raise GenError(f"Client.{name} has no docstring")
        lines.append(f"- `{_signature(member)}`: {doc}")
    return "\n".join(lines) + "\n"


def render_mcp_tools() -> str:
    from palace_client.mcp.tools import TOOLS, TOOLSET_OF

    rows = []
    for spec in TOOLS:
        args = ", ".join(f"`{k}`" + ("*" if k in spec.required else "") for k in spec.properties)
        kind = "read-only" if spec.read_only else "destructive" if spec.destructive else "writes"
        rows.append([f"`{spec.name}`", f"`{TOOLSET_OF[spec.name]}`", kind, args or "-",
                     spec.description])
    return (_table(["tool", "toolset", "kind", "arguments (* required)", "what it does"], rows)
            + "\n")


# -- tuning constants -------------------------------------------------------------------------
def _locate(path: str, symbol: str) -> tuple[int, str]:
    """Line and value source of ``symbol`` (``NAME`` or ``Class.NAME``) in ``path``."""
    src = (REPO / path).read_text("utf-8")
    tree = ast.parse(src)
    scope: list[ast.stmt] = tree.body
    *outer, name = symbol.split(".")
    for cls_name in outer:
        cls = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
        if cls is None:
            raise GenError(f"{path}: no class {cls_name} (TUNING in docs/gen.py)")
        scope = cls.body
    for node in scope:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.lineno, ast.get_source_segment(src, node.value) or ""
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == name and node.value is not None):
            return node.lineno, ast.get_source_segment(src, node.value) or ""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node.lineno, ""
    raise GenError(f"{path}: {symbol} not found (TUNING in docs/gen.py)")


def render_tuning() -> str:
    rows = []
    for path, symbol, note in TUNING:
        line, value = _locate(path, symbol)
        shown = f"`{' '.join(value.split())}`" if value else "(function)"
        rows.append([f"[`{path}:{line}`](../{path}#L{line})", f"`{symbol}`", shown, note])
    return _table(["where", "constant", "value", "measured"], rows) + "\n"


# -- driver -----------------------------------------------------------------------------------
SECTIONS: dict[str, dict[str, Callable[[], str]]] = {
    "protocol.md": {"errors": render_errors, "exit-codes": render_exit_codes,
                    "ops": render_ops},
    "configuration.md": {"config-keys": render_config_keys, "env-vars": render_env},
    "python-api.md": {"client-methods": render_python_api},
    "agents.md": {"mcp-tools": render_mcp_tools},
    "benchmarks.md": {"tuning": render_tuning},
}


def render_service_files() -> dict[Path, str]:
    """The service files in ``systemd/`` and ``launchd/``: what ``palace service install``
    writes, with specifiers and placeholders instead of one user's paths."""
    from palace_client.service import units

    return {
        REPO / "systemd" / units.SOCKET_UNIT: units.render_socket_unit(units.default_spec()),
        REPO / "systemd" / units.SERVICE_UNIT: units.render_service_unit(units.default_spec()),
        REPO / "launchd" / f"{units.LAUNCHD_LABEL}.plist":
            units.render_plist(units.default_launchd_spec()),
    }


def render_all() -> dict[Path, str]:
    """The full new text of every generated file (``{path: text}``); writes nothing."""
    out = {DOCS / "cli.md": render_cli(), **render_service_files()}
    for name, sections in SECTIONS.items():
        path = DOCS / name
        current = path.read_text("utf-8")
        out[path] = replace_sections(current, {k: fn() for k, fn in sections.items()}, name)
    return out


def stale(rendered: dict[Path, str]) -> list[Path]:
    return [p for p, text in rendered.items()
            if not p.is_file() or p.read_text("utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale files, write none")
    args = parser.parse_args(argv)
    try:
        rendered = render_all()
    except GenError as exc:
        sys.stderr.write(f"docs/gen.py: {exc}\n")
        return 2
    changed = stale(rendered)
    if args.check:
        for path in changed:
            sys.stderr.write(f"stale: {path.relative_to(REPO)} (run {REGENERATE})\n")
        return 1 if changed else 0
    for path in changed:
        path.write_text(rendered[path], "utf-8")
        sys.stdout.write(f"wrote {path.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
