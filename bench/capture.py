"""Capture of Claude Code transcripts: import rate, and retrieval quality of captured sessions.

**Import rate** (default): a synthetic corpus in Claude Code's transcript format (10 projects,
``--exchanges`` exchanges over sessions of 100; each exchange a prompt, tool calls with raw
output, thinking, and an answer; one in 20 carries a secret) is imported with
``palace import claude-code DIR --palace bench --json`` against a private daemon with the
real model. Printed: drawers/s of the whole import (reading, redaction, extraction,
embedding, storage), then the raw embedder's throughput on a sample of the very texts stored
(rendered by the daemon's code, chunked as the daemon chunks them, sorted by length, batches
of 32, in-process while no daemon runs), timed right before and right after the import, and
the share of their mean the import reaches.

**Per format** (``--formats``): one large generated session in each agent's format (Claude
Code, Codex CLI, Gemini CLI, Copilot CLI: ``--session-exchanges`` exchanges, each a prompt,
reasoning or a thought, a read, an edit and a shell call with raw output, and an answer; the
same words in each format; Gemini's model message appended again as it grows, as Gemini CLI
writes it).
Timed per format, ``--rounds`` times, medians printed as exchanges/s and MB/s of transcript:
the reader alone in-process (parse, classify, assemble: ``palaced.text.exchanges``), and
``capture.transcript`` with ``dry_run`` against a keyword-only daemon (the reader plus the
drawer rendering, redaction and extraction, over the socket; no storage, no embedding), then
one full keyword-only capture (storage too).

**LoCoMo** (``--locomo``): every LoCoMo dev conversation rendered as Claude Code transcripts
(one per session; the first speaker's turns are prompts, the other's the answers, each turn
``{speaker} said, "{text}"`` as ``bench/locomo.py`` stores it, at the session's date) and
imported with the claude-code importer (one drawer per exchange: two turns), against
``bench/locomo.py`` itself (one drawer per turn via ``remember_many``), same daemon, same
questions, scored by ``bench/locomo.py``'s ``evaluate`` (a drawer's rank counts for each of
its turns).

    python bench/capture.py [--exchanges 10000] [--locomo [--conversations N]] [--json out.json]
    python bench/capture.py --formats [--session-exchanges 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import locomo  # noqa: E402  (bench/ is on sys.path: this script's directory)
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon, all_drawers  # noqa: E402

from palace_client.importers.runner import Tally  # noqa: E402
from palace_client.importers.transcripts import AGENTS, import_transcripts  # noqa: E402
from tests.support.agent_transcripts import (  # noqa: E402
    CodexSession,
    CopilotSession,
    GeminiSession,
)
from tests.support.transcripts import Session  # noqa: E402

PROJECTS = ["shop-api", "billing", "mobile-app", "infra", "search", "auth", "data-pipeline",
            "docs-site", "ml-serving", "admin-ui"]
COMPONENTS = ["the checkout flow", "the payment webhook", "the user table", "the cache layer",
              "the login form", "the nightly export", "the rate limiter", "the search index",
              "the email worker", "the feature flags", "the build script", "the CI pipeline"]
ASKS = ["Why does {c} fail on staging?", "Can you add retries to {c}?",
        "Refactor {c} so it is testable.", "Write tests for {c}.",
        "What does {c} depend on?", "Make {c} faster; it takes {n} seconds.",
        "Rename the config key used by {c}.", "Document how {c} works."]
ANSWERS = ["The root cause was a missing index on {c}; fixed by adding it in migration {n}.",
           "We decided to use exponential backoff for {c}, capped at {n} seconds.",
           "{c} talks to Postgres 16 on port 5433 and reads its settings from config/{p}.toml.",
           "Added {n} tests for {c}; they cover the empty, error and retry cases.",
           "{c} now streams rows instead of loading them all, which cut it to {n} ms.",
           "I renamed the key to {p}_timeout_ms everywhere and kept the old one as an alias."]


def synthetic_corpus(root: Path, exchanges: int, seed: int = 5) -> list[Path]:
    """Transcripts of ``exchanges`` exchanges in Claude Code's format under ``root``."""
    rnd = random.Random(seed)
    paths: list[Path] = []
    done = 0
    while done < exchanges:
        project = PROJECTS[len(paths) % len(PROJECTS)]
        cwd = f"/home/dev/src/{project}"
        s = Session(root / f"-home-dev-src-{project}" / f"session-{len(paths):04d}.jsonl",
                    session_id=f"{len(paths):08d}-bench", cwd=cwd)
        for _ in range(min(100, exchanges - done)):
            c, n = rnd.choice(COMPONENTS), rnd.randint(2, 900)
            s.prompt(f"Ticket {done + 1}: " + rnd.choice(ASKS).format(c=c, n=n) + (
                " The token is ghp_" + "".join(rnd.choices("abcdefXYZ0123456789", k=36))
                if rnd.random() < 0.05 else ""))
            s.say(f"Let me look at {c}.", thinking=f"The user asks about {c}.")
            s.tool("Read", {"file_path": f"{cwd}/src/{project}/main.py"}, "x = 1\n" * 40)
            s.tool("Edit", {"file_path": f"{cwd}/src/{project}/main.py", "old_string": "a",
                            "new_string": "b"}, "The file has been updated.")
            s.tool("Bash", {"command": "pytest -q"}, f"{n} passed in 1.2s\n" + "." * 400)
            s.say(rnd.choice(ANSWERS).format(c=c.capitalize(), n=n, p=project))
            done += 1
        paths.append(s.path)
    return paths


def rendered_texts(paths: list[Path], limit: int = 200_000) -> list[str]:
    """The drawer texts the import stores for ``paths`` (the daemon's own rendering code)."""
    from palaced.capture.drawers import to_drawer
    from palaced.text.exchanges import TranscriptReader, open_transcript

    texts = []
    for path in paths:
        with open_transcript(path) as fh:
            batch = TranscriptReader(fh, 0, 0).next_batch(1_000_000)
        exchanges = batch.complete + ([batch.tail] if batch.tail and batch.tail.answered
                                      else [])
        texts += [to_drawer(ex, wing="w", room="r", path=str(path), limit=limit).drawer.text
                  for ex in exchanges]
    return texts


def raw_embedder_rate(texts: list[str], model_dir: Path) -> dict[str, Any]:
    """Texts/s of the model alone on ``texts``, chunked as the daemon does."""
    from palaced.config.model import EmbedderSettings
    from palaced.engine.embedder import FastEmbedder
    from palaced.memory.writes import chunk_text

    emb = FastEmbedder.load(EmbedderSettings(model_path=model_dir, allow_download=False))
    chunks = sorted((c for t in texts for c in chunk_text(t)), key=len)
    started = time.perf_counter()
    for i in range(0, len(chunks), 32):
        emb.embed_passages(chunks[i:i + 32])
    seconds = time.perf_counter() - started
    return {"texts": len(texts), "chunks": len(chunks), "seconds": round(seconds, 2),
            "texts_per_s": round(len(texts) / seconds, 1)}


def import_rate(args: argparse.Namespace) -> dict[str, Any]:
    daemon = PrivateDaemon("pal-capbench-", args.model_dir, DEFAULT_TIKTOKEN)
    try:
        paths = synthetic_corpus(daemon.home / "projects", args.exchanges)
        texts = rendered_texts(paths)
        # The raw embedder on a sample of the same texts, right before and right after the
        # import (the machine's load moves: the share is taken against their mean).
        sample = random.Random(1).sample(texts, min(len(texts), args.raw_sample))
        raw_before = raw_embedder_rate(sample, args.model_dir)
        daemon.start()
        started = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "palace_client", "import", "claude-code",
                              str(daemon.home / "projects"), "--palace", "bench", "--json"],
                             env=daemon.env, capture_output=True, text=True, timeout=7200)
        seconds = time.perf_counter() - started
        if res.returncode != 0:
            raise RuntimeError(f"import failed ({res.returncode}): {res.stderr}")
        report = json.loads(res.stdout)  # the runner's Tally (docs/importing.md)
        with daemon.client("bench-capture") as c:
            stored = len(all_drawers(c, "bench"))
            again = c.call("capture.transcript", "bench", {
                "path": str(paths[0]), "session_id": paths[0].stem, "wait": True})
    finally:
        daemon.stop()
    raw_after = raw_embedder_rate(sample, args.model_dir)
    raw = (raw_before["texts_per_s"] + raw_after["texts_per_s"]) / 2
    rate = report["stored"] / seconds
    daemon.cleanup(keep=False)
    return {"exchanges": args.exchanges, "files": report["read"],
            "drawers": report["stored"], "stored": stored, "redactions": report["redacted"],
            "seconds": round(seconds, 1),
            "drawers_per_s": round(rate, 1),
            "raw_embedder": {"before": raw_before, "after": raw_after,
                             "texts_per_s": round(raw, 1)},
            "share_of_raw": round(rate / raw, 3),
            "second_capture_of_a_file": again["exchanges"]}


FORMATS = ("claude", "codex", "gemini", "copilot")


def format_session(fmt: str, root: Path, exchanges: int, seed: int = 7) -> Path:
    """One session of ``exchanges`` exchanges in format ``fmt``, the same words in each."""
    rnd = random.Random(seed)
    cwd = "/home/dev/src/shop-api"
    writer: Session | CodexSession | GeminiSession | CopilotSession
    if fmt == "claude":
        writer = Session(root / "claude" / "bench.jsonl", session_id="bench-claude", cwd=cwd)
    elif fmt == "codex":
        writer = CodexSession(root / "codex", session_id="0199aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
                              cwd=cwd)
    elif fmt == "gemini":
        writer = GeminiSession(root / "gemini", session_id="6f1d2c3b-0000-4000-8000-bench0000000")
    else:
        writer = CopilotSession(root / "copilot", session_id="bench-copilot", cwd=cwd)
    for i in range(exchanges):
        c, n = rnd.choice(COMPONENTS), rnd.randint(2, 900)
        prompt = f"Ticket {i + 1}: " + rnd.choice(ASKS).format(c=c, n=n) + (
            " The token is ghp_" + "".join(rnd.choices("abcdefXYZ0123456789", k=36))
            if rnd.random() < 0.05 else "")
        answer = rnd.choice(ANSWERS).format(c=c.capitalize(), n=n, p="shop-api")
        path, output = f"{cwd}/src/main.py", f"{n} passed in 1.2s\n" + "." * 400
        if isinstance(writer, Session):
            writer.prompt(prompt)
            writer.say(f"Let me look at {c}.", thinking=f"The user asks about {c}.")
            writer.tool("Read", {"file_path": path}, "x = 1\n" * 40)
            writer.tool("Edit", {"file_path": path, "old_string": "a", "new_string": "b"},
                        "The file has been updated.")
            writer.tool("Bash", {"command": "pytest -q"}, output)
            writer.say(answer)
        elif isinstance(writer, CodexSession):
            writer.prompt(prompt)
            writer.think(f"The user asks about {c}.")
            writer.shell(f"sed -n 1,40p {path}", "x = 1\n" * 40)
            writer.patch("src/main.py", "-a\n+b")
            writer.shell("pytest -q", output)
            writer.say(answer)
        elif isinstance(writer, CopilotSession):
            writer.prompt(prompt)
            writer.say(f"Let me look at {c}.", reasoning=f"The user asks about {c}.", tools=[
                ("view", {"path": path}, "x = 1\n" * 40),
                ("edit", {"path": path, "old_str": "a", "new_str": "b"}, "File updated"),
                ("bash", {"command": "pytest -q"}, output)])
            writer.say(answer)
            writer.end_turn()
        else:
            writer.prompt(prompt)
            writer.say(f"Let me look at {c}.", thought=f"The user asks about {c}.")
            writer.tool("read_file", {"file_path": path}, "x = 1\n" * 40)
            writer.tool("replace", {"file_path": path, "old_string": "a", "new_string": "b"},
                        "Successfully modified file")
            writer.tool("run_shell_command", {"command": "pytest -q"}, output)
            writer.say(answer)
    return writer.path


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def read_rate(fmt: str, path: Path) -> tuple[int, float]:
    """Exchanges read from ``path`` by the reader alone, and the seconds it took."""
    from palaced.text.exchanges import TranscriptReader, open_transcript, records_for

    started = time.perf_counter()
    count = 0
    with open_transcript(path) as fh:
        reader = TranscriptReader(fh, 0, 0, 0, records_for(fmt))
        while True:
            batch = reader.next_batch(256)
            count += len(batch.complete)
            if batch.eof:
                count += batch.tail is not None and batch.tail.answered
                break
    return count, time.perf_counter() - started


def format_rates(args: argparse.Namespace) -> dict[str, Any]:
    """Per format: the reader's and the daemon's capture throughput (see the docstring)."""
    daemon = PrivateDaemon("pal-fmtbench-", None, None)
    out: dict[str, Any] = {"session_exchanges": args.session_exchanges, "rounds": args.rounds,
                           "formats": {}}
    try:
        paths = {fmt: format_session(fmt, daemon.home / "sessions", args.session_exchanges)
                 for fmt in FORMATS}
        for fmt, path in paths.items():
            mb = path.stat().st_size / 1e6
            reads = [read_rate(fmt, path) for _ in range(args.rounds)]
            out["formats"][fmt] = {
                "mb": round(mb, 2), "exchanges": reads[0][0],
                "reader_exchanges_per_s": round(_median([n / s for n, s in reads]), 0),
                "reader_mb_per_s": round(_median([mb / s for _, s in reads]), 1)}
        daemon.start()
        with daemon.client("bench-formats") as c:
            for fmt, path in paths.items():
                row = out["formats"][fmt]
                mb = row["mb"]
                args_ = {"path": str(path), "session_id": f"bench-{fmt}", "format": fmt,
                         "wait": True}
                dry: list[tuple[int, float]] = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    res = c.call("capture.transcript", "bench", {**args_, "dry_run": True},
                                 timeout_ms=3_600_000)
                    dry.append((int(res["exchanges"]), time.perf_counter() - started))
                started = time.perf_counter()
                res = c.call("capture.transcript", "bench", {**args_, "create": True},
                             timeout_ms=3_600_000)
                full = time.perf_counter() - started
                row.update({
                    "dry_run_exchanges_per_s": round(_median([n / s for n, s in dry]), 0),
                    "dry_run_mb_per_s": round(_median([mb / s for _, s in dry]), 1),
                    "capture_exchanges": int(res["exchanges"]),
                    "capture_redactions": int(res["redactions"]),
                    "capture_exchanges_per_s": round(int(res["exchanges"]) / full, 0),
                    "capture_mb_per_s": round(mb / full, 1)})
    finally:
        daemon.stop()
        daemon.cleanup(keep=False)
    return out


def locomo_transcripts(sample: dict[str, Any], root: Path
                       ) -> tuple[list[Path], dict[tuple[str, int], str]]:
    """One transcript per session of ``sample``; also (path, line) -> dia_id."""
    from datetime import datetime

    conv = sample["conversation"]
    first = conv.get("speaker_a")
    lines: dict[tuple[str, int], str] = {}
    paths = []
    for key in locomo.sessions(conv):
        stamp = datetime.fromisoformat(
            locomo.parse_locomo_date(str(conv[f"{key}_date_time"])).replace("Z", "+00:00"))
        s = Session(root / f"{sample['sample_id']}-{key}.jsonl",
                    session_id=f"{sample['sample_id']}-{key}", start=stamp, cwd="/home/locomo")
        for n, turn in enumerate(conv[key], 1):
            text = f'{turn["speaker"]} said, "{turn["text"]}"'
            if turn["speaker"] == first:
                s.prompt(text)
            else:
                s.say(text)
            lines[(str(s.path), n)] = str(turn["dia_id"])
        paths.append(s.path)
    return paths, lines


def exchange_groups(sample: dict[str, Any]) -> dict[str, list[str]]:
    """dia_id -> the turns of the exchange the import files it in (a prompt turn and the
    answer turns up to the next prompt)."""
    conv = sample["conversation"]
    groups: dict[str, list[str]] = {}
    for key in locomo.sessions(conv):
        group: list[str] = []
        for turn in conv[key]:
            if turn["speaker"] == conv.get("speaker_a") or not group:
                group = []
            group.append(str(turn["dia_id"]))
            groups[str(turn["dia_id"])] = group
    return groups


def paired(ranked: list[str], groups: dict[str, list[str]]) -> list[str]:
    """A per-turn ranking with each turn replaced by its whole exchange (first occurrence)."""
    return list(dict.fromkeys(t for turn in ranked for t in groups.get(turn, [turn])))


def locomo_compare(args: argparse.Namespace) -> dict[str, Any]:
    import os

    daemon = PrivateDaemon("pal-caplocomo-", args.model_dir, DEFAULT_TIKTOKEN)
    samples = json.loads(locomo.DEFAULT_DATA.read_text("utf-8"))[:args.conversations]
    try:
        daemon.start()
        daemon.adopt_env()
        os.environ["PALACE_EMBED_MODEL_PATH"] = str(args.model_dir)
        baseline = locomo.run(locomo.DEFAULT_DATA, top_k=locomo.DEFAULT_TOP_K,
                              conversations=args.conversations, wait_embed_s=600,
                              requested_mode="default")
        questions: list[locomo.Question] = []
        rankings: list[list[str]] = []
        paired_base: list[list[str]] = []
        same_rankings: list[list[str]] = []
        ingest_s = 0.0
        drawers = 0
        with daemon.client("bench-capture-locomo") as c:
            for sample in samples:
                name = "cc-" + locomo.palace_name(str(sample["sample_id"]))
                paths, line_turns = locomo_transcripts(sample, daemon.home / "locomo")
                started = time.perf_counter()
                tally = import_transcripts(c.call, name, paths,
                                           Tally("claude-code", "transcript", "", name, False),
                                           agent=AGENTS["claude-code"])
                ingest_s += time.perf_counter() - started
                drawers += tally.stored
                turns_of: dict[int, list[str]] = {}
                same_texts: list[tuple[dict[str, Any], list[str]]] = []
                for d in all_drawers(c, name)[::-1]:
                    path, _, span = str(d["source"]).rpartition(":")
                    lo, hi = (int(x) for x in span.split("-"))
                    turns = [line_turns[(path, n)] for n in range(lo, hi + 1)
                             if (path, n) in line_turns]
                    turns_of[int(d["id"])] = turns
                    room = locomo.session_of(turns[0])
                    same_texts.append(({"text": d["text"], "wing": "locomo", "room": room,
                                        "importance": 0.5, "occurred_at": locomo.parse_locomo_date(
                                            str(sample["conversation"][f"{room}_date_time"]))},
                                       turns))
                # The same exchange texts through remember_many, as bench/locomo.py files its
                # drawers (room session_N, importance 0.5): what the capture path itself costs.
                same_name = "ex-" + locomo.palace_name(str(sample["sample_id"]))
                if any(p["name"] == same_name for p in c.list_palaces()):
                    c.delete_palace(same_name)
                c.create_palace(same_name)
                ids = c.remember_many(same_name, [item for item, _ in same_texts])
                same_turns = {i: turns for i, (_, turns) in zip(ids, same_texts, strict=True)}
                base_name = locomo.palace_name(str(sample["sample_id"]))
                base_turns = {int(d["id"]): str(d["source"]).removeprefix("locomo:")
                              for d in all_drawers(c, base_name)}
                groups = exchange_groups(sample)
                for q in locomo.build_questions(sample):
                    res = c.recall_ex(name, q.question, top_k=locomo.DEFAULT_TOP_K)
                    questions.append(q)
                    rankings.append([t for r in res["results"] for t in turns_of[int(r["id"])]])
                    # The per-turn palace's ranking, each turn widened to its exchange: what
                    # two-turn drawers cost the turn metric by themselves.
                    base = c.recall_ex(base_name, q.question, top_k=locomo.DEFAULT_TOP_K)
                    paired_base.append(paired([base_turns[int(r["id"])]
                                               for r in base["results"]], groups))
                    same = c.recall_ex(same_name, q.question, top_k=locomo.DEFAULT_TOP_K)
                    same_rankings.append([t for r in same["results"]
                                          for t in same_turns[int(r["id"])]])
    finally:
        daemon.stop()
    captured = locomo.evaluate(questions, rankings)
    widened = locomo.evaluate(questions, paired_base)
    same_eval = locomo.evaluate(questions, same_rankings)
    daemon.cleanup(keep=False)
    r5_base = baseline["turn"]["recall@5"]
    r5_cap = captured["turn"]["recall@5"]
    return {"questions": len(questions),
            "remember_many": {"turn": baseline["turn"], "drawers": baseline["ingest"]["drawers"]},
            "claude_code_import": {"turn": captured["turn"], "drawers": drawers,
                                   "drawers_per_s": round(drawers / ingest_s, 1)},
            "remember_many_widened_to_exchanges": {"turn": widened["turn"],
                                                   "drawers": baseline["ingest"]["drawers"]},
            "remember_many_of_the_exchanges": {"turn": same_eval["turn"], "drawers": drawers},
            "turn_r5_difference": round(r5_cap - r5_base, 4),
            "turn_r5_difference_same_drawers": round(r5_cap - same_eval["turn"]["recall@5"], 4),
            "turn_r5_difference_same_granularity": round(
                r5_cap - widened["turn"]["recall@5"], 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--exchanges", type=int, default=10_000)
    ap.add_argument("--raw-sample", type=int, default=1_000,
                    help="texts the raw embedder is timed on, before and after the import")
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--locomo", action="store_true", help="run the LoCoMo comparison instead")
    ap.add_argument("--conversations", type=int, default=None,
                    help="LoCoMo: only the first N conversations")
    ap.add_argument("--formats", action="store_true",
                    help="per transcript format: reader and capture throughput instead")
    ap.add_argument("--session-exchanges", type=int, default=5_000,
                    help="--formats: exchanges of each format's session")
    ap.add_argument("--rounds", type=int, default=5, help="--formats: timed rounds (median)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.formats:
        report = format_rates(args)
        print(f"one session of {args.session_exchanges} exchanges per format, medians of "
              f"{args.rounds} rounds (capture: one keyword-only run)")
        print(f"  {'format':8} {'MB':>6} {'reader ex/s':>12} {'MB/s':>6} "
              f"{'dry-run ex/s':>13} {'MB/s':>6} {'capture ex/s':>13} {'MB/s':>6}")
        for fmt, row in report["formats"].items():
            print(f"  {fmt:8} {row['mb']:6.1f} {row['reader_exchanges_per_s']:12.0f} "
                  f"{row['reader_mb_per_s']:6.1f} {row['dry_run_exchanges_per_s']:13.0f} "
                  f"{row['dry_run_mb_per_s']:6.1f} {row['capture_exchanges_per_s']:13.0f} "
                  f"{row['capture_mb_per_s']:6.1f}")
    elif args.locomo:
        report = locomo_compare(args)
        print(f"LoCoMo dev, {report['questions']} questions, turn recall@1/5/10")
        for key in ("remember_many", "remember_many_widened_to_exchanges",
                    "remember_many_of_the_exchanges", "claude_code_import"):
            turn = report[key]["turn"]
            print(f"  {key:35} {turn['recall@1']:.3f} / {turn['recall@5']:.3f} / "
                  f"{turn['recall@10']:.3f}   ({report[key]['drawers']} drawers)")
        print(f"  turn R@5 difference (import - remember_many): "
              f"{report['turn_r5_difference']:+.4f}; at the same granularity (import - "
              f"widened): {report['turn_r5_difference_same_granularity']:+.4f}; with the same "
              f"drawers (import - remember_many of the exchanges): "
              f"{report['turn_r5_difference_same_drawers']:+.4f}")
    else:
        report = import_rate(args)
        raw = report["raw_embedder"]
        print(f"claude-code import: {report['drawers']} drawers from {report['files']} "
              f"transcripts in {report['seconds']} s = {report['drawers_per_s']} drawers/s "
              f"({report['redactions']} secrets redacted)")
        print(f"raw embedder on {raw['before']['texts']} of the same texts: "
              f"{raw['before']['texts_per_s']} texts/s before the import, "
              f"{raw['after']['texts_per_s']} after; the import reaches "
              f"{report['share_of_raw']:.0%} of their mean")
        print(f"second capture of a transcript stored {report['second_capture_of_a_file']} "
              "exchanges")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
