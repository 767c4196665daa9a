"""LoCoMo retrieval benchmark, through the real daemon and the public client API.

For each LoCoMo conversation: a fresh palace ``locomo-<sample id>``, one drawer per dialog
turn (text ``{speaker} said, "{text}"``, room ``session_N``, ``occurred_at`` the session's
date), inserted in conversation order with ``remember_many``. Then every question is asked
verbatim with ``recall(top_k=50)`` and scored against its ``evidence`` turn ids:

* turn level: the returned drawers, mapped back to their ``dia_id``, in rank order;
* session level: the rooms (sessions) of that ranking in first-occurrence order;
* recall@k = |gold ∩ top-k| / |gold| per question (1.0 when a question has no evidence),
  averaged over all questions of all five categories, and per category, for k = 1, 5, 10.

Evidence ids are normalised before scoring: ``"D8:6; D9:17"`` splits into two ids,
``"D:11:26"`` reads as ``D11:26``, and ids that name no turn of the conversation (``"D"``,
``"D10:19"`` in one conversation) are dropped and counted in the report.

Also reported: ingest throughput (drawers/s, embedding included) and recall latency p50/p95.

    python bench/locomo.py [--data PATH] [--json out.json] [--keyword-only] [--conversations N]

The client auto-starts a daemon when none runs; ``PALACE_HOME`` picks which one (use a
scratch directory, e.g. ``PALACE_HOME=$(mktemp -d)``, to keep benchmark palaces out of your
real ones). Palaces are deleted and recreated on every run. ``--model-dir`` (default
``../shared/models/all-MiniLM-L6-v2-onnx-int8`` when present) is handed to an auto-started
daemon through ``PALACE_EMBED_MODEL_PATH``. ``--keyword-only`` sets ``PALACE_EMBED_MODEL=none``
for an auto-started daemon, so it serves BM25 only; a daemon that is already running keeps
its own mode. Either way the report states the ``mode`` each recall answered in.

The data (CC BY-NC 4.0) is for benchmarking only and is never copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared/data/bench/locomo-dev.json"
DEFAULT_MODEL_DIR = ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx-int8"
KS = (1, 5, 10)
DEFAULT_TOP_K = 50
WING = "locomo"

_SESSION_KEY_RE = re.compile(r"session_(\d+)")
_DIA_ID_RE = re.compile(r"D:?(\d+):(\d+)")
_DATE_RE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*",
    re.IGNORECASE,
)
_MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"), 1)}


# -- pure metric functions --------------------------------------------------------------------
class BenchDrawer(NamedTuple):
    """One dialog turn: its LoCoMo ``dia_id`` and the ``remember_many`` item to store."""

    dia_id: str
    item: dict[str, Any]


@dataclass(frozen=True)
class Question:
    """One QA pair with its normalised gold turns and sessions."""

    sample_id: str
    question: str
    category: int
    gold_turns: tuple[str, ...]
    gold_sessions: tuple[str, ...]
    dropped_evidence: tuple[str, ...] = ()


def parse_locomo_date(text: str) -> str:
    """Turn a LoCoMo session stamp ("1:56 pm on 8 May, 2023") into ISO 8601 UTC.

    LoCoMo stamps carry no zone; they are read as UTC ("2023-05-08T13:56:00Z").

    Raises:
        ValueError: the stamp is not in that shape or names an impossible date.
    """
    m = _DATE_RE.fullmatch(text)
    month = _MONTHS.get(m.group(5).lower()) if m else None
    if m is None or month is None:
        raise ValueError(f"not a LoCoMo date: {text!r}")
    hour, minute = int(m.group(1)), int(m.group(2))
    if not 1 <= hour <= 12:
        raise ValueError(f"not a 12-hour time: {text!r}")
    hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
    stamp = datetime(int(m.group(6)), month, int(m.group(4)), hour, minute, tzinfo=UTC)
    return stamp.isoformat().replace("+00:00", "Z")


def session_of(dia_id: str) -> str:
    """Return the room of a turn id: ``"D3:7"`` -> ``"session_3"``.

    Raises:
        ValueError: ``dia_id`` is not of the form ``D<session>:<turn>``.
    """
    m = _DIA_ID_RE.fullmatch(dia_id.strip())
    if m is None:
        raise ValueError(f"not a LoCoMo turn id: {dia_id!r}")
    return f"session_{int(m.group(1))}"


def parse_evidence(evidence: Iterable[str],
                   known: Mapping[str, object] | set[str] | None = None
                   ) -> tuple[list[str], list[str]]:
    """Normalise a QA ``evidence`` list; return ``(turn ids, dropped raw pieces)``.

    Pieces are split on ``;`` / ``,`` / whitespace, ``D:11:26`` is read as ``D11:26``,
    duplicates are removed (first occurrence kept), and a piece that is not a turn id, or is
    not in ``known`` when given, is dropped.
    """
    ids: list[str] = []
    dropped: list[str] = []
    for raw in evidence:
        for piece in re.split(r"[;,\s]+", str(raw)):
            if not piece:
                continue
            m = _DIA_ID_RE.fullmatch(piece)
            dia_id = f"D{int(m.group(1))}:{int(m.group(2))}" if m else None
            if dia_id is None or (known is not None and dia_id not in known):
                dropped.append(piece)
            elif dia_id not in ids:
                ids.append(dia_id)
    return ids, dropped


def sessions(conversation: Mapping[str, Any]) -> list[str]:
    """Return the conversation's ``session_N`` keys in numeric order."""
    keys = [k for k in conversation if _SESSION_KEY_RE.fullmatch(k)]
    return sorted(keys, key=lambda k: int(k.split("_")[1]))


def build_drawers(conversation: Mapping[str, Any], *, wing: str = WING) -> list[BenchDrawer]:
    """Return one drawer per dialog turn, in conversation order.

    Raises:
        ValueError: a session has no parsable ``session_N_date_time``.
        KeyError: a turn lacks ``speaker``, ``text`` or ``dia_id``.
    """
    drawers: list[BenchDrawer] = []
    for room in sessions(conversation):
        occurred_at = parse_locomo_date(str(conversation[f"{room}_date_time"]))
        for turn in conversation[room]:
            dia_id = str(turn["dia_id"])
            item = {
                "text": f'{turn["speaker"]} said, "{turn["text"]}"',
                "wing": wing,
                "room": room,
                "tags": [],
                "importance": 0.5,
                "source": f"locomo:{dia_id}",
                "occurred_at": occurred_at,
            }
            drawers.append(BenchDrawer(dia_id, item))
    return drawers


def build_questions(sample: Mapping[str, Any]) -> list[Question]:
    """Return the sample's QA pairs with evidence normalised against its turns."""
    known = {d.dia_id for d in build_drawers(sample["conversation"])}
    sample_id = str(sample.get("sample_id", ""))
    questions: list[Question] = []
    for qa in sample["qa"]:
        gold, dropped = parse_evidence(qa.get("evidence") or (), known)
        gold_sessions = tuple(dict.fromkeys(session_of(t) for t in gold))
        questions.append(Question(sample_id, str(qa["question"]), int(qa["category"]),
                                  tuple(gold), gold_sessions, tuple(dropped)))
    return questions


def session_ranking(ranked_turns: Sequence[str]) -> list[str]:
    """Sessions in the order their first turn appears in ``ranked_turns``."""
    return list(dict.fromkeys(session_of(t) for t in ranked_turns))


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """``|gold ∩ ranked[:k]| / |gold|``; 1.0 when there is no gold.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gold_set = set(gold)
    if not gold_set:
        return 1.0
    return len(gold_set & set(ranked[:k])) / len(gold_set)


def evaluate(questions: Sequence[Question], ranked_turns: Sequence[Sequence[str]],
             ks: Sequence[int] = KS,
             ranked_sessions: Sequence[Sequence[str]] | None = None) -> dict[str, Any]:
    """Mean recall@k at turn and session level, overall and per category.

    ``ranked_turns[i]`` is the retrieved turn ranking for ``questions[i]``. Sessions are
    ranked by ``ranked_sessions[i]`` when given (the daemon's room-level recall), else by
    the first occurrence of each session in the turn ranking.

    Returns ``{"questions": n, "turn": {"recall@k": x}, "session": {...},
    "by_category": {"<c>": {"questions": n, "turn": {...}, "session": {...}}}}``.

    Raises:
        ValueError: the two sequences differ in length, or a k is < 1.
    """
    if len(questions) != len(ranked_turns):
        raise ValueError(f"{len(questions)} questions but {len(ranked_turns)} rankings")
    if ranked_sessions is not None and len(ranked_sessions) != len(ranked_turns):
        raise ValueError("ranked_sessions and ranked_turns differ in length")
    rows: list[tuple[int, dict[str, float], dict[str, float]]] = []
    for i, (q, ranked) in enumerate(zip(questions, ranked_turns, strict=True)):
        by_session = (session_ranking(ranked) if ranked_sessions is None
                      else list(ranked_sessions[i]))
        rows.append((
            q.category,
            {f"recall@{k}": recall_at_k(ranked, q.gold_turns, k) for k in ks},
            {f"recall@{k}": recall_at_k(by_session, q.gold_sessions, k) for k in ks},
        ))

    def summary(selected: list[tuple[int, dict[str, float], dict[str, float]]]
                ) -> dict[str, Any]:
        n = len(selected)
        return {
            "questions": n,
            "turn": {key: (sum(r[1][key] for r in selected) / n if n else 0.0)
                     for key in (f"recall@{k}" for k in ks)},
            "session": {key: (sum(r[2][key] for r in selected) / n if n else 0.0)
                        for key in (f"recall@{k}" for k in ks)},
        }

    result = summary(rows)
    result["by_category"] = {
        str(cat): summary([r for r in rows if r[0] == cat])
        for cat in sorted({r[0] for r in rows})
    }
    return result


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0..100) of ``values``; NaN when empty.

    Raises:
        ValueError: ``q`` is outside 0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def palace_name(sample_id: str) -> str:
    """``locomo-<slug>`` where the slug keeps [a-z0-9] runs joined by "-"."""
    slug = "-".join(re.findall(r"[a-z0-9]+", sample_id.lower())) or "sample"
    return f"locomo-{slug}"


# -- the run against a daemon ----------------------------------------------------------------
def _wait_model(client: Any, timeout_s: float) -> dict[str, Any]:
    """Wait while the daemon's model is loading; return its final ``model`` status."""
    deadline = time.monotonic() + timeout_s
    while True:
        model = dict(client.status().get("model") or {})
        if model.get("state") != "loading" or time.monotonic() >= deadline:
            return model
        time.sleep(0.25)


def _wait_embedded(client: Any, name: str, timeout_s: float) -> int:
    """Wait until the palace has no drawer pending embedding; return how many remain."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = int(client.palace_info(name).get("pending_embeddings") or 0)
        if pending == 0 or time.monotonic() >= deadline:
            return pending
        time.sleep(0.25)


def run(data_path: Path, *, top_k: int, conversations: int | None,
        wait_embed_s: float, requested_mode: str, store: str | None = None
        ) -> dict[str, Any]:
    """Ingest, query and score every conversation; return the report dict. With ``store``
    (a PostgreSQL URL or named store), the palaces are team palaces there.

    Raises:
        palaced.wire.errors.PalaceError: the daemon refused or failed a request.
        OSError, ValueError: the data file cannot be read or parsed.
    """
    from palace_client import Client

    samples = json.loads(data_path.read_text("utf-8"))
    if conversations is not None:
        samples = samples[:conversations]
    all_questions: list[Question] = []
    all_rankings: list[list[str]] = []
    all_rooms: list[list[str]] = []
    modes: Counter[str] = Counter()
    latencies_ms: list[float] = []
    ingest_s = 0.0
    n_drawers = 0
    pending_after_wait = 0
    with Client(client_name="bench-locomo") as client:
        server = client.server_info.get("server")
        # Let the model finish loading first, so ingest time is embedding, not waiting.
        model = _wait_model(client, wait_embed_s)
        embedding = client.status().get("mode") == "hybrid"
        for sample in samples:
            name = palace_name(str(sample["sample_id"]))
            if any(p.get("name") == name for p in client.list_palaces()):
                client.delete_palace(name)
            client.create_palace(name, store=store)
            drawers = build_drawers(sample["conversation"])
            questions = build_questions(sample)
            start = time.perf_counter()
            ids = client.remember_many(name, [d.item for d in drawers])
            if embedding:
                pending_after_wait += _wait_embedded(client, name, wait_embed_s)
            ingest_s += time.perf_counter() - start
            n_drawers += len(drawers)
            turns_of: dict[int, list[str]] = {}
            for drawer_id, drawer in zip(ids, drawers, strict=True):
                turns_of.setdefault(drawer_id, []).append(drawer.dia_id)
            for q in questions:
                start = time.perf_counter()
                response = client.recall_ex(name, q.question, top_k=top_k)
                latencies_ms.append((time.perf_counter() - start) * 1000)
                modes[str(response.get("mode", "unreported"))] += 1
                ranked = [t for r in response["results"] for t in turns_of.get(int(r["id"]), [])]
                all_questions.append(q)
                all_rankings.append(ranked)
                # Room-level recall: the daemon ranks rooms (sessions) from their best
                # drawers; sessions it did not rank follow in turn order.
                rooms = [str(r["room"]) for r in response.get("rooms", [])]
                all_rooms.append(list(dict.fromkeys([*rooms, *session_ranking(ranked)])))
            print(f"{name}: {len(drawers)} drawers, {len(questions)} questions", file=sys.stderr)
    report: dict[str, Any] = {
        "benchmark": "locomo",
        "data": str(data_path),
        "requested_mode": requested_mode,
        "store": "team (PostgreSQL)" if store is not None else "local (SQLite)",
        "mode": dict(modes),
        "server": server,
        "model": model,
        "conversations": len(samples),
        "top_k": top_k,
        "ks": list(KS),
        "session_level": "room-level recall (response 'rooms': rooms ranked from their best "
                         "drawers), then sessions of the turn ranking",
        **evaluate(all_questions, all_rankings, ranked_sessions=all_rooms),
        "session_from_turns": evaluate(all_questions, all_rankings)["session"],
        "ingest": {
            "drawers": n_drawers,
            "seconds": round(ingest_s, 3),
            "drawers_per_s": round(n_drawers / ingest_s, 1) if ingest_s else None,
            "pending_embeddings_after_wait": pending_after_wait,
        },
        "recall_latency_ms": {
            "p50": round(percentile(latencies_ms, 50), 2),
            "p95": round(percentile(latencies_ms, 95), 2),
            "mean": round(sum(latencies_ms) / len(latencies_ms), 2) if latencies_ms else None,
        },
        "evidence": {
            "questions_without_evidence": sum(1 for q in all_questions if not q.gold_turns),
            "dropped": [f"{q.sample_id}: {d}" for q in all_questions
                        for d in q.dropped_evidence],
        },
    }
    return report


def format_report(report: Mapping[str, Any]) -> str:
    """A compact human-readable table of a report from :func:`run`."""
    keys = [f"recall@{k}" for k in report["ks"]]
    lines = [
        f"LoCoMo: {report['questions']} questions, {report['conversations']} conversations, "
        f"mode {report['mode']} (requested {report['requested_mode']}), top_k {report['top_k']}",
        f"{'':14}" + "".join(f"{'turn ' + k:>16}" for k in keys)
        + "".join(f"{'session ' + k:>19}" for k in keys),
    ]

    def row(label: str, block: Mapping[str, Any]) -> str:
        return (f"{label:14}" + "".join(f"{block['turn'][k]:>16.3f}" for k in keys)
                + "".join(f"{block['session'][k]:>19.3f}" for k in keys))

    lines.append(row("all", report))
    for cat, block in report["by_category"].items():
        lines.append(row(f"category {cat} ({block['questions']})", block))
    ingest = report["ingest"]
    latency = report["recall_latency_ms"]
    lines.append(f"ingest: {ingest['drawers']} drawers in {ingest['seconds']} s "
                 f"= {ingest['drawers_per_s']} drawers/s; recall p50 {latency['p50']} ms, "
                 f"p95 {latency['p95']} ms")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo JSON file")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write the full report as JSON to OUT")
    parser.add_argument("--keyword-only", action="store_true",
                        help="start the daemon with PALACE_EMBED_MODEL=none (BM25 only)")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="embedding model directory for an auto-started daemon")
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                        help=f"drawers per recall (default {DEFAULT_TOP_K})")
    parser.add_argument("--conversations", type=int, default=None,
                        help="only the first N conversations")
    parser.add_argument("--store", default=None, metavar="URL",
                        help="make the palaces team palaces in this PostgreSQL database "
                             "(a URL or a named store of config.toml)")
    parser.add_argument("--wait-embed-s", type=float, default=600.0,
                        help="how long to wait for background embedding after ingest")
    args = parser.parse_args(argv)
    if args.top_k < max(KS):
        parser.error(f"--top-k must be >= {max(KS)}")
    if args.keyword_only:
        os.environ["PALACE_EMBED_MODEL"] = "none"
    else:
        if args.model_dir is not None:
            os.environ["PALACE_EMBED_MODEL_PATH"] = str(args.model_dir)
        elif "PALACE_EMBED_MODEL_PATH" not in os.environ and DEFAULT_MODEL_DIR.is_dir():
            os.environ["PALACE_EMBED_MODEL_PATH"] = str(DEFAULT_MODEL_DIR)
    requested = "keyword-only" if args.keyword_only else "default"
    report = run(args.data, top_k=args.top_k, conversations=args.conversations,
                 wait_embed_s=args.wait_embed_s, requested_mode=requested, store=args.store)
    print(format_report(report))
    if args.keyword_only and set(report["mode"]) - {"keyword"}:
        print("warning: --keyword-only was requested but a running daemon answered in mode "
              f"{report['mode']}; stop it or use a fresh PALACE_HOME", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
