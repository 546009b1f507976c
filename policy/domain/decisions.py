"""The gate's possible answers, and the one object that lets a tool run.

``ExecutableCommand`` can only be built by the gate: its constructor demands a module-private
seal, so neither a planner nor an adapter can fabricate one from proposal data.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from policy.domain.confirmation.approvers import DEFAULT_RULE, ApproverRule

# Set only while the gate (or a ledger restore) constructs a command. A field would be copied
# by ``dataclasses.replace``; a flag that is off during any other construction cannot be.
_ISSUING: contextvars.ContextVar[bool] = contextvars.ContextVar("issuing", default=False)

LAYERS = (
    "parse",
    "registry",
    "schema",
    "semantic",
    "authorization",
    "confirmation",
    "state",
    "budget",
)


@dataclass(frozen=True)
class ExecutableCommand:
    command_id: str
    run_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    validated_arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    idempotency_token: str
    resource: str | None
    deadline_ms: int
    granted_capabilities: tuple[str, ...]
    grant_ids: tuple[str, ...]
    confirmation_id: str | None
    consume_confirmation: bool

    def __post_init__(self) -> None:
        if not _ISSUING.get():
            raise TypeError("an ExecutableCommand is made by the policy gate only")


def _issue(**kwargs: Any) -> ExecutableCommand:
    token = _ISSUING.set(True)
    try:
        return ExecutableCommand(**kwargs)
    finally:
        _ISSUING.reset(token)


def restore_command(**fields: Any) -> ExecutableCommand:
    """Rebuild a command the gate issued earlier, from its persisted ledger row.

    Recovery and handoff retries re-issue the *same* command with the *same* token; they never
    go back through the planner. Only the ledger adapter (``runs.orm.store``) calls this, with the
    fields of a row that the gate's own command wrote.
    """
    return _issue(**fields)


def reissue(
    command: ExecutableCommand, *, run_deadline_ms: int, now_ms: int, timeout_ms: int
) -> ExecutableCommand:
    """The same command (same arguments, same token) for a new attempt, with a fresh effective
    deadline: min(run deadline, now + tool timeout) — seed §13, never a stale or longer one."""
    fields = {f: getattr(command, f) for f in command.__dataclass_fields__}
    fields["deadline_ms"] = min(run_deadline_ms, now_ms + timeout_ms)
    return _issue(**fields)


@dataclass(frozen=True)
class Execute:
    command: ExecutableCommand
    passed: tuple[str, ...] = LAYERS[1:]


@dataclass(frozen=True)
class Reject:
    layer: str
    code: str
    message: str = ""
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class NeedsConfirmation:
    proposal_hash: str
    confirmation_hash: str
    existing_confirmation_id: str | None = None
    passed: tuple[str, ...] = ()
    why: str = "USER_CONFIRMATION_REQUIRED"
    # Which tool-policy rule asked (``policy.domain.tool_policy``: UNTRUSTED_PROVENANCE, ...);
    # None when the contract's own confirmation mode did. With the untrusted ids it names.
    trigger: str | None = None
    untrusted_ids: tuple[str, ...] = ()
    # The arguments whose untrusted provenance made it wait (policy.domain.origins.argument_policy).
    untrusted_arguments: tuple[str, ...] = ()
    # Who may approve the confirmation this asks for (policy.domain.confirmation.approvers).
    approvers: ApproverRule = DEFAULT_RULE


@dataclass(frozen=True)
class Stop:
    layer: str
    reason: str
    message: str = ""
    passed: tuple[str, ...] = ()


Decision = Execute | Reject | NeedsConfirmation | Stop
