"""The runner's share of the per-subject limits (issue 9 item 10): the daily step quota is
spent where steps are spent, and a worker's advance can be bounded to a slice of steps."""

from __future__ import annotations

from collections import Counter

from runs.domain import trace as ev
from runs.domain.errors import VersionConflict
from runs.domain.machine import Status
from tests.domain.toolkit import SUBJECT, final, harness, tool

DAY_MS = 24 * 3600 * 1000


class DictQuota:
    """The StepQuota port in memory: per (subject, day of the injected clock)."""

    def __init__(self, daily_steps: int) -> None:
        self.daily_steps = daily_steps
        self.spent: Counter[tuple[str, int]] = Counter()

    def take(self, subject: str, now_ms: int) -> bool:
        key = (subject, now_ms // DAY_MS)
        if self.spent[key] >= self.daily_steps:
            return False
        self.spent[key] += 1
        return True

    def give_back(self, subject: str, now_ms: int) -> None:
        self.spent[(subject, now_ms // DAY_MS)] -= 1


def searches(n: int) -> list[dict]:
    return [tool(f"p{i}", "search_public", {"query": f"retry rule {i}"}) for i in range(1, n + 1)]


def test_a_run_meeting_the_daily_quota_stops_with_a_reason_and_a_handoff() -> None:
    """issue 9 item 10: the quota is checked before each planner step; a run that meets it
    stops as MAX_STEPS does (failed, handoff), never mid-step and never silently."""
    h = harness([*searches(4), final("done", ["tool-1"])], max_steps=10, max_tool_calls=10)
    h.runner.quota = quota = DictQuota(2)

    state = h.advance()

    assert (state.status, state.stop_reason, state.step) == (
        Status.FAILED,
        "DAILY_STEP_QUOTA_EXHAUSTED",
        2,
    )
    assert [e["details"]["reason"] for e in h.events(ev.HANDOFF_OPENED)] == [
        "DAILY_STEP_QUOTA_EXHAUSTED"
    ]
    assert len(h.ledger()) == 2  # two tools ran; the third step was never planned
    assert sum(quota.spent.values()) == 2


def test_a_step_that_is_not_spent_gives_its_quota_back() -> None:
    """issue 9 item 10: the planner failing (no outputs left) spends no step and no quota."""
    h = harness(searches(1))
    h.runner.quota = quota = DictQuota(5)

    state = h.advance()

    assert (state.status, state.stop_reason, state.step) == (Status.FAILED, "PLANNER_EXHAUSTED", 1)
    assert sum(quota.spent.values()) == 1


def test_the_quota_of_a_new_day_lets_the_subject_go_on() -> None:
    h = harness([*searches(3), final("done", ["tool-1"])], max_steps=10, max_tool_calls=10)
    h.runner.quota = quota = DictQuota(4)
    quota.spent[(SUBJECT, h.clock.now_ms() // DAY_MS - 1)] = 4  # yesterday: not counted
    assert h.advance().status is Status.COMPLETED
    assert quota.spent[(SUBJECT, h.clock.now_ms() // DAY_MS)] == 4


def test_an_advance_with_a_slice_returns_after_that_many_steps_still_running() -> None:
    """issue 9 item 10: a worker advances a run for a bounded slice, then returns it running
    with every command settled, so the run can go back to the queue."""
    h = harness([*searches(7), final("done", ["tool-1"])], max_steps=10, max_tool_calls=10)

    first = h.runner.advance(h.run_id, slice_steps=3)
    assert (first.status, first.step, first.tool_calls) == (Status.RUNNING, 3, 3)
    assert {r["status"] for r in h.ledger()} == {"succeeded"}
    second = h.runner.advance(h.run_id, slice_steps=3)
    assert (second.status, second.step) == (Status.RUNNING, 6)
    last = h.runner.advance(h.run_id, slice_steps=3)
    assert (last.status, last.step) == (Status.COMPLETED, 8)


def test_a_step_decided_again_after_a_conflict_is_paid_once() -> None:
    """issue 9 item 10: a commit that loses a race is decided again for the same step; the
    subject pays for that step once."""
    h = harness([*searches(2), final("done", ["tool-1"])], max_steps=10, max_tool_calls=10)
    h.runner.quota = quota = DictQuota(10)
    apply = h.store.apply
    lost: list[int] = []

    def apply_losing_each_first_try(commit):
        step = commit.state.step
        if commit.state.status is Status.RUNNING and step > 0 and step not in lost:
            lost.append(step)
            raise VersionConflict("another writer won", run_id=h.run_id)
        return apply(commit)

    h.store.apply = apply_losing_each_first_try

    assert h.advance().status is Status.COMPLETED
    assert lost == [1, 2]
    assert sum(quota.spent.values()) == 3  # three planner steps, each paid once
