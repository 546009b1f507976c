"""issue 9 item 16: a tool output that breaks its contract's ``output_schema`` fails the call.

``TOOL_OUTPUT_INVALID``, ledger ``failed``, no observation a final answer could cite — in a
thread and in an isolated child alike (the executor checks both paths in ``_finish``)."""

from __future__ import annotations

import pytest

from agentconsole import wiring
from policy.domain.proposals import FinalProposal
from runs import services
from runs.domain.machine import Status
from runs.domain.step.final import final_violation
from tests.durable.durable_kit import Run, create, final, use

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("tool", ["durable_bad_output", "durable_isolated_bad_output"])
def test_an_output_that_breaks_its_schema_fails_the_call_and_is_never_citable(child_env, tool):
    """issue 9 item 16: {"ok": "yes"} against {"ok": boolean}: the call fails, nothing to cite."""
    run = create([use("p1", tool), final("tool-1")])
    state = services.run_advance(run_id=run.run_id)

    done = Run(run.run_id)
    done.check()
    [row] = done.ledger
    assert (row["status"], row["outcome"]["code"]) == ("failed", "TOOL_OUTPUT_INVALID")
    assert (state.status, state.stop_reason) == (Status.FAILED, "TOOL_OUTPUT_INVALID")
    (validated,) = done.events("tool.result.validated")
    assert validated["details"]["valid"] is False
    # No tool-1 observation at all: the invalid value is neither evidence nor planner context.
    assert "tool-1" not in [o["observation_id"] for o in done.observations]
    assert state.answer is None

    # A final answer citing it is refused by the run's own lookups and the final validator.
    citable = wiring.store().lookups(run.run_id).citable(["tool-1"])
    assert citable == set()
    answer = FinalProposal(answer="Done.", citation_observation_ids=["tool-1"])
    assert final_violation(answer, citable) == "FINAL_CITATION_VALIDATION_FAILED"
