"""Seed §15 rows 'unknown tool or version' and 'schema invalid', and seed §5.1 (a capability
cannot be self-declared): each bad proposal is a recorded rejection and no tool code runs."""

from __future__ import annotations

import pytest

from memory.models import PreferenceRecord
from policy.models import Confirmation
from runs.models import LedgerEntry
from tests.scenarios.conftest import completed_with, nothing_remembered, rejected_then_answered

pytestmark = pytest.mark.django_db(transaction=True)


def test_unknown_tool_and_unknown_version_are_rejected_and_the_planner_may_fix_it(run_scenario):
    result = run_scenario("s15-unknown-tool")

    # The planner fixed the version: the search ran once and the run completed on it.
    rejected_then_answered(result, "registry", ["UNKNOWN_TOOL_OR_VERSION"] * 2)
    assert result.state["citations"] == ["tool-3"]
    assert LedgerEntry.objects.count() == 1
    # Rejections cost steps, not tool calls.
    assert result.state["step"] == 4
    assert result.state["tool_calls"] == 1
    # Each rejection is an observation the planner can see (policy-<step>).
    assert result.observation("policy-1")["content"]["code"] == "UNKNOWN_TOOL_OR_VERSION"
    assert result.observation("policy-2")["content"]["code"] == "UNKNOWN_TOOL_OR_VERSION"
    # An unknown tool never gets past the registry: no schema, capability or confirmation step.
    for pid in ("p1", "p2"):
        events = {e["event"] for e in result.trace if e["proposal_id"] == pid}
        assert "proposal.schema.validated" not in events
        assert "policy.capability.checked" not in events
        assert "tool.started" not in events


def test_schema_violations_are_rejected_before_any_tool_runs(run_scenario):
    result = run_scenario("s15-schema-invalid")

    codes = ["UNKNOWN_INPUT_FIELD", "INPUT_NOT_OBJECT", "INPUT_NOT_OBJECT", "INPUT_TOO_LONG"]
    rejected_then_answered(result, "schema", codes)
    assert result.state["tool_calls"] == 1
    assert result.state["step"] == 6
    for pid in ("p1", "p2", "p3", "p4"):
        events = {e["event"] for e in result.trace if e["proposal_id"] == pid}
        assert "proposal.schema.validated" not in events
        assert "tool.started" not in events


def test_schema_rejection_details_do_not_echo_an_unknown_field(run_scenario):
    result = run_scenario("s15-schema-invalid")

    # Only the fields the contract names as loggable reach the trace; the unknown field's
    # value ("rm -rf /") is nowhere in it, neither in the rejection nor in the received event.
    assert "rm -rf" not in repr(result.trace)
    (received,) = result.received("p1")
    assert "arg_shell" not in received["details"]
    assert received["details"]["arg_query"] == "retry"


def test_capability_written_into_a_planner_output_is_a_parse_error(run_scenario):
    result = run_scenario("s15-capability-in-output")

    # Only the search ran; the self-declared capability granted nothing.
    completed_with(result, [("p2", "parse", "PARSE_ERROR")], [("p1", "search_public", "succeeded")])
    assert [g["capability"] for g in result.grants] == ["search:public"]
    nothing_remembered(result)
    assert result.confirmations == []
    assert Confirmation.objects.count() == 0
    # A parse error never reaches the gate's later layers.
    assert result.received("p2") == []


def test_capability_in_output_grants_nothing_even_with_a_matching_confirmation(run_variant):
    """Even when a person approved exactly these arguments, the extra key is not an effect."""
    result = run_variant(
        "s15-capability-in-output",
        confirmations=[
            {
                "confirmation_id": "confirm-zh",
                "proposal": {
                    "tool_name": "save_preference",
                    "tool_version": "1",
                    "arguments": {"key": "answer_language", "value": "zh-CN"},
                },
                "approved": True,
                "expires_at_step": 10,
            }
        ],
    )

    assert result.rejections() == [("p2", "parse", "PARSE_ERROR")]
    assert result.status == "completed"
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    assert PreferenceRecord.objects.count() == 0
    # The approval was never used.
    (confirmation,) = result.confirmations
    assert confirmation["status"] == "approved"
