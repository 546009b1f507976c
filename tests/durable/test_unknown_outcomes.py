"""Unknown outcomes (seed §3.1, §15 "tool timeout, result unknown"): stop new actions, reconcile
with the same token, hand off when the world cannot say — never retry blind under a new token."""

from __future__ import annotations

import pytest

from agentconsole import wiring
from runs import models as m
from runs import services
from runs.domain import lifecycle
from runs.domain.machine import Status
from runs.domain.step.commits import Commit
from tests.durable.durable_kit import Run, create, final, load, use, write

pytestmark = pytest.mark.django_db(transaction=True)


def test_lost_answer_is_reconciled_with_the_same_token_and_the_run_continues(run_output_root):
    run = create(
        [write("p1"), final("tool-1", answer="Written.")],
        faults={"tools": {"write_artifact": {"mode": "unknown", "reconcile": "real"}}},
    )
    state = services.run_advance(run_id=run.run_id)
    assert state.status is Status.COMPLETED
    done = Run(run.run_id)
    done.check()
    [row] = done.ledger
    assert row["status"] == "reconciled"
    assert row["attempt"] == 1
    [completed] = done.events("tool.completed")
    assert completed["details"]["reconciled"] is True
    assert completed["details"]["status"] == "succeeded"
    # Reconcile asked about the one effect that happened; nothing was written twice.
    artifact = m.Artifact.objects.get(run_id=run.run_id)
    assert artifact.idempotency_token == row["idempotency_token"]
    assert done.observation("tool-1")["citable"] is True
    assert state.unresolved_effects == 0


def test_timeout_that_nobody_can_reconcile_fails_with_a_handoff_and_starts_nothing_more(
    plugin_tools,
):
    """durable_note times out after 200 ms (fault: no answer, no effect known) and its reconcile
    cannot tell: failed TOOL_OUTCOME_UNKNOWN, a handoff, and p2 is never started."""
    run = create(
        [use("p1", "durable_note"), use("p2", "durable_steady"), final("tool-1")],
        faults={"tools": {"durable_note": {"mode": "timeout", "reconcile": "unknown"}}},
    )
    state = services.run_advance(run_id=run.run_id)
    assert (state.status, state.stop_reason) == (Status.FAILED, "TOOL_OUTCOME_UNKNOWN")
    done = Run(run.run_id)
    done.check()
    assert [(r["tool_name"], r["status"]) for r in done.ledger] == [("durable_note", "unknown")]
    assert done.ledger[0]["outcome"]["code"] == "TOOL_TIMEOUT"
    [started] = done.events("tool.started")
    assert started["proposal_id"] == "p1"
    assert [e["proposal_id"] for e in done.events("planner.output")] == ["p1"]
    assert plugin_tools.calls("durable_steady") == []
    assert state.unresolved_effects == 1
    handoff = done.open_handoff()
    assert handoff.reason == "TOOL_OUTCOME_UNKNOWN"
    assert [e["idempotency_token"] for e in handoff.bundle["unknown_effects"]] == [
        done.ledger[0]["idempotency_token"]
    ]
    # The tool's own timeout bounded the wait: the effective deadline was now + 200 ms.
    assert started["details"]["deadline_ms"] < state.deadline_ms
    # Advancing the failed run again does nothing at all.
    before = Run(run.run_id)
    services.run_advance(run_id=run.run_id)
    assert Run(run.run_id).trace == before.trace


def test_the_gate_refuses_any_new_tool_while_an_unknown_effect_is_unresolved(plugin_tools):
    """Through the services an unknown outcome always ends the run, so a running run with an
    unresolved effect only exists if that rule ever changes; the gate is the second line. We
    commit such a state through the store and check that no tool can start."""
    run = create([use("p1", "durable_steady"), final("user-1")])
    store = wiring.store()
    running = store.apply(lifecycle.start(load(run.run_id)))
    commit = Commit(expected_version=running.version, state=running.model_copy(deep=True))
    commit.state.unresolved_effects = 1
    commit.state.version += 1
    store.apply(commit)

    state = services.run_advance(run_id=run.run_id)

    assert (state.status, state.stop_reason) == (Status.FAILED, "UNRESOLVED_UNKNOWN_EFFECT")
    done = Run(run.run_id)
    assert done.ledger == []
    assert done.events("tool.started") == []
    assert plugin_tools.calls("durable_steady") == []
    [rejected] = done.events("proposal.rejected")
    assert (rejected["details"]["layer"], rejected["details"]["code"]) == (
        "state",
        "UNRESOLVED_UNKNOWN_EFFECT",
    )
    assert done.open_handoff().reason == "UNRESOLVED_UNKNOWN_EFFECT"
