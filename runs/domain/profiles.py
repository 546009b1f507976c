"""Run profiles (issue 11 item 7): what an operator lets a user start, as plain data.

A profile names a planner, the tools it may use, grant templates (a capability, a resource scope
that may name ``{subject}``, an expiry step, optional call count and argument constraints) and
budgets. A user starts a run from a profile with a goal; the run gets exactly the profile's
grants, each expanded for the run's subject and bound to the new run. Neither the user nor the
planner adds one.

Expansion is where scope could widen: ``{subject}`` → ``*`` would be a grant of everything,
``alice/..`` or ``a/b`` would reach another subject's scope. So the subject is checked as a
value (one plain name: no ``/``, no ``..``, no ``*``, no whitespace), the expanded scope is checked
again (normalized, no wildcard, still under the template's fixed prefix) and built as a
``CapabilityGrant`` — the same model, with the same rules, every trusted grant passes.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policy.domain.canonical import json_equal
from policy.domain.errors import DomainError
from policy.domain.grants import CapabilityGrant, Constraint
from policy.domain.secrets.redaction import redact_secrets
from policy.domain.tool_policy import (
    EMPTY,
    ToolFacts,
    ToolPolicy,
    ToolPolicyInvalid,
    check_profile_policy,
    parse_tool_policy,
)
from runs.domain.budgets import (
    MAX_DEADLINE_S,
    MAX_STEPS_CEILING,
    RepeatedProposals,
    RunBudgets,
    Steps,
    Tokens,
    ToolCalls,
)
from runs.domain.gateway.model_planning import PLANNER_KIND, PlannerConfigInvalid, check_config

PLACEHOLDER = "{subject}"
PLANNER_KINDS = ("fixture", PLANNER_KIND)
Audience = Literal["all", "users", "groups"]
AUDIENCES: tuple[str, ...] = get_args(Audience)
MAX_TEMPLATES = 20
MAX_PLANNER_OUTPUTS = 200
NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"
# One plain name: a letter or digit first (never "." or ".."), then what user names use.
_SUBJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}")
_BRACES = re.compile(r"[{}]")
_PROBE_SUBJECT = "probe"


class ProfileInvalid(DomainError):
    """A profile (or its expansion for a subject) the domain refuses; ``code`` says which rule."""

    code = "PROFILE_INVALID"


TEMPLATE_INVALID = "PROFILE_TEMPLATE_INVALID"
SUBJECT_UNSAFE = "PROFILE_SUBJECT_UNSAFE"
SCOPE_WIDENED = "PROFILE_SCOPE_WIDENED"
TOOL_UNKNOWN = "PROFILE_TOOL_UNKNOWN"
TOOL_NOT_ALLOWED = "PROFILE_TOOL_NOT_ALLOWED"
PLANNER_INVALID = "PROFILE_PLANNER_INVALID"
HOLDS_SECRET = "PROFILE_HOLDS_SECRET"  # noqa: S105 - an error code


def _refuse(code: str, message: str, **extra: Any) -> ProfileInvalid:
    return ProfileInvalid(message, code=code, **extra)


class GrantTemplate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    capability: Annotated[str, Field(min_length=1, max_length=64)]
    resource_scope: Annotated[str, Field(min_length=1, max_length=512)]
    expires_at_step: Annotated[int, Field(ge=0, le=MAX_STEPS_CEILING)]
    max_calls: Annotated[int, Field(ge=1, le=MAX_STEPS_CEILING)] | None = None
    constraints: dict[str, Constraint] = {}


_RUN_DEFAULTS = RunBudgets()


class ProfileBudgets(BaseModel):
    """What the form shows: steps, tool calls, seconds (a run stores milliseconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_steps: Steps = _RUN_DEFAULTS.max_steps
    max_tool_calls: ToolCalls = _RUN_DEFAULTS.max_tool_calls
    max_repeated_proposal: RepeatedProposals = _RUN_DEFAULTS.max_repeated_proposal
    deadline_s: Annotated[int, Field(ge=1, le=MAX_DEADLINE_S)] = _RUN_DEFAULTS.deadline_ms // 1000
    max_tokens: Tokens = _RUN_DEFAULTS.max_tokens

    def run_budgets(self) -> RunBudgets:
        return RunBudgets(
            max_steps=self.max_steps,
            max_tool_calls=self.max_tool_calls,
            max_repeated_proposal=self.max_repeated_proposal,
            deadline_ms=self.deadline_s * 1000,
            max_tokens=self.max_tokens,
        )


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=f"^{NAME_PATTERN}$")]
    description: Annotated[str, Field(max_length=500)] = ""
    audience: Audience = "all"
    users: list[Annotated[str, Field(min_length=1, max_length=150)]] = []
    groups: list[Annotated[str, Field(min_length=1, max_length=150)]] = []
    planner: dict[str, Any]
    tools: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1)]
    grant_templates: Annotated[list[GrantTemplate], Field(max_length=MAX_TEMPLATES)] = []
    budgets: ProfileBudgets = ProfileBudgets()
    # Per tool of this profile: confirmation policy, auto constraints, approvers
    # (policy.domain.tool_policy); checked by ``validate_profile`` to only tighten.
    tool_policy: dict[str, Any] = {}

    def data(self) -> dict[str, Any]:
        """As stored: plain JSON (constraints keep only the kind they name)."""
        out = self.model_dump(exclude={"grant_templates"})
        out["users"], out["groups"] = sorted(set(self.users)), sorted(set(self.groups))
        out["grant_templates"] = [template_data(t) for t in self.grant_templates]
        return out


def template_data(template: GrantTemplate) -> dict[str, Any]:
    out = template.model_dump(exclude={"constraints"}, exclude_none=True)
    if template.constraints:
        out["constraints"] = {
            name: c.model_dump(exclude_unset=True) for name, c in template.constraints.items()
        }
    return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "profile"
    return f"{where}: {err.get('msg', 'invalid')}"


def validate_profile(
    raw: Mapping[str, Any],
    *,
    tools: Mapping[str, Sequence[str]],
    endpoints: Collection[str] = (),
    policy_tools: Mapping[str, ToolFacts] | None = None,
    deployment: ToolPolicy = EMPTY,
) -> ProfileSpec:
    """The profile as a checked value, or a ``ProfileInvalid`` with a stable code.

    ``tools`` maps each registered tool name to the capabilities it requires; ``endpoints``
    names the model endpoints the deployment configures.

    1. Shape and types (pydantic, strict: ``"3"`` is not a number, ``true`` is not ``1``).
    2. Who may use it: named users or groups when the audience says so.
    3. Tools: each is registered.
    4. Grant templates: each scope template is well formed and expands safely; each capability
       serves one of the profile's tools (a grant for nothing the profile may call is a mistake).
    5. Planner: a kind that exists; a fixture script proposes only the profile's tools; a model
       planner names a configured endpoint (the model offers only tools the grants allow).
    6. Tool policy: names only the profile's tools, in the deployment's vocabulary, and only
       tightens the deployment's policy (``policy_tools``: each tool's inputs and contract mode).
    7. No secret in what runs execute or enforce (``check_no_secret``).
    """
    try:
        spec = ProfileSpec.model_validate(dict(raw))
    except ValidationError as exc:
        raise ProfileInvalid(_first_error(exc)) from None
    if spec.audience == "users" and not spec.users:
        raise ProfileInvalid("audience 'users' needs at least one user name")
    if spec.audience == "groups" and not spec.groups:
        raise ProfileInvalid("audience 'groups' needs at least one group")
    unknown = [t for t in spec.tools if t not in tools]
    if unknown:
        raise _refuse(TOOL_UNKNOWN, f"no registered tool {unknown[0]!r}", tool=unknown[0])
    needed = {cap for t in spec.tools for cap in tools[t]}
    for template in spec.grant_templates:
        # Checks the scope template itself too (expand_scope → check_template).
        expand_template(template, subject=_PROBE_SUBJECT, run_id="probe")
        if template.capability not in needed:
            raise _refuse(
                TOOL_NOT_ALLOWED,
                f"no tool of this profile needs {template.capability!r}",
                capability=template.capability,
            )
    check_planner(spec.planner, allowed=spec.tools, endpoints=endpoints)
    profile_tool_policy(spec, policy_tools=policy_tools or {}, deployment=deployment)
    check_no_secret(spec)
    return spec


# What a run of the profile executes or enforces: a secret there is refused, not masked.
_EXECUTED = ("planner", "grant_templates", "tool_policy")


def check_no_secret(spec: ProfileSpec) -> None:
    """Refuse a profile whose planner, grant templates or tool policy hold a secret the scanner
    finds (issue 21 item 11). A profile is shown to everyone who may use it, and masking these
    parts would change what its runs do (a script proposing the tag, a constraint comparing
    with it): a tool's secret belongs in ``AGENTCONSOLE_TOOL_SECRETS``. The description is
    text only: the service stores it masked."""
    data = spec.data()
    for name in _EXECUTED:
        where = _secret_at(data[name], name)
        if where is not None:
            raise _refuse(
                HOLDS_SECRET,
                f"{where} holds a secret; a profile is shown to its users: give a tool its "
                "secrets through AGENTCONSOLE_TOOL_SECRETS",
                field=where[:128],
            )


def _secret_at(value: Any, path: str) -> str | None:
    """The path of the first value the scanner would mask (redaction returns an unchanged
    value as the same object), or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            entry = {key: item}
            if redact_secrets(entry) is not entry:
                # Inside the item, or the item as a whole under a secret-like key.
                return _secret_at(item, f"{path}.{key}") or f"{path}.{key}"
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _secret_at(item, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return path if redact_secrets(value) is not value else None


def profile_tool_policy(
    spec: ProfileSpec, *, policy_tools: Mapping[str, ToolFacts], deployment: ToolPolicy
) -> ToolPolicy:
    """The profile's tool policy, checked (see ``validate_profile`` step 6)."""
    outside = [name for name in spec.tool_policy if name not in spec.tools]
    if outside:
        raise _refuse(
            TOOL_NOT_ALLOWED,
            f"tool_policy names {outside[0]!r}, not a tool of this profile",
            tool=outside[0][:64],
        )
    facts = {name: policy_tools[name] for name in spec.tools if name in policy_tools}
    try:
        policy = parse_tool_policy(spec.tool_policy, tools=facts)
        check_profile_policy(policy, deployment=deployment, tools=facts)
    except ToolPolicyInvalid as exc:
        raise _refuse(exc.code, exc.message, **exc.extra) from None
    return policy


def _segments_ok(scope: str) -> bool:
    if scope.startswith("/") or "//" in scope or "\\" in scope:
        return False
    return all(seg not in (".", "..") for seg in scope.rstrip("/").split("/"))


def check_template(scope: str) -> None:
    """A scope template: printable, no whitespace, only the ``{subject}`` placeholder, a
    normalized relative path, and ``*`` only as the whole (fixed) scope."""
    if not scope.isprintable() or any(ch.isspace() for ch in scope):
        raise _refuse(
            TEMPLATE_INVALID, "a scope has no whitespace or control characters", scope=scope
        )
    if _BRACES.search(scope.replace(PLACEHOLDER, "")):
        raise _refuse(
            TEMPLATE_INVALID, "the only placeholder a scope may name is {subject}", scope=scope
        )
    if "*" in scope and scope != "*":
        raise _refuse(TEMPLATE_INVALID, "'*' is allowed only as the whole scope", scope=scope)
    if not _segments_ok(scope.replace(PLACEHOLDER, _PROBE_SUBJECT)):
        raise _refuse(
            TEMPLATE_INVALID, "a scope is a normalized relative path (no '..', '//')", scope=scope
        )


def check_subject(subject: Any) -> str:
    """The subject as a value a scope may contain: one plain name."""
    if not isinstance(subject, str) or not _SUBJECT.fullmatch(subject) or ".." in subject:
        raise _refuse(
            SUBJECT_UNSAFE,
            "the subject must be one plain name (no '/', '..', '*' or whitespace)",
            subject=str(subject)[:64],
        )
    return subject


def expand_scope(template: str, *, subject: str) -> str:
    """Substitute, then check the result: it must be exactly as narrow as the template says."""
    check_template(template)
    if PLACEHOLDER not in template:
        return template
    scope = template.replace(PLACEHOLDER, check_subject(subject))
    fixed = template.split(PLACEHOLDER, 1)[0]
    # Defence in depth (the subject check already rules these out): no wildcard, nothing
    # normalization would change, and still under the template's fixed prefix.
    if "*" in scope or not _segments_ok(scope) or not scope.startswith(fixed):
        raise _refuse(SCOPE_WIDENED, "the expanded scope is wider than its template", scope=scope)
    if posixpath.normpath(scope) != scope.rstrip("/"):
        raise _refuse(SCOPE_WIDENED, "the expanded scope is not normalized", scope=scope)
    return scope


def expand_template(template: GrantTemplate, *, subject: str, run_id: str) -> dict[str, Any]:
    """One grant for ``run_create``, validated as the ``CapabilityGrant`` it becomes."""
    grant = template_data(template)
    grant["resource_scope"] = expand_scope(template.resource_scope, subject=subject)
    try:
        CapabilityGrant(grant_id=f"{run_id}:probe", run_id=run_id, **grant)
    except ValidationError as exc:
        raise _refuse(SCOPE_WIDENED, _first_error(exc)) from None
    return grant


def expand_grants(
    templates: Sequence[Mapping[str, Any]], *, subject: str, run_id: str = "new"
) -> list[dict[str, Any]]:
    """Every template of a stored profile, expanded for ``subject`` (all or nothing)."""
    out = []
    for raw in templates:
        try:
            template = GrantTemplate.model_validate(dict(raw))
        except ValidationError as exc:
            raise _refuse(TEMPLATE_INVALID, _first_error(exc)) from None
        out.append(expand_template(template, subject=subject, run_id=run_id))
    return out


def check_planner(
    planner: Mapping[str, Any], *, allowed: Sequence[str], endpoints: Collection[str] = ()
) -> None:
    kind = planner.get("kind")
    if kind not in PLANNER_KINDS:
        raise _refuse(PLANNER_INVALID, f"planner kind must be one of {', '.join(PLANNER_KINDS)}")
    if kind == PLANNER_KIND:
        try:
            check_config(planner, endpoints=endpoints)
        except PlannerConfigInvalid as exc:
            raise _refuse(PLANNER_INVALID, exc.message, cause=exc.code, **exc.extra) from None
        return
    if set(planner) - {"kind", "outputs"}:
        raise _refuse(PLANNER_INVALID, "a fixture planner has a kind and outputs, nothing else")
    outputs = planner.get("outputs")
    if not isinstance(outputs, list) or not outputs or len(outputs) > MAX_PLANNER_OUTPUTS:
        raise _refuse(PLANNER_INVALID, f"a fixture planner has 1 to {MAX_PLANNER_OUTPUTS} outputs")
    for i, out in enumerate(outputs):
        if not isinstance(out, dict):
            raise _refuse(PLANNER_INVALID, f"outputs[{i}] is not an object")
        if out.get("kind") == "tool" and out.get("tool_name") not in allowed:
            raise _refuse(
                TOOL_NOT_ALLOWED,
                f"outputs[{i}] proposes {out.get('tool_name')!r}, not a tool of this profile",
            )


def same_profile(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two stored profiles are the same by JSON value and type (``true`` is not ``1``)."""
    return json_equal(dict(a), dict(b))
