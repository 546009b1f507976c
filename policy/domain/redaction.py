"""Secrets never reach a proposal, observation, trace event, log line or frame.

``scrub`` replaces every occurrence of a known secret value in any JSON value; ``redact_fields``
masks the input fields a contract names as redacted. ``SecretScanner`` finds secrets nobody
declared (issue 9 item 12): well-known token shapes and ``key=value`` / ``"key": "value"`` pairs
whose key sounds secret. Each match becomes ``[secret:hmac-sha256:<12 hex>]``.

Why a keyed hash and not a plain sha256 of the secret: a password is low-entropy, so a bare
sha256 prefix of ``hunter2`` is reversed by any dictionary; keyed with a server key, the stored
tag still lets an operator who holds the key check "was it this secret?" (audit), and lets a
reader see two places held the same secret, without keeping the secret.

The redaction is applied at the few boundaries where text enters storage or leaves the process
(run creation, planner output, tool outcome, observation, trace event, handoff bundle), through
``redact_secrets``: the scanner there is the process-wide one ``configure`` installs (the Django
app does so from settings at start-up, like the logging configuration). Two properties hold for
every scanner: ``redact(redact(x)) == redact(x)``, and a string with no match is returned as is.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "[REDACTED]"
_MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary text; refuse them at configuration

SECRET_TAG = "[secret:"  # noqa: S105 - the tag's prefix, not a password
ERASED_TAG = "[erased:"
_TAGS = (SECRET_TAG, ERASED_TAG)

# The words that make a key secret-like; a key may carry a prefix (client_secret, db_password,
# x-api-key) but must end with the word: ``max_tokens`` and ``token_count`` are not secrets.
_SECRET_WORD = (
    r"(?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|"  # noqa: S105
    r"authorization|private[_-]?key)"
)
_SECRET_KEY = re.compile(rf"[\w.-]*?{_SECRET_WORD}", re.IGNORECASE)
# One linear pass that rules the key=value search out for most text (it tries every word).
_SECRET_HINT = re.compile(_SECRET_WORD, re.IGNORECASE)

# The system stores sha256 hex digests everywhere (proposal hashes, idempotency tokens): a
# 64-hex value under a key such as ``idempotency_token`` is a hash we made, not a secret.
_OUR_HASH = re.compile(r"[0-9a-f]{64}")

_TOKEN_SHAPES: tuple[tuple[str, str], ...] = (
    # PEM private key blocks, also a truncated one (no END line: redact to the end).
    (
        "private-key-pem",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    ),
    # OpenAI-style keys: sk-..., sk-live-..., sk-proj-... (not "task-force": no letter before).
    ("openai-key", r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{10,}"),
    ("aws-access-key-id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"),
    (
        "github-token",
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("slack-token", r"(?<![A-Za-z0-9_])xox[abeoprs]-[A-Za-z0-9-]{10,}"),
    # Three base64url segments, the first two JSON objects ({" is eyJ): a JWT.
    ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    # The token after "Bearer"; it must hold a digit, so "Bearer authentication" is prose.
    (
        "bearer-token",
        r"(?<=Bearer )(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{12,}=*",
    ),
)

# key=value, key: value, "key": "value", 'key'='value' inside free text. Only the value is
# replaced. The key may not follow "[" (so the tag "[secret:..." never matches itself).
_KEY_VALUE = re.compile(
    rf"""(?<![\[\w.-])(?P<key>[\w.-]*?{_SECRET_WORD})(?P<kq>["']?)(?P<sep>[ \t]*[:=][ \t]*)"""
    r"""(?:(?P<q>["'])(?P<qv>[^"'\n]{1,512}?)(?P=q)"""
    r"""|(?P<v>(?:(?:Bearer|Basic|Token)[ \t]+)?[^\s"',;&<>\[\]{}()]{1,512}))""",
    re.IGNORECASE,
)


_SCHEMES = ("bearer", "basic", "token")

# Cheap pre-checks, so the common case (text with no secret in it) costs a few substring tests
# instead of two regex scans at every position; each must hold whenever its regex can match
# (pinned by a property test against the unconditional scans).
# The built-in shapes all start with a case-sensitive literal:
_SHAPE_LITERALS = (
    "-----BEGIN", "sk-", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "xox", "eyJ", "Bearer ",
)  # fmt: skip
# Every secret word contains one of these; checked on ASCII text only, where lower() is exact
# (IGNORECASE also folds a few non-ASCII letters, such as the long s, onto these).
_WORD_STEMS = ("password", "passwd", "secret", "token", "api", "access", "authorization", "private")


def _may_name_a_secret(text: str) -> bool:
    if text.isascii():
        lowered = text.lower()
        if not any(stem in lowered for stem in _WORD_STEMS):
            return False
    return _SECRET_HINT.search(text) is not None


def _tagged(value: str) -> bool:
    return value.startswith(_TAGS)


class SecretScanner:
    """Finds and replaces secrets in text and in JSON values. Pure; configuration in, no I/O.

    ``extra_patterns`` are regular expressions (strings) for deployment-specific shapes; the
    whole match of each is replaced. ``key`` keys the hash in the tag (bytes; may be empty).
    """

    def __init__(self, extra_patterns: Sequence[str] = (), *, key: bytes = b"") -> None:
        shapes = [p for _, p in _TOKEN_SHAPES] + [str(p) for p in extra_patterns]
        for pattern in extra_patterns:
            if re.compile(pattern).search(""):
                raise ValueError(f"secret pattern {pattern!r} matches the empty string")
        self._shapes = re.compile("|".join(f"(?:{p})" for p in shapes))
        # Deployment patterns have no known literal, so with any of them every text is scanned.
        self._literals = () if extra_patterns else _SHAPE_LITERALS
        self._key = key

    def tag(self, secret: str) -> str:
        digest = hmac.new(self._key, secret.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"[secret:hmac-sha256:{digest[:12]}]"

    def redact_text(self, text: str) -> str:
        """``text`` with every secret replaced by its tag; the same object if nothing matched."""
        out = text
        if not self._literals or any(lit in text for lit in self._literals):
            out = self._shapes.sub(self._replace_shape, out)
        if _may_name_a_secret(out):
            out = _KEY_VALUE.sub(self._replace_pair, out)
        return text if out == text else out

    def _replace_shape(self, match: re.Match[str]) -> str:
        found = match.group(0)
        return found if not found or _tagged(found) else self.tag(found)

    def _replace_pair(self, match: re.Match[str]) -> str:
        value = match.group("qv") if match.group("q") else match.group("v")
        if _tagged(value) or _OUR_HASH.fullmatch(value) or value.lower() in _SCHEMES:
            # Already a tag, one of our hashes, or the scheme word before a redacted token.
            return match.group(0)
        start, end = match.span("qv" if match.group("q") else "v")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + self.tag(value) + whole[end - offset :]

    def redact(self, value: Any) -> Any:
        """Every string in a JSON value redacted; a string under a secret-like key is replaced
        whole. Containers are rebuilt only where something changed."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, list):
            items = [self.redact(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if isinstance(value, tuple):
            return tuple(self.redact(list(value)))
        if isinstance(value, dict):
            changed = False
            out: dict[Any, Any] = {}
            for k, v in value.items():
                new_k = self.redact_text(k) if isinstance(k, str) else k
                new_v = self._under_key(k, v)
                changed = changed or new_k is not k or new_v is not v
                out[new_k] = new_v
            return out if changed else value
        return value

    def _under_key(self, key: Any, value: Any) -> Any:
        if (
            isinstance(key, str)
            and isinstance(value, str)
            and value
            and _SECRET_KEY.fullmatch(key)
            and not _tagged(value)
            and not _OUR_HASH.fullmatch(value)
        ):
            return self.tag(value)
        return self.redact(value)


_active = SecretScanner()


def configure(extra_patterns: Sequence[str] = (), *, key: bytes = b"") -> SecretScanner:
    """Install the process-wide scanner (called once at start-up from settings)."""
    global _active
    _active = SecretScanner(extra_patterns, key=key)
    return _active


def active_scanner() -> SecretScanner:
    return _active


def redact_secrets(value: Any) -> Any:
    """``value`` with every secret the configured scanner finds replaced by its tag."""
    return _active.redact(value)


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    secrets = [s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET_LENGTH]
    if not secrets:
        return value
    return _scrub(value, secrets)


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    return value


def redact_fields(arguments: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    hidden = set(fields)
    return {k: (MASK if k in hidden else v) for k, v in arguments.items()}


class ValueEraser:
    """Replaces given values wherever they stand in text or JSON (issue 9 item 11: a user's
    erased preference values, in the records of their runs).

    1. A value of 4 characters or more is replaced wherever it occurs inside a string
       (case-sensitive, exact): "answer in Klingon please" loses "Klingon". A shorter value
       ("en", "fr") only where it stands as a word of its own, or "en" would be cut out of
       "token" and "when".
    2. Each occurrence becomes ``[erased:hmac-sha256:<16 hex>]``, keyed with ``key``. The caller
       passes a fresh random key per erasure and keeps it nowhere: the same value gets the same
       tag within one erasure (a reader sees where it stood), and nobody can test guesses
       against a tag afterwards, which a plain sha256 of "Klingon" would allow.
    3. Existing tags (``[erased:…]``, ``[secret:…]``) are left as they are; dict keys are
       structure, not data, and are kept.
    """

    _MIN_SUBSTRING = 4

    def __init__(self, values: Iterable[str], *, key: bytes) -> None:
        self._key = key
        wanted = sorted({v for v in values if isinstance(v, str) and v}, key=len, reverse=True)
        parts = [r"\[(?:erased|secret):[^\]\s]{1,80}\]"]
        for v in wanted:
            if len(v) >= self._MIN_SUBSTRING:
                parts.append(re.escape(v))
            else:
                parts.append(rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])")
        self._pattern = re.compile("|".join(parts)) if wanted else None
        self.replaced = 0

    def tag(self, value: str) -> str:
        digest = hmac.new(self._key, value.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"[erased:hmac-sha256:{digest[:16]}]"

    def _replace(self, match: re.Match[str]) -> str:
        found = match.group(0)
        if _tagged(found):
            return found
        self.replaced += 1
        return self.tag(found)

    def erase(self, value: Any) -> Any:
        """``value`` with every occurrence replaced; the same object when nothing matched."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            out = self._pattern.sub(self._replace, value)
            return value if out == value else out
        if isinstance(value, list):
            items = [self.erase(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if isinstance(value, dict):
            out_d = {k: self.erase(v) for k, v in value.items()}
            return value if all(out_d[k] is value[k] for k in value) else out_d
        return value


def shown_arguments(arguments: Any) -> Any:
    """A proposal's arguments as a person deciding it is shown them: every secret the scanner
    finds is replaced by its tag (they were tagged when stored; a pattern configured since, or a
    row from before the scanner, is masked here too). Fields a contract keeps out of the logs
    (``redacted_fields``, e.g. a preference's value) are shown: they are what is being approved,
    and an operator who cannot see them would approve blind."""
    return redact_secrets(arguments)
