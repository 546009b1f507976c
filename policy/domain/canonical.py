"""Canonical JSON and every hash the system stores (SPEC §3, STYLE habit 12).

The scheme is versioned: ``HASH_SCHEME`` is stored beside each persisted hash so that a future
change of the scheme can never silently re-interpret an old hash. Golden vectors in
``tests/domain/test_canonical.py`` pin the output.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from policy.domain.errors import CanonicalError

HASH_SCHEME = "c1"

_MAX_DEPTH = 64


def _check(value: Any, depth: int) -> None:
    # json.dumps would accept tuples, int-like keys and NaN; a proposal hash must not depend on
    # which of several Python spellings produced the same JSON, so we accept exactly JSON.
    if depth > _MAX_DEPTH:
        raise CanonicalError("value nests too deeply", code="VALUE_TOO_DEEP")
    if isinstance(value, str):
        _check_text(value)
        return
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise CanonicalError("NaN and Infinity are not JSON", code="NON_FINITE_NUMBER")
        return
    if isinstance(value, list):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError("object keys must be strings", code="NON_STRING_KEY")
            _check_text(key)
            _check(item, depth + 1)
        return
    raise CanonicalError(f"{type(value).__name__} is not a JSON value", code="NOT_JSON_VALUE")


def _check_text(text: str) -> None:
    # A lone surrogate ("\ud800") is a Python str but not Unicode text: it has no UTF-8 form.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("string is not valid Unicode", code="INVALID_UNICODE") from None


def canonical(value: Any) -> str:
    """Return the canonical JSON text of ``value``.

    Keys sorted at every depth (by code point), no insignificant whitespace, unicode kept as
    UTF-8 rather than ``\\u`` escapes, NaN/Infinity rejected. The same JSON value always gives
    the same text, whatever the key order or escaping it arrived with.
    """
    _check(value, 0)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """Hash of any JSON value (observation content, tool output, artifact bodies)."""
    return sha256_hex(canonical(value))


def arguments_hash(arguments: Any) -> str:
    return content_hash(arguments)


def proposal_hash(tool_name: str, tool_version: str, arguments: Any) -> str:
    """sha256(canonical({toolName, toolVersion, arguments})) — also the loop fingerprint."""
    return content_hash(
        {"toolName": tool_name, "toolVersion": tool_version, "arguments": arguments}
    )


def proposal_hash_from_canonical(tool_name: str, tool_version: str, arguments_text: str) -> str:
    """``proposal_hash`` from already-canonical arguments, without canonicalising them again.

    Sorted keys put "arguments" before "toolName" before "toolVersion", so the wrapper's
    canonical text is exactly this concatenation (pinned by a golden test against
    ``proposal_hash``)."""
    name = json.dumps(tool_name, ensure_ascii=False)
    version = json.dumps(tool_version, ensure_ascii=False)
    return sha256_hex(f'{{"arguments":{arguments_text},"toolName":{name},"toolVersion":{version}}}')


def per_run_confirmation_hash(tool_name: str, tool_version: str) -> str:
    """What a per-run confirmation is bound to: the tool identity, for the whole run."""
    return content_hash({"toolName": tool_name, "toolVersion": tool_version, "scope": "per-run"})


def idempotency_token(run_id: str, proposal_id: str, tool_version: str, args_hash: str) -> str:
    """sha256(runId:proposalId:toolVersion:argumentsHash) — stable across retries and recovery."""
    return sha256_hex(f"{run_id}:{proposal_id}:{tool_version}:{args_hash}")
