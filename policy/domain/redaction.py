"""Secrets never reach a proposal, observation, trace event, log line or frame.

``scrub`` replaces every occurrence of a known secret value in any JSON value; ``redact_fields``
masks the input fields a contract names as redacted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[REDACTED]"
_MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary text; refuse them at configuration


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
