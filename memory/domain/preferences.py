"""Long-term memory key policy (seed §9): a whitelist of keys, each with its value schema.

The whitelist is configuration, but configuration can never admit an instruction-like key: a
preference is data handed to the planner, never text that steers it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Keys that would let stored text act as an instruction. Refused whatever the configuration says.
_FORBIDDEN_KEY = re.compile(r"(system|instruction|prompt|policy|role|approve|permission|grant)")
_KEY_SHAPE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_HINT = 200


class KeyPolicyError(ValueError):
    """The configured whitelist is unsafe or malformed (raised at start-up, not at run time)."""


@dataclass(frozen=True)
class KeyPolicy:
    key: str
    max_length: int = 40
    allowed: tuple[str, ...] = ()
    pattern: str | None = None
    # What a person may type, in words ("a language code such as en or de-CH"): shown beside
    # the field and in a refusal. A regular expression is never shown to a person.
    hint: str | None = None
    retention_days: int = 365
    # What a value may be read for: handed to the planner, shown to its owner.
    purposes: tuple[str, ...] = ("planner", "display")

    def __post_init__(self) -> None:
        if not _KEY_SHAPE.match(self.key):
            raise KeyPolicyError(f"memory key {self.key!r} is not a lower_snake_case name")
        if _FORBIDDEN_KEY.search(self.key):
            raise KeyPolicyError(f"memory key {self.key!r} looks like an instruction; refused")
        if not 1 <= self.max_length <= 512:
            raise KeyPolicyError(f"memory key {self.key!r}: max_length must be 1..512")
        if self.retention_days < 1:
            raise KeyPolicyError(f"memory key {self.key!r}: a retention period is required")
        if self.hint is not None and not (
            0 < len(self.hint) <= MAX_HINT and self.hint.isprintable()
        ):
            raise KeyPolicyError(f"memory key {self.key!r}: a hint is one line of 1..{MAX_HINT}")

    def describe(self) -> str | None:
        """What the key takes, in words, or None when only a regular expression says it."""
        if self.hint:
            return self.hint
        if self.allowed:
            return "one of: " + ", ".join(self.allowed)
        if self.pattern:
            return None
        return f"text of up to {self.max_length} characters"

    def violation(self, value: Any) -> tuple[str, str] | None:
        """The code and a sentence a person understands (issue 21 item 14: the page showed
        the key's regular expression); neither repeats the value, which may be anything."""
        if not isinstance(value, str) or not value:
            return ("MEMORY_VALUE_INVALID", self._takes())
        if len(value) > self.max_length:
            return (
                "MEMORY_VALUE_TOO_LONG",
                f"{self.key} takes at most {self.max_length} characters.",
            )
        if self.allowed and value not in self.allowed:
            return ("MEMORY_VALUE_INVALID", self._takes())
        if self.pattern and not re.fullmatch(self.pattern, value):
            return ("MEMORY_VALUE_INVALID", self._takes())
        return None

    def _takes(self) -> str:
        described = self.describe()
        if described is None:
            return f"{self.key} does not take this value."
        return f"{self.key} takes {described}."


DEFAULT_KEYS: tuple[Mapping[str, Any], ...] = (
    {
        "key": "answer_language",
        "max_length": 40,
        "pattern": r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*",
        "hint": "a language code such as en, de or pt-BR",
    },
    {"key": "citation_style", "max_length": 40, "allowed": ("inline", "footnote", "endnote")},
)


def build_policies(config: Iterable[Mapping[str, Any]]) -> dict[str, KeyPolicy]:
    policies: dict[str, KeyPolicy] = {}
    for item in config:
        item = dict(item)
        for name in ("allowed", "purposes"):
            if name in item:
                item[name] = tuple(item[name])
        policy = KeyPolicy(**item)
        if policy.key in policies:
            raise KeyPolicyError(f"memory key {policy.key!r} configured twice")
        policies[policy.key] = policy
    return policies


def check_preference(
    policies: Mapping[str, KeyPolicy], key: Any, value: Any
) -> tuple[str, str] | None:
    """The semantic check of a memory write: whitelisted key, then the key's value schema."""
    policy = policies.get(key) if isinstance(key, str) else None
    if policy is None:
        return ("MEMORY_KEY_NOT_ALLOWED", "this key is not on the memory whitelist")
    return policy.violation(value)


class ChangeStatus(enum.StrEnum):
    """A proposed preference change: pending a confirmation, then applied, refused as a
    conflict (the value moved meanwhile), expired or cancelled. Stored as the string value."""

    PENDING = "pending"
    APPLIED = "applied"
    CONFLICT = "conflict"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


def change_payload(
    *, subject: str, key: str, value: str, expected_version: int | None
) -> dict[str, Any]:
    """Exactly what a preference change's hash covers (the confirmation page shows this text)."""
    return {"subject": subject, "key": key, "value": value, "expectedVersion": expected_version}
