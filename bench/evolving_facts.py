"""Evolving facts (issue 31): does recall put the current fact first, and is a stale one marked?

Generates, with templates and a seeded RNG, a palace an agent would write over simulated weeks:
subjects whose facts change (a service's owner, port and runtime version, what a team uses for
a purpose, who leads a team: people take over and leave), each state written as an agent would
word it ("Bob now owns the billing API.", "Moved the search worker to port 8443.", "We switched
feature flags from LaunchDarkly to Unleash."), interleaved with unrelated control facts
(preferences, log sinks, dependencies, rate limits, commands) that never change. Then asks,
per subject, the question whose answer is its current state, and reports:

* ``current_first``: how often the current state's drawer ranks first (recall top 1), and
  what ranks first otherwise: a stale state of the subject, or another subject's drawer;
* ``stale_marked``: of the stale states shown in the top 5, how many carry ``conflicts_with``
  (the older of an open conflict) — zero on a tree without conflicts;
* ``false_conflicts_per_1000``: conflicts recorded between drawers of different subjects or
  touching a control write, per 1,000 control writes (and the precision of all conflicts);
* ``remember_p50_ms``: the client's round trip of each remember (checks on);
* consolidation: per generated room of 7 sources, consolidated with a summary, the summary's
  recall position and how many sources rank above it (top 10).

The script only uses ops every tree since 941dc27 has, so one copy measures an old tree too:
``PYTHONPATH=/tmp/truth-old python bench/evolving_facts.py`` starts that tree's palaced.

    python bench/evolving_facts.py [--subjects 120] [--controls 1000] [--seed 31] [--json F]
                                   [--keyword-only]

``--keyword-only`` starts the daemon without a model: conflicts are then found (or not) from
the words alone, and recall ranks by keywords.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon

PEOPLE = ("Alice Bob Carol Dana Eli Farah Gus Hana Ivan Jia Kofi Lena Marco Nadia Omar Priya "
          "Quinn Rosa Sami Tomas Uma Viktor Wen Xavier Yara Zane Aiko Bruno Chloe Diego Esme "
          "Felix Greta Hugo Ines Jonas Kira Luis Mei Nils").split()
DOMAINS = ("payments billing search checkout auth notifications inventory shipping analytics "
           "reporting onboarding pricing ledger catalog recommendations email media upload "
           "export invoicing refunds identity profile scheduling").split()
KINDS = ("service", "API", "worker", "gateway")
TECHS = {"Node": ("16", "18", "20", "22"), "Python": ("3.9", "3.10", "3.11", "3.12"),
         "Postgres": ("13", "14", "15", "16"), "Go": ("1.20", "1.21", "1.22"),
         "Java": ("11", "17", "21")}
PURPOSES = {"feature flags": ("LaunchDarkly", "Unleash", "Flagsmith"),
            "error tracking": ("Sentry", "Rollbar", "Bugsnag"),
            "the message queue": ("RabbitMQ", "Kafka", "NATS"),
            "CI": ("Jenkins", "CircleCI", "Buildkite"),
            "the session cache": ("Redis", "Memcached", "Hazelcast"),
            "secrets": ("Vault", "Doppler", "Infisical"),
            "log search": ("Kibana", "Grafana Loki", "Splunk"),
            "load testing": ("k6", "Locust", "Gatling")}
PREFS = ("small pull requests", "squash merges", "dark mode in the dashboards",
         "pair programming on hard bugs", "async standups", "tabs over spaces",
         "typed Python", "trunk-based development", "feature branches", "long-form RFCs")
SINKS = ("Datadog", "CloudWatch", "Splunk", "Honeycomb", "Elastic")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


@dataclass
class Subject:
    key: str
    question: str
    states: list[str]  # texts in the order written
    ids: list[int] = field(default_factory=list)


def _service(rnd: random.Random) -> str:
    return f"{rnd.choice(DOMAINS)} {rnd.choice(KINDS)}"


def _owner(rnd: random.Random, s: str) -> Subject:
    people = rnd.sample(PEOPLE, rnd.randint(2, 4))
    first = rnd.choice([f"{people[0]} owns the {s}.", f"The {s} is owned by {people[0]}."])
    later = [rnd.choice([f"{p} now owns the {s}.", f"The {s} is now owned by {p}.",
                         f"{p} took over the {s} from {prev}.",
                         f"Ownership of the {s} moved from {prev} to {p}."])
             for prev, p in zip(people, people[1:], strict=False)]
    return Subject(f"owner:{s}", f"Who owns the {s}?", [first, *later])


def _port(rnd: random.Random, s: str) -> Subject:
    ports = rnd.sample([3000, 4000, 5000, 5432, 6379, 8000, 8080, 8081, 8443, 9000, 9090], 3)
    n = rnd.randint(2, 3)
    first = rnd.choice([f"The {s} listens on port {ports[0]}.", f"The {s} runs on port {ports[0]}."])
    later = [rnd.choice([f"The {s} now listens on port {p}.", f"Moved the {s} to port {p}.",
                         f"The {s} port changed from {prev} to {p}."])
             for prev, p in zip(ports[: n - 1], ports[1:n], strict=True)]
    return Subject(f"port:{s}", f"Which port does the {s} listen on?", [first, *later])


def _version(rnd: random.Random, s: str) -> Subject:
    tech = rnd.choice(list(TECHS))
    vs = TECHS[tech]
    start = rnd.randint(0, len(vs) - 2)
    chain = vs[start: start + rnd.randint(2, 3)]
    first = rnd.choice([f"The {s} runs on {tech} {chain[0]}.", f"The {s} uses {tech} {chain[0]}."])
    later = [rnd.choice([f"Upgraded the {s} to {tech} {v}.", f"The {s} is on {tech} {v} now.",
                         f"The {s} now runs on {tech} {v}."]) for v in chain[1:]]
    return Subject(f"version:{s}", f"Which {tech} version does the {s} run?", [first, *later])


def _decision(rnd: random.Random, purpose: str) -> Subject:
    tools = list(PURPOSES[purpose])
    rnd.shuffle(tools)
    chain = tools[: rnd.randint(2, 3)]
    first = rnd.choice([f"We use {chain[0]} for {purpose}.",
                        f"We decided to use {chain[0]} for {purpose}."])
    later = [rnd.choice([f"We now use {t} for {purpose}.",
                         f"We switched {purpose} from {prev} to {t}.",
                         f"Decided to drop {prev}; {purpose} uses {t} now.",
                         f"We use {t} for {purpose} instead of {prev}."])
             for prev, t in zip(chain, chain[1:], strict=False)]
    return Subject(f"decision:{purpose}", f"What do we use for {purpose}?", [first, *later])


def _lead(rnd: random.Random, team: str) -> Subject:
    people = rnd.sample(PEOPLE, rnd.randint(2, 3))
    first = f"{people[0]} leads the {team} team."
    later = [rnd.choice([f"{p} is the new lead of the {team} team.",
                         f"{prev} left the company; {p} now leads the {team} team.",
                         f"{p} leads the {team} team now."])
             for prev, p in zip(people, people[1:], strict=False)]
    return Subject(f"lead:{team}", f"Who leads the {team} team?", [first, *later])


def subjects(rnd: random.Random, n: int) -> list[Subject]:
    """``n`` subjects with distinct keys, their states in order."""
    out: dict[str, Subject] = {}
    while len(out) < n:
        kind = rnd.choice(["owner", "owner", "port", "version", "decision", "lead"])
        if kind == "decision":
            sub = _decision(rnd, rnd.choice(list(PURPOSES)))
        elif kind == "lead":
            sub = _lead(rnd, rnd.choice(DOMAINS))
        else:
            sub = {"owner": _owner, "port": _port, "version": _version}[kind](rnd, _service(rnd))
        out.setdefault(sub.key, sub)
    return list(out.values())


def controls(rnd: random.Random, n: int) -> list[str]:
    """``n`` distinct unrelated facts that never change."""
    out: dict[str, str] = {}
    while len(out) < n:
        s, s2, p = _service(rnd), _service(rnd), rnd.choice(PEOPLE)
        kind = rnd.randrange(7)
        key, text = {
            0: (f"pref:{p}:{kind}", f"{p} prefers {rnd.choice(PREFS)}."),
            1: (f"sink:{s}", f"The {s} ships its logs to {rnd.choice(SINKS)}."),
            2: (f"dep:{s}:{s2}", f"The {s} depends on the {s2}."),
            3: (f"limit:{s}", f"The {s} allows {rnd.choice([60, 100, 600, 1000])} requests "
                              "per minute per client."),
            4: (f"reset:{s}", f"Staging data for the {s} is reset every {rnd.choice(DAYS)}."),
            5: (f"cmd:{s}", f"Run make lint-{s.split()[0]} before pushing changes to the {s}."),
            6: (f"oncall:{p}:{s}", f"{p} is on the on-call rotation for the {s}."),
        }[kind]
        if s == s2:
            continue
        out.setdefault(key, text)
    return list(out.values())


def timeline(rnd: random.Random, subs: list[Subject], ctrl: list[str], weeks: int
             ) -> list[tuple[datetime, str, Subject | None]]:
    """Every write with its simulated date: each subject's states in order, spread over
    ``weeks``; controls anywhere in between."""
    start = datetime(2026, 1, 5, 9, tzinfo=UTC)
    span = weeks * 7 * 24 * 3600
    out: list[tuple[datetime, str, Subject | None]] = []
    for sub in subs:
        times = sorted(rnd.uniform(0, span) for _ in sub.states)
        out += [(start + timedelta(seconds=t), text, sub)
                for t, text in zip(times, sub.states, strict=True)]
    out += [(start + timedelta(seconds=rnd.uniform(0, span)), text, None) for text in ctrl]
    out.sort(key=lambda w: w[0])
    return out


ROOMS = {
    "auth": ("auth tokens rotate", "Auth tokens", ("rotate every 24 hours on the gateway",
             "for refresh flows rotate weekly", "are signed with RS256 keys that rotate monthly",
             "rotate on a cron job in the auth service", "keep a 5 minute grace period after "
             "they rotate", "between services rotate every hour", "rotate early when a key "
             "leaks")),
    "deploys": ("how do deploys work", "Deploys", ("go out every Tuesday after standup",
                "need two approvals on the release PR", "run database migrations first",
                "are rolled back with the deploy-revert job", "freeze during the last week of "
                "the quarter", "notify the #releases channel", "use blue-green switching")),
    "backups": ("database backups schedule", "Database backups", ("run nightly at 2am UTC",
                "are kept for 35 days", "are copied to a second region", "are tested by a "
                "monthly restore drill", "use pg_dump for small databases", "stream WAL to "
                "object storage", "alert on-call when they fail")),
}


def consolidation(c: Any, palace: str) -> list[dict[str, Any]]:
    """Per room: 7 sources, a summary consolidating them, then the recall position of the
    summary and the sources ranked above it (top 10)."""
    out = []
    for room, (query, head, parts) in ROOMS.items():
        ids = [c.remember(palace, f"{head} {p}.", room=room) for p in parts]
        summary = f"{head} summary: " + "; ".join(parts) + "."
        sid = c.consolidate(palace, room, summary)["summary_id"]
        hits = [h["id"] for h in c.recall(palace, query, top_k=10)]
        pos = hits.index(sid) + 1 if sid in hits else None
        above = len([i for i in hits[: (pos or 11) - 1] if i in ids])
        out.append({"room": room, "summary_rank": pos, "sources_above": above,
                    "sources_shown": len(set(hits) & set(ids))})
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    rnd = random.Random(args.seed)
    subs = subjects(rnd, args.subjects)
    ctrl = controls(rnd, args.controls)
    writes = timeline(rnd, subs, ctrl, args.weeks)
    d = PrivateDaemon("evolving-", None if args.keyword_only else args.model, args.tiktoken)
    d.adopt_env()
    d.start()
    try:
        with d.client("bench-evolving") as c:
            c.create_palace("evolving")
            owner: dict[int, str] = {}  # drawer id -> subject key ("" for a control)
            took: list[float] = []
            for when, text, sub in writes:
                t0 = time.perf_counter()
                res = c.remember_ex("evolving", text, room="facts",
                                    occurred_at=when.isoformat())
                took.append((time.perf_counter() - t0) * 1000)
                did = int(res["id"])
                owner[did] = sub.key if sub is not None else ""
                if sub is not None:
                    sub.ids.append(did)
            first = marked = stale_shown = stale_first = missing = 0
            for sub in subs:
                hits = c.recall("evolving", sub.question, top_k=5)
                first += bool(hits) and hits[0]["id"] == sub.ids[-1]
                stale_first += bool(hits) and hits[0]["id"] in sub.ids[:-1]
                missing += sub.ids[-1] not in [h["id"] for h in hits]
                for h in hits:
                    if h["id"] in sub.ids[:-1]:
                        stale_shown += 1
                        marked += "conflicts_with" in h
            try:
                found = c.call("memory.conflicts", "evolving",
                               {"include_resolved": True, "limit": 1000})["conflicts"]
            except Exception:  # an old tree: no conflicts op
                found = []
            false = [x for x in found if not owner.get(x["newer_id"])
                     or owner.get(x["newer_id"]) != owner.get(x["older_id"])]
            c.create_palace("consolidation")
            rooms = consolidation(c, "consolidation")
    finally:
        d.stop()
        d.cleanup(keep=False)
    return {
        "keyword_only": args.keyword_only,
        "subjects": len(subs), "states": sum(len(s.states) for s in subs),
        "controls": len(ctrl), "writes": len(writes),
        "current_first": round(first / len(subs), 3), "current_first_n": first,
        "stale_first_n": stale_first, "other_first_n": len(subs) - first - stale_first,
        "current_not_in_top5_n": missing,
        "stale_shown_top5": stale_shown, "stale_marked": marked,
        "stale_marked_share": round(marked / stale_shown, 3) if stale_shown else None,
        "conflicts": len(found), "false_conflicts": len(false),
        "false_conflicts_per_1000": round(1000 * len(false) / len(ctrl), 2),
        "conflict_precision": round(1 - len(false) / len(found), 3) if found else None,
        "remember_p50_ms": round(statistics.median(took), 1),
        "remember_p90_ms": round(statistics.quantiles(took, n=10)[-1], 1),
        "consolidation": rooms,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subjects", type=int, default=120)
    ap.add_argument("--controls", type=int, default=1000)
    ap.add_argument("--weeks", type=int, default=12)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tiktoken", type=Path, default=DEFAULT_TIKTOKEN)
    ap.add_argument("--keyword-only", action="store_true",
                    help="a daemon without a model (conflicts found from words alone)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
