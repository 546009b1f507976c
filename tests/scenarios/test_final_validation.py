"""Seed §15 row 'final without a valid citation': a final answer must cite existing, verified
tool-result observations; fluent text alone never completes a run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("name", "citations", "step"),
    [
        ("s15-final-cites-missing", ["tool-9"], 2),
        ("s15-final-cites-policy", ["policy-2"], 3),
        ("s15-final-cites-nothing", [], 2),
        ("s15-final-cites-user-request", ["user-1"], 2),
        ("s15-final-cites-valid-and-missing", ["tool-1", "tool-9"], 2),
    ],
)
def test_final_without_valid_citation_is_rejected(run_scenario, name, citations, step):
    result = run_scenario(name)

    assert result.status == "failed"
    assert result.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"
    (rejected,) = result.events("final.rejected")
    assert rejected["details"]["code"] == "FINAL_CITATION_VALIDATION_FAILED"
    assert rejected["details"]["citations"] == citations
    assert result.events("final.validated") == []
    assert result.state["answer"] is None
    assert result.state["citations"] == []
    assert result.state["step"] == step
    # The only tool that ran is the search the scenario proposed; tool-1 exists and is citable.
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    assert result.observation("tool-1")["citable"] is True


def test_cited_observations_exist_where_the_scenario_says(run_scenario):
    """policy-2 and user-1 exist (so the rejection is about what they are, not their absence)."""
    result = run_scenario("s15-final-cites-policy")

    assert result.observation("policy-2")["kind"] == "policy-rejection"
    assert result.observation("policy-2")["citable"] is False
    assert result.observation("user-1")["kind"] == "user-request"
    assert result.observation("user-1")["citable"] is False
    assert "tool-9" not in result.observation_ids()
