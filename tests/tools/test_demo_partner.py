"""The DEBUG-only demo tool ``notify_partner`` (issue 11, "Demo": an unknown effect handed off):
registered only on a development setup, its outcome always unknown, and a run that calls it
stops with ``TOOL_OUTCOME_UNKNOWN`` and a handoff naming its idempotency token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentconsole import wiring
from policy.domain.contracts import CancelSignal, ToolContext
from policy.domain.outcomes import OutcomeStatus
from policy.domain.registry import ToolRegistry
from runs import models as m
from runs.start.scenarios import Scenario, run_scenario
from runs.tools import demo_partner
from tests.support.planner import tool_call

ARGS = {"partner": "acme-logistics", "message": "shipment 4711 is quarantined"}


@pytest.fixture
def registry(settings: Any) -> Iterator[Any]:
    """The root's registry, rebuilt for the DEBUG value the test sets."""

    def build(debug: bool) -> ToolRegistry:
        settings.DEBUG = debug
        wiring.registry.cache_clear()
        return wiring.registry()

    yield build
    wiring.registry.cache_clear()


def _names(registry: ToolRegistry) -> set[str]:
    return {c.name for c in registry}


@pytest.mark.django_db  # the registry reads the MCP catalog's stamp
def test_registered_only_with_debug_on(registry: Any) -> None:
    assert demo_partner.NAME not in _names(registry(False))
    assert demo_partner.NAME in _names(registry(True))


def _context(cancelled: bool = False) -> ToolContext:
    cancel = CancelSignal()
    if cancelled:
        cancel.cancel()
    return ToolContext(
        run_id="run_x", subject="bob", step=1, idempotency_token="t", deadline_ms=0, cancel=cancel
    )


def test_the_outcome_is_unknown_every_time() -> None:
    for _ in range(2):  # a retry under the same token ends the same way
        outcome = demo_partner.execute(ARGS, _context())
        assert (outcome.status, outcome.code) == (OutcomeStatus.UNKNOWN, "PARTNER_NO_ANSWER")
    cancelled = demo_partner.execute(ARGS, _context(cancelled=True))
    assert (cancelled.status, cancelled.code) == (OutcomeStatus.FAILED, "CANCELLED")


@pytest.mark.django_db(transaction=True)
def test_a_run_calling_it_is_handed_off_with_the_token(registry: Any) -> None:
    registry(True)
    grant = {"capability": demo_partner.CAPABILITY, "resource_scope": "*", "expires_at_step": 3}
    scenario = Scenario.model_validate(
        {
            "subject": "bob",
            "goal": "notify",
            "grants": [grant],
            "planner": [tool_call("p1", demo_partner.NAME, ARGS, sources=None)],
        }
    )
    state = run_scenario(scenario)["state"]
    assert (state["status"], state["stop_reason"]) == ("failed", "TOOL_OUTCOME_UNKNOWN")
    [row] = m.LedgerEntry.objects.filter(run_id=state["run_id"])
    assert row.status == "unknown"
    handoff = m.Handoff.objects.get(run_id=state["run_id"])
    assert handoff.reason == "TOOL_OUTCOME_UNKNOWN"
    assert row.idempotency_token in str(handoff.bundle)
