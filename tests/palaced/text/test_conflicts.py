"""The conflict rule on pairs: true conflicts, and the non-conflicts that must not fire."""

from __future__ import annotations

import pytest

from palaced.text.conflicts import adds_detail, conflict_reason, covers

CONFLICTS = [
    ("Bob owns the payment gateway integration.", "Alice owns the payment gateway integration."),
    ("Alice no longer owns the payment gateway.", "Alice owns the payment gateway integration."),
    ("The API listens on port 9090.", "The API listens on port 8080."),
    ("The build uses Node 20.", "The build uses Node 18."),
    ("We upgraded production to Postgres 16.", "We use Postgres 15 in production."),
    ("The release is planned for Monday.", "The release is planned for Friday."),
    ("Feature flag new-checkout is disabled.", "Feature flag new-checkout is enabled."),
    ("Signups from free email domains are denied.", "Signups from free email domains are allowed."),
    ("The on-call lead for payments is Dana Kim.", "The on-call lead for payments is Eli Park."),
    # a change that names the old value and the new one
    ("We switched the job queue from Sidekiq to GoodJob.", "We use Sidekiq for the job queue."),
    ("Priya took over the mobile app from Omar.", "Omar owns the mobile app."),
    ("Upgraded the web app to React 18.", "The web app runs on React 17."),
    ("Moved the docs site to port 4000.", "The docs site listens on port 3000."),
]

NOT_CONFLICTS = [
    # different subjects
    ("The metrics server listens on port 9090.", "The API listens on port 8080."),
    ("The billing service is owned by Dana.", "The auth service is owned by Dana."),
    ("Alice owns the refunds service.", "Alice owns the payment gateway integration."),
    # numbered instances: the number before the statement's verb names which one
    ("Kafka broker 5 listens on port 9095 in staging.",
     "Kafka broker 4 listens on port 9094 in staging."),
    ("Worker node 3 runs 8 executors.", "Worker node 2 runs 4 executors."),
    ("Carol leads the search team.", "Dana leads the checkout redesign and the mobile app."),
    ("Staging for the inventory service resets on Friday.",
     "Staging for the catalog service resets on Monday."),
    ("The orders API allows 600 requests per minute.",
     "The orders worker allows 60 requests per minute."),
    # two people's facts of a many-valued kind
    ("Eli prefers long-form design docs.", "Kofi prefers long-form design docs."),
    ("Gus is on the on-call rotation for the web app.",
     "Marco is on the on-call rotation for the web app."),
    ("Sprint 2 goal met", "Sprint 1 goal met"),
    ("The v2 API is deprecated.", "The v3 API is deprecated."),
    # added detail
    ("Alice owns the payment gateway integration and also the refunds service.",
     "Alice owns the payment gateway integration."),
    ("The API listens on port 8080 and the admin UI on port 8081.",
     "The API listens on port 8080."),
    ("Alice owns the payment gateway, not the refunds service.",
     "Alice owns the payment gateway."),
    ("The search API now also talks to Elastic.", "The search API talks to Solr."),
    # paraphrase
    ("Production runs on Postgres 15.", "We use Postgres 15 in production."),
    ("The billing service is owned by Bob.", "Bob owns the billing service."),
    ("Never deploy on Fridays.", "Don't deploy on Fridays."),
    ("Deploys happen every Tuesday morning.", "Every Tuesday morning we deploy."),
    # unrelated
    ("Logs are shipped to Datadog.", "The frontend is written in TypeScript with React."),
]


@pytest.mark.parametrize(("new", "old"), CONFLICTS)
def test_true_conflicts_fire(new: str, old: str) -> None:
    assert conflict_reason(new, old) is not None


@pytest.mark.parametrize(("new", "old"), NOT_CONFLICTS)
def test_non_conflicts_stay_quiet(new: str, old: str) -> None:
    assert conflict_reason(new, old) is None


def test_reason_names_the_values() -> None:
    assert conflict_reason("Bob owns the gateway.", "Alice owns the gateway.") == "bob vs alice"
    assert conflict_reason("The API listens on port 9090.",
                           "The API listens on port 8080.") == "9090 vs 8080"
    assert conflict_reason("Alice no longer owns the gateway.",
                           "Alice owns the gateway.") == "negated"


def test_capitals_do_not_make_a_value() -> None:
    assert conflict_reason("the staging db runs postgres 16",
                           "The staging db runs Postgres 15") == "16 vs 15"


def test_long_texts_are_not_compared() -> None:
    filler = " and the team agreed on it after a long discussion" * 10
    assert conflict_reason("Bob owns the gateway" + filler,
                           "Alice owns the gateway" + filler) is None


def test_added_detail_and_cover() -> None:
    old = "Alice owns the payment gateway integration."
    new = "Alice owns the payment gateway integration and also the refunds service."
    assert adds_detail(new, old) and covers(new, old)
    assert not adds_detail("Alice owns the payment gateway integration!", old)
    # Capitals do not make a word new: a value in one text is a word in the other.
    assert not adds_detail("the staging database runs postgres 15",
                           "The staging database runs Postgres 15")
    assert not covers("Alice owns the refunds service.", old)


@pytest.mark.parametrize(("new", "old"), CONFLICTS)
def test_strict_keeps_the_true_conflicts(new: str, old: str) -> None:
    # Found by words alone (no vector), every true conflict above still fires.
    assert conflict_reason(new, old, strict=True) is not None


# Pairs of one subject found by shared words (keyword-only palaces) that the loose rule takes
# for conflicts: another fact of the subject (its port, its log sink, who is on call).
LOOSE_ONLY = [
    ("Marco now owns the invoicing gateway.", "The invoicing gateway runs on port 8081."),
    ("Luis owns the payments service.", "The payments service uses Node 18."),
    ("The email gateway now runs on Postgres 15.", "Marco now owns the email gateway."),
    ("Quinn is on the on-call rotation for the ledger service.",
     "The ledger service is owned by Chloe."),
    ("The checkout API listens on port 9090 behind the load balancer.",
     "The checkout API listens on port 8080."),
]


@pytest.mark.parametrize(("new", "old"), LOOSE_ONLY)
def test_strict_needs_the_same_kind_of_statement_and_no_extra_words(new: str, old: str
                                                                    ) -> None:
    assert conflict_reason(new, old) is not None
    assert conflict_reason(new, old, strict=True) is None
