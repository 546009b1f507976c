"""The cost of one step does not grow with the run (STYLE habit 13: equal query counts for a
short and a long run).

One step is one iteration of the runner loop: load, plan, decide, apply the intent, run the
tool, settle, apply the outcome. ``Runner.advance(run_id, max_iterations=1)`` runs exactly one
iteration and then raises ``RuntimeError`` because the run has not settled; the test counts the
queries of that call on the test's own connection (the tool itself, ``search_public`` over an
empty corpus, runs in its own thread and connection and is not counted: it is the tool's cost,
not the step's).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentconsole import wiring
from runs import models as m
from runs.domain.runner import Runner
from tests.services.services_kit import create_run, search

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 60


def one_step(runner: Runner, run_id: str) -> list[str]:
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(RuntimeError, match="did not settle"),
    ):
        runner.advance(run_id, max_iterations=1)
    return [q["sql"] for q in queries.captured_queries]


def test_a_step_costs_the_same_queries_at_step_3_and_at_step_60() -> None:
    # Distinct queries: no loop-guard stop, and every result is new content.
    outputs = [search(f"p{i}", f"retry rule {i}") for i in range(1, STEPS + 1)]
    run_id = create_run(outputs, max_steps=STEPS + 5, max_tool_calls=STEPS + 5).run_id
    runner = wiring.runner()
    one_step(runner, run_id)  # created -> running

    per_step: dict[int, list[str]] = {}
    for step in range(1, STEPS + 1):
        per_step[step] = one_step(runner, run_id)
        run = m.Run.objects.get(pk=run_id)
        assert (run.step, run.tool_calls, run.status) == (step, step, "running")
        ledger = m.LedgerEntry.objects.filter(run_id=run_id)
        assert ledger.filter(status="succeeded").count() == step == ledger.count()

    assert len(per_step[3]) == len(per_step[STEPS]), (per_step[3], per_step[STEPS])
    counts = {step: len(sql) for step, sql in per_step.items()}
    assert set(list(counts.values())[1:]) == {counts[3]}, counts
