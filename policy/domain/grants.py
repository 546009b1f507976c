"""Capability grants (seed §5): trusted, bound to a run, a resource scope, an expiry step, a call
count and optional argument constraints. A capability named inside a proposal has no effect:
``authorize`` reads grants only from the trusted list it is given.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

import jsonschema_rs
from pydantic import BaseModel, ConfigDict, Field, model_validator

from policy.domain.canonical import json_equal
from policy.domain.contracts import scope_covers

_KINDS = (
    "equals",
    "one_of",
    "prefix",
    "maximum",
    "absent_or",
    "subset_of",
    "url_host_in",
    "pattern",
)
CONSTRAINT_KINDS = _KINDS  # what a form offers (runs/views/grant_rows.py)
# ``pattern`` bounds: a longer pattern is refused when configured, a longer value never matches.
MAX_PATTERN_LENGTH = 256
MAX_PATTERN_INPUT = 4096
# Rust's ``regex`` crate (through jsonschema_rs): finite automata, matching time linear in the
# input, no backreferences or lookaround. The size limits bound what one pattern may compile to
# (``a{1000}{1000}`` is refused rather than built).
_LINEAR = jsonschema_rs.RegexOptions(size_limit=1 << 20, dfa_size_limit=1 << 20)


class PatternInvalid(ValueError):
    pass


@functools.lru_cache(maxsize=512)
def compiled_pattern(pattern: str) -> jsonschema_rs.Validator:
    """A full-match validator for ``pattern`` (ECMA-262 syntax, linear-time engine).

    The pattern must compile *alone* before it is wrapped in ``^(?:…)$``: otherwise ``a)|(b``
    would become ``^(?:a)|(b)$``, a search for ``b`` anywhere. Inline groups other than ``(?:``
    are refused: a flag such as ``(?x)`` could turn the closing ``)$`` into a comment."""
    if not pattern or len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternInvalid(f"a pattern has 1 to {MAX_PATTERN_LENGTH} characters")
    if not pattern.isprintable():
        raise PatternInvalid("a pattern has no control characters")
    if pattern.replace("(?:", "").find("(?") >= 0:
        raise PatternInvalid("a pattern may use (?: groups, but no flags or lookaround")
    for text in (pattern, f"^(?:{pattern})$"):
        try:
            validator = jsonschema_rs.Draft202012Validator(
                {"type": "string", "pattern": text}, pattern_options=_LINEAR
            )
        except ValueError as exc:
            raise PatternInvalid(
                "not a regular expression the linear-time engine accepts "
                "(no backreferences or lookaround)"
            ) from exc
    return validator


def pattern_matches(pattern: str, value: Any) -> bool:
    if not isinstance(value, str) or len(value) > MAX_PATTERN_INPUT:
        return False
    return compiled_pattern(pattern).is_valid(value)


class Constraint(BaseModel):
    """Exactly one kind, on one argument, checked on the value the tool will receive (the gate
    hands ``authorize`` the arguments with the resource field already normalized).

    * ``equals`` / ``one_of``: JSON equality (JSON type at every depth; ``1`` is ``1.0``).
    * ``prefix``: a string prefix; on the contract's *path* field it matches whole segments of the
      normalized path (``run-output/reports/`` covers ``run-output/reports`` and
      ``run-output/reports/a``, never ``run-output/reports-old/a``).
    * ``maximum``: a number (not a boolean) at most this.
    * ``absent_or``: the argument is absent, or it satisfies the inner constraint.
    * ``subset_of``: a JSON array whose every item is (JSON-equal to) one of these.
    * ``url_host_in``: an http(s) URL whose parsed, normalized host is one of these; a URL with
      userinfo, a backslash, whitespace or control characters is refused (parsers disagree on
      where such a host ends). A value without a scheme is read as an address bar reads it
      (``www.example.com/page`` is ``http://www.example.com/page``), see ``url_host``.
    * ``pattern``: a string the regular expression matches *in full* (ECMA-262 syntax, run by a
      linear-time engine, so no pattern can make a check slow; at most 256 characters, and a
      value longer than 4096 characters never matches).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    equals: Any = None
    one_of: list[Any] | None = None
    prefix: str | None = None
    maximum: float | None = None
    absent_or: Constraint | None = None
    subset_of: list[Any] | None = None
    url_host_in: list[str] | None = None
    pattern: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Constraint:
        given = [k for k in _KINDS if k in self.model_fields_set]
        if len(given) != 1:
            raise ValueError("a constraint names exactly one of " + ", ".join(_KINDS))
        if self.url_host_in is not None:
            hosts = [normalized_host(h) for h in self.url_host_in]
            if None in hosts:
                raise ValueError("url_host_in names a host that is not a valid host name")
        if self.pattern is not None:
            compiled_pattern(self.pattern)  # PatternInvalid is a ValueError: a clear refusal
        return self

    def allows(self, present: bool, value: Any, *, path: bool = False) -> bool:
        """``path``: the argument is the contract's (normalized) path field."""
        if self.absent_or is not None:
            return not present or self.absent_or.allows(True, value, path=path)
        if not present:
            return False
        # JSON equality at every depth: {"admin": true} is not {"admin": 1} (Python == says it is).
        if "equals" in self.model_fields_set:
            return json_equal(value, self.equals)
        if self.one_of is not None:
            return any(json_equal(value, v) for v in self.one_of)
        if self.prefix is not None:
            if not isinstance(value, str):
                return False
            return _under(value, self.prefix) if path else value.startswith(self.prefix)
        if self.maximum is not None:
            return (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and value <= self.maximum
            )
        if self.subset_of is not None:
            return isinstance(value, list) and all(
                any(json_equal(item, allowed) for allowed in self.subset_of) for item in value
            )
        if self.url_host_in is not None:
            host = url_host(value)
            return host is not None and host in {normalized_host(h) for h in self.url_host_in}
        if self.pattern is not None:
            return pattern_matches(self.pattern, value)
        return False


def _under(path: str, prefix: str) -> bool:
    """Whole-segment prefix on a normalized path: the prefix directory itself or below it."""
    base = posixpath.normpath(prefix) if prefix.strip("/") else ""
    if not base or base == ".":
        return False  # an empty prefix names no directory: refuse rather than allow all
    return path == base or path.startswith(base + "/")


def normalized_host(host: str) -> str | None:
    """Lower-case, at most one trailing dot dropped, IDNA (punycode) ASCII; None when it is no
    host name (``a.example..`` has an empty label: refused, not read as ``a.example``).

    A non-ASCII label is accepted only when IDNA maps nothing in it (it is plain punycode of the
    label): Python's codec is IDNA 2003, which maps ``faß`` to ``fass`` and full-width letters to
    ASCII, where IDNA 2008 clients (browsers, ``requests``) reach a *different* host."""
    if not host or any(ch in host for ch in "@/\\:?#[]% ") or not host.isprintable():
        return None
    labels = host.lower().removesuffix(".").split(".")
    out = []
    for label in labels:
        if not label:
            return None
        if label.isascii():
            out.append(label)
            continue
        try:
            mapped = label.encode("idna").decode("ascii")
            plain = "xn--" + label.encode("punycode").decode("ascii")
        except UnicodeError:
            return None
        if mapped != plain:
            return None
        out.append(mapped)
    return ".".join(out)


# RFC 3986 and the WHATWG URL standard agree on what a scheme is: a letter, then letters,
# digits, "+", "-" or ".", then ":".
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def url_host(value: Any) -> str | None:
    """The normalized host of an http(s) URL, or None when ``value`` is not one we trust to
    mean the same host to every parser (userinfo, backslash, whitespace, controls).

    A value without a scheme is read as a browser's address bar reads it, as ``http://`` and
    the value (issue 21 item 15: tools take ``www.example.com/page``), except where readers
    disagree, which is refused:

    1. A leading ``name:`` is a scheme to every URL parser, so ``www.example.com:8080`` has the
       scheme ``www.example.com``, and ``http:evil.example`` (no ``//``) has no host to Python
       while a browser reads ``http://evil.example``: only ``http://`` and ``https://`` pass.
    2. A value starting with ``/`` is a path or, with ``//``, a reference whose scheme comes
       from wherever the tool resolves it: refused.
    3. Everything else gets ``http://`` in front and the same checks as a URL with a scheme.
    """
    if not isinstance(value, str) or not value.isprintable() or any(ch in value for ch in " \\"):
        return None
    if not _SCHEME.match(value):
        if value.startswith("/"):
            return None
        value = "http://" + value
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or "@" in parts.netloc or not parts.hostname:
        return None
    return normalized_host(parts.hostname)


class CapabilityGrant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    grant_id: str
    capability: Annotated[str, Field(min_length=1, max_length=64)]
    run_id: str
    resource_scope: Annotated[str, Field(min_length=1, max_length=512)]
    expires_at_step: Annotated[int, Field(ge=0)]
    max_calls: Annotated[int, Field(ge=1)] | None = None
    calls_used: Annotated[int, Field(ge=0)] = 0
    constraints: dict[str, Constraint] = {}


@dataclass(frozen=True)
class AuthorizationResult:
    ok: bool
    code: str | None = None
    message: str = ""
    grant_ids: tuple[str, ...] = ()


# When several grants exist but none fits, the reported code is the failure of the grant that
# came closest: the order below is "how far a grant got" through the checks.
_FAILURE_ORDER = (
    "CAPABILITY_EXPIRED",
    "CAPABILITY_CALLS_EXHAUSTED",
    "CAPABILITY_SCOPE_MISMATCH",
    "CAPABILITY_CONSTRAINT_VIOLATED",
)


def _grant_failure(
    grant: CapabilityGrant,
    *,
    step: int,
    resource: str | None,
    arguments: Mapping[str, Any],
    path_field: str | None,
) -> str | None:
    if grant.expires_at_step < step:
        return "CAPABILITY_EXPIRED"
    if grant.max_calls is not None and grant.calls_used >= grant.max_calls:
        return "CAPABILITY_CALLS_EXHAUSTED"
    if resource is not None and not scope_covers(grant.resource_scope, resource):
        return "CAPABILITY_SCOPE_MISMATCH"
    for name, constraint in grant.constraints.items():
        present, value = name in arguments, arguments.get(name)
        if not constraint.allows(present, value, path=name == path_field):
            return "CAPABILITY_CONSTRAINT_VIOLATED"
    return None


def authorize(
    *,
    required: Iterable[str],
    grants: Iterable[CapabilityGrant],
    run_id: str,
    step: int,
    resource: str | None,
    arguments: Mapping[str, Any],
    path_field: str | None = None,
) -> AuthorizationResult:
    """Every required capability needs one trusted grant of this run that fits this call.

    ``arguments`` are the ones the tool will receive (resource field normalized); ``path_field``
    names the argument that holds the normalized path, where ``prefix`` means whole segments."""
    grants = [g for g in grants if g.run_id == run_id]
    used: list[str] = []
    for capability in required:
        candidates = [g for g in grants if g.capability == capability]
        if not candidates:
            return AuthorizationResult(
                False, "MISSING_CAPABILITY", f"no grant of {capability} for this run"
            )
        failures = []
        for grant in candidates:
            failure = _grant_failure(
                grant, step=step, resource=resource, arguments=arguments, path_field=path_field
            )
            if failure is None:
                used.append(grant.grant_id)
                break
            failures.append(failure)
        else:
            code = max(failures, key=_FAILURE_ORDER.index)
            return AuthorizationResult(False, code, f"no grant of {capability} fits this call")
    return AuthorizationResult(True, grant_ids=tuple(used))
