"""The scanner's rules from detect-secrets (issue 21 item 11): each masks what its upstream
plugin flags, and leaves alone what upstream leaves alone. Most examples are upstream's own
test cases (detect-secrets, ``tests/plugins/*_test.py``, Apache License 2.0); ``sk_live_`` is
the shape the hand list missed."""

from __future__ import annotations

import re

import pytest

from policy.domain.secrets.redaction import SecretScanner
from policy.domain.secrets.secret_rules import DETECT_SECRETS, LOCAL, RULES

SCANNER = SecretScanner(key=b"rules")
TAG = re.compile(r"\[secret:hmac-sha256:[0-9a-f]{12}\]")
HEX64 = "0123456789abcdef" * 4
IAM = "abcd1234abcd1234abcd1234ABCD1234abcd1234abcd"  # 44 characters
SENDGRID = "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"
STRIPE = "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
MAILCHIMP = "343ea45721923ed956e2b38c31db76aa-us30"
PGP = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----"
PUTTY = "PuTTY-User-Key-File-2: ssh-rsa\nPrivate-Lines: 1\nAAAAgQC\nPrivate-MAC: 0a1b"
WEBHOOK = "https://hooks.slack.com/services/Txxxxxxxx/Bxxxxxxxx/xxxxxxxxxxxxxxxxxxxxxxxx"
PYPI = "pypi-AgEIcHlwaS5vcmc" + "CJDU3OTM1MjliLWIyYTYtNDEwOC05NzRkLTM0MjNiNmEwNWIzYgACF1sxLFsi" * 2

# (rule, text, the secret in it): the secret is gone, and everything else of the text stays.
FLAGGED = [
    ("stripe-key", f"charge with {STRIPE} today", STRIPE),
    ("stripe-key", "rk_live_5TcWfjKmJgpql9hjpRnwRXbT", "rk_live_5TcWfjKmJgpql9hjpRnwRXbT"),
    # A longer key than upstream's minimum is masked whole, not its first 32 characters.
    ("stripe-key", "sk_live_" + "A1b2" * 20, "sk_live_" + "A1b2" * 20),
    ("artifactory-token", "token AKCxxxxxxxxxx", "AKCxxxxxxxxxx"),
    ("artifactory-password", '"AP6xxxxxxxxxx"', "AP6xxxxxxxxxx"),
    ("aws-access-key-id", "id=A3T0ZZZZZZZZZZZZZZZZ", "A3T0ZZZZZZZZZZZZZZZZ"),
    ("aws-secret-access-key", f'aws_secret_key = "{AWS_SECRET}"', AWS_SECRET),
    ("azure-storage-key", "AccountName=x;AccountKey=" + "a" * 86 + "==;", "a" * 86 + "=="),
    ("basic-auth", "clone https://username:password@yelp.com/repo", "password"),
    ("cloudant-password", f"cloudant_password='{HEX64}'", HEX64),
    ("cloudant-api-key", 'cloudant_key = "abcdefghijklmnopqrstuvwx"', "abcdefghijklmnopqrstuvwx"),
    ("cloudant-url-password", f"https://acct:{HEX64}@acct.cloudant.com", HEX64),
    ("cloudant-url-api-key", "https://acct:abcdefghijklmnopqrstuvwx@acct.cloudant.com",
     "abcdefghijklmnopqrstuvwx"),
    ("discord-bot-token", "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
     "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs"),
    ("github-token", "ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    ("gitlab-token", "use glpat-hellOworld380_testin now", "glpat-hellOworld380_testin"),
    ("ibm-cloud-iam-key", f'"iam-password": "{IAM}"', IAM),
    ("ibm-cos-hmac-key", f"cos_hmac_secret_access_key = {HEX64[:48]}", HEX64[:48]),
    ("mailchimp-key", f"key {MAILCHIMP}", MAILCHIMP),
    ("npm-token", "//registry.npmjs.org/:_authToken=743b294a-cd03-11ec-9d64-0242ac120002",
     "743b294a-cd03-11ec-9d64-0242ac120002"),
    ("openai-token", "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",
     "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"),
    # A key is masked as a block: its header, body and end line.
    ("private-key", f"key:\n{PGP}\nend", PGP),
    ("putty-private-key", f"{PUTTY}\n", PUTTY),
    ("pypi-token", PYPI, PYPI),
    ("sendgrid-key", SENDGRID, SENDGRID),
    ("slack-token", "xoxb-34532454-e039d02840a0b9379c", "xoxb-34532454-e039d02840a0b9379c"),
    ("slack-webhook", f"post to {WEBHOOK}.", WEBHOOK),
    ("softlayer-key", f"--softlayer-api-key={HEX64}", HEX64),
    ("softlayer-url", f"http://api.softlayer.com/soap/v3.1/{HEX64}", HEX64),
    ("square-oauth-secret", "sq0csp-ABCDEFGHIJK_LMNOPQRSTUVWXYZ-0123456789abcdef",
     "sq0csp-ABCDEFGHIJK_LMNOPQRSTUVWXYZ-0123456789abcdef"),
    ("telegram-bot-token", "bot token 110201543:AAHdqTcvCH1vGWJxfSe1ofSAs0K5PALDsaw.",
     "110201543:AAHdqTcvCH1vGWJxfSe1ofSAs0K5PALDsaw"),
    ("twilio-key", "SKxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "SKxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
]  # fmt: skip

# Left alone, as upstream leaves them (or as ordinary text).
NOT_FLAGGED = [
    "pk_live_j5krY8XTgIcDaHDb3YrsAfCl",  # a publishable Stripe key
    "sk_live_",
    "http://localhost:5000/<%= @variable %>",
    'cloudant_url = "a-fake-tooshort-key"',
    "glpat_hellOworld380_testin",
    "3ea4572956e2b381923ed34c31db76aa-2",
    "SG.ngeVfQFYQlKU0ufo8x5d1A..TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "arn:aws:sns:aaa:111122223333:aaaaaaaaaaaaaaaaaaassssssddddddddddddd",
    "APPLICATION settings and ACCOUNT names",
    "The retry policy: three attempts, then a person (see https://example.test/docs).",
]


def test_every_upstream_rule_has_an_example() -> None:
    assert {r.name for r in DETECT_SECRETS} == {name for name, _, _ in FLAGGED}
    assert len({r.name for r in RULES}) == len(DETECT_SECRETS) + len(LOCAL)


@pytest.mark.parametrize(("rule", "text", "secret"), FLAGGED, ids=[f[0] for f in FLAGGED])
def test_each_rule_masks_its_secret_and_nothing_else(rule: str, text: str, secret: str) -> None:
    out = SCANNER.redact_text(text)
    assert secret not in out, out
    # Exactly the secret is replaced; the text around it stays as it was.
    assert TAG.sub("", out) == text.replace(secret, ""), out
    assert SCANNER.redact_text(out) == out


@pytest.mark.parametrize("text", NOT_FLAGGED)
def test_what_upstream_leaves_alone_is_left_alone(text: str) -> None:
    assert SCANNER.redact_text(text) is text


def test_the_length_of_each_masked_secret_is_reported() -> None:
    found: dict[str, int] = {}
    out = SCANNER.redact_text("key sk_live_ReTllpYQYfIZu2Jnf2lAPFjD and password=hunter2", found)
    assert sorted(found.values()) == [7, 32]
    assert set(found) == set(TAG.findall(out))
