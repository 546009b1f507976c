"""Deadlines (seed §13; SPEC §3-§4): an absolute run deadline; a tool never gets more time than
the run has left; overdue runs are moved by the sweeper."""

from __future__ import annotations

import pytest

from policy.models import Confirmation
from runs import services
from runs.domain.machine import Status
from runs.engine.sweeper import sweep
from tests.durable.durable_kit import Run, create, final, load, now_ms, start, use

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_waiting_past_its_deadline_is_cancelled_and_its_confirmation_expires(
    plugin_tools,
):
    run = create([use("p1", "durable_guarded"), final("tool-1")], deadline_ms=60_000)
    assert services.run_advance(run_id=run.run_id).status is Status.WAITING_CONFIRMATION
    deadline = load(run.run_id).deadline_ms

    early = sweep(enqueue=False, now_ms=deadline - 1)
    assert early.expired_waiting == []
    assert load(run.run_id).status is Status.WAITING_CONFIRMATION

    report = sweep(enqueue=False, now_ms=deadline)

    assert report.expired_waiting == [run.run_id]
    state = load(run.run_id)
    assert (state.status, state.stop_reason) == (Status.CANCELLED, "DEADLINE_REACHED")
    assert list(
        Confirmation.objects.filter(run_id=run.run_id).values_list("status", flat=True)
    ) == ["expired"]
    done = Run(run.run_id)
    done.check()
    assert done.events("run.stopped")[-1]["details"]["reason"] == "DEADLINE_REACHED"
    assert done.ledger == []
    assert plugin_tools.calls("durable_guarded") == []
    # A second sweep finds nothing more to do.
    assert sweep(enqueue=False, now_ms=deadline + 1).expired_waiting == []


def test_a_running_run_nobody_advances_fails_at_its_deadline(plugin_tools):
    """Created ten seconds ago with a five-second budget, started, then its worker vanished."""
    run = create(
        [use("p1", "durable_steady"), final("tool-1")],
        deadline_ms=5_000,
        created_ms=now_ms() - 10_000,
    )
    start(run.run_id)
    report = sweep(enqueue=False)
    assert report.requeued == [run.run_id]
    state = load(run.run_id)
    assert (state.status, state.stop_reason) == (Status.FAILED, "DEADLINE_REACHED")
    done = Run(run.run_id)
    done.check()
    assert done.ledger == []
    assert done.events("planner.output") == []  # the deadline is checked before every step
    assert plugin_tools.calls("durable_steady") == []


def test_a_deadline_passing_mid_tool_stops_the_tool_and_cancels_the_run(plugin_tools):
    """The run has 2 s; the cooperative tool would wait 20 s. At the deadline the tool gets
    the signal, its effect is known (none), and the run ends cancelled: DEADLINE_REACHED."""
    run = create(
        [use("p1", "durable_wait", seconds=20), use("p2", "durable_steady"), final("tool-1")],
        deadline_ms=2_000,
    )
    # No bound on elapsed time: had the tool run its 20 s, it would have succeeded; the failed
    # ledger row and the stop reason show it was stopped at the deadline.
    state = services.run_advance(run_id=run.run_id)
    assert (state.status, state.stop_reason) == (Status.CANCELLED, "DEADLINE_REACHED")
    done = Run(run.run_id)
    done.check()
    transitions = done.transitions()
    assert ("running", "cancelling") in transitions
    assert transitions[-1] == ("cancelling", "cancelled")
    assert [(r["proposal_id"], r["status"]) for r in done.ledger] == [("p1", "failed")]
    assert plugin_tools.calls("durable_steady") == []
    assert done.handoffs() == []
    # The effective tool deadline was the run's deadline, not now + the tool's 10 s timeout.
    [started] = done.events("tool.started")
    assert started["details"]["deadline_ms"] == state.deadline_ms


@pytest.mark.parametrize(
    ("tool", "run_budget_ms", "bounded_by"),
    [
        ("durable_wait", 3_000, "run"),  # tool timeout 10 s > the run's 3 s
        ("durable_steady", 60_000, "tool"),  # tool timeout 2 s < the run's 60 s
    ],
)
def test_the_effective_tool_deadline_never_exceeds_the_run_deadline(
    plugin_tools, tool, run_budget_ms, bounded_by
):
    arguments = {"seconds": 0} if tool == "durable_wait" else {}
    run = create([use("p1", tool, **arguments), final("tool-1")], deadline_ms=run_budget_ms)
    before = now_ms()
    state = services.run_advance(run_id=run.run_id)
    after = now_ms()
    assert state.status is Status.COMPLETED
    [started] = Run(run.run_id).events("tool.started")
    tool_deadline = started["details"]["deadline_ms"]
    assert tool_deadline <= state.deadline_ms
    if bounded_by == "run":
        assert tool_deadline == state.deadline_ms
    else:
        assert before + 2_000 <= tool_deadline <= after + 2_000
