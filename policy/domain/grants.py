"""Capability grants (seed §5): trusted, bound to a run, a resource scope, an expiry step, a call
count and optional argument constraints. A capability named inside a proposal has no effect:
``authorize`` reads grants only from the trusted list it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policy.domain.canonical import json_equal
from policy.domain.contracts import scope_covers


class Constraint(BaseModel):
    """Exactly one of equals / one_of / prefix / maximum, on one argument."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    equals: Any = None
    one_of: list[Any] | None = None
    prefix: str | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Constraint:
        given = [k for k in ("equals", "one_of", "prefix", "maximum") if k in self.model_fields_set]
        if len(given) != 1:
            raise ValueError("a constraint names exactly one of equals, one_of, prefix, maximum")
        return self

    def allows(self, present: bool, value: Any) -> bool:
        if not present:
            return False
        # JSON equality at every depth: {"admin": true} is not {"admin": 1} (Python == says it is).
        if "equals" in self.model_fields_set:
            return json_equal(value, self.equals)
        if self.one_of is not None:
            return any(json_equal(value, v) for v in self.one_of)
        if self.prefix is not None:
            return isinstance(value, str) and value.startswith(self.prefix)
        if self.maximum is not None:
            return (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and value <= self.maximum
            )
        return False


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
    grant: CapabilityGrant, *, step: int, resource: str | None, arguments: Mapping[str, Any]
) -> str | None:
    if grant.expires_at_step < step:
        return "CAPABILITY_EXPIRED"
    if grant.max_calls is not None and grant.calls_used >= grant.max_calls:
        return "CAPABILITY_CALLS_EXHAUSTED"
    if resource is not None and not scope_covers(grant.resource_scope, resource):
        return "CAPABILITY_SCOPE_MISMATCH"
    for name, constraint in grant.constraints.items():
        if not constraint.allows(name in arguments, arguments.get(name)):
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
) -> AuthorizationResult:
    """Every required capability needs one trusted grant of this run that fits this call."""
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
            failure = _grant_failure(grant, step=step, resource=resource, arguments=arguments)
            if failure is None:
                used.append(grant.grant_id)
                break
            failures.append(failure)
        else:
            code = max(failures, key=_FAILURE_ORDER.index)
            return AuthorizationResult(False, code, f"no grant of {capability} fits this call")
    return AuthorizationResult(True, grant_ids=tuple(used))
