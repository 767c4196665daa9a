"""Secret redaction (``palaced.wire.redact``): every shape it knows is replaced, prose is not."""

from __future__ import annotations

import pytest

from palaced.wire.redact import redact

# Assembled at run time so that no scanner mistakes these test values for real secrets.
OPENAI = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
ANTHROPIC = "sk-ant-" + "api03-" + "x9Yz8Wv7Ut6Sr5Qp4On3Ml2Kj1Ih0GfEdCbA"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1v"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98Xy1+abc/def\n"
       "q2Xy3Zz==\n-----END RSA PRIVATE KEY-----")


@pytest.mark.parametrize(("text", "kind", "secret"), [
    (f"use {OPENAI} for the API", "openai_key", OPENAI),
    (f"export ANTHROPIC={ANTHROPIC}", "anthropic_key", ANTHROPIC),
    (f"token {GITHUB} works", "github_token", GITHUB),
    (f"pat: {GITHUB_PAT}", "github_token", GITHUB_PAT),
    (f"aws id {AWS} in us-east-1", "aws_access_key", AWS),
    (f"slack {SLACK}", "slack_token", SLACK),
    (f"maps key {GOOGLE}.", "google_api_key", GOOGLE),
    (f"cookie {JWT}", "jwt", JWT),
    (f"key:\n{PEM}\nend", "private_key", "MIIEowIBAAKCAQEA7bq98Xy1"),
])
def test_known_shapes_are_redacted(text: str, kind: str, secret: str) -> None:
    out, count = redact(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert count == 1


def test_a_truncated_pem_block_is_redacted_up_to_the_prose() -> None:
    out, count = redact("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n"
                        "AAAABG5vbmUAAAAE\nThat was the key.")
    assert out == "[REDACTED:private_key]\nThat was the key."
    assert count == 1


def test_bearer_connection_string_and_basic_keep_their_frame() -> None:
    text = ("curl -H 'Authorization: Bearer abcDEF1234567890ghiJKL' "
            "postgres://app:s3cr3t-Pw@db.internal:5432/app and Basic dXNlcjpwYXNzd29yZDEy")
    out, count = redact(text)
    assert "Authorization: Bearer [REDACTED:bearer_token]'" in out
    assert "postgres://app:[REDACTED:password]@db.internal:5432/app" in out
    assert "Basic [REDACTED:basic_auth]" in out
    assert "s3cr3t" not in out and count == 3


@pytest.mark.parametrize(("text", "expected"), [
    ("API_KEY=f00bar-baz-7", "API_KEY=[REDACTED:key]"),
    ("DB_PASSWORD: hunter22", "DB_PASSWORD: [REDACTED:password]"),
    ('{"client_secret": "Zk9-qq-Ww"}', '{"client_secret": "[REDACTED:secret]"}'),
    ("authToken = 'Q1w2E3r4T5'", "authToken = '[REDACTED:token]'"),
    ("export GITLAB_TOKEN=abcdefghijklmnopqrst", "export GITLAB_TOKEN=[REDACTED:token]"),
])
def test_secret_assignments_lose_their_value(text: str, expected: str) -> None:
    assert redact(text) == (expected, 1)


@pytest.mark.parametrize("text", [
    "The key: value pairs are read in order.",
    "Primary key: id, then the foreign key: user_id.",
    "keyboard: Logitech MX Keys",
    "max_tokens: 4096 and token_count = 12",
    "password: required",
    "SSH_KEY=/home/me/.ssh/id_ed25519",
    "API_KEY=${API_KEY} and SECRET=<your secret here>",
    "We decided to use Postgres 16 on port 5433 because the sk-learn pipeline needs it.",
    "The token budget is 1500 tokens; see https://example.com/docs/tokens for details.",
    "Call skip-list-implementation-details-here before ask-the-team.",
    "I prefer tabs over spaces, and the release is v1.2.3 on 2024-05-01.",
    "",
])
def test_ordinary_prose_and_settings_are_left_alone(text: str) -> None:
    assert redact(text) == (text, 0)


def test_counts_add_up_and_redaction_is_idempotent() -> None:
    text = f"{OPENAI} and {GITHUB} and PASSWORD=abc123xyz"
    out, count = redact(text)
    assert count == 3
    assert redact(out) == (out, 0)


def test_private_key_blocks_end_at_their_first_end_line_or_their_base64() -> None:
    head = "-----BEGIN PRIVATE KEY-----"
    text = (f"a {head}\nQUJDREVGR0g=\n-----END PRIVATE KEY----- b {head} c {head}\n"
            "QUJDREVGR0g=\n-----END RSA PRIVATE KEY----- d " + f"{head}\nQUJDREVGR0g=\nprose " * 2)
    assert redact(text) == ("a [REDACTED:private_key] b [REDACTED:private_key] d "
                            + "[REDACTED:private_key]\nprose " * 2, 4)
