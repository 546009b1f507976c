"""Edit and respond (issue 24 item 1) through the HTTP API: an edit is an approval of a
different proposal, checked by the whole gate again; a response is a note to the planner.

Personas (tests/support/personas.py): ``alice`` owns the waiting runs (save_preference
``answer_language=zh-CN`` waits, s15); ``operator`` and ``operator2`` decide; ``reviewer``
never does.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from memory.models import PreferenceRecord
from policy.models import Confirmation
from runs import models as m
from runs import services
from tests.api import api_kit as kit
from tests.api.confirmations.test_approvers import publish_scenario, publish_tool  # noqa: F401 -- fixture

# Transactional: the approved tool writes the preference on its own connection (the executor's
# thread), which a test's rolled-back transaction would leave behind for the next test.
pytestmark = pytest.mark.django_db(transaction=True)

SHOWN = {"key": "answer_language", "value": "zh-CN"}


def post(caller: kit.Persona, waiting: kit.Waiting, verb: str, **body: Any) -> Any:
    return caller.post(
        f"/api/confirmations/{waiting.confirmation_id}/{verb}/",
        {"proposal_hash": waiting.proposal_hash, **body},
    )


def constrained_run(owner: Any, allowed: list[str]) -> kit.Waiting:
    """s15 with a memory:write grant limited to ``allowed`` values (a grant constraint)."""
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    data["subject"] = data["grants"][0]["resource_scope"] = owner.get_username()
    data["grants"][0]["constraints"] = {"value": {"one_of": allowed}}
    export = kit.scenario_run(data, owner)
    (pending,) = [c for c in export["confirmations"] if c["status"] == "pending"]
    return kit.Waiting(
        export["state"]["run_id"],
        pending["id"],
        pending["proposal_hash"],
        export["state"]["version"],
    )


def unchanged(waiting: kit.Waiting) -> None:
    """Nothing was written: the confirmation still pending, the run at its version, no event."""
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by) == ("pending", None)
    run = m.Run.objects.get(pk=waiting.run_id)
    assert (run.status, run.version) == ("waiting_confirmation", waiting.version)
    assert Confirmation.objects.filter(run_id=waiting.run_id).count() == 1
    assert kit.events_of(waiting.run_id, "confirmation.edited") == []


def test_edit_and_approve_runs_the_edited_call(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    edited_args = {"key": "answer_language", "value": "fr-FR"}
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(
            post(
                people.operator,
                waiting,
                "edit",
                arguments=edited_args,
                reason="the user said French",
            )
        )
    assert body["run_status"] == "running"
    old, new = body["edited"], body["confirmation"]
    assert (old["status"], old["decided_by"], old["decision_reason"]) == (
        "edited",
        "operator",
        "the user said French",
    )
    assert new["status"] == "approved"
    assert new["decided_by"] == "operator"
    assert new["edited_from"] == waiting.confirmation_id
    assert new["proposal_hash"] != waiting.proposal_hash
    assert new["proposal"]["arguments"] == edited_args
    assert new["edit_diff"] == [{"path": "value", "op": "changed", "from": "zh-CN", "to": "fr-FR"}]
    assert [a["by"] for a in new["approvals"]] == ["operator"]
    assert enqueued == [waiting.run_id]
    (event,) = kit.events_of(waiting.run_id, "confirmation.edited")
    assert event.details["paths"] == ["value"]
    # ``value`` is not a logged field of save_preference: the trace says it changed, not to what.
    assert event.details["changes"] == ["value: changed"]
    assert "fr-FR" not in str(event.details)

    # The worker: the edited call passes the gate again and the tool gets exactly it.
    state = services.run_advance(run_id=waiting.run_id)
    assert state is not None
    assert state.status.value == "completed", state
    record = PreferenceRecord.objects.get(subject="alice", key="answer_language")
    assert record.value == "fr-FR"
    assert kit.confirmation_row(new["confirmation_id"]).status == "consumed"
    (provenance,) = [
        e
        for e in kit.events_of(waiting.run_id, "proposal.provenance")
        if e.proposal_id == new["proposal"]["proposal_id"]
    ]
    value_leaf = next(k for k, v in provenance.details.items() if v == "value")
    assert provenance.details["from_" + value_leaf.split("_")[1]][0] == "edited:operator"


def test_an_edit_outside_the_grants_constraint_is_refused_with_the_gates_code(
    people: kit.People, enqueued: list
) -> None:
    waiting = constrained_run(people.alice.user, ["zh-CN", "fr-FR"])
    response = post(
        people.operator, waiting, "edit", arguments={"key": "answer_language", "value": "de"}
    )
    body = kit.assert_error(response, 422, "CAPABILITY_CONSTRAINT_VIOLATED")
    assert body["extra"]["layer"] == "authorization"
    unchanged(waiting)
    assert enqueued == []
    # Inside the constraint it passes.
    body = kit.assert_ok(
        post(
            people.operator, waiting, "edit", arguments={"key": "answer_language", "value": "fr-FR"}
        )
    )
    assert body["confirmation"]["status"] == "approved"


@pytest.mark.parametrize(
    ("arguments", "status", "code"),
    [
        ({"key": "answer_language", "value": "not a language"}, 422, "MEMORY_VALUE_INVALID"),
        ({"key": "answer_language", "value": "de", "extra": 1}, 422, "UNKNOWN_INPUT_FIELD"),
        ({"key": "system_prompt", "value": "de"}, 422, "MEMORY_KEY_NOT_ALLOWED"),
        (["not", "an", "object"], 400, "EDIT_ARGUMENTS_INVALID"),
        (SHOWN, 400, "EDIT_UNCHANGED"),
    ],
    ids=["semantic", "schema", "key", "not-object", "unchanged"],
)
def test_every_refused_edit_writes_nothing(
    people: kit.People, arguments: Any, status: int, code: str
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_error(post(people.operator, waiting, "edit", arguments=arguments), status, code)
    unchanged(waiting)


def test_an_edit_by_someone_the_approver_rule_excludes_is_403(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    Confirmation.objects.filter(pk=waiting.confirmation_id).update(approvers="operator")
    new = {"key": "answer_language", "value": "fr-FR"}
    response = post(people.alice, waiting, "edit", arguments=new)
    kit.assert_error(response, 403, "APPROVER_NOT_ALLOWED")
    unchanged(waiting)
    kit.assert_error(
        post(people.reviewer, waiting, "edit", arguments=new), 403, kit.PERMISSION_DENIED
    )
    kit.assert_error(post(people.bob, waiting, "edit", arguments=new), 404, kit.NOT_FOUND)
    unchanged(waiting)


def test_a_stale_hash_is_the_mismatch_code(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = people.operator.post(
        f"/api/confirmations/{waiting.confirmation_id}/edit/",
        {"proposal_hash": kit.HASH_OTHER, "arguments": {"key": "answer_language", "value": "de"}},
    )
    kit.assert_error(response, 409, kit.CONFIRMATION_HASH_MISMATCH)
    unchanged(waiting)


def test_an_edit_after_a_decision_is_not_pending(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_ok(post(people.operator, waiting, "decline", reason="no"))
    response = post(
        people.operator2, waiting, "edit", arguments={"key": "answer_language", "value": "de"}
    )
    kit.assert_error(response, 409, kit.CONFIRMATION_NOT_PENDING)


def test_four_eyes_the_edit_is_one_approval_and_the_second_sees_the_edit(
    people: kit.People,
    enqueued: list,
    publish_tool: list[dict[str, Any]],  # noqa: F811 -- the fixture
    django_capture_on_commit_callbacks: Any,
) -> None:
    waiting = publish_scenario(people.alice.user)
    fixed = {"text": "Maintenance tonight at 23:00"}
    response = post(people.operator, waiting, "edit", arguments=fixed, reason="it is at 23:00")
    assert response.status_code == 202, kit.describe(response)
    body = response.json()
    new = body["confirmation"]
    assert (body["run_status"], new["status"], new["approvals_needed"]) == (
        "waiting_confirmation",
        "pending",
        2,
    )
    assert [a["by"] for a in new["approvals"]] == ["operator"]
    # The edit is logged the way the tool's contract logs ``text``.
    (event,) = kit.events_of(waiting.run_id, "confirmation.edited")
    assert event.details["changes"] == [
        "text: Maintenance tonight at 22:00 → Maintenance tonight at 23:00"
    ]
    assert enqueued == []
    assert publish_tool == []

    # The original is no longer approvable; the editor cannot approve their own edit twice.
    kit.assert_error(
        post(people.operator2, waiting, "approve"), 409, kit.CONFIRMATION_HASH_MISMATCH
    )
    edited = kit.Waiting(waiting.run_id, new["confirmation_id"], new["proposal_hash"], 0)
    kit.assert_error(post(people.operator, edited, "approve"), 409, "ALREADY_APPROVED_BY_YOU")
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(post(people.alice, edited, "approve", reason="yes"))
    assert [a["by"] for a in body["approvals"]] == ["operator", "alice"]
    state = services.run_advance(run_id=waiting.run_id)
    assert state is not None
    assert state.status.value == "completed", state
    assert publish_tool == [{"run_id": waiting.run_id, "text": "Maintenance tonight at 23:00"}]


def test_respond_ends_the_wait_with_a_note_and_the_planner_takes_a_new_step(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(
            post(people.operator, waiting, "respond", note="She wants French, not Chinese.")
        )
    assert (body["status"], body["decided_by"], body["decision_reason"]) == (
        "responded",
        "operator",
        "She wants French, not Chinese.",
    )
    run = m.Run.objects.get(pk=waiting.run_id)
    assert (run.status, run.pending_proposal, run.pending_confirmation_id) == (
        "running",
        None,
        None,
    )
    assert enqueued == [waiting.run_id]
    (note,) = m.Observation.objects.filter(run_id=waiting.run_id, kind="human-decision")
    assert (note.trust, note.content["note"], note.content["from"]) == (
        "user",
        "She wants French, not Chinese.",
        "operator",
    )
    (event,) = kit.events_of(waiting.run_id, "confirmation.responded")
    assert event.details["note"] == "She wants French, not Chinese."
    step_before = run.step
    state = services.run_advance(run_id=waiting.run_id)
    assert state is not None
    # The planner took its next step (s15's final answer, citing a tool result that never came:
    # refused), and the proposal never ran.
    assert state.step == step_before + 1
    assert [e.details["kind"] for e in kit.events_of(waiting.run_id, "planner.output")] == [
        "tool",
        "final",
    ]
    assert not m.LedgerEntry.objects.filter(run_id=waiting.run_id).exists()


@pytest.mark.parametrize(
    ("note", "code"),
    [("", "NOTE_REQUIRED"), ("   ", "NOTE_REQUIRED"), ("x" * 2001, "NOTE_TOO_LONG")],
)
def test_a_note_is_required_and_bounded(people: kit.People, note: str, code: str) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_error(post(people.operator, waiting, "respond", note=note), 400, code)
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.status == "pending"
    assert m.Run.objects.get(pk=waiting.run_id).version == waiting.version


def test_respond_follows_the_approver_rule(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    Confirmation.objects.filter(pk=waiting.confirmation_id).update(approvers="owner")
    kit.assert_error(
        post(people.operator, waiting, "respond", note="no"), 403, "APPROVER_NOT_ALLOWED"
    )
    kit.assert_error(
        post(people.reviewer, waiting, "respond", note="no"), 403, kit.PERMISSION_DENIED
    )
    kit.assert_ok(post(people.alice, waiting, "respond", note="use French"))


def test_a_value_that_keeps_a_masks_tag_is_refused(people: kit.People) -> None:
    """The person edits what they were shown, secrets masked: a changed value that still holds
    a mask's tag would hand the tool the tag, not the secret (tests/domain/test_edits.py has
    the value left alone, which keeps its real secret)."""
    waiting = kit.waiting_run(people.alice.user)
    tagged = {"key": "answer_language", "value": f"[secret:hmac-sha256:{'0' * 12}]"}
    kit.assert_error(
        post(people.operator, waiting, "edit", arguments=tagged), 400, "EDIT_KEEPS_MASK"
    )
    unchanged(waiting)
