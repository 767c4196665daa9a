"""Measure where to put palace's near-duplicate threshold for all-MiniLM-L6-v2.

Embeds hand-written pairs of memories with the real model: true near-duplicates (rephrasings,
typo fixes, reordered words of the same memory) and false ones (related but different facts:
another number, a negation, an opposite word). Prints the cosine distributions, the best
cosine-only threshold, and the same with the lexical guard of ``palaced.text.rules``
(``is_near_duplicate``), then one JSON line with the numbers.

    python bench/dedup_threshold.py [--model-dir PATH]

The default model directory is ``../shared/models/all-MiniLM-L6-v2-onnx-int8`` next to the repo.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from palaced.text.rules import DEDUP_THRESHOLD, lexical_guard  # noqa: E402

DEFAULT_MODEL = ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx-int8"

# The same memory written twice: a merge loses nothing.
DUPLICATES: list[tuple[str, str]] = [
    ("We use Postgres 15 in production.", "Production runs on Postgres 15."),
    ("The API gateway times out after 30 seconds.", "API gateway timeout is 30 seconds."),
    ("Alice prefers tabs over spaces.", "Alice likes tabs better than spaces."),
    ("Deploys happen every Tuesday morning.", "Every Tuesday morning we deploy."),
    ("The staging database is reset nightly.", "The staging DB gets reset every night."),
    ("Bob owns the billing service.", "The billing service is owned by Bob."),
    ("Never deploy on Fridays.", "Don't deploy on Fridays."),
    ("Use ruff for linting the Python code.", "Python code is linted with ruff."),
    ("The user's name is Priya and she lives in Lisbon.", "User is Priya, living in Lisbon."),
    ("The cache TTL is 300 seconds.", "Cache TTL: 300 seconds."),
    ("Our CI runs on GitHub Actions.", "CI runs on Github actions."),
    ("The frontend is written in TypeScript with React.", "Frontend: React + TypeScript."),
    ("Remember to rotate the AWS keys every 90 days.", "AWS keys must be rotated every 90 days."),
    ("The project deadline is March 3rd.", "Project deadline: March 3rd."),
    ("Meeting notes are stored in Notion.", "We keep meeting notes in Notion."),
    ("The service listens on port 8080.", "Service port is 8080."),
    (
        "Mobile app releases go through TestFlight first.",
        "We ship mobile releases to TestFlight first.",
    ),
    ("Customer data must stay in the EU region.", "Customer data has to remain in the EU region."),
    ("The nightly backup runs at 2am UTC.", "Nightly backups run at 2am UTC."),
    ("The user is allergic to peanuts.", "User has a peanut allergy."),
    ("Kafka is used for the event bus.", "The event bus is built on Kafka."),
    ("Logs are shipped to Datadog.", "We ship logs to Datadog."),
    (
        "The main branch is protected; merges need two approvals.",
        "Merges to main need two approvals since the branch is protected.",
    ),
    (
        "The recomendation model is retrained weekly.",
        "The recommendation model is retrained weekly.",
    ),
    ("Sarah is the tech lead of the payments team.", "The payments team's tech lead is Sarah."),
    ("We migrated from MySQL to Postgres last year.", "Last year we moved from MySQL to Postgres."),
    ("The user prefers concise answers without emojis.", "User wants concise answers, no emojis."),
    ("Feature flags are managed with LaunchDarkly.", "We manage feature flags in LaunchDarkly."),
    ("The office wifi password changes monthly.", "Office wifi password is changed every month."),
    ("Use UTC for all timestamps in the database.", "All database timestamps are in UTC."),
    ("The search service uses Elasticsearch 8.", "Search is powered by Elasticsearch 8."),
    ("Tom is on vacation until next Monday.", "Tom's on vacation till next Monday."),
    ("The build takes about 12 minutes.", "Builds take roughly 12 minutes."),
    (
        "Rate limit is 100 requests per minute per user.",
        "Each user is limited to 100 requests per minute.",
    ),
    ("The docs site is built with MkDocs.", "We build the documentation site with MkDocs."),
    ("The user's favourite language is Rust.", "User's favorite language is Rust."),
    ("Don't use the legacy auth endpoint.", "Do not use the legacy auth endpoint."),
    (
        "The invoice job failed because of a missing env var.",
        "A missing environment variable made the invoice job fail.",
    ),
    (
        "Redis is only used as a cache, not as a database.",
        "Redis is used just for caching, not as a database.",
    ),
    ("The ML team meets on Thursdays at 3pm.", "ML team meeting: Thursdays 3pm."),
    ("The user drinks coffee every morning.", "Every morning the user drinks coffee."),
    ("Backups are stored in S3.", "We store backups in S3."),
    ("The user's dog is named Max.", "The user has a dog called Max."),
    ("The bug is in the login page.", "There's a bug on the login page."),
    ("Use spaces for indentation.", "Indent with spaces."),
    ("The user wants replies in French.", "Reply to the user in French."),
    ("Run migrations before deploying.", "Migrations must be run before deploying."),
    ("The team switched from Jira to Linear.", "The team moved from Jira over to Linear."),
    ("Thee user prefers dark mode.", "The user prefers dark mode."),
    ("The frontend uses React.", "React is used for the frontend."),
    (
        "The deploy pipeline builds the Docker image, runs the integration tests against a fresh "
        "database, and then pushes to the staging cluster where QA signs off.",
        "Our deploy pipeline builds the Docker image, runs integration tests on a fresh database, "
        "then pushes to the staging cluster for QA sign-off.",
    ),
    (
        "Decided in the architecture review: the event store keeps raw events for a year and "
        "compacts snapshots weekly.",
        "Architecture review decision: raw events are kept in the event store for a year, "
        "snapshots compacted weekly.",
    ),
    ("The user works at Google as a data scientist.", "The user is a data scientist at Google."),
]

# Related but different facts: a merge would lose or corrupt a memory.
DIFFERENT: list[tuple[str, str]] = [
    ("We use Postgres 15 in production.", "We use Postgres 16 in production."),
    ("Deploy on Fridays.", "Never deploy on Fridays."),
    ("The API gateway times out after 30 seconds.", "The API gateway times out after 60 seconds."),
    ("Alice prefers tabs over spaces.", "Alice prefers spaces over tabs."),
    ("Deploys happen every Tuesday morning.", "Deploys happen every Thursday morning."),
    ("Bob owns the billing service.", "Bob owns the search service."),
    ("The staging database is reset nightly.", "The staging database is not reset nightly."),
    ("The cache TTL is 300 seconds.", "The cache TTL is 30 seconds."),
    ("The service listens on port 8080.", "The service listens on port 8443."),
    ("Our CI runs on GitHub Actions.", "Our CI runs on GitLab CI."),
    ("The user is allergic to peanuts.", "The user is allergic to shellfish."),
    ("The nightly backup runs at 2am UTC.", "The nightly backup runs at 4am UTC."),
    ("Kafka is used for the event bus.", "RabbitMQ is used for the event bus."),
    ("The project deadline is March 3rd.", "The project deadline is April 3rd."),
    ("Sarah is the tech lead of the payments team.", "Sarah is the tech lead of the search team."),
    ("Customer data must stay in the EU region.", "Customer data must stay in the US region."),
    ("Use ruff for linting the Python code.", "Use black for formatting the Python code."),
    (
        "The main branch is protected; merges need two approvals.",
        "The main branch is protected; merges need one approval.",
    ),
    (
        "We migrated from MySQL to Postgres last year.",
        "We migrated from Postgres to MySQL last year.",
    ),
    ("The user prefers concise answers.", "The user prefers detailed answers."),
    ("Feature flags are enabled in staging.", "Feature flags are disabled in staging."),
    ("The login bug is fixed.", "The login bug is not fixed yet."),
    ("Tom is on vacation until next Monday.", "Tom is on vacation until next Friday."),
    ("The build takes about 12 minutes.", "The build takes about 40 minutes."),
    (
        "Rate limit is 100 requests per minute per user.",
        "Rate limit is 1000 requests per minute per user.",
    ),
    ("The user's favourite language is Rust.", "The user's favourite language is Go."),
    ("Use the legacy auth endpoint.", "Don't use the legacy auth endpoint."),
    ("Redis is used as a cache.", "Redis is used as the primary database."),
    ("The ML team meets on Thursdays at 3pm.", "The ML team meets on Thursdays at 5pm."),
    ("The search service uses Elasticsearch 8.", "The search service uses Elasticsearch 7."),
    (
        "Python 3.11 is the minimum supported version.",
        "Python 3.12 is the minimum supported version.",
    ),
    ("Always squash commits before merging.", "Never squash commits before merging."),
    ("The user lives in Berlin.", "The user lives in Munich."),
    ("The user has two children.", "The user has three children."),
    ("The outage started at 14:05.", "The outage started at 14:50."),
    ("Enable debug logging in development.", "Disable debug logging in development."),
    ("Tests must pass before merging.", "Tests may fail before merging."),
    ("The contract renews on 2024-06-01.", "The contract renews on 2025-06-01."),
    ("Increase the worker pool size under load.", "Decrease the worker pool size under load."),
    ("The payment provider is Stripe.", "The payment provider is Adyen."),
    ("The user drinks coffee every morning.", "The user drinks tea every morning."),
    ("Backups are stored in S3.", "Backups are stored in GCS."),
    ("The user's dog is named Max.", "The user's cat is named Max."),
    ("The bug is in the login page.", "The bug is in the signup page."),
    ("Write the tests with pytest.", "Write the tests with unittest."),
    ("The database password is kept in the vault.", "The database password is kept in the wiki."),
    ("Use spaces for indentation.", "Use tabs for indentation."),
    ("The user wants replies in French.", "The user wants replies in German."),
    ("The frontend uses React.", "The frontend uses Vue."),
    ("Run migrations before deploying.", "Run migrations after deploying."),
    ("The user prefers dark mode.", "The user prefers light mode."),
    ("The team switched from Jira to Linear.", "The team switched from Linear to Jira."),
    (
        "The deploy pipeline builds the Docker image, runs the integration tests against a fresh "
        "database, and then pushes to the staging cluster where QA signs off.",
        "The deploy pipeline builds the Docker image, runs the integration tests against a fresh "
        "database, and then pushes straight to production without QA sign-off.",
    ),
    (
        "Decided in the architecture review: the event store keeps raw events for a year and "
        "compacts snapshots weekly.",
        "Decided in the architecture review: the event store keeps raw events for a month and "
        "compacts snapshots daily.",
    ),
    ("The user is vegetarian but eats fish.", "The user is vegetarian and doesn't eat fish."),
    ("Customer Acme pays annually by invoice.", "Customer Acme pays monthly by credit card."),
    (
        "The user works at Google as a data scientist.",
        "The user works at Google as a software engineer.",
    ),
]


def embed_pairs(model_dir: Path, pairs: list[tuple[str, str]]) -> list[float]:
    """Cosine similarity of each pair with the real model (vectors are L2-normalised)."""
    from fastembed import TextEmbedding

    model = TextEmbedding(
        model_name="sentence-transformers/all-MiniLM-L6-v2",
        specific_model_path=str(model_dir),
        local_files_only=True,
    )
    texts = [t for pair in pairs for t in pair]
    vecs = np.array(list(model.embed(texts, batch_size=64)), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [float(vecs[2 * i] @ vecs[2 * i + 1]) for i in range(len(pairs))]


def summary(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10)
    return (
        f"min {min(values):.3f}  p10 {qs[0]:.3f}  median {statistics.median(values):.3f}  "
        f"p90 {qs[-1]:.3f}  max {max(values):.3f}"
    )


def confusion(
    threshold: float, dup: list[tuple[float, bool]], diff: list[tuple[float, bool]]
) -> tuple[int, int]:
    """(true duplicates caught, different pairs wrongly merged) at ``threshold``."""
    caught = sum(1 for cos, ok in dup if cos >= threshold and ok)
    merged = sum(1 for cos, ok in diff if cos >= threshold and ok)
    return caught, merged


def best_threshold(dup: list[tuple[float, bool]], diff: list[tuple[float, bool]]) -> float:
    """Lowest threshold (2 decimals) that merges no different pair: highest recall at 0 FP."""
    for t in np.arange(0.50, 1.0001, 0.01):
        if confusion(float(t), dup, diff)[1] == 0:
            return round(float(t), 2)
    return 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    args = parser.parse_args()

    started = time.perf_counter()
    sims = embed_pairs(args.model_dir, DUPLICATES + DIFFERENT)
    elapsed = time.perf_counter() - started
    dup_sims, diff_sims = sims[: len(DUPLICATES)], sims[len(DUPLICATES) :]

    print(f"embedded {2 * len(sims)} texts in {elapsed:.2f}s")
    print(f"near-duplicates  (n={len(dup_sims)}): {summary(dup_sims)}")
    print(f"different facts  (n={len(diff_sims)}): {summary(diff_sims)}")

    cos_only_dup = [(c, True) for c in dup_sims]
    cos_only_diff = [(c, True) for c in diff_sims]
    guarded_dup = [(c, lexical_guard(a, b)) for c, (a, b) in zip(dup_sims, DUPLICATES, strict=True)]
    guarded_diff = [
        (c, lexical_guard(a, b)) for c, (a, b) in zip(diff_sims, DIFFERENT, strict=True)
    ]

    t_cos = best_threshold(cos_only_dup, cos_only_diff)
    t_guard = best_threshold(guarded_dup, guarded_diff)
    print()
    print("threshold  cosine-only (dups caught / different merged)   cosine+guard")
    for t in (0.70, 0.75, 0.80, 0.85, 0.88, 0.90, 0.92, 0.95):
        c1, m1 = confusion(t, cos_only_dup, cos_only_diff)
        c2, m2 = confusion(t, guarded_dup, guarded_diff)
        print(
            f"  {t:.2f}     {c1:2d}/{len(dup_sims)} caught, {m1:2d} merged"
            + f"                 {c2:2d}/{len(dup_sims)} caught, {m2:2d} merged"
        )

    print()
    print("different pairs the guard lets through, highest cosine first:")
    for cos, (a, b), ok in sorted(
        zip(diff_sims, DIFFERENT, [ok for _, ok in guarded_diff], strict=True), reverse=True
    ):
        if ok:
            print(f"  {cos:.3f}  {a!r} / {b!r}")
    print("duplicates below the configured threshold or refused by the guard:")
    for cos, (a, b), ok in sorted(
        zip(dup_sims, DUPLICATES, [ok for _, ok in guarded_dup], strict=True)
    ):
        if cos < DEDUP_THRESHOLD or not ok:
            print(f"  {cos:.3f}  guard={'pass' if ok else 'refuse'}  {a!r} / {b!r}")

    c_cfg, m_cfg = confusion(DEDUP_THRESHOLD, guarded_dup, guarded_diff)
    print()
    print(f"lowest zero-false-merge threshold: cosine-only {t_cos:.2f}, with guard {t_guard:.2f}")
    print(
        f"configured DEDUP_THRESHOLD = {DEDUP_THRESHOLD}: {c_cfg}/{len(dup_sims)} duplicates "
        f"caught, {m_cfg}/{len(diff_sims)} different pairs merged"
    )
    print(
        json.dumps(
            {
                "bench": "dedup_threshold",
                "pairs": {"duplicates": len(dup_sims), "different": len(diff_sims)},
                "duplicates_cos": [round(x, 4) for x in dup_sims],
                "different_cos": [round(x, 4) for x in diff_sims],
                "threshold_cosine_only": t_cos,
                "threshold_with_guard": t_guard,
                "configured": DEDUP_THRESHOLD,
                "configured_caught": c_cfg,
                "configured_false_merges": m_cfg,
            }
        )
    )


if __name__ == "__main__":
    main()
