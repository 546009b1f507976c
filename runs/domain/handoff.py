"""Human handoff bundles (seed §14): state and evidence handed to a person, not an error text."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from policy.domain.redaction import redact_secrets
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
