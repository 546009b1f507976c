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
from dataclasses import dataclass
from typing import Any

from policy.domain.secrets.secret_rules import LONG_RUN_LENGTH as _RUN
from policy.domain.secrets.secret_rules import RULES, Rule

MASK = "[REDACTED]"
_MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary text; refuse them at configuration

# The key, beside a recorded proposal's masked arguments, of each tag and the length of the
# secret it hides (``shown_proposal``; the confirmation card says "masked secret, N characters").
MASKED_SECRETS = "masked_secrets"

SECRET_TAG = "[secret:"  # noqa: S105 - the tag's prefix, not a password
ERASED_TAG = "[erased:"
_TAGS = (SECRET_TAG, ERASED_TAG)

# The words that make a key secret-like; a key may carry a prefix (client_secret, db_password,
# x-api-key) but must end with the word: ``max_tokens`` and ``token_count`` are not secrets.
# Ours, joined with detect-secrets' KeywordDetector list (plugins/keyword.py; see secret_rules).
_SECRET_WORD = (
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"  # noqa: S105
    r"authorization|priv(?:ate)?[_-]?key|auth[_-]?key|service[_-]?key|account[_-]?key|"
    r"db[_-]?key|database[_-]?key|client[_-]?key|db[_-]?pass|database[_-]?pass|key[_-]?pass|"
    r"contrase(?:ñ|n)a)"
)
_SECRET_KEY = re.compile(rf"[\w.-]*?{_SECRET_WORD}", re.IGNORECASE)
# One linear pass that rules the key=value search out for most text (it tries every word).
_SECRET_HINT = re.compile(_SECRET_WORD, re.IGNORECASE)

# The system stores sha256 hex digests everywhere (proposal hashes, idempotency tokens): a
# 64-hex value under a key such as ``idempotency_token`` is a hash we made, not a secret.
_OUR_HASH = re.compile(r"[0-9a-f]{64}")

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
# instead of regex scans at every position; each must hold whenever its regex can match
# (pinned by a property test against the unconditional scans). A rule is tried only on text
# holding one of its hints (secret_rules); its case-insensitive hints, and the stems one of
# which every secret word contains, are checked on ASCII text only, where lower() is exact
# (IGNORECASE also folds a few non-ASCII letters, such as the long s and the Kelvin sign, onto
# ASCII ones): on other text those rules are always tried.
_WORD_STEMS = ("pass", "pwd", "secret", "token", "api", "key", "authorization", "contrase")


def _may_name_a_secret(text: str, lowered: str | None) -> bool:
    if lowered is not None and not any(stem in lowered for stem in _WORD_STEMS):
        return False
    return _SECRET_HINT.search(text) is not None


def _tagged(value: str) -> bool:
    return value.startswith(_TAGS)


# Where a scan records what it masked: tag -> the length (characters) of the secret it hides.
Found = dict[str, int]


# Scans of one text at most: each pass that changes it tags at least one more secret.
_PASSES = 4


class _Shapes:
    """The rules of one scanner, and for each text the alternation of only those it may match
    (one alternation of every rule tries each at every position: a hundred times slower on
    plain prose than the few a text's hints call for)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._all = _Hints(rules, range(len(rules)))
        # Text without a long run of token characters (most prose) is checked for the few
        # rules that need none: a handful of substring tests instead of sixty.
        self._short = _Hints(rules, [i for i, r in enumerate(rules) if r.short])
        self._compiled: dict[frozenset[int], re.Pattern[str]] = {}
        self.pattern(frozenset(range(len(rules))))  # a bad pattern fails here, at configuration

    def for_text(self, text: str, lowered: str | None) -> re.Pattern[str] | None:
        """The alternation of the rules ``text`` may match (``lowered``: ``text.lower()`` when
        ``text`` is ASCII, else None), or None when it may match none."""
        # A run of 11 token characters lies within one whitespace-separated word: measuring the
        # words (C speed) is ten times cheaper than a regex search for the run.
        long_run = len(text) >= _RUN and max(map(len, text.split()), default=0) >= _RUN
        hints = self._all if long_run else self._short
        active = hints.rules_for(text, lowered)
        return self.pattern(active) if active else None

    def pattern(self, indices: frozenset[int]) -> re.Pattern[str]:
        """Each rule in a group ``r<i>``; its group ``s`` (the secret inside its match) becomes
        ``s<i>``. Cached: texts call for few distinct sets of rules."""
        found = self._compiled.get(indices)
        if found is None:
            parts = [
                f"(?P<r{i}>{self.rules[i].pattern.replace('(?P<s>', f'(?P<s{i}>')})"
                for i in sorted(indices)
            ]
            found = re.compile("|".join(parts))
            if len(self._compiled) < _MAX_COMPILED:
                self._compiled[indices] = found
        return found


_MAX_COMPILED = 1024


class _Hints:
    """Which of ``indices`` (rules) a text may match, by their hints."""

    def __init__(self, rules: Sequence[Rule], indices: Iterable[int]) -> None:
        self._always: set[int] = set()
        self._folded: set[int] = set()
        self._by_hint: dict[str, set[int]] = {}
        self._by_ihint: dict[str, set[int]] = {}
        for i in indices:
            rule = rules[i]
            if not rule.hints and not rule.ihints:
                self._always.add(i)
            if rule.ihints:
                self._folded.add(i)
            for hint in rule.hints:
                self._by_hint.setdefault(hint, set()).add(i)
            for hint in rule.ihints:
                self._by_ihint.setdefault(hint, set()).add(i)
        self._hints = tuple(self._by_hint)
        self._ihints = tuple(self._by_ihint)

    def rules_for(self, text: str, lowered: str | None) -> frozenset[int]:
        present = [h for h in self._hints if h in text]
        folded = [h for h in self._ihints if h in lowered] if lowered is not None else None
        if not present and not folded and folded is not None and not self._always:
            return _NONE  # the common case: no hint at all
        active = set(self._always)
        for hint in present:
            active |= self._by_hint[hint]
        for hint in folded or ():
            active |= self._by_ihint[hint]
        if folded is None:
            active |= self._folded
        return frozenset(active)


_NONE: frozenset[int] = frozenset()


class SecretScanner:
    """Finds and replaces secrets in text and in JSON values. Pure; configuration in, no I/O.

    ``extra_patterns`` are regular expressions (strings) for deployment-specific shapes; the
    whole match of each is replaced. ``key`` keys the hash in the tag (bytes; may be empty).
    """

    def __init__(self, extra_patterns: Sequence[str] = (), *, key: bytes = b"") -> None:
        for pattern in extra_patterns:
            if re.compile(pattern).search(""):
                raise ValueError(f"secret pattern {pattern!r} matches the empty string")
        # Deployment patterns have no known hint: they are tried on every text.
        extra = tuple(
            Rule(f"deployment-{i}", str(p), short=True) for i, p in enumerate(extra_patterns)
        )
        self._shapes = _Shapes(RULES + extra)
        self._key = key

    def tag(self, secret: str) -> str:
        digest = hmac.new(self._key, secret.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"[secret:hmac-sha256:{digest[:12]}]"

    def _tag(self, secret: str, found: Found | None) -> str:
        tag = self.tag(secret)
        if found is not None:
            found[tag] = len(secret)
        return tag

    def redact_text(self, text: str, found: Found | None = None) -> str:
        """``text`` with every secret replaced by its tag; the same object if nothing matched.
        ``found``: filled with each tag put in and the length of the secret it replaced.

        Scanned again until nothing more matches (at most ``_PASSES`` times): a tag can uncover
        a secret its first match hid, as in ``AKIA…sk-0123…``, where the key's tag leaves
        ``]sk-0123…`` standing at a word boundary (found by hypothesis: redacting the result
        again changed it). So what comes out is redacted for good."""
        out = self._redact_once(text, found)
        for _ in range(_PASSES - 1):
            if out is text:
                break
            again = self._redact_once(out, found)
            if again is out:
                break
            out = again
        return out

    def _redact_once(self, text: str, found: Found | None) -> str:
        out = text
        lowered = text.lower() if text.isascii() else None
        shapes = self._shapes.for_text(text, lowered)
        if shapes is not None:
            out = shapes.sub(lambda m: self._replace_shape(m, found), out)
        if _may_name_a_secret(out, lowered if out is text else None):
            out = _KEY_VALUE.sub(lambda m: self._replace_pair(m, found), out)
        return text if out == text else out

    def _replace_shape(self, match: re.Match[str], found: Found | None = None) -> str:
        whole = match.group(0)
        # The rule's own group (r<i>) closes last; its secret group, if any, is s<i>.
        secret_group = f"s{str(match.lastgroup)[1:]}"
        if secret_group in match.re.groupindex and match.group(secret_group) is not None:
            start, end = match.span(secret_group)
        else:
            start, end = match.span()
        secret = whole[start - match.start() : end - match.start()]
        if not secret or _tagged(secret):
            return whole
        offset = match.start()
        return whole[: start - offset] + self._tag(secret, found) + whole[end - offset :]

    def _replace_pair(self, match: re.Match[str], found: Found | None = None) -> str:
        value = match.group("qv") if match.group("q") else match.group("v")
        if _tagged(value) or _OUR_HASH.fullmatch(value) or value.lower() in _SCHEMES:
            # Already a tag, one of our hashes, or the scheme word before a redacted token.
            return match.group(0)
        start, end = match.span("qv" if match.group("q") else "v")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + self._tag(value, found) + whole[end - offset :]

    def redact(self, value: Any, found: Found | None = None) -> Any:
        """Every string in a JSON value redacted; a string under a secret-like key is replaced
        whole. Containers are rebuilt only where something changed."""
        if isinstance(value, str):
            return self.redact_text(value, found)
        if isinstance(value, list):
            items = [self.redact(v, found) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if isinstance(value, tuple):
            return tuple(self.redact(list(value), found))
        if isinstance(value, dict):
            changed = False
            out: dict[Any, Any] = {}
            for k, v in value.items():
                new_k = self.redact_text(k, found) if isinstance(k, str) else k
                new_v = self._under_key(k, v, found)
                changed = changed or new_k is not k or new_v is not v
                out[new_k] = new_v
            return out if changed else value
        return value

    def _under_key(self, key: Any, value: Any, found: Found | None) -> Any:
        if (
            isinstance(key, str)
            and isinstance(value, str)
            and value
            and _SECRET_KEY.fullmatch(key)
            and not _tagged(value)
            and not _OUR_HASH.fullmatch(value)
        ):
            return self._tag(value, found)
        return self.redact(value, found)

    def masked(self, value: Any) -> Masked:
        """``value`` as it may be recorded and shown, with what was masked in it."""
        found: Found = {}
        return Masked(self.redact(value, found), found)


@dataclass(frozen=True)
class Masked:
    """A value with its secrets replaced by tags (``value``), and for each tag the length of
    the secret it stands for (``secrets``): what a person deciding on the value is told."""

    value: Any
    secrets: Mapping[str, int]


_active = SecretScanner()


def configure(extra_patterns: Sequence[str] = (), *, key: bytes = b"") -> SecretScanner:
    """Install the process-wide scanner (called once at start-up from settings)."""
    global _active
    _active = SecretScanner(extra_patterns, key=key)
    return _active


def active_scanner() -> SecretScanner:
    """The process-wide scanner ``configure`` installed: a tag depends on its key, so a test that
    checks what a person is shown asks it for the tag it expects."""
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


def shown_proposal(proposal: Mapping[str, Any]) -> dict[str, Any]:
    """A proposal (``tool_name``, ``tool_version``, ``arguments``, …) as it may be recorded and
    shown: every secret the scanner finds is masked, and ``MASKED_SECRETS`` names each tag with
    the length of the secret it hides, so a person deciding on it is told what is masked."""
    masked = _active.masked(dict(proposal))
    shown: dict[str, Any] = dict(masked.value)
    if masked.secrets:
        shown[MASKED_SECRETS] = dict(masked.secrets)
    return shown


def shown_arguments(arguments: Any) -> Any:
    """A proposal's arguments as a person deciding it is shown them: every secret the scanner
    finds is replaced by its tag (they were tagged when stored; a pattern configured since, or a
    row from before the scanner, is masked here too). Fields a contract keeps out of the logs
    (``redacted_fields``, e.g. a preference's value) are shown: they are what is being approved,
    and an operator who cannot see them would approve blind."""
    return redact_secrets(arguments)
