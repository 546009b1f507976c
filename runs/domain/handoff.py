"""Human handoff bundles (seed §14): state and evidence handed to a person, not an error text."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from policy.domain.secrets.redaction import redact_secrets
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import StopReason
from runs.domain.state import RunState


class HandoffStatus(enum.StrEnum):
    """A handoff's life: opened by the run, claimed by one reviewer, resolved by them."""

    OPEN = "open"
    CLAIMED = "claimed"
    RESOLVED = "resolved"


# What a reviewer may do, by reason. Every action is a command into the state machine.
_SAFE_ACTIONS: dict[str, list[str]] = {
    StopReason.TOOL_OUTCOME_UNKNOWN: [
        "check the external system for the idempotency token",
        "mark_effect_present or mark_effect_absent after checking",
        "retry with the same idempotency token",
    ],
    StopReason.TOOL_POSTCONDITION_FAILED: [
        "inspect the stored artifact against the recorded hash",
        "compensate (undo the write) or mark_effect_present if the stored state is right",
    ],
    StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION: [
        "read the repeated proposal and the last observation",
        "start a new run with a clearer goal or other grants",
    ],
    StopReason.POLLING_LIMIT_REACHED: [
        "check the polled resource by hand",
        "start a new run later",
    ],
    StopReason.MAX_STEPS_REACHED: [
        "review the partial artifacts",
        "start a new run with a larger budget",
    ],
    StopReason.DAILY_STEP_QUOTA_EXHAUSTED: [
        "review the partial artifacts",
        "start a new run on the next UTC day, or raise AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT",
    ],
    StopReason.MAX_TOOL_CALLS_REACHED: [
        "review the partial artifacts",
        "start a new run with a larger budget",
    ],
    StopReason.MAX_TOKENS_REACHED: [
        "review the partial artifacts and the tokens each planner.output spent",
        "start a new run with a larger max_tokens, or a smaller model",
    ],
}
_DEFAULT_SAFE = ["read the trace and observations", "fail the run with a reason"]

FORBIDDEN_AUTOMATIC_ACTIONS = [
    "retry under a new idempotency token",
    "set a run status by hand",
    "re-plan from step one",
    "treat a tool's success response as a verified business success",
]
# seed §15, by reason: what no automation may do on top of the above.
_FORBIDDEN: dict[str, list[str]] = {
    StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION: [
        "send the same proposal or error back to the planner"
    ],
    StopReason.POLLING_LIMIT_REACHED: ["send the same proposal or error back to the planner"],
}


def build_handoff_bundle(
    *,
    state: RunState,
    reason: str,
    trusted_observations: Sequence[dict[str, Any]],
    unknown_effects: Sequence[dict[str, Any]],
    required: dict[str, Any] | None = None,
    proposal: dict[str, Any] | None = None,
    proposal_hash: str | None = None,
) -> dict[str, Any]:
    """The seed's fields: run id, state + version, goal, last trusted observations, pending
    proposal, required capability/confirmation, unknown effects and their reconciliation
    status, recommended safe actions, forbidden automatic actions.

    ``proposal``/``proposal_hash``: what the handoff is about when the state holds no pending
    proposal — a loop stop names the repeated proposal and its hash (the loop fingerprint)."""
    # Redacted as a whole: the bundle is shown to reviewers and stored (issue 9 item 12).
    bundle = {
        "run_id": state.run_id,
        "status": state.status.value,
        "version": state.version,
        "reason": reason,
        "goal": state.goal,
        "step": state.step,
        "tool_calls": state.tool_calls,
        "last_trusted_observations": list(trusted_observations),
        "pending_proposal": proposal if proposal is not None else state.pending_proposal,
        "repeated_proposal_hash": proposal_hash,
        "required": required or {},
        "unknown_effects": list(unknown_effects),
        "recommended_safe_actions": _SAFE_ACTIONS.get(reason, _DEFAULT_SAFE),
        "forbidden_automatic_actions": FORBIDDEN_AUTOMATIC_ACTIONS + _FORBIDDEN.get(reason, []),
    }
    redacted: dict[str, Any] = redact_secrets(bundle)
    return redacted


# --- resolution rules (one place for the API, the console and the service) -------------------

# Every command a reviewer may send, in the order the console offers them.
RESOLUTION_ACTIONS = (
    "retry_same_token",
    "mark_effect_present",
    "mark_effect_absent",
    "compensate",
    "cancel",
    "fail",
)
EFFECT_ACTIONS = frozenset(RESOLUTION_ACTIONS[:4])
# The others (cancel, fail) end the run through the state machine and settle no effect.
RUN_ACTIONS = frozenset(RESOLUTION_ACTIONS) - EFFECT_ACTIONS

# (button label, what the command does), for people.
RESOLUTION_TEXT: dict[str, tuple[str, str]] = {
    "retry_same_token": (
        "Retry with the same token",
        "Run the tool again under the same idempotency token; an idempotent tool cannot "
        "double the effect. The ledger row settles by what the retry finds.",
    ),
    "mark_effect_present": (
        "Mark effect present",
        "You checked the outside system and the effect is there: the ledger row becomes "
        "reconciled.",
    ),
    "mark_effect_absent": (
        "Mark effect absent",
        "You checked the outside system and the effect is not there: the ledger row becomes "
        "failed.",
    ),
    "compensate": (
        "Compensate",
        "Undo the effect with the tool's own compensation; the ledger row becomes reconciled.",
    ),
    "cancel": (
        "Cancel the run",
        "Cancel the run through the state machine (a finished run keeps its status); no "
        "effect is settled.",
    ),
    "fail": (
        "Fail the run",
        "Fail the run through the state machine (a finished run keeps its status); no "
        "effect is settled.",
    ),
}

# Ledger statuses a handoff can settle (the latest such row of the run is the one it settles).
UNSETTLED_EFFECTS = (
    LedgerStatus.UNKNOWN,
    LedgerStatus.COMPENSATION_REQUIRED,
    LedgerStatus.STARTED,
)


def resolution_refusal(
    action: str, *, effect_status: str | None, can_compensate: bool
) -> tuple[str, str] | None:
    """Why ``action`` may not resolve a handoff whose run's unsettled effect has
    ``effect_status`` (None: no unsettled effect) — a (code, message) pair — or None.

    A write that happened but failed its post-condition (compensation-required) is present by
    definition: it can be compensated or accepted, never marked absent, and retrying it under
    the same token only repeats the answer that failed verification."""
    if action not in RESOLUTION_ACTIONS:
        return "HANDOFF_ACTION_UNKNOWN", f"unknown action {action!r}"
    if action not in EFFECT_ACTIONS:
        return None
    if effect_status is None:
        return "HANDOFF_NO_EFFECT", "no effect to settle"
    if action == "compensate" and not can_compensate:
        return "COMPENSATION_NOT_SUPPORTED", "this tool cannot compensate"
    if effect_status == LedgerStatus.COMPENSATION_REQUIRED and action in (
        "retry_same_token",
        "mark_effect_absent",
    ):
        return (
            "HANDOFF_ACTION_NOT_ALLOWED",
            "the write happened and failed its check: compensate it or mark it present",
        )
    return None


def allowed_resolutions(*, effect_status: str | None, can_compensate: bool) -> list[str]:
    """The commands that may resolve such a handoff, in the console's order."""
    return [
        action
        for action in RESOLUTION_ACTIONS
        if resolution_refusal(action, effect_status=effect_status, can_compensate=can_compensate)
        is None
    ]


def resolver_refusal(
    *, status: str, assignee_id: int | None, user_id: int | None, user_is_admin: bool
) -> str | None:
    """Why this person may not resolve the handoff now (a stable code), or None.

    Only the claimant resolves (an admin may stand in); a handoff claimed under a name that is
    no account (a scenario, the system) may be resolved by any reviewer."""
    if status != HandoffStatus.CLAIMED:
        return "HANDOFF_NOT_CLAIMED"
    if assignee_id is not None and assignee_id != user_id and not user_is_admin:
        return "PERMISSION_DENIED"
    return None
