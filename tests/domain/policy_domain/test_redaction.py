"""The secret scanner (issue 9 item 12): each shape it knows, the text it must leave alone, and
its two properties — idempotent, and a string without a match is never changed."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from policy.domain.canonical import content_hash, proposal_hash
from policy.domain.secrets import redaction
from policy.domain.secrets.redaction import SecretScanner

KEY = b"test-key"
SCANNER = SecretScanner(key=KEY)
TAG = re.compile(r"\[secret:hmac-sha256:[0-9a-f]{12}\]")

OPENAI = "sk-live-abc123def456ghi789jkl"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\nq9Z+abc/def==\n"
    "-----END RSA PRIVATE KEY-----"
)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

# One secret a line, between [[ and ]]: the scanner replaces it by a tag and leaves every other
# character of the line as it was.
MARKED = f"""
use [[{OPENAI}]] now
key [[sk-abcdefghij0123456789]]
[[sk-proj-Abc_def-0123456789xyz]]
aws [[AKIAIOSFODNN7EXAMPLE]] here
[[ghp_a1B2a1B2a1B2a1B2a1B2a1B2a1B2a1B2a1B2]]
[[github_pat_11ABCDEFG0123456789_abcdefXYZ]]
slack [[xoxb-123456789012-abcdefABCDEF]]
[[xoxp-1234-5678-abcdefgh]]
Authorization: Bearer [[abc123DEF456ghi789]]
token [[{JWT}]]
password=[[hunter2]]
login with passwd: [[s3cr3t!x]] please
{{"password": "[[hunter2]]"}}
client_secret='[[abc def]]'
API_KEY=[[abcdef123]]
apikey: [[zzz999]]
access_key=[[AAAAbbbb]]
x-api-key: [[k-123]]
private_key=[[MIIBOgIBAAJB]]
db_password=[[hunter2]]&user=bob
SECRET: [[abracadabra]]
"""


def _marked(line: str) -> tuple[str, str, str]:
    """(the text, its secret, the text without it) of one line of MARKED."""
    before, rest = line.split("[[", 1)
    secret, after = rest.split("]]", 1)
    return before + secret + after, secret, before + after


# (text, the secret that must be gone, exactly what stays once the tag is taken out)
SECRETS = [_marked(line) for line in MARKED.strip().splitlines()] + [
    (f"key:\n{PEM}\nend", "MIIEowIBAAKCAQEA7x", "key:\n\nend"),  # the whole PEM block goes
    ("-----BEGIN PRIVATE KEY-----\nMIIEvQ truncated", "MIIEvQ", ""),  # a cut-off one too
    ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "authorization="),  # and the scheme
]


@pytest.mark.parametrize(("text", "secret", "kept"), SECRETS, ids=[s[1][:24] for s in SECRETS])
def test_each_shape_is_replaced_by_a_keyed_tag(text: str, secret: str, kept: str) -> None:
    """issue 9 item 12: the secret is gone, a tag with a hash stands in its place."""
    out = SCANNER.redact_text(text)
    assert secret not in out
    assert TAG.search(out), out
    assert TAG.sub("", out) == kept


# Text the system and its users write every day: none of it is a secret.
NOT_SECRETS = [
    "Please review our password policy before Friday.",
    "The token bucket refills at 5 tokens per second.",
    "max_tokens=512 and token_count: 40",
    "task-force risk-assessment desk-top",
    "Bearer authentication is described in RFC 6750.",
    "the secret to good soup is salt",
    "sk-short",
    "AKIA lowercase akiaiosfodnn7example",
    "eyJ alone is not a JWT",
    "proposal_hash=" + "ab" * 32,
    "idempotency_token: " + hashlib.sha256(b"x").hexdigest(),
    '{"idempotency_token": "' + hashlib.sha256(b"y").hexdigest() + '"}',
    hashlib.sha256(b"a proposal").hexdigest(),
    "answer in Klingon please",
    "run_0123456789abcdef0123456789abcdef:c3",
    "password=",
    "[secret:hmac-sha256:0123456789ab] is already a tag",
    'password: "[secret:hmac-sha256:0123456789ab]"',
    "token=[secret:hmac-sha256:0123456789ab]",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_text_and_our_own_hashes_are_left_alone(text: str) -> None:
    """issue 9 item 12: the system stores sha256 hashes everywhere; they are not secrets."""
    assert SCANNER.redact_text(text) is text


def test_json_values_under_secret_like_keys_are_replaced_whole_hashes_kept() -> None:
    h = proposal_hash("search_public", "1", {"query": "q"})
    value = {
        "password": "hunter2",
        "nested": [{"api_key": "abc"}, {"query": f"call with {OPENAI}"}],
        "idempotency_token": h,
        "max_tokens": 5,
        "tokens": "many",
        "content_hash": content_hash({"a": 1}),
        "secret_names": ["API_KEY"],
    }
    out = SCANNER.redact(value)
    assert TAG.fullmatch(out["password"])
    assert TAG.fullmatch(out["nested"][0]["api_key"])
    assert OPENAI not in out["nested"][1]["query"]
    assert out["idempotency_token"] == h
    assert out["content_hash"] == value["content_hash"]
    assert (out["max_tokens"], out["tokens"], out["secret_names"]) == (5, "many", ["API_KEY"])


def test_the_tag_is_keyed_stable_and_not_a_bare_sha256() -> None:
    a, b = SCANNER.redact_text("password=hunter2"), SCANNER.redact_text("password=hunter2")
    assert a == b  # one secret, one tag: a reader sees where the same secret stood
    bare = hashlib.sha256(b"hunter2").hexdigest()[:12]
    assert bare not in a  # a dictionary of passwords cannot reverse it without the key
    assert SecretScanner(key=b"other").redact_text("password=hunter2") != a


def test_extra_patterns_extend_the_scanner() -> None:
    scanner = SecretScanner([r"ACME-[0-9]{6}"], key=KEY)
    assert "ACME-123456" not in scanner.redact_text("ticket ACME-123456 opened")
    assert SCANNER.redact_text("ticket ACME-123456 opened") == "ticket ACME-123456 opened"
    with pytest.raises(ValueError, match="empty"):
        SecretScanner([r"x*"])


def test_unchanged_containers_are_the_same_objects() -> None:
    value = {"a": ["b", {"c": "d"}], "n": 1}
    assert SCANNER.redact(value) is value


_PIECES = ["password", "token", "sk-", "sk-live-", "AKIA", "Bearer ", "ghp_", "xoxb-", "eyJ"]
_PIECES += ["[secret:hmac-sha256:", "-----BEGIN RSA PRIVATE KEY-----", "api_key", "0123456789"]
# Shapes of the detect-secrets rules (issue 21 item 11): their hints and the runs they need.
_PIECES += ["sk_live_", "AKC", "aws_key", "://u:", "@h", "SG.", "AccountKey=", "cl_pw", "AP1"]
_PIECES += ["0123456789abcdef" * 2, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "glpat-", "xoxb-12-", "AC"]
_alphabet = st.sampled_from([*"abcXYZ019 _-=:'\"\n.[]/+", *_PIECES])
texts = st.lists(_alphabet, max_size=40).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_redaction_is_idempotent_on_text(text: str) -> None:
    once = SCANNER.redact_text(text)
    assert SCANNER.redact_text(once) == once


@settings(max_examples=300, deadline=None)
@given(json_values)
# Found by hypothesis: the key's tag left "]sk-0123456789" at a word boundary, found next time.
@example({"AKIAABCDEFGHIJKLMNOPQRSTUVWXYZsk-0123456789": None})
def test_redaction_is_idempotent_on_json(value: object) -> None:
    once = SCANNER.redact(value)
    assert SCANNER.redact(once) == once


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60) | texts)
def test_a_string_is_changed_only_where_a_secret_was_found(text: str) -> None:
    out = SCANNER.redact_text(text)
    if out == text:
        assert out is text  # nothing matched: the very same string back
    else:
        # Every change is a tag standing where a secret was; text around it is kept.
        assert TAG.search(out)
        for part in TAG.split(out):
            assert part in text


_FRAGMENTS = st.sampled_from(
    ["sk-", "live-", "AKIA", "ASIA", "ghp_", "github_pat_", "xoxb-", "eyJ", "Bearer ",
     "-----BEGIN ", "PRIVATE KEY-----", "password", "PassWord", "pa\u017f\u017fword", "api_key",
     "Token", "=", ": ", "'", '"', " ", "\n", "abc", "0123456789", "ABCDEFGHIJKLMNOP", "x" * 12,
     "sk_live_", "AKC", "aws_key", "AWS", "://u", ":p@", "xoxb-1-", "SG.", "AccountKey=", "cl_pw",
     "0123456789abcdef" * 4, "PuTTY-User-Key-File-2: ", "glpat-", "AC", "-us1", "Bearer ",
     "\u00e9", "\u212a"]  # the long s and the Kelvin sign fold onto ASCII under IGNORECASE
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=14).map("".join))
def test_the_cheap_pre_checks_never_change_what_is_redacted(text: str) -> None:
    """The substring pre-checks only skip scans that would find nothing: the result equals the
    two full regex scans run unconditionally."""
    scanner = SecretScanner(key=b"k")
    every_rule = scanner._shapes.pattern(frozenset(range(len(scanner._shapes.rules))))

    def full_scan(t: str) -> str:
        out = every_rule.sub(scanner._replace_shape, t)
        if redaction._SECRET_HINT.search(out):
            out = redaction._KEY_VALUE.sub(scanner._replace_pair, out)
        return out

    # As redact_text: scanned again until nothing more matches (redaction._PASSES at most).
    expected = text
    for _ in range(redaction._PASSES):
        again = full_scan(expected)
        if again == expected:
            break
        expected = again
    assert scanner.redact_text(text) == expected
