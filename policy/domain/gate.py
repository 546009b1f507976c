"""The policy gate (seed §4-§5): a pure function, one small function per layer.

parse → registry → schema → semantic → authorization → confirmation → state → budget

``evaluate`` returns exactly one decision. Only ``Execute`` carries a command; every other
decision means the tool is not called. No I/O, no clock: ``now_ms`` is an input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from policy.domain import canonical as hashing
from policy.domain.confirmation.approvers import ApproverRule, approver_rule
from policy.domain.confirmation.confirmations import (
    Confirmation,
    ConfirmationCheck,
    check_confirmation,
)
from policy.domain.contracts import CallFacts, ResourceError, ToolContract, bind_resource
from policy.domain.decisions import (
    Decision,
    ExecutableCommand,
    Execute,
    NeedsConfirmation,
    Reject,
    Stop,
    _issue,
)
from policy.domain.grants import CapabilityGrant, authorize
from policy.domain.origins.provenance import ArgumentProvenance
from policy.domain.proposals import ActionProposal
from policy.domain.registry import RegisteredTool, ToolRegistry
from policy.domain.tool_policy import EMPTY, ToolPolicy, join_approvers, requirement


@dataclass(frozen=True)
class RunView:
    """The trusted facts of the run the gate needs (a snapshot, never the proposal's claims)."""

    run_id: str
    subject: str
    status: str
    step: int
    tool_calls: int
    max_tool_calls: int
    deadline_ms: int
    unresolved_effects: int = 0
    # The tool policy the run recorded when it was created (never a profile read later).
    tool_policy: ToolPolicy = EMPTY


class _Rejected(Exception):
    def __init__(self, decision: Decision) -> None:
        self.decision = decision


def _lookup(registry: ToolRegistry, proposal: ActionProposal) -> RegisteredTool:
    tool = registry.get(proposal.tool_name, proposal.tool_version)
    if tool is None:
        # Never import or guess: an unknown name or version is a rejection the planner may fix.
        raise _Rejected(Reject("registry", "UNKNOWN_TOOL_OR_VERSION", "no such tool and version"))
    return tool


def _schema(tool: RegisteredTool, proposal: ActionProposal) -> dict[str, Any]:
    violation = tool.input_violation(proposal.arguments)
    if violation is not None:
        raise _Rejected(Reject("schema", violation.code, violation.message))
    size = len(proposal.canonical_arguments().encode("utf-8"))
    if size > tool.contract.max_input_bytes:
        raise _Rejected(Reject("schema", "ARGUMENTS_TOO_LARGE", f"{size} bytes"))
    arguments = hashing.json_normal(proposal.arguments)
    return dict(arguments) if arguments is proposal.arguments else arguments


def _semantic(
    tool: RegisteredTool, arguments: dict[str, Any], facts: CallFacts
) -> tuple[str | None, dict[str, Any]]:
    """The resource, and the arguments the tool will receive (resource field normalized).

    Everything after this layer (semantic checks, grant scope, constraints, the command) sees
    these arguments only: a check on one value and a use of another is how
    ``run-output/reports/../x`` passed a ``prefix: run-output/reports/`` constraint."""
    contract = tool.contract
    resource = None
    if contract.resource is not None:
        try:
            resource, bound = bind_resource(contract.resource, arguments, facts)
        except ResourceError as exc:
            raise _Rejected(Reject("semantic", exc.code, exc.message)) from None
        if bound is not arguments:
            # A default filled in must still be input the contract accepts.
            violation = tool.input_violation(bound)
            if violation is not None:
                raise _Rejected(Reject("semantic", violation.code, violation.message))
            arguments = bound
    for check in contract.semantic_checks:
        failure = check(arguments, facts)
        if failure is not None:
            code, message = failure
            raise _Rejected(Reject("semantic", code, message))
    return resource, arguments


def _path_field(tool: RegisteredTool) -> str | None:
    """The argument holding a normalized path, where a ``prefix`` constraint means segments."""
    rule = tool.contract.resource
    return getattr(rule, "field", None) if getattr(rule, "kind", None) == "path" else None


def _arguments_hash(proposal: ActionProposal, arguments: dict[str, Any]) -> str:
    """The hash (and so the token) of what the tool will run: the normalized arguments. Their
    c2 text is the proposal's unless the semantic layer rewrote the resource field."""
    text = proposal.canonical_arguments()
    if len(arguments) != len(proposal.arguments) or any(
        arguments.get(k) is not v for k, v in proposal.arguments.items()
    ):
        text = hashing.canonical(arguments)
    return hashing.sha256_hex(text)


def evaluate(
    proposal: ActionProposal,
    *,
    run: RunView,
    grants: Iterable[CapabilityGrant],
    confirmations: Iterable[Confirmation],
    registry: ToolRegistry,
    now_ms: int,
    provenance: ArgumentProvenance | None = None,
) -> Decision:
    """``provenance``: where each argument's value came from (policy.domain.origins.provenance),
    computed by the runtime. Without it every argument counts as untrusted-derived: a tool
    with argument rules or ``when_untrusted`` refuses or asks (fail closed)."""
    passed: list[str] = ["parse"]
    try:
        tool = _lookup(registry, proposal)
        passed.append("registry")
        arguments = _schema(tool, proposal)
        passed.append("schema")
        facts = CallFacts(run_id=run.run_id, subject=run.subject, step=run.step)
        resource, arguments = _semantic(tool, arguments, facts)
        passed.append("semantic")
    except _Rejected as rejected:
        return _with_passed(rejected.decision, passed)

    contract = tool.contract
    auth = authorize(
        required=contract.required_capabilities,
        grants=grants,
        run_id=run.run_id,
        step=run.step,
        resource=resource,
        arguments=arguments,
        path_field=_path_field(tool),
    )
    if not auth.ok:
        return Reject(
            "authorization", auth.code or "MISSING_CAPABILITY", auth.message, tuple(passed)
        )
    passed.append("authorization")

    p_hash = proposal.hash()
    confirmation = _confirmation(
        proposal, tool, run, arguments, confirmations, provenance, p_hash, passed
    )
    if not isinstance(confirmation, ConfirmationCheck):
        return confirmation
    passed.append("confirmation")

    stopped = _state_and_budget(run, now_ms, passed)
    if stopped is not None:
        return stopped
    command = _command(
        proposal,
        contract,
        run=run,
        arguments=arguments,
        resource=resource,
        proposal_hash=p_hash,
        grant_ids=auth.grant_ids,
        confirmation=confirmation,
        now_ms=now_ms,
    )
    return Execute(command=command, passed=tuple(passed))


def _confirmation(
    proposal: ActionProposal,
    tool: RegisteredTool,
    run: RunView,
    arguments: dict[str, Any],
    confirmations: Iterable[Confirmation],
    provenance: ArgumentProvenance | None,
    p_hash: str,
    passed: list[str],
) -> ConfirmationCheck | Decision:
    """The confirmation layer: the mode the run's tool policy gives this call (the contract's
    own when the policy does not name the tool), then the confirmation evidence for it."""
    contract = tool.contract
    needs = requirement(
        run.tool_policy.for_tool(contract.name),
        contract,
        arguments=arguments,
        provenance=provenance,
        path_field=_path_field(tool),
    )
    if needs.refused:
        # No person is asked to spot the attacker's value in a recipient or a URL.
        message = f"derived from untrusted content: {', '.join(needs.refused)}"[:256]
        return Reject("confirmation", needs.trigger or "", message, tuple(passed))
    confirmation = check_confirmation(
        contract=contract,
        mode=needs.mode,
        proposal_hash=p_hash,
        confirmations=confirmations,
        run_id=run.run_id,
        step=run.step,
        hash_in=lambda scheme: hashing.proposal_hash(
            proposal.tool_name, proposal.tool_version, proposal.arguments, scheme
        ),
    )
    if confirmation.code is not None:
        return Reject("confirmation", confirmation.code, "the person declined", tuple(passed))
    if not confirmation.ok:
        return NeedsConfirmation(
            proposal_hash=p_hash,
            confirmation_hash=confirmation.needed_hash or p_hash,
            existing_confirmation_id=confirmation.confirmation_id,
            passed=tuple(passed),
            why=confirmation.why,
            trigger=needs.trigger,
            untrusted_ids=needs.untrusted_ids,
            untrusted_arguments=needs.arguments,
            approvers=_approvers(run, contract),
        )
    return confirmation


def _approvers(run: RunView, contract: ToolContract) -> ApproverRule:
    """The one place the effective approver rule is chosen: the contract's, made stricter by
    the run's tool policy where it names one. A policy only tightens it (the contract's four
    eyes on an irreversible write stays four eyes whatever a deployment or profile says)."""
    named = run.tool_policy.approvers_for(contract.name)
    rule = contract.approvers.value
    return approver_rule(join_approvers(rule, named) if named is not None else rule)


def _state_and_budget(run: RunView, now_ms: int, passed: list[str]) -> Decision | None:
    """The state and budget layers; None when both pass (each appends itself to ``passed``)."""
    if run.status != "running":
        return Reject("state", "RUN_NOT_RUNNING", f"run is {run.status}", tuple(passed))
    if run.unresolved_effects:
        # seed §15: after an unknown outcome no new action starts until it is reconciled.
        return Stop("state", "UNRESOLVED_UNKNOWN_EFFECT", "reconcile first", tuple(passed))
    passed.append("state")

    if run.tool_calls >= run.max_tool_calls:
        return Stop("budget", "MAX_TOOL_CALLS_REACHED", "tool-call budget spent", tuple(passed))
    if now_ms >= run.deadline_ms:
        return Stop("budget", "DEADLINE_REACHED", "run deadline passed", tuple(passed))
    passed.append("budget")
    return None


def _command(
    proposal: ActionProposal,
    contract: ToolContract,
    *,
    run: RunView,
    arguments: Any,
    resource: str | None,
    proposal_hash: str,
    grant_ids: tuple[str, ...],
    confirmation: ConfirmationCheck,
    now_ms: int,
) -> ExecutableCommand:
    """The sealed command of a proposal that passed every layer."""
    args_hash = _arguments_hash(proposal, arguments)
    token = hashing.idempotency_token(run.run_id, proposal.proposal_id, contract.version, args_hash)
    return _issue(
        command_id=f"{run.run_id}:{proposal.proposal_id}",
        run_id=run.run_id,
        proposal_id=proposal.proposal_id,
        tool_name=contract.name,
        tool_version=contract.version,
        validated_arguments=arguments,
        arguments_hash=args_hash,
        proposal_hash=proposal_hash,
        idempotency_token=token,
        resource=resource,
        # seed §13: a tool never gets more time than the run has left.
        deadline_ms=min(run.deadline_ms, now_ms + contract.timeout_ms),
        granted_capabilities=tuple(contract.required_capabilities),
        grant_ids=grant_ids,
        confirmation_id=confirmation.confirmation_id,
        consume_confirmation=confirmation.consume,
    )


def _with_passed(decision: Decision, passed: list[str]) -> Decision:
    if isinstance(decision, Reject):
        return Reject(decision.layer, decision.code, decision.message, tuple(passed))
    return decision


def loop_fingerprint(proposal: ActionProposal, *, registry: ToolRegistry, facts: CallFacts) -> str:
    """The loop guard's key: the proposal hash of the arguments *as the tool would receive
    them*, so ``run-output/a``, ``run-output/./a`` and ``run-output//a`` (or a corpus left to its
    default and the default spelled out) are one repeated proposal, not three new ones. When the
    arguments cannot be bound (the gate will reject them) it is the proposal's own hash."""
    tool = registry.get(proposal.tool_name, proposal.tool_version)
    arguments = proposal.arguments
    if tool is None or tool.contract.resource is None or not isinstance(arguments, dict):
        return proposal.hash()
    try:
        _, bound = bind_resource(tool.contract.resource, arguments, facts)
    except ResourceError:
        return proposal.hash()
    if bound is arguments:
        return proposal.hash()
    return hashing.proposal_hash(proposal.tool_name, proposal.tool_version, bound)


def command_fingerprint(command: ExecutableCommand) -> str:
    """``loop_fingerprint`` of the proposal this command was issued for (its arguments are the
    bound ones; their c2 text is the same whether numbers were normalized or not)."""
    text = hashing.canonical(command.validated_arguments)
    return hashing.proposal_hash_from_canonical(command.tool_name, command.tool_version, text)
