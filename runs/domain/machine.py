"""The run state machine (seed §7): one table; anything not in it raises."""

from __future__ import annotations

import enum

from runs.domain.errors import IllegalTransition


class Status(enum.StrEnum):
    CREATED = "created"
    RUNNING = "running"
    WAITING_CONFIRMATION = "waiting_confirmation"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class StopReason(enum.StrEnum):
    """Why a run stopped, or waits (``RunState.stop_reason``); stored as the string value.

    A planner's or the store's error code may also end a run (``lifecycle.fail``): those are
    listed here as far as the runtime raises them, but a plugin's planner may name its own.
    """

    FINAL_ANSWER_VALIDATED = "FINAL_ANSWER_VALIDATED"
    FINAL_CITATION_VALIDATION_FAILED = "FINAL_CITATION_VALIDATION_FAILED"
    USER_CONFIRMATION_REQUIRED = "USER_CONFIRMATION_REQUIRED"
    CANCELLED = "CANCELLED"
    DEADLINE_REACHED = "DEADLINE_REACHED"
    MAX_STEPS_REACHED = "MAX_STEPS_REACHED"
    MAX_TOOL_CALLS_REACHED = "MAX_TOOL_CALLS_REACHED"
    MAX_TOKENS_REACHED = "MAX_TOKENS_REACHED"
    DAILY_STEP_QUOTA_EXHAUSTED = "DAILY_STEP_QUOTA_EXHAUSTED"
    REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"
    POLLING_LIMIT_REACHED = "POLLING_LIMIT_REACHED"
    UNRESOLVED_UNKNOWN_EFFECT = "UNRESOLVED_UNKNOWN_EFFECT"
    TOOL_OUTPUT_INVALID = "TOOL_OUTPUT_INVALID"
    TOOL_POSTCONDITION_FAILED = "TOOL_POSTCONDITION_FAILED"
    TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
    TOOL_FAILED = "TOOL_FAILED"
    FAILED_BY_REVIEWER = "FAILED_BY_REVIEWER"
    PLANNER_FAILED = "PLANNER_FAILED"
    PLANNER_EXHAUSTED = "PLANNER_EXHAUSTED"
    UNKNOWN_PLANNER = "UNKNOWN_PLANNER"
    # The model planner's endpoint (runs.domain.gateway.model_planning), once retries are spent.
    PLANNER_TIMEOUT = "PLANNER_TIMEOUT"
    PLANNER_RATE_LIMITED = "PLANNER_RATE_LIMITED"
    PLANNER_UNAVAILABLE = "PLANNER_UNAVAILABLE"
    PLANNER_REQUEST_REJECTED = "PLANNER_REQUEST_REJECTED"
    PLANNER_ENDPOINT_UNKNOWN = "PLANNER_ENDPOINT_UNKNOWN"
    STORE_INTEGRITY_VIOLATION = "STORE_INTEGRITY_VIOLATION"


class Event(enum.StrEnum):
    START = "start"
    STEP = "step"  # a step that leaves the run running (tool succeeded, proposal rejected)
    NEEDS_CONFIRMATION = "needs_confirmation"
    FINAL_VALIDATED = "final_validated"
    FAIL = "fail"  # budget exceeded, non-retryable failure, loop, invalid final
    CANCEL_REQUESTED = "cancel_requested"
    DEADLINE_REACHED = "deadline_reached"
    DEADLINE_DURING_TOOL = "deadline_during_tool"
    CONFIRMED = "confirmed"
    DECLINED = "declined"
    # A person edited the waiting proposal (the edited one runs, or waits no more for them), or
    # answered it with a note for the planner instead of a decision (issue 24 item 1).
    EDITED = "edited"
    RESPONDED = "responded"
    EFFECTS_CHECKED = "effects_checked"
    UNKNOWN_EFFECT = "unknown_effect"


S, E = Status, Event

TRANSITIONS: dict[tuple[Status, Event], Status] = {
    (S.CREATED, E.START): S.RUNNING,
    (S.CREATED, E.CANCEL_REQUESTED): S.CANCELLED,
    (S.CREATED, E.FAIL): S.FAILED,
    (S.RUNNING, E.STEP): S.RUNNING,
    (S.RUNNING, E.NEEDS_CONFIRMATION): S.WAITING_CONFIRMATION,
    (S.RUNNING, E.FINAL_VALIDATED): S.COMPLETED,
    (S.RUNNING, E.CANCEL_REQUESTED): S.CANCELLING,
    (S.RUNNING, E.FAIL): S.FAILED,
    # Between steps no tool is active, so the deadline fails the run outright; during a tool the
    # run must first stop the tool and check its effect (seed §7: "cancelling or failed").
    (S.RUNNING, E.DEADLINE_REACHED): S.FAILED,
    (S.RUNNING, E.DEADLINE_DURING_TOOL): S.CANCELLING,
    (S.WAITING_CONFIRMATION, E.CONFIRMED): S.RUNNING,
    (S.WAITING_CONFIRMATION, E.DECLINED): S.RUNNING,
    (S.WAITING_CONFIRMATION, E.EDITED): S.RUNNING,
    (S.WAITING_CONFIRMATION, E.RESPONDED): S.RUNNING,
    (S.WAITING_CONFIRMATION, E.DEADLINE_REACHED): S.CANCELLED,
    # Nothing runs while waiting, so a cancel needs no effect check.
    (S.WAITING_CONFIRMATION, E.CANCEL_REQUESTED): S.CANCELLED,
    (S.CANCELLING, E.EFFECTS_CHECKED): S.CANCELLED,
    (S.CANCELLING, E.UNKNOWN_EFFECT): S.FAILED,
}


def transition(status: Status | str, event: Event | str) -> Status:
    """Return the next status, or raise ``IllegalTransition``."""
    try:
        key = (Status(status), Event(event))
    except ValueError as exc:
        raise IllegalTransition(f"unknown status or event: {status!r}, {event!r}") from exc
    try:
        return TRANSITIONS[key]
    except KeyError:
        raise IllegalTransition(
            f"{key[0].value} does not accept {key[1].value}",
            status=key[0].value,
            event=key[1].value,
        ) from None


def allowed_events(status: Status | str) -> frozenset[Event]:
    return frozenset(e for (s, e) in TRANSITIONS if s == Status(status))
