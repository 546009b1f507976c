"""What a run's page says to do next when the run did not end as asked (issue 24 item 5): a
failed or cancelled run, a completed one with a write that did not take effect (a declined
confirmation, a refused or failed write), a run handed to a person.

Plain data: the stop reason in words and the advice that fits it. Which actions the page
offers (run again, open the handoff, edit the profile) depends on who looks: the caller decides
those (``runs.web.console_selectors``); this only says which apply to the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.domain.machine import Status, StopReason

R = StopReason
# The stop reason in a sentence an operator or a user reads without the code book.
REASON_WORDS: dict[str, str] = {
    R.FINAL_ANSWER_VALIDATED: "The run gave its final answer.",
    R.FINAL_CITATION_VALIDATION_FAILED: "The final answer cited something the run never saw.",
    R.USER_CONFIRMATION_REQUIRED: "The run waits for a person to confirm its next action.",
    R.CANCELLED: "Someone cancelled the run.",
    R.DEADLINE_REACHED: "The run ran out of time.",
    R.MAX_STEPS_REACHED: "The run used all its steps before it had an answer.",
    R.MAX_TOOL_CALLS_REACHED: "The run used all its tool calls before it had an answer.",
    R.MAX_TOKENS_REACHED: "The run's model planner spent all its tokens.",
    R.DAILY_STEP_QUOTA_EXHAUSTED: "The subject's steps for today are used up.",
    R.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION: (
        "The planner proposed the same action again and again without learning anything new."
    ),
    R.POLLING_LIMIT_REACHED: "The run polled the same thing too often.",
    R.UNRESOLVED_UNKNOWN_EFFECT: "A tool call's effect is unknown and nobody settled it.",
    R.TOOL_OUTPUT_INVALID: "A tool answered with something that does not fit its contract.",
    R.TOOL_POSTCONDITION_FAILED: "A tool's write could not be verified afterwards.",
    R.TOOL_OUTCOME_UNKNOWN: "A tool call's outcome is unknown (it may or may not have acted).",
    R.TOOL_FAILED: "A tool failed.",
    R.FAILED_BY_REVIEWER: "A reviewer ended the run.",
    R.PLANNER_FAILED: "The planner failed.",
    R.PLANNER_EXHAUSTED: "The planner's script ended before the run had an answer.",
    R.UNKNOWN_PLANNER: "The run names a planner this deployment does not have.",
    R.PLANNER_TIMEOUT: "The model endpoint did not answer in time.",
    R.PLANNER_RATE_LIMITED: "The model endpoint refused: too many requests.",
    R.PLANNER_UNAVAILABLE: "The model endpoint was unavailable.",
    R.PLANNER_REQUEST_REJECTED: "The model endpoint rejected the request.",
    R.PLANNER_ENDPOINT_UNKNOWN: "The run names a model endpoint that is not configured.",
    R.STORE_INTEGRITY_VIOLATION: "The database refused a write that would break the run's rules.",
}

_BUDGET = "Run it again with a narrower goal, or ask an operator for a profile with a larger "
# What to try, by reason; one line each.
_ADVICE: dict[str, str] = {
    R.DEADLINE_REACHED: _BUDGET + "time limit.",
    R.MAX_STEPS_REACHED: _BUDGET + "step budget.",
    R.MAX_TOOL_CALLS_REACHED: _BUDGET + "tool-call budget.",
    R.MAX_TOKENS_REACHED: _BUDGET + "token budget.",
    R.DAILY_STEP_QUOTA_EXHAUSTED: "Run it again tomorrow (UTC), or ask an admin for more steps.",
    R.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION: "Run it again with a clearer goal.",
    R.POLLING_LIMIT_REACHED: "Check the polled resource yourself, then run it again later.",
    R.TOOL_OUTCOME_UNKNOWN: "A reviewer checks the outside system before anything is retried.",
    R.UNRESOLVED_UNKNOWN_EFFECT: "A reviewer checks the outside system before anything is retried.",
    R.TOOL_POSTCONDITION_FAILED: "A reviewer compares what was written with what was recorded.",
    R.PLANNER_TIMEOUT: "Run it again in a while: the endpoint may answer then.",
    R.PLANNER_RATE_LIMITED: "Run it again in a while: the endpoint may answer then.",
    R.PLANNER_UNAVAILABLE: "Run it again in a while: the endpoint may answer then.",
    R.PLANNER_ENDPOINT_UNKNOWN: "An operator fixes the profile's model endpoint.",
    R.UNKNOWN_PLANNER: "An operator fixes the profile's planner.",
    R.PLANNER_EXHAUSTED: "An operator extends the profile's planner script.",
    R.CANCELLED: "Run it again if it was cancelled by mistake.",
}
_DEFAULT_ADVICE = "Read the trace below: each step says what was decided and why."
_NOT_APPLIED = (
    "Read the trace to see which write did not happen and why (a person declined it, the "
    "tool refused it or failed); run it again once that is settled."
)


def reason_in_words(reason: str | None) -> str:
    """The stop reason as a sentence; a code the runtime does not know (a plugin planner's)
    is said as it is."""
    if not reason:
        return "No stop reason was recorded."
    return REASON_WORDS.get(reason, f"The run stopped: {reason}.")


@dataclass(frozen=True)
class NextSteps:
    headline: str
    reason: str
    advice: str
    # Whether a handoff bundle waits for a reviewer (the page links it for those who may).
    handed_off: bool


def next_steps(
    *, status: str, stop_reason: str | None, outcome_flag: str | None, handed_off: bool
) -> NextSteps | None:
    """The box for a run that did not end as asked, or None (still going, or done well)."""
    if status == Status.FAILED:
        headline = "This run failed"
    elif status == Status.CANCELLED:
        headline = "This run was cancelled"
    elif status == Status.COMPLETED and outcome_flag:
        return NextSteps(
            "This run completed, but a write did not take effect",
            reason_in_words(stop_reason),
            _NOT_APPLIED,
            handed_off,
        )
    elif handed_off:
        headline = "This run was handed to a person"
    else:
        return None
    advice = _ADVICE.get(stop_reason or "", _DEFAULT_ADVICE)
    if handed_off:
        advice = "A reviewer has the handoff bundle: " + advice[0].lower() + advice[1:]
    return NextSteps(headline, reason_in_words(stop_reason), advice, handed_off)
