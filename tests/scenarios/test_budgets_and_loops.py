"""Seed §8 and §15: budgets (steps, tool calls, deadline), the repeated-proposal loop guard, and a
planner that runs out of outputs. The runner never depends on the planner to stop."""

from __future__ import annotations

import pytest

from agentconsole import wiring
from runs.models import LedgerEntry
from tests.support.clock import AheadClock

pytestmark = pytest.mark.django_db(transaction=True)

LOOP = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"


def _failed(result, reason, **state):
    """The run failed for ``reason``, with these values in its state."""
    assert (result.status, result.stop_reason) == ("failed", reason)
    assert {k: result.state[k] for k in state} == state


def _budgets(scenario_data, name, **changes):
    return {**scenario_data(name)["budgets"], **changes}


@pytest.mark.parametrize("max_repeated", [1, 2, 3])
def test_repeating_a_rejected_proposal_stops_the_run(run_variant, scenario_data, max_repeated):
    """The identical output, rejected identically each time, is stopped after max+1 outputs."""
    budgets = _budgets(scenario_data, "s15-loop-rejected", max_repeated_proposal=max_repeated)
    result = run_variant("s15-loop-rejected", budgets=budgets)

    _failed(result, LOOP, step=max_repeated + 1)
    assert len(result.events("planner.output")) == max_repeated + 1
    (loop,) = result.events("proposal.loop-detected")
    assert loop["details"]["code"] == LOOP
    assert loop["proposal_id"] == "p1"
    # Every output before the stop was rejected identically; none ran a tool.
    assert result.rejections() == [("p1", "semantic", "MEMORY_KEY_NOT_ALLOWED")] * max_repeated
    assert result.ledger == []
    assert LedgerEntry.objects.count() == 0
    assert result.state["tool_calls"] == 0


def test_repeating_a_rejected_proposal_stops_long_before_the_step_budget(run_scenario):
    result = run_scenario("s15-loop-rejected")

    _failed(result, LOOP, max_repeated_proposal=2, step=3)
    assert result.state["step"] < result.state["max_steps"]
    assert result.ledger == []


@pytest.mark.parametrize("max_repeated", [1, 2, 3])
def test_repeating_an_identical_search_stops_the_run(run_variant, scenario_data, max_repeated):
    """New proposal ids, identical tool, version, arguments and identical results."""
    budgets = _budgets(scenario_data, "s15-loop-search", max_repeated_proposal=max_repeated)
    result = run_variant("s15-loop-search", budgets=budgets)

    _failed(result, LOOP, step=max_repeated + 1, tool_calls=max_repeated)
    expected = [(f"p{i}", "search_public", "succeeded") for i in range(1, max_repeated + 1)]
    assert result.ledger_rows() == expected
    (loop,) = result.events("proposal.loop-detected")
    assert loop["proposal_id"] == f"p{max_repeated + 1}"
    assert loop["details"]["code"] == LOOP
    assert result.rejections() == []


def test_repeating_an_identical_search_stays_within_the_tool_call_budget(run_scenario):
    result = run_scenario("s15-loop-search")

    _failed(result, LOOP, step=3, tool_calls=2)
    assert result.state["tool_calls"] < result.state["max_tool_calls"]
    assert result.ledger_rows() == [
        ("p1", "search_public", "succeeded"),
        ("p2", "search_public", "succeeded"),
    ]


def test_deadline_reached_before_the_first_tool(run_scenario, monkeypatch):
    """deadline_ms=1 and the first planner output is a search: no tool may start.

    Timing: the run's absolute deadline is fixed in ``run_create`` (wall clock + 1 ms); the
    runner checks it before every step through its clock (``runs.domain.clock``), and the gate's
    budget layer checks it again. On the real clock the run only fails if at least 1 ms passes
    between creating the run and its first step (measured: about 20 ms on SQLite, a few ms on
    PostgreSQL), which holds in practice but is not guaranteed: on a fast enough machine the
    first step could still see "before the deadline" and the search would run. So the runner's
    clock is set one second ahead of the wall clock that fixed the deadline (only the clock
    the runner is built with; store, gate, tools and command are real). The outcome then no
    longer depends on how fast the machine is.
    """
    real_runner = wiring.runner
    ahead = AheadClock(1_000)
    monkeypatch.setattr(
        wiring, "runner", lambda lease_owner=None, clock=None: real_runner(lease_owner, ahead)
    )

    result = run_scenario("s15-deadline")

    assert result.status == "failed"
    assert result.stop_reason == "DEADLINE_REACHED"
    assert result.last_stop()["details"]["reason"] == "DEADLINE_REACHED"
    assert result.ledger == []
    assert LedgerEntry.objects.count() == 0
    assert result.events("tool.started") == []
    assert result.state["tool_calls"] == 0
    # The deadline is checked before the step: the planner was not even asked.
    assert result.events("planner.output") == []
    assert result.state["step"] == 0


def test_max_tool_calls_stops_before_the_extra_call(run_scenario):
    result = run_scenario("s15-max-tool-calls")

    _failed(result, "MAX_TOOL_CALLS_REACHED", max_tool_calls=2, tool_calls=2)
    assert result.ledger_rows() == [
        ("p1", "search_public", "succeeded"),
        ("p2", "search_public", "succeeded"),
    ]
    assert LedgerEntry.objects.count() == 2
    assert result.rejections() == [("p3", "budget", "MAX_TOOL_CALLS_REACHED")]
    assert [e["proposal_id"] for e in result.events("tool.started")] == ["p1", "p2"]
    # Steps and tool calls are counted apart: three steps, two tool calls.
    assert result.state["step"] == 3


def test_max_steps_stops_a_planner_that_only_makes_mistakes(run_variant, scenario_data):
    budgets = _budgets(scenario_data, "s15-unknown-tool", max_steps=2)
    result = run_variant("s15-unknown-tool", budgets=budgets)

    assert result.status == "failed"
    assert result.stop_reason == "MAX_STEPS_REACHED"
    assert result.state["step"] == 2
    assert result.rejections() == [
        ("p1", "registry", "UNKNOWN_TOOL_OR_VERSION"),
        ("p2", "registry", "UNKNOWN_TOOL_OR_VERSION"),
    ]
    assert result.ledger == []


def test_planner_that_runs_out_of_outputs_fails_the_run(run_scenario):
    result = run_scenario("s15-planner-exhausted")

    assert result.status == "failed"
    assert result.stop_reason == "PLANNER_EXHAUSTED"
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    assert result.state["step"] == 1
    assert result.state["answer"] is None


def test_planner_with_no_outputs_at_all_fails_without_a_step(run_variant):
    result = run_variant("s15-planner-exhausted", planner=[])

    assert result.status == "failed"
    assert result.stop_reason == "PLANNER_EXHAUSTED"
    assert result.state["step"] == 0
    assert result.ledger == []
