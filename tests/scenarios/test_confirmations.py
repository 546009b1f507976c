"""Seed §15 row 'missing user confirmation' and seed §5.2: a confirmation is independent
evidence bound to the exact proposal hash, approved, unexpired and used at most once.

save_preference needs, at once: a whitelisted key and valid value, a memory:write grant whose
scope is the run's own subject, and a per-call confirmation of this exact proposal.
"""

from __future__ import annotations

import pytest

from memory.models import PreferenceHistory, PreferenceRecord
from policy.models import Confirmation
from runs.models import LedgerEntry, Run

pytestmark = pytest.mark.django_db(transaction=True)


def _waiting(result, proposal_id):
    waits = [
        e for e in result.events("proposal.waiting-confirmation") if e["proposal_id"] == proposal_id
    ]
    assert len(waits) == 1, waits
    return waits[0]


def test_missing_confirmation_makes_the_run_wait_and_nothing_runs(run_scenario):
    result = run_scenario("s15-missing-confirmation")

    assert result.status == "waiting_confirmation"
    assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
    assert result.rejections() == []
    wait = _waiting(result, "p1")
    assert wait["details"]["code"] == "USER_CONFIRMATION_REQUIRED"

    # One pending confirmation, bound to the hash of the proposal that was received.
    (received,) = result.received("p1")
    (confirmation,) = result.confirmations
    assert confirmation["status"] == "pending"
    assert confirmation["tool_name"] == "save_preference"
    assert confirmation["tool_version"] == "1"
    assert confirmation["proposal_hash"] == received["details"]["proposal_hash"]
    assert confirmation["proposal_hash"] == wait["details"]["proposal_hash"]
    assert confirmation["id"] == wait["details"]["confirmation_id"]
    assert confirmation["origin"] == "runtime"
    assert confirmation["cites_untrusted"] is False
    assert Confirmation.objects.filter(status="pending").count() == 1

    # The proposal is parked in the run state; the tool never ran.
    assert result.state["pending_proposal"]["proposal_id"] == "p1"
    assert result.ledger == []
    assert LedgerEntry.objects.count() == 0
    assert result.events("tool.started") == []
    assert result.preferences == []
    assert PreferenceRecord.objects.count() == 0
    # Authorization passed (the grant fits); only the confirmation is missing.
    (checked,) = [e for e in result.events("policy.capability.checked") if e["proposal_id"] == "p1"]
    assert checked["details"]["result"] == "granted"
    (grant,) = result.grants
    assert grant["calls_used"] == 0
    assert Run.objects.get(pk=result.run_id).status == "waiting_confirmation"


def test_confirmation_for_other_arguments_is_not_reused(run_scenario):
    result = run_scenario("s15-confirmation-other-arguments")

    assert result.status == "waiting_confirmation"
    assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
    assert result.rejections() == []
    assert result.ledger == []
    assert LedgerEntry.objects.count() == 0
    assert result.preferences == []
    assert PreferenceRecord.objects.count() == 0

    (given,) = [c for c in result.confirmations if c["origin"] == "scenario"]
    # The approval of "en" stays as it was: it authorized nothing and was not consumed.
    assert given["status"] == "approved"
    # A new request for the zh-CN proposal, with a different hash.
    (asked,) = [c for c in result.confirmations if c["origin"] == "runtime"]
    assert asked["status"] == "pending"
    (received,) = result.received("p1")
    assert asked["proposal_hash"] == received["details"]["proposal_hash"]
    assert asked["proposal_hash"] != given["proposal_hash"]


def test_approving_the_pending_confirmation_writes_the_preference_once(run_scenario):
    result = run_scenario("s15-confirmation-other-arguments-approved")

    assert result.status == "completed"
    assert result.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert result.state["citations"] == ["tool-1"]
    assert result.rejections() == []

    (given,) = [c for c in result.confirmations if c["origin"] == "scenario"]
    assert given["status"] == "approved"  # the unrelated "en" approval, still unused
    (used,) = [c for c in result.confirmations if c["origin"] == "runtime"]
    assert used["status"] == "consumed"

    assert result.ledger_rows() == [("p1", "save_preference", "succeeded")]
    (row,) = result.ledger
    assert row["verification"]["ok"] is True
    (started,) = result.events("tool.started")
    assert started["details"]["confirmation_id"] == used["id"]

    assert result.preferences == [
        {
            "key": "answer_language",
            "value": "zh-CN",
            "version": 1,
            "source_kind": "user-confirmation",
            "confirmation_id": used["id"],
            "created_by_run": result.run_id,
            "revoked_at": None,
        }
    ]
    assert PreferenceRecord.objects.count() == 1
    assert PreferenceHistory.objects.count() == 1

    # The decision is in the trace, and the re-evaluation did not cost a planner step.
    (decided,) = result.events("confirmation.decided")
    assert decided["details"]["decision"] == "approved"
    assert decided["details"]["confirmation_id"] == used["id"]
    assert result.state["step"] == 2
    assert result.state["tool_calls"] == 1
    # The tool result of save_preference is trusted and citable.
    assert result.observation("tool-1")["trust"] == "trusted-tool"


def test_declined_confirmation_never_runs_the_tool_and_the_run_continues(run_scenario):
    result = run_scenario("s15-confirmation-declined")

    assert result.rejections() == [("p2", "confirmation", "CONFIRMATION_DECLINED")]
    assert result.status == "completed"
    assert result.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert result.state["citations"] == ["tool-1"]
    assert result.ledger_rows() == [("p1", "search_public", "succeeded")]
    assert not LedgerEntry.objects.filter(tool_name="save_preference").exists()
    assert result.preferences == []
    assert PreferenceRecord.objects.count() == 0

    (confirmation,) = result.confirmations
    assert confirmation["status"] == "declined"
    (decided,) = result.events("confirmation.decided")
    assert decided["details"]["decision"] == "declined"
    assert decided["proposal_id"] == "p2"
    # The refusal is an observation the planner sees next.
    declined = result.observation("policy-2")
    assert declined["trust"] == "policy"
    assert declined["content"]["code"] == "CONFIRMATION_DECLINED"
    assert result.state["pending_proposal"] is None


def test_a_confirmation_authorizes_exactly_one_execution(run_scenario):
    result = run_scenario("s15-confirmation-single-use")

    # p1 ran once with the approval; the identical p2 has to be confirmed again.
    assert result.status == "waiting_confirmation"
    assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
    assert result.ledger_rows() == [("p1", "save_preference", "succeeded")]
    assert LedgerEntry.objects.filter(tool_name="save_preference").count() == 1
    assert result.state["tool_calls"] == 1

    first = _waiting(result, "p1")
    second = _waiting(result, "p2")
    # Same proposal hash (identical tool, version, arguments), different confirmation requests.
    assert first["details"]["proposal_hash"] == second["details"]["proposal_hash"]
    assert first["details"]["confirmation_id"] != second["details"]["confirmation_id"]
    statuses = {c["id"]: c["status"] for c in result.confirmations}
    assert statuses == {
        first["details"]["confirmation_id"]: "consumed",
        second["details"]["confirmation_id"]: "pending",
    }
    assert result.state["pending_proposal"]["proposal_id"] == "p2"

    (record,) = result.preferences
    assert (record["key"], record["value"], record["version"]) == ("answer_language", "zh-CN", 1)
    assert record["confirmation_id"] == first["details"]["confirmation_id"]
    assert PreferenceHistory.objects.count() == 1


def test_confirmation_matches_the_canonical_proposal_whatever_the_key_order(
    run_scenario, scenario_data
):
    data = scenario_data("s15-confirmation-key-order")
    confirmed_args = data["confirmations"][0]["proposal"]["arguments"]
    proposed_args = data["planner"][0]["arguments"]
    assert list(confirmed_args) != list(proposed_args)  # really another key order
    assert confirmed_args == proposed_args

    result = run_scenario("s15-confirmation-key-order")

    assert result.status == "completed"
    assert result.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert result.events("proposal.waiting-confirmation") == []
    assert result.ledger_rows() == [("p1", "save_preference", "succeeded")]
    # The approval given in the file (not a new request) authorized the call, and is used up.
    (confirmation,) = result.confirmations
    assert confirmation["origin"] == "scenario"
    assert confirmation["status"] == "consumed"
    (started,) = result.events("tool.started")
    assert started["details"]["confirmation_id"] == confirmation["id"]
    (received,) = result.received("p1")
    assert confirmation["proposal_hash"] == received["details"]["proposal_hash"]
    assert result.preferences == [
        {
            "key": "citation_style",
            "value": "footnote",
            "version": 1,
            "source_kind": "user-confirmation",
            "confirmation_id": confirmation["id"],
            "created_by_run": result.run_id,
            "revoked_at": None,
        }
    ]


def test_the_same_scenario_with_confirmations_can_run_twice(run_scenario):
    """A scenario file is reusable: its confirmation ids belong to the run they are given to.

    Two runs of one file (a demo run twice, two operators, a retried CI job) must not collide on
    the confirmation id written in the file.
    """
    first = run_scenario("s15-confirmation-other-arguments")
    second = run_scenario("s15-confirmation-other-arguments")

    assert first.run_id != second.run_id
    for result in (first, second):
        assert result.status == "waiting_confirmation"
        assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
        assert len(result.confirmations) == 2
        assert result.ledger == []
    assert Confirmation.objects.filter(origin="scenario").count() == 2


def test_an_expired_approval_authorizes_nothing(run_variant, scenario_data):
    """The same approval as in s15-confirmation-key-order, expired before the step it is needed."""
    confirmations = scenario_data("s15-confirmation-key-order")["confirmations"]
    expired = [{**confirmations[0], "expires_at_step": 0}]

    result = run_variant("s15-confirmation-key-order", confirmations=expired)

    assert result.status == "waiting_confirmation"
    assert result.stop_reason == "USER_CONFIRMATION_REQUIRED"
    assert result.ledger == []
    assert result.preferences == []
    assert PreferenceRecord.objects.count() == 0
    statuses = sorted((c["origin"], c["status"]) for c in result.confirmations)
    assert statuses == [("runtime", "pending"), ("scenario", "approved")]
