"""runs.domain.console.next_steps: the box a run's page shows when the run did not end as asked."""

from __future__ import annotations

import pytest

from runs.domain.console.next_steps import REASON_WORDS, next_steps, reason_in_words
from runs.domain.machine import Status, StopReason


def test_every_stop_reason_the_runtime_writes_has_words() -> None:
    assert set(REASON_WORDS) == {r.value for r in StopReason}
    for words in REASON_WORDS.values():
        assert words.endswith(".")
        assert "_" not in words


def test_a_code_the_runtime_does_not_know_is_said_as_it_is() -> None:
    assert reason_in_words("MY_PLANNER_GAVE_UP") == "The run stopped: MY_PLANNER_GAVE_UP."
    assert reason_in_words(None) == "No stop reason was recorded."


@pytest.mark.parametrize("status", [Status.CREATED, Status.RUNNING, Status.WAITING_CONFIRMATION])
def test_no_box_while_the_run_goes_on(status: Status) -> None:
    assert next_steps(status=status, stop_reason=None, outcome_flag=None, handed_off=False) is None


def test_no_box_for_a_run_that_ended_as_asked() -> None:
    done = next_steps(
        status=Status.COMPLETED,
        stop_reason=StopReason.FINAL_ANSWER_VALIDATED,
        outcome_flag=None,
        handed_off=False,
    )
    assert done is None


def test_a_failed_run_says_why_and_what_to_try() -> None:
    box = next_steps(
        status=Status.FAILED,
        stop_reason=StopReason.MAX_STEPS_REACHED,
        outcome_flag=None,
        handed_off=False,
    )
    assert box is not None
    assert box.headline == "This run failed"
    assert box.reason == "The run used all its steps before it had an answer."
    assert "larger step budget" in box.advice


def test_a_handed_off_run_says_a_reviewer_has_it() -> None:
    box = next_steps(
        status=Status.FAILED,
        stop_reason=StopReason.TOOL_OUTCOME_UNKNOWN,
        outcome_flag=None,
        handed_off=True,
    )
    assert box is not None
    assert box.handed_off
    assert box.advice.startswith("A reviewer has the handoff bundle: a reviewer checks")


def test_a_cancelled_run_and_a_declined_write() -> None:
    cancelled = next_steps(
        status=Status.CANCELLED, stop_reason="CANCELLED", outcome_flag=None, handed_off=False
    )
    assert cancelled is not None
    assert cancelled.headline == "This run was cancelled"
    declined = next_steps(
        status=Status.COMPLETED,
        stop_reason=StopReason.FINAL_ANSWER_VALIDATED,
        outcome_flag="writes_not_applied",
        handed_off=False,
    )
    assert declined is not None
    assert declined.headline == "This run completed, but a write did not take effect"
    assert "declined" in declined.advice
