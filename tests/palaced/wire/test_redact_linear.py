"""Every redaction rule runs in time linear in its text, on the inputs hardest for it.

A rule that rescans the rest of the text from each of many starts is quadratic: the private-key
pattern once took 9.4 s of CPU for a 200k-character text of repeated headers (a 5.7 MB
transcript: 264 s of daemon CPU). For each rule of ``palaced.wire.redact.RULES`` this builds
adversarial texts (repeated prefixes, long runs that almost match) at 50k and 400k characters
and checks that the CPU time grows about 8-fold (a quadratic rule: 64-fold) and stays small
(the linear rules take at most about 10 ms and 75 ms of CPU on the two sizes).
"""

from __future__ import annotations

import time

import pytest

from palaced.wire.redact import RULES

SMALL, LARGE = 50_000, 400_000
# Units repeated to the size: for each rule, its prefix again and again, or a long run that
# matches all but the last step.
ADVERSARIAL: dict[str, tuple[str, ...]] = {
    "private_key": ("-----BEGIN PRIVATE KEY-----\n", "-----BEGIN A B C PRIVATE KEY-----x",
                    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98Xy1\n-----END ",
                    "-----END " + "A " * 50),
    "anthropic_key": (" sk-ant-" + "a" * 19, " sk-ant-" + "-" * 200 + "!"),
    "openai_key": (" sk-" + "a" * 60, " sk-proj-" + "_" * 60, " sk-" + "1" * 200 + "!"),
    "stripe_key": (" sk_live_" + "a" * 15, " rk_test_" + "a" * 300 + "!"),
    "github_token": (" ghp_" + "a" * 29, " github_pat_" + "a" * 21, " gho_" + "a" * 300),
    "aws_access_key": (" AKIA" + "A" * 15, "AKIA" * 50),
    "slack_webhook": ("https://hooks.slack.com/services/T" + "a" * 40 + "/B" + "b" * 40 + "/ ",
                      "https://hooks.slack.com/services/T" + "a" * 300),
    "slack_token": (" xoxb-" + "a" * 9, " xoxp-" + "-" * 300 + "!"),
    "google_api_key": (" AIza" + "a" * 34, " AIza" + "a" * 300),
    "jwt": (" eyJ" + "a" * 40 + ".eyJ" + "a" * 40 + ".aaaaaaa", ".eyJaaaaaaaa" * 20),
    "bearer_token": ("bearer " + "a" * 40 + " ", "Bearer" + " " * 200 + "x",
                     "authorization:" + " " * 200 + "x", "bearer " * 20),
    "basic_auth": ("basic" + " " * 200 + "x", "Basic " + "a" * 200 + " ", "basic " * 20),
    "password": ("x://" + "y" * 99 + ":" + "z" * 199 + " ", "a" * 20 + "://",
                 "db://u:" + ":" * 300),
    "assignment": ("a=" + "." * 500 + " ", "a." * 40 + " ", "token:" + " " * 200 + ",",
                   'key="' + "x" * 600 + "\n", "key" * 100, "key=" * 100),
}


def _cpu(rule: object, text: str, runs: int) -> float:
    """The least CPU time of ``runs`` runs of ``rule`` on ``text``, in seconds."""
    assert callable(rule)
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        rule(text)
        best = min(best, time.process_time() - start)
    return best


def test_every_rule_has_adversarial_inputs() -> None:
    assert set(ADVERSARIAL) == {name for name, _ in RULES}


@pytest.mark.parametrize(("name", "rule"), RULES, ids=[name for name, _ in RULES])
def test_rule_time_is_linear_on_adversarial_input(name: str, rule: object) -> None:
    for unit in ADVERSARIAL[name]:
        small = (unit * (SMALL // len(unit) + 1))[:SMALL]
        large = (unit * (LARGE // len(unit) + 1))[:LARGE]
        t_small = _cpu(rule, small, 3)
        # checked before the large text, which a quadratic rule would take minutes over
        assert t_small < 0.04, (name, unit[:40], t_small)
        t_large = _cpu(rule, large, 2)
        # 8 times the text: about 8 times the time, where a quadratic rule takes 64 times
        # (timings under a millisecond are noise, hence the floor)
        assert t_large / max(t_small, 1e-3) < 20, (name, unit[:40], t_small, t_large)
        assert t_large < 0.3, (name, unit[:40], t_large)
