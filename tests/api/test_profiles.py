"""Run profiles in the HTTP API (issue 11 item 7): ``GET /api/profiles/`` lists what the caller
may use; ``POST /api/runs/`` with ``profile`` gives the run exactly the profile's grants; a run
started for a subject by someone else is visible to that subject, with its confirmations.

Personas (tests/support/personas.py): ``operator`` defines the profiles, ``alice`` and ``bob``
are users, ``admin`` may start runs for another subject.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.models import Grant
from runs import services
from runs.demo.demo_profiles import load_demo_profiles
from runs.models import Run
from runs.start import profiles
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(people: kit.People) -> None:
    assert people.alice.user  # named by a profile: she must exist first
    load_demo_profiles(by=people.operator.user)
    kit.profile_define(people.operator.user, "alices", audience="users", users=["alice"])


def test_the_list_shows_only_what_the_caller_may_use(people: kit.People, demo: None) -> None:
    mine = kit.assert_ok(people.alice.get("/api/profiles/"))
    assert [p["name"] for p in mine] == [
        "alices", "research", "research-save-preference", "write-report",
    ]  # fmt: skip
    # The planner's kind only: its script is the operator's configuration.
    assert mine[0]["planner"] == "fixture"
    assert mine[2]["grant_templates"][1]["resource_scope"] == "{subject}"
    bobs = kit.assert_ok(people.bob.get("/api/profiles/"))
    assert "alices" not in [p["name"] for p in bobs]


def test_a_run_from_a_profile_gets_exactly_its_grants(
    people: kit.People, demo: None, enqueued: list[str]
) -> None:
    body = kit.assert_ok(
        people.alice.post(
            "/api/runs/", {"goal": "remember footnotes", "profile": "research-save-preference"}
        ),
        201,
    )
    grants = list(
        Grant.objects.filter(run_id=body["run_id"])
        .order_by("id")
        .values_list("capability", "resource_scope", "granted_by__username")
    )
    assert grants == [
        ("search:public", "public", "operator"),
        ("memory:write", "alice", "operator"),
    ]
    assert (body["owner"], body["subject"], body["max_steps"]) == ("alice", "alice", 6)


def test_a_profile_is_named_by_id_too(people: kit.People, demo: None) -> None:
    pk = profiles.profile_usable(user=people.alice.user, ref="research").pk
    kit.assert_ok(people.alice.post("/api/runs/", {"goal": "g", "profile": str(pk)}), 201)


@pytest.mark.parametrize("ref", ["alices", "no-such-profile", "999999"])
def test_a_profile_the_caller_may_not_use_is_not_found(
    people: kit.People, demo: None, ref: str
) -> None:
    kit.assert_error(
        people.bob.post("/api/runs/", {"goal": "g", "profile": ref}), 404, kit.PROFILE_NOT_FOUND
    )
    assert not Run.objects.exists()


def test_an_archived_profile_starts_nothing(people: kit.People, demo: None) -> None:
    pk = profiles.profile_usable(user=people.alice.user, ref="research").pk
    profiles.profile_archive(profile_id=pk, by=people.operator.user)
    kit.assert_error(
        people.alice.post("/api/runs/", {"goal": "g", "profile": "research"}),
        404,
        kit.PROFILE_NOT_FOUND,
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"grants": [{"capability": "memory:write", "resource_scope": "*", "expires_at_step": 9}]},
        {"planner": {"kind": "fixture", "outputs": []}},
        {"budgets": {"max_steps": 100}},
    ],
)
@pytest.mark.parametrize("who", ["alice", "operator"])
def test_a_profile_is_the_whole_definition(
    people: kit.People, demo: None, extra: dict[str, Any], who: str
) -> None:
    response = kit.persona(people, who).post(
        "/api/runs/", {"goal": "g", "profile": "research", **extra}
    )
    kit.assert_error(response, 400, kit.PROFILE_EXCLUSIVE)
    assert not Run.objects.exists()


def test_without_profile_a_planner_is_required(people: kit.People) -> None:
    kit.assert_error(people.alice.post("/api/runs/", {"goal": "g"}), 400, kit.VALIDATION_ERROR)


@pytest.mark.parametrize("subject", ["*", "alice/..", "a/b"])
def test_a_subject_that_would_widen_a_template_is_refused(
    people: kit.People, demo: None, subject: str
) -> None:
    response = people.admin.post(
        "/api/runs/",
        {"goal": "g", "profile": "research-save-preference", "subject": subject},
    )
    kit.assert_error(response, 400, "PROFILE_SUBJECT_UNSAFE")
    assert not Run.objects.exists()


def test_a_run_started_for_a_subject_is_visible_to_that_subject(
    people: kit.People, demo: None
) -> None:
    """admin starts a run for alice; alice sees it, its confirmation, and may decide it; bob
    sees none of it."""
    body = kit.assert_ok(
        people.admin.post(
            "/api/runs/",
            {"goal": "g", "profile": "research-save-preference", "subject": "alice"},
        ),
        201,
    )
    run_id = body["run_id"]
    assert body["owner"] == "admin"
    services.run_advance(run_id=run_id)
    run = Run.objects.get(pk=run_id)
    assert run.status == "waiting_confirmation"

    kit.assert_ok(people.alice.get(f"/api/runs/{run_id}/"))
    listed = kit.assert_ok(people.alice.get("/api/runs/"))["results"]
    assert [r["run_id"] for r in listed] == [run_id]
    confirmation = kit.assert_ok(
        people.alice.get(f"/api/confirmations/{run.pending_confirmation_id}/")
    )
    assert kit.assert_ok(people.alice.get("/api/confirmations/"))[0]["run_id"] == run_id

    kit.assert_error(people.bob.get(f"/api/runs/{run_id}/"), 404, kit.NOT_FOUND)
    assert kit.assert_ok(people.bob.get("/api/confirmations/")) == []
    kit.assert_error(
        people.bob.post(
            f"/api/confirmations/{run.pending_confirmation_id}/approve/",
            {"proposal_hash": confirmation["proposal_hash"]},
        ),
        404,
        kit.NOT_FOUND,
    )
    decided = kit.assert_ok(
        people.alice.post(
            f"/api/confirmations/{run.pending_confirmation_id}/approve/",
            {"proposal_hash": confirmation["proposal_hash"]},
        )
    )
    assert (decided["status"], decided["decided_by"]) == ("approved", "alice")
    # Hers to cancel too (a stranger still gets 404; see above).
    kit.assert_error(
        people.bob.post(f"/api/runs/{run_id}/cancel/", {"reason": "r"}), 404, kit.NOT_FOUND
    )
    cancelled = people.alice.post(f"/api/runs/{run_id}/cancel/", {"reason": "not needed"})
    assert kit.assert_ok(cancelled)["status"] in ("cancelled", "cancelling")


def test_the_runs_list_costs_the_same_with_runs_for_the_subject(
    people: kit.People, demo: None, django_assert_max_num_queries: Any
) -> None:
    for _ in range(3):
        people.admin.post("/api/runs/", {"goal": "g", "profile": "research", "subject": "alice"})
        people.alice.post("/api/runs/", {"goal": "g", "profile": "research"})
    people.alice.get("/api/runs/")  # warm the session and role caches
    with django_assert_max_num_queries(6):
        body = kit.assert_ok(people.alice.get("/api/runs/"))
    assert len(body["results"]) == 6


def test_a_profile_shows_its_tool_policy_and_its_runs_record_it(
    people: kit.People, enqueued: list[str]
) -> None:
    """issue 12 item 3: the API shows the policy; a run from the profile records it."""
    assert people.alice.user
    policy = {"search_public": {"confirmation": "always", "approvers": "owner"}}
    kit.profile_define(people.operator.user, "strict", tool_policy=policy)
    (listed,) = kit.assert_ok(people.alice.get("/api/profiles/"))
    assert listed["tool_policy"] == policy
    body = kit.assert_ok(people.alice.post("/api/runs/", {"goal": "g", "profile": "strict"}), 201)
    assert body["tool_policy"] == policy
    assert Run.objects.get(pk=body["run_id"]).tool_policy == policy
