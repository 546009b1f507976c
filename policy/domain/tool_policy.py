"""Tool policy as configuration (issue 12 item 3): how strict each tool is, without code.

A deployment sets ``AGENTCONSOLE_TOOL_POLICY`` and a run profile may set ``tool_policy``, both
of one shape::

    {"<tool name>": {"confirmation": "always" | "never" | "when_untrusted" | "outside_constraints",
                     "auto_constraints": {"<argument>": <Constraint>, ...},
                     "arguments": {"<argument>": "refuse" | "confirm" | "carry", ...},
                     "approvers": "owner_or_operator" | "owner" | "operator" | "four_eyes"}}

``arguments`` says what a call may do with an argument whose value derives from untrusted
content (policy.domain.origins.argument_policy, policy.domain.origins.provenance).

A tool the policy does not name keeps its contract's own confirmation mode. A run records its
*effective* policy when it is created (``join`` of the deployment's and its profile's), so the
gate never reads a profile an operator edits later.

Strictness is a partial order. Confirmation: ``never`` < (``when_untrusted`` |
``outside_constraints`` | the contract's ``per-run``) < ``always``, the middle three incomparable.
Approvers: ``owner_or_operator`` < (``owner`` | ``operator``) < ``four_eyes``. A profile may only
tighten the deployment (``profile_refusal``); at run creation the two are *joined* (the least
policy at least as strict as both), so a deployment tightened after a profile was saved still
wins, and two incomparable choices become the strictest (``always``, ``four_eyes``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from policy.domain.canonical import json_equal
from policy.domain.confirmation.approvers import ApproverRule
from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContract
from policy.domain.errors import DomainError
from policy.domain.grants import Constraint
from policy.domain.origins.argument_policy import (
    ArgumentRule,
    join_rules,
    loosened,
    rule_for,
    stricter,
)
from policy.domain.origins.provenance import OVERFLOW_ID, ArgumentProvenance


class ConfirmationPolicy(enum.StrEnum):
    ALWAYS = "always"
    NEVER = "never"
    WHEN_UNTRUSTED = "when_untrusted"
    OUTSIDE_CONSTRAINTS = "outside_constraints"


class ToolPolicyInvalid(DomainError):
    code = "TOOL_POLICY_INVALID"
    http_status = 400


# Why a confirmation was required (trace evidence, ``NeedsConfirmation.trigger``).
ALWAYS = "TOOL_POLICY_ALWAYS"
# An argument under "confirm" (or any, under when_untrusted) derives from untrusted content.
UNTRUSTED_PROVENANCE = "UNTRUSTED_PROVENANCE"
# An argument under "refuse" does: the call is refused, nobody is asked.
UNTRUSTED_ARGUMENT_REFUSED = "UNTRUSTED_ARGUMENT_REFUSED"
PROVENANCE_UNKNOWN = "PROVENANCE_UNKNOWN"  # the facts were not given: fail closed
# The run read more untrusted content than its index keeps: every write asks (fail closed).
PROVENANCE_OVERFLOW = "PROVENANCE_OVERFLOW"
OUTSIDE_CONSTRAINTS = "OUTSIDE_AUTO_CONSTRAINTS"

_PER_RUN = "per-run"  # the contract's own per-run mode, as a strictness level


class PolicyEntry(BaseModel):
    """One tool's policy. Strict: ``"always "`` or ``1`` is an error, not a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Enum values arrive as JSON strings: lax for these two (an int is still no member).
    confirmation: Annotated[ConfirmationPolicy | None, Field(strict=False)] = None
    auto_constraints: dict[str, Constraint] = {}
    arguments: dict[str, Annotated[ArgumentRule, Field(strict=False)]] = {}
    approvers: Annotated[ApproverRule | None, Field(strict=False)] = None

    @model_validator(mode="after")
    def _constraints_need_their_policy(self) -> PolicyEntry:
        outside = self.confirmation is ConfirmationPolicy.OUTSIDE_CONSTRAINTS
        if self.auto_constraints and not outside:
            raise ValueError("auto_constraints apply only with confirmation 'outside_constraints'")
        if outside and not self.auto_constraints:
            # Empty constraints hold for every call: that is "never", and should say so.
            raise ValueError("'outside_constraints' needs at least one auto_constraint")
        return self

    def data(self) -> dict[str, Any]:
        """As stored and shown: plain JSON, unset keys left out."""
        out: dict[str, Any] = {}
        if self.confirmation is not None:
            out["confirmation"] = self.confirmation.value
        if self.auto_constraints:
            out["auto_constraints"] = {
                k: c.model_dump(exclude_unset=True) for k, c in self.auto_constraints.items()
            }
        if self.arguments:
            out["arguments"] = {k: r.value for k, r in sorted(self.arguments.items())}
        if self.approvers is not None:
            out["approvers"] = self.approvers.value
        return out


@dataclass(frozen=True)
class ToolPolicy:
    """A validated policy: tool name → entry, read-only."""

    entries: Mapping[str, PolicyEntry]

    def for_tool(self, name: str) -> PolicyEntry | None:
        return self.entries.get(name)

    def data(self) -> dict[str, Any]:
        return {name: e.data() for name, e in sorted(self.entries.items())}

    def approvers_for(self, name: str) -> str | None:
        """Who may decide this tool's confirmations under this policy; None: the default
        (the approvers' own rule). The seam to the confirmation-decision services."""
        entry = self.entries.get(name)
        return entry.approvers.value if entry is not None and entry.approvers else None

    def __bool__(self) -> bool:
        return bool(self.entries)


EMPTY = ToolPolicy(MappingProxyType({}))


def _policy(entries: Mapping[str, PolicyEntry]) -> ToolPolicy:
    return ToolPolicy(MappingProxyType(dict(entries)))


@dataclass(frozen=True)
class ToolFacts:
    """What validation needs of a registered tool: its inputs, its contract's own mode and
    argument rules (the strictest of its versions)."""

    inputs: frozenset[str]
    baseline: str  # "never" | "per-run" | "always"
    arguments: Mapping[str, ArgumentRule] = field(default_factory=dict)


def contract_level(mode: ConfirmationMode) -> str:
    return {
        ConfirmationMode.NEVER: ConfirmationPolicy.NEVER.value,
        ConfirmationMode.PER_RUN: _PER_RUN,
        ConfirmationMode.PER_CALL: ConfirmationPolicy.ALWAYS.value,
    }[mode]


def tool_facts(contracts: Iterable[ToolContract]) -> dict[str, ToolFacts]:
    """Per tool name (all its versions): the union of their inputs, the strictest mode."""
    inputs: dict[str, set[str]] = {}
    levels: dict[str, str] = {}
    rules: dict[str, dict[str, ArgumentRule]] = {}
    for c in contracts:
        inputs.setdefault(c.name, set()).update(c.input_schema.get("properties", {}))
        levels[c.name] = join_confirmation(
            levels.get(c.name, "never"), contract_level(c.confirmation)
        )
        rules[c.name] = join_rules(rules.get(c.name, {}), c.untrusted_arguments)
    return {n: ToolFacts(frozenset(inputs[n]), levels[n], rules[n]) for n in inputs}


def parse_tool_policy(
    raw: Any, *, tools: Mapping[str, ToolFacts], where: str = "tool_policy"
) -> ToolPolicy:
    """A policy as configured → a checked ``ToolPolicy``, or ``ToolPolicyInvalid`` naming the
    first problem: not a mapping, an unknown tool, an unknown key or value, an
    ``auto_constraints`` argument the tool does not take, a malformed constraint."""
    if raw is None:
        return EMPTY
    if not isinstance(raw, Mapping):
        raise ToolPolicyInvalid(f"{where} must be an object of tool name → policy")
    entries: dict[str, PolicyEntry] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or name not in tools:
            raise ToolPolicyInvalid(
                f"{where}: no registered tool {str(name)[:64]!r}", tool=str(name)[:64]
            )
        if not isinstance(value, Mapping):
            raise ToolPolicyInvalid(f"{where}.{name} must be an object", tool=name)
        try:
            entry = PolicyEntry.model_validate(dict(value))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ()))
            at = f"{where}.{name}" + (f".{loc}" if loc else "")
            raise ToolPolicyInvalid(f"{at}: {err.get('msg', 'invalid')}", tool=name) from None
        for key, named in (
            ("auto_constraints", entry.auto_constraints),
            ("arguments", entry.arguments),
        ):
            unknown = sorted(set(named) - tools[name].inputs)
            if unknown:
                raise ToolPolicyInvalid(
                    f"{where}.{name}.{key}: {name} takes no argument {unknown[0][:64]!r}",
                    tool=name,
                )
        entries[name] = entry
    return _policy(entries)


# --- strictness --------------------------------------------------------------------------------


def _join(a: str, b: str, *, bottom: str, top: str) -> str:
    """The least element at least as strict as both, in an order with one bottom, one top and
    the rest mutually incomparable (so two different middle elements join to the top)."""
    if a in (b, top) or b == bottom:
        return a
    if b == top or a == bottom:
        return b
    return top


def join_confirmation(a: str, b: str) -> str:
    return _join(a, b, bottom=ConfirmationPolicy.NEVER.value, top=ConfirmationPolicy.ALWAYS.value)


def join_approvers(a: str, b: str) -> str:
    return _join(
        a, b, bottom=ApproverRule.OWNER_OR_OPERATOR.value, top=ApproverRule.FOUR_EYES.value
    )


def _level(entry: PolicyEntry | None, facts: ToolFacts) -> str:
    if entry is None or entry.confirmation is None:
        return facts.baseline
    return entry.confirmation.value


def profile_refusal(
    deployment: PolicyEntry | None, profile: PolicyEntry, facts: ToolFacts
) -> str | None:
    """Why ``profile`` would loosen the deployment's policy for this tool (None: it does not)."""
    base = _level(deployment, facts)
    mine = base if profile.confirmation is None else profile.confirmation.value
    if join_confirmation(base, mine) != mine:
        return f"confirmation {mine!r} is not at least as strict as the deployment's {base!r}"
    if (
        deployment is not None
        and mine == base == ConfirmationPolicy.OUTSIDE_CONSTRAINTS.value
        and profile.auto_constraints
    ):
        # The profile's constraints are added to the deployment's (both must hold); one
        # argument constrained twice cannot be merged into one constraint, so it is refused.
        shared = sorted(set(deployment.auto_constraints) & set(profile.auto_constraints))
        if shared:
            return f"the deployment already constrains {shared[0]!r}; constrain another argument"
    floor = {**facts.arguments, **(deployment.arguments if deployment else {})}
    low = loosened(floor, profile.arguments)
    if low is not None:
        arg, rule, base = low
        return f"argument {arg!r}: {rule.value!r} is not at least as strict as {base.value!r}"
    d_app = deployment.approvers.value if deployment and deployment.approvers else None
    if (
        d_app
        and profile.approvers
        and join_approvers(d_app, profile.approvers) != profile.approvers
    ):
        return f"approvers {profile.approvers.value!r} are not at least as strict as {d_app!r}"
    return None


def join_entries(
    deployment: PolicyEntry | None, profile: PolicyEntry | None, facts: ToolFacts
) -> PolicyEntry | None:
    """The least policy at least as strict as both (``profile_refusal`` keeps a saved profile
    from relying on this; it matters when the deployment changed after the profile was saved)."""
    if profile is None:
        return deployment
    # No deployment entry: the profile is joined with the contract's own mode.
    deployment = deployment or PolicyEntry()
    base = _level(deployment, facts)
    # A profile entry without a confirmation (only approvers, say) has no opinion on it.
    mine = base if profile.confirmation is None else profile.confirmation.value
    level = join_confirmation(base, mine)
    constraints: dict[str, Constraint] = {}
    if level == ConfirmationPolicy.OUTSIDE_CONSTRAINTS.value:
        constraints = {**deployment.auto_constraints}
        for arg, c in profile.auto_constraints.items():
            if arg in constraints and not _same(constraints[arg], c):
                # One argument constrained twice does not merge: ask a person every time.
                level, constraints = ConfirmationPolicy.ALWAYS.value, {}
                break
            constraints[arg] = c
    unset = deployment.confirmation is None and profile.confirmation is None
    approvers = [a.value for a in (deployment.approvers, profile.approvers) if a is not None]
    joined: str | None = approvers[0] if approvers else None
    if len(approvers) == 2:
        joined = join_approvers(*approvers)
    return PolicyEntry(
        # per-run is the contract's own mode: no policy value names it, the contract keeps it.
        confirmation=None if unset or level == _PER_RUN else ConfirmationPolicy(level),
        auto_constraints=constraints,
        arguments=join_rules(deployment.arguments, profile.arguments),
        approvers=ApproverRule(joined) if joined else None,
    )


def _same(a: Constraint, b: Constraint) -> bool:
    # By JSON value and type: pydantic's == would take {"equals": 1} for {"equals": true}.
    return json_equal(a.model_dump(exclude_unset=True), b.model_dump(exclude_unset=True))


def effective_policy(
    deployment: ToolPolicy, profile: ToolPolicy, *, tools: Mapping[str, ToolFacts]
) -> ToolPolicy:
    """What a new run records: each tool named by either, joined."""
    names = set(deployment.entries) | set(profile.entries)
    out = {}
    for name in sorted(names):
        facts = tools.get(name)
        if facts is None:
            continue  # a tool no longer registered: no call to it can pass the gate anyway
        entry = join_entries(deployment.for_tool(name), profile.for_tool(name), facts)
        if entry is not None:
            out[name] = entry
    return _policy(out)


def check_profile_policy(
    profile: ToolPolicy, *, deployment: ToolPolicy, tools: Mapping[str, ToolFacts]
) -> None:
    for name, entry in profile.entries.items():
        refusal = profile_refusal(deployment.for_tool(name), entry, tools[name])
        if refusal is not None:
            raise ToolPolicyInvalid(
                f"tool_policy.{name}: {refusal} (a profile may only tighten)",
                code="TOOL_POLICY_LOOSENS",
                tool=name,
            )


def stored_policy(raw: Any) -> ToolPolicy:
    """A run's recorded policy (validated when it was recorded: only the shape is re-read)."""
    if not raw:
        return EMPTY
    return _policy({name: PolicyEntry.model_validate(v) for name, v in raw.items()})


# --- the gate's use ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """The confirmation mode this call needs, and why (``trigger``; None: the contract's own).
    ``refused``: arguments under ``refuse`` that derive from untrusted content (the gate refuses
    the call); ``arguments``: those that made it wait."""

    mode: ConfirmationMode
    trigger: str | None = None
    untrusted_ids: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()


def _tainted(
    provenance: ArgumentProvenance | None, arguments: Mapping[str, Any]
) -> dict[str, tuple[str, ...]]:
    """Argument → the untrusted observations it derives from. Without the facts, or from an
    index that overflowed, every argument counts as untrusted-derived (fail closed)."""
    if provenance is None:
        return dict.fromkeys(sorted(arguments), (PROVENANCE_UNKNOWN,))
    if provenance.overflow:
        return dict.fromkeys(sorted(arguments), (OVERFLOW_ID,))
    return provenance.tainted()


def _by_argument(
    entry: PolicyEntry | None,
    contract: ToolContract,
    arguments: Mapping[str, Any],
    provenance: ArgumentProvenance | None,
) -> Requirement | None:
    """What the untrusted-derived arguments ask for under their rules (None: nothing)."""
    tainted = _tainted(provenance, arguments)
    if not tainted:
        return None
    policy = entry.confirmation if entry is not None else None
    never = policy is ConfirmationPolicy.NEVER
    rules = {
        name: rule_for(
            name,
            named=entry.arguments if entry is not None else {},
            contract=contract.untrusted_arguments,
            never=never,
            when_untrusted=policy is ConfirmationPolicy.WHEN_UNTRUSTED,
        )
        for name in tainted
    }
    overflow = provenance is not None and provenance.overflow
    if overflow and not never and contract.side_effect is not SideEffect.READ:
        # Fail closed: after the index overflowed, a write asks whatever it carries.
        rules = {k: stricter(r, ArgumentRule.CONFIRM) for k, r in rules.items()}
    refused = tuple(k for k, r in rules.items() if r is ArgumentRule.REFUSE)
    asked = tuple(k for k, r in rules.items() if r is ArgumentRule.CONFIRM)
    named = refused or asked
    if not named:
        return None
    ids = tuple(sorted({i for k in named for i in tainted[k]}))
    if refused:
        return Requirement(ConfirmationMode.PER_CALL, UNTRUSTED_ARGUMENT_REFUSED, ids, refused)
    trigger = UNTRUSTED_PROVENANCE
    if provenance is None or overflow:
        trigger = PROVENANCE_UNKNOWN if provenance is None else PROVENANCE_OVERFLOW
    return Requirement(ConfirmationMode.PER_CALL, trigger, ids, arguments=asked)


def requirement(
    entry: PolicyEntry | None,
    contract: ToolContract,
    *,
    arguments: Mapping[str, Any],
    provenance: ArgumentProvenance | None,
    path_field: str | None,
) -> Requirement:
    """The confirmation mode of one call under the run's policy for its tool: first what its
    untrusted-derived arguments ask (refuse, confirm), then the policy's mode."""
    by_argument = _by_argument(entry, contract, arguments, provenance)
    if by_argument is not None:
        return by_argument
    if entry is None or entry.confirmation is None:
        return Requirement(contract.confirmation)
    policy = entry.confirmation
    if policy is ConfirmationPolicy.ALWAYS:
        return Requirement(ConfirmationMode.PER_CALL, ALWAYS)
    if policy in (ConfirmationPolicy.NEVER, ConfirmationPolicy.WHEN_UNTRUSTED):
        # when_untrusted: every argument that derives from untrusted content was asked about
        # above (or may carry it): nothing left to ask.
        return Requirement(ConfirmationMode.NEVER)
    for name, constraint in entry.auto_constraints.items():
        if not constraint.allows(name in arguments, arguments.get(name), path=name == path_field):
            return Requirement(ConfirmationMode.PER_CALL, OUTSIDE_CONSTRAINTS)
    return Requirement(ConfirmationMode.NEVER)
