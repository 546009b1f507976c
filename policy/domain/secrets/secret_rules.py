"""The token shapes the secret scanner (``redaction.SecretScanner``) knows, as data.

Most come from a maintained ruleset rather than our own list: the regex-based plugins of
detect-secrets (Yelp, Apache License 2.0, ``detect_secrets/plugins/*.py`` at commit
``5e141933554a0b74e7341841f318be21e895339c``), vendored here, not imported: its last release (1.5.0)
is older than the fixes on its main branch (telegram), and importing a plugin pulls in ``requests``
and ``pyyaml`` for verifiers we never call. ``tests/domain/policy_domain/test_secret_rules.py``
carries a positive and a negative example for each rule.

How the vendored patterns were changed, and why (detect-secrets scans source lines to report
them; we replace the secret inside JSON strings and prose, so the match must cover the secret,
all of it, and nothing else):

1. Where upstream matches the secret with its surroundings (``AccountKey=``, a key name, a URL,
   quotes), the secret is a group named ``s`` (or a look-behind): only that is replaced.
2. A fixed-length run at the end became ``{n,}``: ``sk_live_`` + 24 characters is the shortest
   Stripe key, not the length of every one, and masking a prefix would leave the rest readable.
3. Upstream's line anchors (telegram's ``^…$``) became token boundaries: a token in a sentence
   is still a token.
4. ``PrivateKeyDetector`` flags only the ``BEGIN … PRIVATE KEY`` line (a reviewer then removes
   the file); the rules below replace the whole block, up to its END line or the end of text.
5. Left out: ``KeywordDetector`` (per-language source regexes; its keyword list joined
   ``redaction._SECRET_WORD``, our key=value rule), the two high-entropy detectors (they flag
   every hash we store), ``IPPublicDetector`` (not a secret), and ``JwtTokenDetector`` (its lazy
   tail stops before the signature and leans on a decode check; ours below is greedy).

Our own rules (``LOCAL``) cover what the ruleset does not: generic ``sk-`` keys (current OpenAI
keys no longer carry the ``T3BlbkFJ`` marker upstream looks for), Bearer tokens, fine-grained
GitHub tokens, and JWTs.

Every rule lists hints: strings one of which occurs in any text the rule can match, so a rule
is tried only on text that holds one (``redaction``; a property test pins the result against
unconditional scans). A look-behind stands after a rule's first literal where it can: a pattern
that starts with a literal is found by a fast prefix search, one that starts with a look-behind
is tried at every position.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    # The whole match is the secret, unless the pattern has a group named ``s``: then that is.
    pattern: str
    # Substrings one of which is in every text the rule matches: ``hints`` exactly as written,
    # ``ihints`` (lower case) in any case. A rule with neither is tried on every text.
    hints: tuple[str, ...] = ()
    ihints: tuple[str, ...] = ()
    # The rule may match text whose words (split at whitespace) are all shorter than
    # ``LONG_RUN_LENGTH`` (a short password in a URL, a key's header line). Every other rule's
    # match holds at least that many characters without whitespace in a row.
    short: bool = False


LONG_RUN_LENGTH = 11


# Upstream's build_assignment_regex (plugins/base.py), IGNORECASE, the secret as group ``s``.
def _assignment(prefix: str, keyword: str, secret: str) -> str:
    return (
        rf"(?i:(?:(?<=\W)|(?<=^))(?:\[|)(?:\"|'|){prefix}(?:_|-|){keyword}(?:\"|'|)(?:\]|)"
        rf"(?: *)(?:=|:|:=|=>| +|::)(?: *)(?:\"|'|))(?P<s>{secret})"
    )


# Artifactory's delimiters (whitespace, =, :, " or the start; whitespace, " or the end), the
# one before as a look-behind over the literal just matched.
def _art_before(literal: str) -> str:
    return rf"""(?<![^\s=:"]{literal})"""


_ART_AFTER = r"""(?=[\s"]|\Z)"""
_BASIC_AUTH_RESERVED = r":/?#\[\]@!$&'()*+,;="
_CL = r"(?:cloudant|cl|clou)"
_CL_KEY = r"(?:api|)(?:key|pwd|pw|password|pass|token)"
_CL_URL = r"(?i:https?://[\w\-]+:(?P<s>{value})@[\w\-]+\.cloudant\.com)"
_IAM = (
    r"(?:ibm(?:_|-|)cloud(?:_|-|)iam|cloud(?:_|-|)iam|ibm(?:_|-|)cloud|ibm(?:_|-|)iam|ibm|iam"
    r"|cloud|)(?:_|-|)(?:api|)"
)
_KEY_OR_PASS = r"(?:key|pwd|password|pass|token)"  # noqa: S105 - a pattern
_GITLAB = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-", "glimt-",
           "glptt-", "glagent-", "gloas-")  # fmt: skip

DETECT_SECRETS: tuple[Rule, ...] = (
    Rule("artifactory-token", rf"AKC{_art_before('AKC')}[a-zA-Z0-9]{{10,}}{_ART_AFTER}", ("AKC",)),
    Rule(
        "artifactory-password",
        rf"AP{_art_before('AP')}[\dABCDEF][a-zA-Z0-9]{{8,}}{_ART_AFTER}",
        ("AP",),
    ),
    Rule(
        "aws-access-key-id",
        r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16,}",
        ("A3T", "ABIA", "ACCA", "AKIA", "ASIA"),
    ),
    Rule(
        "aws-secret-access-key",
        r"(?i:aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['\"])"
        r"(?P<s>[0-9a-zA-Z/+]{40,})(?=['\"])",
        ihints=("aws",),
    ),
    Rule("azure-storage-key", r"AccountKey=(?P<s>[a-zA-Z0-9+/=]{88,})", ("AccountKey=",)),
    Rule(
        "basic-auth",
        rf"://[^{_BASIC_AUTH_RESERVED}\s]+:(?P<s>[^{_BASIC_AUTH_RESERVED}\s]+)@",
        ("://",),
        short=True,
    ),
    Rule(
        "cloudant-password",
        _assignment(_CL, _CL_KEY, r"[0-9a-f]{64}"),
        ihints=("key", "pw", "pass", "token"),
    ),
    Rule(
        "cloudant-api-key",
        _assignment(_CL, _CL_KEY, r"[a-z]{24}"),
        ihints=("key", "pw", "pass", "token"),
    ),
    Rule(
        "cloudant-url-password",
        _CL_URL.format(value=r"[0-9a-f]{64}"),
        ihints=("cloudant.com",),
    ),
    Rule("cloudant-url-api-key", _CL_URL.format(value=r"[a-z]{24}"), ihints=("cloudant.com",)),
    Rule(
        "discord-bot-token",
        r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27,}",
        (".",),
    ),
    Rule(
        "github-token",
        r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36,}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    Rule(
        "gitlab-token",
        r"(?:(?:glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,}"
        r"|GR1348941[A-Za-z0-9_\-]{20,}"
        r"|glcbt-(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,}"
        r"|glimt-[A-Za-z0-9_\-]{25,}|glptt-[A-Za-z0-9_\-]{40,}"
        r"|glagent-[A-Za-z0-9_\-]{50,}|gloas-[A-Za-z0-9_\-]{64,})(?!\w)",
        _GITLAB,
    ),
    Rule(
        "ibm-cloud-iam-key",
        _assignment(_IAM, _KEY_OR_PASS, r"[a-zA-Z0-9_\-]{44}(?![a-zA-Z0-9_\-])"),
        ihints=("key", "pwd", "pass", "token"),
    ),
    Rule(
        "ibm-cos-hmac-key",
        _assignment(
            r"(?:(?:ibm)?[-_]?cos[-_]?(?:hmac)?|)",
            r"(?:secret[-_]?(?:access)?[-_]?key)",
            r"[a-f0-9]{48}(?![a-f0-9])",
        ),
        ihints=("secret",),
    ),
    Rule("mailchimp-key", r"[0-9a-z]{32}-us[0-9]{1,2}", ("-us",)),
    Rule(
        "npm-token",
        r"//\S+?/:_authToken=\s*(?P<s>npm_\S+|[A-Fa-f0-9-]{36})",
        ("_authToken=",),
    ),
    Rule(
        "openai-token",
        r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20,}",
        ("T3BlbkFJ",),
    ),
    Rule(
        "private-key",
        r"-----BEGIN (?:DSA |EC |OPENSSH |RSA |SSH2 ENCRYPTED |PGP |)PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        ("-----BEGIN",),
        short=True,
    ),
    Rule(
        "putty-private-key",
        r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC: [0-9a-fA-F]+|\Z)",
        ("PuTTY-User-Key-File-",),
        short=True,
    ),
    Rule(
        "pypi-token",
        r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9-_]{70,}",
        ("pypi-",),
    ),
    Rule("sendgrid-key", r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43,}", ("SG.",)),
    Rule("slack-token", r"(?i:xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+)", ihints=("xox",), short=True),
    Rule(
        "slack-webhook",
        r"(?i:https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+)",
        ihints=("hooks.slack.com",),
    ),
    Rule(
        "softlayer-key",
        _assignment(r"(?:softlayer|sl)(?:_|-|)(?:api|)", _KEY_OR_PASS, r"[a-z0-9]{64}"),
        ihints=("key", "pwd", "pass", "token"),
    ),
    Rule(
        "softlayer-url",
        r"(?i:(?:http|https)://api\.softlayer\.com/soap/(?:v3|v3\.1)/)(?P<s>[a-z0-9]{64})",
        ihints=("api.softlayer.com",),
    ),
    Rule("square-oauth-secret", r"sq0csp-[0-9A-Za-z\\\-_]{43,}", ("sq0csp-",)),
    Rule("stripe-key", r"(?:r|s)k_live_[0-9a-zA-Z]{24,}", ("k_live_",)),
    Rule(
        "telegram-bot-token",
        r"(?<![0-9])[0-9]{8,10}:[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
        (":",),
    ),
    Rule("twilio-key", r"(?:AC|SK)[a-z0-9]{32,}", ("AC", "SK")),
)

LOCAL: tuple[Rule, ...] = (
    # OpenAI-style keys: sk-..., sk-live-..., sk-proj-... (not "task-force": no letter before).
    Rule("openai-key", r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{10,}", ("sk-",)),
    # Broader than upstream's github and slack rules: shorter classic tokens, fine-grained
    # ones, and Slack's refresh tokens (xoxe-) and tokens without numeric segments.
    Rule(
        "github-token-broad",
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Rule("slack-token-broad", r"xox(?<![A-Za-z0-9_]xox)[abeoprs]-[A-Za-z0-9-]{10,}", ("xox",)),
    # Three base64url segments, the first two JSON objects ({" is eyJ): a JWT.
    Rule(
        "jwt",
        r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        ("eyJ",),
    ),
    # The token after "Bearer"; it must hold a digit, so "Bearer authentication" is prose.
    Rule(
        "bearer-token",
        r"Bearer (?P<s>(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{12,}=*)",
        ("Bearer ",),
    ),
)

RULES: tuple[Rule, ...] = DETECT_SECRETS + LOCAL
