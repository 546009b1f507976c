"""Confirmations: the pending list, the detail a person decides on (tool, version, arguments,
proposal hash, provenance with trust labels), approve/decline naming the hash that was shown, and
the conflicts: a stale or different hash, a second decision."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policy.domain.canonical import proposal_hash
from runs import models as m
from runs.tools.corpus import demo_corpus_dir, document_load
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db


def approve(caller: kit.Persona, waiting: kit.Waiting, shown: str | None = None) -> Any:
    return caller.post(
        f"/api/confirmations/{waiting.confirmation_id}/approve/",
        {"proposal_hash": shown or waiting.proposal_hash},
    )


def decline(
    caller: kit.Persona, waiting: kit.Waiting, shown: str | None = None, reason: str = "not now"
) -> Any:
    return caller.post(
        f"/api/confirmations/{waiting.confirmation_id}/decline/",
        {"proposal_hash": shown or waiting.proposal_hash, "reason": reason},
    )


def assert_undecided(waiting: kit.Waiting) -> None:
    """Nothing was decided: the row, the run and the trace are as the runner left them."""
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by, row.decided_at) == ("pending", None, None)
    run = m.Run.objects.get(pk=waiting.run_id)
    assert (run.status, run.version) == ("waiting_confirmation", waiting.version)
    assert kit.events_of(waiting.run_id, "confirmation.decided") == []


# --- list and detail ----------------------------------------------------------------------------


def test_pending_list_shows_a_user_only_their_own(people: kit.People) -> None:
    mine = kit.waiting_run(people.alice.user)
    theirs = kit.waiting_run(people.bob.user)

    def listed(caller: kit.Persona, **params: str) -> set[str]:
        rows = kit.assert_ok(caller.get("/api/confirmations/", params))
        return {r["confirmation_id"] for r in rows}

    assert listed(people.alice) == {mine.confirmation_id}
    assert listed(people.bob) == {theirs.confirmation_id}
    for staff in (people.operator, people.reviewer, people.admin):
        assert listed(staff) == {mine.confirmation_id, theirs.confirmation_id}
    kit.assert_ok(approve(people.operator, mine))
    assert listed(people.operator) == {theirs.confirmation_id}  # pending is the default
    assert listed(people.operator, status="approved") == {mine.confirmation_id}
    assert listed(people.bob, status="approved") == set()
    assert listed(people.alice, status="no-such-status") == set()


def test_detail_shows_tool_version_arguments_hash_and_provenance(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user, cites=["user-1", "obs-that-never-was"])
    detail = kit.assert_ok(people.alice.get(f"/api/confirmations/{waiting.confirmation_id}/"))
    assert detail["confirmation_id"] == waiting.confirmation_id
    assert detail["run_id"] == waiting.run_id
    assert detail["status"] == "pending"
    assert (detail["tool_name"], detail["tool_version"]) == ("save_preference", "1")
    assert detail["proposal"]["arguments"] == {"key": "answer_language", "value": "zh-CN"}
    assert detail["proposal"]["source_observation_ids"] == ["user-1", "obs-that-never-was"]
    expected_hash = proposal_hash("save_preference", "1", detail["proposal"]["arguments"])
    assert detail["proposal_hash"] == expected_hash == waiting.proposal_hash
    provenance = detail["provenance"]
    assert provenance["cited"] == [
        {"observation_id": "user-1", "trust": "user"},
        {"observation_id": "obs-that-never-was", "trust": "missing"},
    ]
    # Where each argument came from, as the runtime recorded it: the goal (以后请用中文回答)
    # holds neither value, so the planner wrote both; it waits by the tool's own contract.
    assert provenance["recorded"] is True
    assert [(leaf["path"], leaf["words"]) for leaf in provenance["leaves"]] == [
        ("key", "no source found (the planner wrote it)"),
        ("value", "no source found (the planner wrote it)"),
    ]
    assert provenance["why_words"] == "the tool's contract asks a person for this call"
    assert detail["cites_untrusted"] is False
    assert detail["origin"] == "runtime"
    assert detail["decided_by"] is None
    assert detail["decided_at"] is None


@pytest.mark.django_db(transaction=True)
def test_provenance_labels_untrusted_content(people: kit.People) -> None:
    """A proposal that cites a search result: the detail says which observation is untrusted.
    (A tool runs in its own thread with its own connection: committed rows, transaction=True.)"""
    for path in sorted(demo_corpus_dir().glob("*.md")):
        document_load(path=path)
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    data["grants"].append(
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10}
    )
    search = {
        "kind": "tool",
        "proposal_id": "p0",
        "tool_name": "search_public",
        "tool_version": "1",
        "arguments": {"query": "retry quarantine queue"},
        "source_observation_ids": ["user-1"],
    }
    data["planner"][0]["source_observation_ids"] = ["user-1", "tool-1"]
    data["planner"].insert(0, search)
    export = kit.scenario_run(data, people.alice.user)
    assert export["state"]["status"] == "waiting_confirmation", export["state"]
    run_id = export["state"]["run_id"]
    (cid,) = [c["id"] for c in export["confirmations"] if c["status"] == "pending"]

    detail = kit.assert_ok(people.operator.get(f"/api/confirmations/{cid}/"))
    assert detail["cites_untrusted"] is True
    assert detail["provenance"]["cited"] == [
        {"observation_id": "user-1", "trust": "user"},
        {"observation_id": "tool-1", "trust": "untrusted-content"},
    ]
    # The run's other views agree: one ledger row for the search, its observation untrusted.
    (row,) = kit.assert_ok(people.alice.get(f"/api/runs/{run_id}/ledger/"))
    assert (row["tool_name"], row["tool_version"], row["status"]) == (
        "search_public",
        "1",
        "succeeded",
    )
    assert len(row["idempotency_token"]) > 0
    observations = kit.assert_ok(people.alice.get(f"/api/runs/{run_id}/observations/"))
    trust = {o["observation_id"]: o["trust"] for o in observations}
    assert trust["tool-1"] == "untrusted-content"
    assert trust["user-1"] == "user"


def test_detail_of_unknown_and_foreign_confirmations_is_not_found(
    people: kit.People,
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    for cid in ("nope", f"{waiting.run_id}:c99", waiting.confirmation_id + "x"):
        kit.assert_error(people.alice.get(f"/api/confirmations/{cid}/"), 404, kit.NOT_FOUND)
    kit.assert_error(
        people.bob.get(f"/api/confirmations/{waiting.confirmation_id}/"), 404, kit.NOT_FOUND
    )


# --- decisions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["operator", "admin", "alice"])
def test_approve_records_who_and_resumes_the_run_once(
    who: str,
    people: kit.People,
    enqueued: list,
    django_capture_on_commit_callbacks: Any,
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(approve(getattr(people, who), waiting))
    assert body["status"] == "approved"
    assert body["decided_by"] == who
    assert body["decided_at"] is not None
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by) == ("approved", getattr(people, who).user)
    run = m.Run.objects.get(pk=waiting.run_id)
    assert run.status == "running"
    assert run.version == waiting.version + 1
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert decided.details == {
        "confirmation_id": waiting.confirmation_id,
        "decision": "approved",
        "by": who,
        # The audit names every approver (issue 12 item 3): here the one the default rule needs.
        "approvers": "owner_or_operator",
        "approved_by": [who],
        "approval_reasons": [""],
    }
    assert [a["by"] for a in body["approvals"]] == [who]
    assert (body["approvers"], body["approvals_needed"]) == ("owner_or_operator", 1)
    assert enqueued == [waiting.run_id]  # resumed once, by a worker


def test_decline_records_who_and_resumes_the_run(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    with django_capture_on_commit_callbacks(execute=True):
        body = kit.assert_ok(decline(people.operator, waiting))
    assert (body["status"], body["decided_by"]) == ("declined", "operator")
    run = m.Run.objects.get(pk=waiting.run_id)
    assert run.status == "running"
    assert run.pending_confirmation_id is None
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert (decided.details["decision"], decided.details["by"]) == ("declined", "operator")
    assert enqueued == [waiting.run_id]


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_decline_without_a_reason_is_refused_as_in_the_console(
    people: kit.People, reason: str
) -> None:
    # One rule (issue 25 item 5): the service refuses it, for the API and the console alike.
    waiting = kit.waiting_run(people.alice.user)
    response = decline(people.operator, waiting, reason=reason)
    kit.assert_error(response, 400, "REASON_REQUIRED")
    assert_undecided(waiting)


@pytest.mark.parametrize("decide", [approve, decline], ids=["approve", "decline"])
def test_a_different_hash_is_a_conflict_and_decides_nothing(
    decide: Any,
    people: kit.People,
    enqueued: list,
    django_capture_on_commit_callbacks: Any,
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    # What a stale screen would show: the hash of other arguments for the same tool.
    stale = proposal_hash("save_preference", "1", {"key": "answer_language", "value": "fr"})
    for shown in (stale, kit.HASH_OTHER, waiting.proposal_hash.upper()):
        with django_capture_on_commit_callbacks(execute=True):
            response = decide(people.operator, waiting, shown)
        if shown.isupper():
            kit.assert_error(response, 400, kit.VALIDATION_ERROR)  # not a hash at all
        else:
            kit.assert_error(response, 409, kit.CONFIRMATION_HASH_MISMATCH)
        assert_undecided(waiting)
    assert enqueued == []


@pytest.mark.parametrize(
    "body",
    [{}, {"proposal_hash": ""}, {"proposal_hash": "abc"}, {"proposal_hash": 7},
     {"proposal_hash": None}, {"proposal_hash": ["x"]}, {"hash": "0" * 64},
     {"proposal_hash": "0" * 64, "approved": True}],
)  # fmt: skip
def test_decision_body_is_validated(body: dict, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = people.operator.post(f"/api/confirmations/{waiting.confirmation_id}/approve/", body)
    kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert_undecided(waiting)


@pytest.mark.parametrize(
    ("first", "second"),
    [(approve, approve), (approve, decline), (decline, approve), (decline, decline)],
    ids=["approve-approve", "approve-decline", "decline-approve", "decline-decline"],
)
def test_a_second_decision_is_a_conflict(first: Any, second: Any, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_ok(first(people.operator, waiting))
    decided = kit.confirmation_row(waiting.confirmation_id)
    version = m.Run.objects.get(pk=waiting.run_id).version
    kit.assert_error(second(people.admin, waiting), 409, kit.CONFIRMATION_NOT_PENDING)
    again = kit.confirmation_row(waiting.confirmation_id)
    assert (again.status, again.decided_by, again.decided_at) == (
        decided.status,
        people.operator.user,
        decided.decided_at,
    )
    assert m.Run.objects.get(pk=waiting.run_id).version == version
    assert len(kit.events_of(waiting.run_id, "confirmation.decided")) == 1


def test_a_reviewer_cannot_decide(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_error(approve(people.reviewer, waiting), 403, kit.PERMISSION_DENIED)
    kit.assert_error(decline(people.reviewer, waiting), 403, kit.PERMISSION_DENIED)
    assert_undecided(waiting)


def test_deciding_an_unknown_confirmation_is_not_found(people: kit.People) -> None:
    for cid in ("nope", "run_x:c1", "a" * 500):
        response = people.operator.post(
            f"/api/confirmations/{cid}/approve/", {"proposal_hash": kit.HASH_OTHER}
        )
        kit.assert_error(response, 404, kit.NOT_FOUND)
