"""Canonical JSON and every hash the system stores (SPEC §3, STYLE habit 12).

The scheme is versioned: ``HASH_SCHEME`` is stored beside each persisted hash so that a future
change of the scheme can never silently re-interpret an old hash. Golden vectors in
``tests/domain/policy_domain/test_canonical.py`` pin the output.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import rfc8785

from policy.domain.errors import CanonicalError

HASH_SCHEME = "c2"
"""The scheme of every hash written now. ``c1`` stays computable so stored c1 rows can be read."""

SCHEMES = ("c1", "c2")

_MAX_DEPTH = 64
# RFC 8785 §3.2.2.3 / I-JSON (RFC 7493): a JSON number is an IEEE 754 double. Python parses
# integers exactly, so c2 accepts an integer beyond ±(2**53 - 1) only when it names one double
# without ambiguity: it equals that double, or it is that double's own RFC 8785 spelling (what
# a JSON column hands back for a large float). Any other (2**53 + 1) would have to be rounded,
# and two different Python ints would share one hash (and one confirmation): refused.
_SAFE_INT = 2**53 - 1


def _check(value: Any, depth: int, scheme: str) -> bool:
    """Refuse what is not exactly JSON; True when the fast ``json.dumps`` form is not JCS.

    json.dumps would accept tuples, int-like keys and NaN; a proposal hash must not depend on
    which of several Python spellings produced the same JSON, so we accept exactly JSON. The
    return value says whether the value holds a float (JCS spells numbers as ECMAScript does)
    or a key outside the Basic Multilingual Plane (JCS sorts keys by UTF-16 code units, which
    differs from code point order only there).
    """
    if depth > _MAX_DEPTH:
        raise CanonicalError("value nests too deeply", code="VALUE_TOO_DEEP")
    if isinstance(value, str):
        _check_text(value)
        return False
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, int):
        if scheme == "c1" or -_SAFE_INT <= value <= _SAFE_INT:
            return False
        _as_double(value)
        return True
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise CanonicalError("NaN and Infinity are not JSON", code="NON_FINITE_NUMBER")
        return True
    if isinstance(value, list):
        slow = False
        for item in value:
            slow = _check(item, depth + 1, scheme) or slow
        return slow
    if isinstance(value, dict):
        slow = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError("object keys must be strings", code="NON_STRING_KEY")
            _check_text(key)
            slow = _check(item, depth + 1, scheme) or slow or _astral(key)
        return slow
    raise CanonicalError(f"{type(value).__name__} is not a JSON value", code="NOT_JSON_VALUE")


def _as_double(value: int) -> float:
    try:
        double = float(value)
    except OverflowError:
        double = math.inf
    if math.isinf(double) or (double != value and str(value) != rfc8785.dumps(double).decode()):
        raise CanonicalError(
            "integer outside the exact range of a JSON number", code="NUMBER_OUT_OF_RANGE"
        )
    return double


def _as_jcs_input(value: Any) -> Any:
    # rfc8785 refuses every int beyond 2**53; the ones _check let through are doubles.
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _SAFE_INT:
        return _as_double(value)
    if isinstance(value, list):
        return [_as_jcs_input(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_jcs_input(item) for key, item in value.items()}
    return value


def _astral(text: str) -> bool:
    return not text.isascii() and any(ord(ch) > 0xFFFF for ch in text)


def _check_text(text: str) -> None:
    # A lone surrogate ("\ud800") is a Python str but not Unicode text: it has no UTF-8 form.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("string is not valid Unicode", code="INVALID_UNICODE") from None


def canonical(value: Any, scheme: str = HASH_SCHEME) -> str:
    """Return the canonical JSON text of ``value`` under ``scheme`` (default: the current one).

    ``c2`` is RFC 8785 (JCS): keys sorted by UTF-16 code units at every depth, numbers spelled
    as ECMAScript does (``1.0`` is ``1``, ``-0.0`` is ``0``, ``4.50`` is ``4.5``, ``1e-7``),
    strings as UTF-8 with only the mandatory escapes. ``c1`` (rows written before c2) sorted by
    code point and kept Python's float spelling, so ``1`` and ``1.0`` hashed apart. Both reject
    NaN/Infinity, lone surrogates, non-string keys and nesting deeper than 64.
    """
    if scheme == "c1":
        _check(value, 0, scheme)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if scheme != "c2":
        raise CanonicalError(f"unknown hash scheme {scheme!r}", code="UNKNOWN_HASH_SCHEME")
    if not _check(value, 0, scheme):
        # No float and no astral key: json.dumps (C speed) writes exactly the JCS text, since
        # its string escapes are JCS's and code point order equals UTF-16 order on the BMP.
        # A property test pins this against the rfc8785 package.
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return rfc8785.dumps(_as_jcs_input(value)).decode("utf-8")


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any, scheme: str = HASH_SCHEME) -> str:
    """Hash of any JSON value (observation content, tool output, artifact bodies)."""
    return sha256_hex(canonical(value, scheme))


def arguments_hash(arguments: Any, scheme: str = HASH_SCHEME) -> str:
    return content_hash(arguments, scheme)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values, by JSON type at every depth (never Python ``==``).

    ``True`` is not ``1`` (not even inside a list or an object); ``1`` and ``1.0`` are one JSON
    number (RFC 8785, JSON Schema); key order never matters. Comparing the c2 canonical texts
    says exactly that. A value that is not JSON (NaN, a tuple) equals nothing.
    """
    try:
        return canonical(a, "c2") == canonical(b, "c2")
    except CanonicalError:
        return False


def json_normal(value: Any) -> Any:
    """The value as the tool should receive it: an integral float within the exact integer
    range becomes an int (``2.0`` passes ``"type": "integer"``, and ``items[:2.0]`` fails), and
    ``-0.0`` becomes ``0``. Its c2 text is unchanged. Returns ``value`` itself when nothing
    needs to change, so the common case copies nothing."""
    if isinstance(value, float):
        if value.is_integer() and -_SAFE_INT <= value <= _SAFE_INT:
            return int(value)
        return value
    if isinstance(value, list):
        items = [json_normal(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = {k: json_normal(v) for k, v in value.items()}
        return value if all(pairs[k] is v for k, v in value.items()) else pairs
    return value


def proposal_hash(
    tool_name: str, tool_version: str, arguments: Any, scheme: str = HASH_SCHEME
) -> str:
    """sha256(canonical({toolName, toolVersion, arguments})) — also the loop fingerprint."""
    return content_hash(
        {"toolName": tool_name, "toolVersion": tool_version, "arguments": arguments}, scheme
    )


def proposal_hash_from_canonical(tool_name: str, tool_version: str, arguments_text: str) -> str:
    """``proposal_hash`` (current scheme) from arguments already canonical in that scheme.

    The wrapper's keys are ASCII, so code point order and RFC 8785's UTF-16 order agree:
    "arguments" < "toolName" < "toolVersion" in both c1 and c2; strings are written with the
    same escapes by json.dumps and by JCS. So the wrapper's canonical text is exactly this
    concatenation (pinned by a golden and a property test against ``proposal_hash``)."""
    _check_text(tool_name)
    _check_text(tool_version)
    name = json.dumps(tool_name, ensure_ascii=False)
    version = json.dumps(tool_version, ensure_ascii=False)
    return sha256_hex(f'{{"arguments":{arguments_text},"toolName":{name},"toolVersion":{version}}}')


def per_run_confirmation_hash(tool_name: str, tool_version: str, scheme: str = HASH_SCHEME) -> str:
    """What a per-run confirmation is bound to: the tool identity, for the whole run."""
    return content_hash(
        {"toolName": tool_name, "toolVersion": tool_version, "scope": "per-run"}, scheme
    )


def idempotency_token(run_id: str, proposal_id: str, tool_version: str, args_hash: str) -> str:
    """sha256(runId:proposalId:toolVersion:argumentsHash) — stable across retries and recovery."""
    return sha256_hex(f"{run_id}:{proposal_id}:{tool_version}:{args_hash}")


def pretty_json(value: Any) -> str:
    """Indented JSON for reading (keys sorted, non-ASCII kept); never hashed."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


MCP_PIN_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def mcp_tool_pin(listing: Any, scheme: str = HASH_SCHEME) -> str:
    """What an operator accepts of an MCP tool (``policy.domain.mcp_tools.mcp``): the hash of the
    fields of its ``tools/list`` entry that change what the tool is or how it is described to a
    planner. An absent field and ``null`` pin alike (servers differ in which they send)."""
    fields = listing if isinstance(listing, dict) else {}
    return content_hash(
        {"mcpTool": {k: fields[k] for k in MCP_PIN_FIELDS if fields.get(k) is not None}}, scheme
    )


# -- the trace's hash chain (issue 23 item 5) -------------------------------------------------

TRACE_SCHEME = "t1"
"""The chain scheme stored beside each trace event's digests (``runs.TraceEvent.hash_scheme``).

``t1``: an event's content digest is the c2 hash of ``{run, event, proposal_id, details}``; its
chain digest is the c2 hash of ``{content, previous}``, ``previous`` being the chain digest of
the event before it (``""`` for the first). The sequence number is not in the content: an
event's place is what the chain says, so a row moved to another place reads as moved, not as
edited. An erase's seal is the c2 hash of ``{erased: [[sequence, erased digest], ...]}``."""

TRACE_SCHEMES = ("t1",)


def _trace_scheme(scheme: str) -> str:
    if scheme not in TRACE_SCHEMES:
        raise CanonicalError(f"unknown trace scheme {scheme!r}", code="UNKNOWN_HASH_SCHEME")
    return "c2"


def trace_event_digest(
    run_id: str, event: str, proposal_id: str | None, details: Any, scheme: str = TRACE_SCHEME
) -> str:
    """The content digest of one trace event: what it says, not where it stands."""
    content = {"run": run_id, "event": event, "proposal_id": proposal_id, "details": details}
    return content_hash(content, _trace_scheme(scheme))


_HEX = re.compile(r"[0-9a-f]*")


def trace_link(previous: str, content_digest: str, scheme: str = TRACE_SCHEME) -> str:
    """The chain digest of an event: its content digest bound to the chain digest before it.

    Two hex strings (what the chain stores) are their own canonical JSON text, so the object's
    text is written directly (pinned against ``content_hash`` by a golden and a property test);
    anything else (a stored value someone rewrote) goes the long way."""
    c2 = _trace_scheme(scheme)
    if _HEX.fullmatch(previous) and _HEX.fullmatch(content_digest):
        return sha256_hex(f'{{"content":"{content_digest}","previous":"{previous}"}}')
    return content_hash({"content": content_digest, "previous": previous}, c2)


def trace_erase_seal(erased: Any, scheme: str = TRACE_SCHEME) -> str:
    """What an erase commits to: each rewritten event's sequence and the digest of its content
    as the erase left it, in sequence order (``[[sequence, digest], ...]``)."""
    return content_hash({"erased": [[s, d] for s, d in erased]}, _trace_scheme(scheme))
