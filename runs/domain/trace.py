"""Trace event names (seed §2.4) and the controlled-summary rule for their details.

Details hold summaries only: names, versions, statuses, codes, sizes, hashes, durations, ids.
Full texts and outputs live in observations and artifacts, which are access-controlled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policy.domain.secrets.redaction import redact_secrets

RUN_CREATED = "run.created"
RUN_STARTED = "run.started"
PLANNER_OUTPUT = "planner.output"
# A model planner's request, recorded before it is sent (runs.domain.gateway.calls).
PLANNER_REQUESTED = "planner.requested"
PROPOSAL_RECEIVED = "proposal.received"
# Where each argument's value came from, as the runtime computed it
# (policy.domain.origins.provenance).
PROPOSAL_PROVENANCE = "proposal.provenance"
PROPOSAL_SCHEMA_VALIDATED = "proposal.schema.validated"
POLICY_CAPABILITY_CHECKED = "policy.capability.checked"
POLICY_CONFIRMATION_CHECKED = "policy.confirmation.checked"
PROPOSAL_REJECTED = "proposal.rejected"
PROPOSAL_WAITING_CONFIRMATION = "proposal.waiting-confirmation"
PROPOSAL_LOOP_DETECTED = "proposal.loop-detected"
CONFIRMATION_DECIDED = "confirmation.decided"
# One approval of two (four eyes) is recorded; the run keeps waiting for the second.
CONFIRMATION_APPROVAL_RECORDED = "confirmation.approval-recorded"
# A person edited the waiting proposal (the diff, values as the trace masks them), or sent the
# planner a note instead of deciding (issue 24 item 1).
CONFIRMATION_EDITED = "confirmation.edited"
CONFIRMATION_RESPONDED = "confirmation.responded"
TOOL_STARTED = "tool.started"
TOOL_COMPLETED = "tool.completed"
TOOL_RETRYING = "tool.retrying"
TOOL_RECOVERED = "tool.recovered"
HANDOFF_OPENED = "handoff.opened"
HANDOFF_CLAIMED = "handoff.claimed"
HANDOFF_RESOLVED = "handoff.resolved"
TOOL_RESULT_VALIDATED = "tool.result.validated"
TOOL_VERIFICATION_FAILED = "tool.verification-failed"
FINAL_VALIDATED = "final.validated"
FINAL_REJECTED = "final.rejected"
STATE_TRANSITIONED = "state.transitioned"
RUN_CANCEL_REQUESTED = "run.cancel-requested"
RUN_STOPPED = "run.stopped"
# A user's erase replaced their values in this run's records (issue 9 item 11).
RUN_VALUES_ERASED = "run.values-erased"

ALL_EVENTS = tuple(
    value for name, value in sorted(globals().items()) if name.isupper() and isinstance(value, str)
)

_SCALAR = (str, int, float, bool, type(None))
MAX_DETAIL_STRING = 256


@dataclass(frozen=True)
class TraceDraft:
    """An event before the store gives it its sequence number."""

    event: str
    proposal_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every event passes here before it is stored or sent: the one place the trace is
        # redacted of secrets (a cancel reason, a logged argument, a reviewer's note).
        redacted = redact_secrets(self.details)
        if redacted is not self.details:
            redacted = {k: _fit(v) for k, v in redacted.items()}
            object.__setattr__(self, "details", redacted)
        for key, value in self.details.items():
            _check_detail(key, value)


def _fit(value: Any) -> Any:
    # A tag can be longer than the secret it replaced; cut after redacting, never before (a cut
    # secret might no longer look like one).
    if isinstance(value, str):
        return value[:MAX_DETAIL_STRING]
    if isinstance(value, list | tuple):
        return [_fit(v) for v in value]
    return value


def _check_detail(key: str, value: Any) -> None:
    # A detail is a scalar or a short list of scalars. Anything richer is content, and content
    # belongs in an observation or artifact, not in the trace.
    values = value if isinstance(value, list | tuple) else [value]
    if isinstance(value, list | tuple) and len(value) > 64:
        raise ValueError(f"trace detail {key!r} is too long a list")
    for item in values:
        if not isinstance(item, _SCALAR):
            raise ValueError(f"trace detail {key!r} must be scalar, got {type(item).__name__}")
        if isinstance(item, str) and len(item) > MAX_DETAIL_STRING:
            raise ValueError(f"trace detail {key!r} is longer than {MAX_DETAIL_STRING}")
