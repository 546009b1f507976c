"""Handoffs: the inbox (reviewers and operators), claim (once: a second claim is a conflict) and
resolve (by the claimant or an admin, with one of the allowed commands), each recorded with who
did it."""

from __future__ import annotations

from typing import Any

import pytest

from runs import models as m
from runs.people.handoffs import ACTIONS
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db


def claim(caller: kit.Persona, handed: kit.Handed) -> Any:
    return caller.post(f"/api/handoffs/{handed.handoff_id}/claim/")


def resolve(
    caller: kit.Persona, handed: kit.Handed, action: str = "fail", reason: str = "ok"
) -> Any:
    return caller.post(
        f"/api/handoffs/{handed.handoff_id}/resolve/", {"action": action, "reason": reason}
    )


def test_inbox_lists_handoffs_with_their_bundle(people: kit.People) -> None:
    first = kit.handoff_run(people.alice.user)
    second = kit.handoff_run(people.bob.user)
    kit.assert_ok(claim(people.reviewer, second))
    for staff in (people.reviewer, people.operator, people.admin):
        rows = kit.assert_ok(staff.get("/api/handoffs/"))
        assert {r["id"] for r in rows} == {first.handoff_id, second.handoff_id}
        open_rows = kit.assert_ok(staff.get("/api/handoffs/", {"status": "open"}))
        assert [r["id"] for r in open_rows] == [first.handoff_id]
    detail = kit.assert_ok(people.reviewer.get(f"/api/handoffs/{first.handoff_id}/"))
    assert detail["run_id"] == first.run_id
    assert detail["reason"] == "MAX_STEPS_REACHED"
    assert detail["status"] == "open"
    assert detail["assignee"] is None
    assert detail["bundle"]["run_id"] == first.run_id
    assert detail["bundle"]["reason"] == "MAX_STEPS_REACHED"
    assert "forbidden_automatic_actions" in detail["bundle"]
    counts = kit.assert_ok(people.operator.get("/api/queues/"))
    assert counts["open_handoffs"] == 2  # open and claimed: both still need a person


def test_unknown_handoff_is_not_found(people: kit.People) -> None:
    for path in ("/api/handoffs/999999/", "/api/handoffs/0/"):
        kit.assert_error(people.reviewer.get(path), 404, kit.NOT_FOUND)
    kit.assert_error(
        people.reviewer.post("/api/handoffs/999999/resolve/", {"action": "fail", "reason": "r"}),
        404,
        kit.NOT_FOUND,
    )


def test_claiming_an_unknown_handoff_is_not_found(people: kit.People) -> None:
    """Detail and resolve answer NOT_FOUND for a handoff id that does not exist; claim answers 409
    HANDOFF_NOT_OPEN (runs/people/handoffs.py handoff_claim cannot tell "absent" from "taken")."""
    kit.assert_error(people.reviewer.post("/api/handoffs/999999/claim/"), 404, kit.NOT_FOUND)


def test_claim_records_the_assignee_and_a_second_claim_conflicts(people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)
    body = kit.assert_ok(claim(people.reviewer, handed))
    assert (body["status"], body["assignee"]) == ("claimed", "reviewer")
    assert body["claimed_at"] is not None
    row = m.Handoff.objects.get(pk=handed.handoff_id)
    assert (row.status, row.assignee) == ("claimed", people.reviewer.user)
    (claimed,) = kit.events_of(handed.run_id, "handoff.claimed")
    assert claimed.details == {"handoff": handed.handoff_id, "by": "reviewer"}

    for again in (people.reviewer2, people.reviewer, people.admin):
        kit.assert_error(claim(again, handed), 409, kit.HANDOFF_NOT_OPEN)
    row.refresh_from_db()
    assert row.assignee == people.reviewer.user
    assert len(kit.events_of(handed.run_id, "handoff.claimed")) == 1


def test_claim_takes_no_body_fields(people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)
    response = people.reviewer.post(
        f"/api/handoffs/{handed.handoff_id}/claim/", {"assignee": "reviewer2"}
    )
    kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert m.Handoff.objects.get(pk=handed.handoff_id).status == "open"


@pytest.mark.parametrize("who", ["reviewer", "admin"])
def test_resolve_by_the_claimant_or_an_admin_records_who_and_why(
    who: str, people: kit.People
) -> None:
    handed = kit.handoff_run(people.alice.user)
    kit.assert_ok(claim(people.reviewer, handed))
    body = kit.assert_ok(resolve(getattr(people, who), handed, "fail", "budget too small"))
    assert body["status"] == "resolved"
    assert body["resolution"] == {"action": "fail"}
    assert body["resolved_at"] is not None
    (resolved,) = kit.events_of(handed.run_id, "handoff.resolved")
    assert resolved.details["by"] == who
    assert resolved.details["action"] == "fail"
    assert resolved.details["reason"] == "budget too small"
    assert resolved.details["handoff"] == handed.handoff_id
    assert m.Run.objects.get(pk=handed.run_id).status == "failed"


def test_resolve_by_another_reviewer_is_forbidden(people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)
    kit.assert_ok(claim(people.reviewer, handed))
    kit.assert_error(resolve(people.reviewer2, handed), 403, kit.PERMISSION_DENIED)
    row = m.Handoff.objects.get(pk=handed.handoff_id)
    assert (row.status, row.assignee) == ("claimed", people.reviewer.user)
    assert kit.events_of(handed.run_id, "handoff.resolved") == []


def test_resolve_needs_a_claim_and_happens_once(people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)
    kit.assert_error(resolve(people.reviewer, handed), 409, "HANDOFF_NOT_CLAIMED")
    kit.assert_ok(claim(people.reviewer, handed))
    kit.assert_ok(resolve(people.reviewer, handed, "cancel", "done with it"))
    kit.assert_error(resolve(people.reviewer, handed, "fail"), 409, "HANDOFF_NOT_CLAIMED")
    kit.assert_error(claim(people.reviewer2, handed), 409, kit.HANDOFF_NOT_OPEN)
    assert len(kit.events_of(handed.run_id, "handoff.resolved")) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"action": "ignore", "reason": "r"},
        {"action": "fail"},
        {"action": "fail", "reason": ""},
        {"action": "fail", "reason": "   "},
        {"action": "fail", "reason": "r" * 257},
        {"action": ["fail"], "reason": "r"},
        {"reason": "r"},
        {"action": "fail", "reason": "r", "status": "resolved"},
    ],
)
def test_resolve_body_is_validated(body: dict, people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)
    kit.assert_ok(claim(people.reviewer, handed))
    response = people.reviewer.post(f"/api/handoffs/{handed.handoff_id}/resolve/", body)
    kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert m.Handoff.objects.get(pk=handed.handoff_id).status == "claimed"


def test_every_allowed_action_is_accepted_by_the_api(people: kit.People) -> None:
    """The effect actions need an effect to settle: on a run without one they are a 409 with a
    stable code, never a 500; cancel and fail always resolve."""
    for action in ACTIONS:
        handed = kit.handoff_run(people.alice.user)
        kit.assert_ok(claim(people.reviewer, handed))
        response = resolve(people.reviewer, handed, action, f"try {action}")
        if action in ("cancel", "fail"):
            assert kit.assert_ok(response)["resolution"] == {"action": action}
        else:
            kit.assert_error(response, 409, "HANDOFF_NO_EFFECT")


@pytest.mark.django_db(transaction=True)
def test_a_reviewer_settles_a_failed_verification(people: kit.People, settings: Any) -> None:
    """faultlab/verification-failed: the tool's write was changed behind its back, the ledger row
    is compensation-required and a handoff opened; the reviewer marks the effect present and
    the ledger row is reconciled with their name on it. (A tool thread: transaction=True.)"""
    settings.AGENTCONSOLE_FAULTS_ENABLED = True  # a fault-lab scenario (issue 9 item 6)
    export = kit.scenario_run(kit.load_fixture("faultlab/verification-failed.json"), None)
    run_id = export["state"]["run_id"]
    assert export["state"]["stop_reason"] == "TOOL_POSTCONDITION_FAILED"
    handoff = m.Handoff.objects.get(run_id=run_id)
    handed = kit.Handed(run_id=run_id, handoff_id=handoff.pk)
    (before,) = kit.assert_ok(people.reviewer.get(f"/api/runs/{run_id}/ledger/"))
    assert before["status"] == "compensation-required"
    # The run's write summary (issue 21 item 2): a failed post-condition counts as failed ...
    writes = kit.assert_ok(people.reviewer.get(f"/api/runs/{run_id}/"))["writes"]
    assert (writes["succeeded"], writes["failed"]) == (0, 1)

    kit.assert_ok(claim(people.reviewer, handed))
    body = kit.assert_ok(resolve(people.reviewer, handed, "mark_effect_present", "file checked"))
    assert body["resolution"]["ledger_status"] == "reconciled"
    assert body["resolution"]["effect"] == "present"
    (after,) = kit.assert_ok(people.reviewer.get(f"/api/runs/{run_id}/ledger/"))
    assert after["status"] == "reconciled"
    assert after["verification"]["by"] == "reviewer"
    assert after["verification"]["reason"] == "file checked"
    (resolved,) = kit.events_of(run_id, "handoff.resolved")
    assert resolved.details["by"] == "reviewer"
    assert resolved.details["ledger_status"] == "reconciled"
    # ... and as the reviewer found it once they settled it: present, a write that took effect.
    writes = kit.assert_ok(people.reviewer.get(f"/api/runs/{run_id}/"))["writes"]
    assert (writes["succeeded"], writes["failed"]) == (1, 0)
