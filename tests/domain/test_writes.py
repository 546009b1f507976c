"""What a run's writes came to (issue 21 item 2, runs.domain.writes): counted as the run goes,
shown in ``run.stopped``, and a completed run whose write did not take effect is flagged.

Whole runs on the in-memory store (Runner + ThreadExecutor + FixturePlanner, small real tools);
the fixture planner's answers that depend on what a step came to (runs.domain.planning.as_seen).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from policy.domain.contracts import ToolContext, ToolContract
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification
from runs.demo.demo_planner import failed
from runs.demo.demo_planner import final as demo_final
from runs.domain import lifecycle, writes
from runs.domain.machine import Status
from runs.domain.state import RunState
from tests.domain.toolkit import RUN_ID, SUBJECT, Toolkit, final, grant, harness, tool

ANSWER = "After three retries, hand off to a person."
PUT = {"key": "color", "value": "blue"}


def _answering(contract: ToolContract, outcome: ToolOutcome) -> ToolContract:
    """The contract with a tool that always answers ``outcome`` (the world refused, say)."""

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return outcome

    return dataclasses.replace(contract, execute=execute)


def _counts(state: RunState) -> tuple[int | None, ...]:
    return tuple(getattr(state, writes.FIELDS[o]) for o in OutcomeStatus)


def _stopped(h: Any) -> dict[str, Any]:
    (event,) = h.events("run.stopped")
    return event["details"]


def _run(kit: Toolkit, kv: ToolContract, outputs: list[Any], **kw: Any) -> Any:
    h = harness(outputs, [kit.search_contract(), kv, kit.preference_contract()], kit=kit, **kw)
    h.advance()
    return h


def test_a_write_the_tool_rejects_flags_the_completed_run() -> None:
    """The defect: a write rejected by the tool (the demo's PREFERENCE_VERSION_CONFLICT) and a
    run that still ends ``completed`` with nothing saying so, its answer claiming the write.
    The demo's way of answering (runs.demo.demo_planner) says what the planner saw instead."""
    kit = Toolkit()
    conflict = ToolOutcome.rejected("PREFERENCE_VERSION_CONFLICT", "stale version")
    answer = demo_final(
        "Saved: color=blue.", ["tool-1"], unless=failed(2, "Could not save color=blue: {code}.")
    )
    h = _run(
        kit,
        _answering(kit.kv_contract(), conflict),
        [tool("p1", "search_public", {"query": "retries"}), tool("p2", "kv_put", PUT), answer],
    )
    state = h.state()
    assert state.status is Status.COMPLETED
    assert state.answer == "Could not save color=blue: PREFERENCE_VERSION_CONFLICT."
    # (succeeded, rejected, failed, unknown): the search is a read and is not counted.
    assert _counts(state) == (0, 1, 0, 0)
    assert state.public()["writes"] == {"succeeded": 0, "rejected": 1, "failed": 0, "unknown": 0}
    assert state.public()["outcome_flag"] == "writes_not_applied"
    details = _stopped(h)
    assert details["status"] == "completed"
    assert (details["writes_rejected"], details["writes_succeeded"]) == (1, 0)
    assert details["outcome_flag"] == "writes_not_applied"


def test_a_write_that_succeeded_leaves_the_run_unflagged() -> None:
    kit = Toolkit()
    h = _run(kit, kit.kv_contract(), [tool("p1", "kv_put", PUT), final(ANSWER, ["tool-1"])])
    assert _counts(h.state()) == (1, 0, 0, 0)
    assert "outcome_flag" not in _stopped(h)
    assert h.state().public()["outcome_flag"] is None


def test_a_write_the_gate_refuses_counts_and_a_refused_read_does_not() -> None:
    kit = Toolkit()
    h = _run(
        kit,
        kit.kv_contract(),
        [
            tool("p1", "search_public", {"query": "retries"}),
            tool("p2", "kv_put", PUT),  # no kv:write grant: authorization
            tool("p3", "search_public", {"query": "x", "bogus": True}),  # a read: not a write
            tool("p4", "no_such_tool", {}),  # no contract: no call to count
            final(ANSWER, ["tool-1"]),
        ],
        grants=[grant("search:public")],
    )
    assert h.state().status is Status.COMPLETED
    assert _counts(h.state()) == (0, 1, 0, 0)
    assert _stopped(h)["outcome_flag"] == "writes_not_applied"


def test_a_declined_write_counts_as_rejected() -> None:
    kit = Toolkit()
    h = harness(
        [tool("p1", "save_preference", {"key": "answer_language", "value": "zh"})],
        kit=kit,
    )
    waiting = h.advance()
    assert waiting.status is Status.WAITING_CONFIRMATION
    assert _counts(waiting) == (0, 0, 0, 0)  # not counted while a person has not answered
    commit = lifecycle.decide_confirmation(
        waiting,
        confirmation_id=waiting.pending_confirmation_id or "",
        approved=False,
        by="operator-olga",
        contract=kit.preference_contract(),
    )
    assert _counts(h.store.apply(commit)) == (0, 1, 0, 0)


def test_a_failed_write_fails_the_run_and_is_counted_without_the_flag() -> None:
    kit = Toolkit()
    broken = ToolOutcome.failed("UPSTREAM_DOWN", "no", retryable=False)
    h = _run(kit, _answering(kit.kv_contract(), broken), [tool("p1", "kv_put", PUT)])
    state = h.state()
    assert (state.status, state.stop_reason) == (Status.FAILED, "TOOL_FAILED")
    assert _counts(state) == (0, 0, 1, 0)
    details = _stopped(h)
    # A failed run says so in its status: the counts are there, the flag is not.
    assert details["writes_failed"] == 1
    assert "outcome_flag" not in details


def test_an_unknown_write_is_counted_unknown() -> None:
    kit = Toolkit()
    lost = ToolOutcome.unknown("TOOL_TIMEOUT", "no answer")
    h = _run(kit, _answering(kit.kv_contract(), lost), [tool("p1", "kv_put", PUT)])
    assert h.state().stop_reason == "TOOL_OUTCOME_UNKNOWN"
    assert _counts(h.state()) == (0, 0, 0, 1)
    assert _stopped(h)["writes_unknown"] == 1


def test_a_write_whose_post_condition_fails_counts_as_failed() -> None:
    kit = Toolkit()
    contract = dataclasses.replace(
        kit.kv_contract(), verify=lambda *a: Verification(ok=False, code="MISMATCH")
    )
    h = _run(kit, contract, [tool("p1", "kv_put", PUT)])
    assert h.state().stop_reason == "TOOL_POSTCONDITION_FAILED"
    assert _counts(h.state()) == (0, 0, 1, 0)


def test_a_run_from_before_the_counting_stays_uncounted() -> None:
    state = RunState(
        run_id=RUN_ID,
        subject=SUBJECT,
        goal="g",
        status=Status.COMPLETED,
        max_steps=1,
        max_tool_calls=1,
        max_repeated_proposal=1,
        deadline_ms=1,
        **dict.fromkeys(writes.FIELDS.values()),
    )
    writes.count(state, OutcomeStatus.REJECTED)
    assert _counts(state) == (None, None, None, None)
    assert state.public()["writes"] is None
    assert state.public()["outcome_flag"] is None
    assert writes.stop_details(state) == {}


@pytest.mark.parametrize(
    ("row_status", "effect", "before", "after"),
    [
        ("unknown", "present", (0, 0, 0, 1), (1, 0, 0, 0)),
        ("unknown", "absent", (0, 0, 0, 1), (0, 0, 1, 0)),
        ("unknown", "compensated", (0, 0, 0, 1), (0, 0, 1, 0)),
        ("compensation-required", "present", (0, 0, 1, 0), (1, 0, 0, 0)),
        ("compensation-required", "compensated", (0, 0, 1, 0), (0, 0, 1, 0)),
        ("started", "present", (0, 0, 0, 0), (1, 0, 0, 0)),  # never counted: only counted now
    ],
)
def test_a_write_a_reviewer_settles_counts_as_they_found_it(
    row_status: str, effect: str, before: tuple[int, ...], after: tuple[int, ...]
) -> None:
    state = harness([]).state()
    for outcome, n in zip(OutcomeStatus, before, strict=True):
        setattr(state, writes.FIELDS[outcome], n)
    writes.recount(state, row_status=row_status, effect=effect)
    assert _counts(state) == after


@pytest.mark.parametrize(
    ("status", "counts", "flag"),
    [
        ("completed", (0, 1, 0, 0), "writes_not_applied"),
        ("completed", (2, 0, 1, 0), "writes_not_applied"),
        ("completed", (0, 0, 0, 1), "writes_not_applied"),
        ("completed", (3, 0, 0, 0), None),
        ("completed", (0, 0, 0, 0), None),
        ("failed", (0, 1, 1, 1), None),
        ("cancelled", (0, 1, 0, 0), None),
        ("waiting_confirmation", (0, 1, 0, 0), None),
    ],
)
def test_the_flag_rule(status: str, counts: tuple[int, ...], flag: str | None) -> None:
    named = dict(zip([o.value for o in OutcomeStatus], counts, strict=True))
    assert writes.outcome_flag(status, named) == flag
    assert writes.outcome_flag(status, None) is None
