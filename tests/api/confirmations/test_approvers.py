"""Who may approve (issue 12 item 3), through the HTTP API: each approver rule, four eyes from a
tool package's contract to the resumed run, a decline, a stale hash, and the audit that names
every approver.

Personas (tests/support/personas.py): ``alice`` owns the waiting runs; ``operator`` and
``operator2`` are operators who do not own them; ``reviewer`` never decides.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from agentconsole import wiring
from policy.models import Confirmation
from runs import models as m
from runs import services
from tests.api import api_kit as kit
from tests.support import approval_tools

pytestmark = pytest.mark.django_db

APPROVER_NOT_ALLOWED = "APPROVER_NOT_ALLOWED"
ALREADY_APPROVED_BY_YOU = "ALREADY_APPROVED_BY_YOU"


def post(caller: kit.Persona, waiting: kit.Waiting, verb: str, **body: Any) -> Any:
    return caller.post(
        f"/api/confirmations/{waiting.confirmation_id}/{verb}/",
        {"proposal_hash": waiting.proposal_hash, **body},
    )


def with_rule(waiting: kit.Waiting, rule: str) -> kit.Waiting:
    """The waiting run's confirmation asked with ``rule`` (as a tool policy would choose it)."""
    Confirmation.objects.filter(pk=waiting.confirmation_id).update(approvers=rule)
    return waiting


def run_of(waiting: kit.Waiting) -> m.Run:
    return m.Run.objects.get(pk=waiting.run_id)


def assert_still_waiting(waiting: kit.Waiting, *, approvals: list[str], version: int) -> None:
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by, row.decided_at) == ("pending", None, None)
    assert [a.username for a in row.approvals.all()] == approvals
    run = run_of(waiting)
    assert (run.status, run.version) == ("waiting_confirmation", version)
    assert kit.events_of(waiting.run_id, "confirmation.decided") == []


# --- one approver: owner, operator ----------------------------------------------------------------


@pytest.mark.parametrize("verb", ["approve", "decline"])
def test_owner_rule_only_the_runs_own_person_decides(
    verb: str, people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    waiting = with_rule(kit.waiting_run(people.alice.user), "owner")
    for staff in (people.operator, people.admin):
        response = post(staff, waiting, verb, reason="not mine to decide")
        kit.assert_error(response, 403, APPROVER_NOT_ALLOWED)
        assert "the run's owner" in response.json()["message"]
        assert_still_waiting(waiting, approvals=[], version=waiting.version)
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(post(people.alice, waiting, verb, reason="my own preference"))
    assert body["status"] == ("approved" if verb == "approve" else "declined")
    assert body["decided_by"] == "alice"
    assert run_of(waiting).status == "running"
    assert enqueued == [waiting.run_id]


def test_operator_rule_refuses_the_owner_and_an_operator_on_their_own_run(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    alices = with_rule(kit.waiting_run(people.alice.user), "operator")
    kit.assert_error(post(people.alice, alices, "approve"), 403, APPROVER_NOT_ALLOWED)
    kit.assert_error(post(people.alice, alices, "decline", reason="x"), 403, APPROVER_NOT_ALLOWED)
    assert_still_waiting(alices, approvals=[], version=alices.version)

    # An operator's own run: they are its owner, so not the independent operator it needs.
    own = with_rule(kit.waiting_run(people.operator.user), "operator")
    kit.assert_error(post(people.operator, own, "approve"), 403, APPROVER_NOT_ALLOWED)
    assert_still_waiting(own, approvals=[], version=own.version)

    with django_capture_on_commit_callbacks(execute=True):
        kit.assert_ok(post(people.operator2, own, "approve"))
        kit.assert_ok(post(people.operator, alices, "approve"))
    assert run_of(own).status == run_of(alices).status == "running"
    assert sorted(enqueued) == sorted([own.run_id, alices.run_id])


def test_the_default_rule_is_todays_owner_or_operator(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    detail = kit.assert_ok(people.alice.get(f"/api/confirmations/{waiting.confirmation_id}/"))
    assert (detail["approvers"], detail["approvals_needed"], detail["approvals"]) == (
        "owner_or_operator",
        1,
        [],
    )
    kit.assert_error(post(people.reviewer, waiting, "approve"), 403, kit.PERMISSION_DENIED)


# --- four eyes ----------------------------------------------------------------------------------


def publish_scenario(owner: Any) -> kit.Waiting:
    """A run of ``publish_notice`` (tests/support/approval_tools.py, registered as a tool package
    is), waiting for its four-eyes confirmation."""
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    data["subject"] = owner.get_username()
    data["grants"] = [
        {"capability": approval_tools.CAPABILITY, "resource_scope": "*", "expires_at_step": 10}
    ]
    data["planner"] = [
        {
            "kind": "tool",
            "proposal_id": "p1",
            "tool_name": approval_tools.NAME,
            "tool_version": "1",
            "arguments": {"text": "Maintenance tonight at 22:00"},
            "source_observation_ids": ["user-1"],
        },
        {"kind": "final", "answer": "Published.", "citation_observation_ids": ["tool-1"]},
    ]
    export = kit.scenario_run(data, owner)
    assert export["state"]["status"] == "waiting_confirmation", export["trace"]
    (pending,) = [c for c in export["confirmations"] if c["status"] == "pending"]
    return kit.Waiting(
        run_id=export["state"]["run_id"],
        confirmation_id=pending["id"],
        proposal_hash=pending["proposal_hash"],
        version=export["state"]["version"],
    )


@pytest.fixture
def publish_tool(settings: Any) -> Iterator[list[dict[str, Any]]]:
    settings.AGENTCONSOLE_TOOLS = ["tests.support.approval_tools"]
    wiring.registry.cache_clear()  # the root builds the registry once; this test adds a tool
    approval_tools.PUBLISHED.clear()
    yield approval_tools.PUBLISHED
    wiring.registry.cache_clear()


def test_four_eyes_from_the_contract_to_the_resumed_run(
    people: kit.People,
    enqueued: list,
    publish_tool: list[dict[str, Any]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    waiting = publish_scenario(people.alice.user)
    assert kit.confirmation_row(waiting.confirmation_id).approvers == "four_eyes"

    # The first approval (the owner): recorded, 202, the run keeps waiting, nothing enqueued.
    with django_capture_on_commit_callbacks(execute=True):
        response = post(people.alice, waiting, "approve", reason="yes, publish it")
    assert response.status_code == 202, kit.describe(response)
    body = response.json()
    assert (body["status"], body["approvers"], body["approvals_needed"]) == (
        "pending",
        "four_eyes",
        2,
    )
    assert [(a["by"], a["reason"]) for a in body["approvals"]] == [("alice", "yes, publish it")]
    assert_still_waiting(waiting, approvals=["alice"], version=waiting.version + 1)
    (recorded,) = kit.events_of(waiting.run_id, "confirmation.approval-recorded")
    assert recorded.details["approved_by"] == ["alice"]
    assert recorded.details["needed"] == 2
    assert enqueued == []
    assert publish_tool == []

    # The same person again: 409, nothing changes.
    kit.assert_error(post(people.alice, waiting, "approve"), 409, ALREADY_APPROVED_BY_YOU)
    assert_still_waiting(waiting, approvals=["alice"], version=waiting.version + 1)

    # The second, distinct approver (an operator who is not the owner): approved, resumed once.
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(post(people.operator, waiting, "approve", reason="checked the text"))
    assert (body["status"], body["decided_by"]) == ("approved", "operator")
    assert [a["by"] for a in body["approvals"]] == ["alice", "operator"]
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert decided.details["approved_by"] == ["alice", "operator"]
    assert decided.details["approval_reasons"] == ["yes, publish it", "checked the text"]
    assert decided.details["approvers"] == "four_eyes"
    assert run_of(waiting).status == "running"
    assert enqueued == [waiting.run_id]

    # What the worker does with it, in-process: the tool runs once, the run completes.
    state = services.run_advance(run_id=waiting.run_id)
    assert state is not None
    assert state.status.value == "completed", state
    assert publish_tool == [{"run_id": waiting.run_id, "text": "Maintenance tonight at 22:00"}]

    # A third person finds it decided, and who decided it.
    response = post(people.operator2, waiting, "approve")
    kit.assert_error(response, 409, kit.CONFIRMATION_NOT_PENDING)
    assert "operator" in response.json()["message"]


def test_four_eyes_two_operators_and_a_second_click_by_the_first(
    people: kit.People, enqueued: list
) -> None:
    waiting = with_rule(kit.waiting_run(people.alice.user), "four_eyes")
    assert post(people.operator, waiting, "approve").status_code == 202
    kit.assert_error(post(people.operator, waiting, "approve"), 409, ALREADY_APPROVED_BY_YOU)
    body = kit.assert_ok(post(people.operator2, waiting, "approve"))
    assert (body["status"], [a["by"] for a in body["approvals"]]) == (
        "approved",
        ["operator", "operator2"],
    )


def test_four_eyes_the_owner_who_is_an_operator_needs_an_independent_second(
    people: kit.People, enqueued: list
) -> None:
    """An operator's own run: their approval is the owner's (recorded as not independent), so
    the second pair of eyes must be an operator who is not the run's owner."""
    waiting = with_rule(kit.waiting_run(people.operator.user), "four_eyes")
    assert post(people.operator, waiting, "approve").status_code == 202
    row = kit.confirmation_row(waiting.confirmation_id)
    assert [(a.username, a.independent) for a in row.approvals.all()] == [("operator", False)]
    kit.assert_ok(post(people.operator2, waiting, "approve"))


def test_four_eyes_a_decline_after_one_approval_declines_and_names_the_approver(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    waiting = with_rule(kit.waiting_run(people.alice.user), "four_eyes")
    assert post(people.operator, waiting, "approve", reason="fine by me").status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(post(people.alice, waiting, "decline", reason="changed my mind"))
    assert (body["status"], body["decided_by"], body["decision_reason"]) == (
        "declined",
        "alice",
        "changed my mind",
    )
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert (decided.details["decision"], decided.details["approved_by"]) == (
        "declined",
        ["operator"],
    )
    assert run_of(waiting).pending_confirmation_id is None
    assert enqueued == [waiting.run_id]
    kit.assert_error(post(people.operator2, waiting, "approve"), 409, kit.CONFIRMATION_NOT_PENDING)


def test_four_eyes_a_stale_hash_is_refused_before_and_after_the_first_approval(
    people: kit.People,
) -> None:
    waiting = with_rule(kit.waiting_run(people.alice.user), "four_eyes")
    for caller in (people.operator, people.alice):
        response = caller.post(
            f"/api/confirmations/{waiting.confirmation_id}/approve/",
            {"proposal_hash": kit.HASH_OTHER},
        )
        kit.assert_error(response, 409, kit.CONFIRMATION_HASH_MISMATCH)
    assert_still_waiting(waiting, approvals=[], version=waiting.version)
    assert post(people.operator, waiting, "approve").status_code == 202
    response = people.operator2.post(
        f"/api/confirmations/{waiting.confirmation_id}/approve/", {"proposal_hash": kit.HASH_OTHER}
    )
    kit.assert_error(response, 409, kit.CONFIRMATION_HASH_MISMATCH)
    assert_still_waiting(waiting, approvals=["operator"], version=waiting.version + 1)


def test_the_pending_list_shows_the_rule_and_the_approvals_so_far(people: kit.People) -> None:
    waiting = with_rule(kit.waiting_run(people.alice.user), "four_eyes")
    assert post(people.operator, waiting, "approve", reason="ok").status_code == 202
    (row,) = kit.assert_ok(people.alice.get("/api/confirmations/"))
    assert (row["approvers"], row["approvals_needed"]) == ("four_eyes", 2)
    assert [(a["by"], a["reason"]) for a in row["approvals"]] == [("operator", "ok")]


def test_a_long_reason_is_kept_whole_on_the_row_and_summarized_in_the_trace(
    people: kit.People,
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    reason = "because " * 120  # 960 characters: within the form's 1,000, over a trace detail
    kit.assert_ok(post(people.operator, waiting, "approve", reason=reason))
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.decision_reason == reason.strip()
    assert row.approvals.get().reason == reason.strip()
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert decided.details["reason"] == reason.strip()[:256]
    assert decided.details["approval_reasons"] == [reason.strip()[:256]]
