""" "Run again" and "what to do next" on a run's page (issue 24 item 5).

Run again (POST /runs/<id>/again/) starts the run's goal with its profile as the profile is
now, through ``run_create`` and its creation rate; a profile gone, archived or no longer for
the user is ``PROFILE_NOT_FOUND``; a run the user may not see is ``NOT_FOUND``.

Personas: ``operator`` (defines the profiles; edits them), ``alice`` (a user who starts runs),
``bob`` (the outsider: alice's runs are 404 to him), ``reviewer`` (sees every run, holds the
handoffs).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from policy.models import Grant
from runs import services
from runs.demo.demo_profiles import load_demo_profiles
from runs.models import Run, RunProfile
from runs.start import profiles
from tests.api.api_kit import created_run, handoff_run
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


@pytest.fixture(autouse=True)
def only_the_rate(settings: Any) -> None:
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 0  # runs here never finish by a worker


operator = pytest.fixture(name="operator")(lambda: make_user("operator", "operator"))
alice = pytest.fixture(name="alice")(lambda: make_user("alice", "user"))
bob = pytest.fixture(name="bob")(lambda: make_user("bob", "user"))


@pytest.fixture
def research(operator: Any) -> RunProfile:
    load_demo_profiles(by=operator)
    return RunProfile.objects.get(name="research")


def signed_in(user: Any, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def started(user: Any, profile: RunProfile, goal: str = "find the retry policy") -> str:
    response = signed_in(user).post("/runs/new/", {"profile": str(profile.pk), "goal": goal})
    assert response.status_code == 302, response.content.decode()[:400]
    return str(response["Location"]).strip("/").split("/")[-1]


def error_code(response: Any) -> str:
    found = re.search(r'Code: <span class="mono">([A-Z_]+)</span>', response.content.decode())
    return found.group(1) if found else ""


def test_a_run_from_a_profile_names_it(alice: Any, research: RunProfile) -> None:
    assert Run.objects.get(pk=started(alice, research)).profile_id == research.pk


def test_run_again_starts_the_same_goal_and_profile_under_its_current_rules(
    operator: Any, alice: Any, research: RunProfile
) -> None:
    first = started(alice, research)
    # The operator narrows the grant since: the new run gets the profile as it is now.
    data = profiles.profile_form_data(research)
    data["grant_templates"][0]["expires_at_step"] = 2
    profiles.profile_update(
        profile_id=research.pk, data=data, expected_version=research.version, by=operator
    )
    response = signed_in(alice).post(f"/runs/{first}/again/")
    assert response.status_code == 302
    again = Run.objects.exclude(pk=first).get()
    assert response["Location"] == f"/runs/{again.pk}/"
    assert (again.goal, again.profile_id, again.owner, again.subject) == (
        "find the retry policy", research.pk, alice, "alice",
    )  # fmt: skip
    assert list(Grant.objects.filter(run=again).values_list("expires_at_step", flat=True)) == [2]
    assert list(Grant.objects.filter(run_id=first).values_list("expires_at_step", flat=True)) != [2]


def test_run_again_counts_in_the_creation_rate(
    settings: Any, alice: Any, research: RunProfile
) -> None:
    settings.AGENTCONSOLE_RUN_CREATE_RATE = "2/hour"
    first = started(alice, research)
    assert signed_in(alice).post(f"/runs/{first}/again/").status_code == 302
    refused = signed_in(alice).post(f"/runs/{first}/again/")
    assert refused.status_code == 429
    assert error_code(refused) == "RUN_CREATE_THROTTLED"
    assert 0 < int(refused["Retry-After"]) <= 3600
    assert Run.objects.count() == 2


@pytest.mark.parametrize("gone", ["archived", "deleted", "not-for-alice"])
def test_run_again_of_a_profile_alice_may_no_longer_use_is_profile_not_found(
    operator: Any, alice: Any, research: RunProfile, gone: str
) -> None:
    first = started(alice, research)
    if gone == "archived":
        profiles.profile_archive(profile_id=research.pk, by=operator)
    elif gone == "deleted":
        RunProfile.objects.filter(pk=research.pk).delete()
    else:
        data = {**profiles.profile_form_data(research), "audience": "users", "users": ["operator"]}
        profiles.profile_update(
            profile_id=research.pk, data=data, expected_version=research.version, by=operator
        )
    response = signed_in(alice).post(f"/runs/{first}/again/")
    assert response.status_code == 404
    assert error_code(response) == "PROFILE_NOT_FOUND"
    assert Run.objects.count() == 1
    assert "data-run-again" not in signed_in(alice).get(f"/runs/{first}/").content.decode()


def test_run_again_of_a_run_without_a_profile_is_profile_not_found(alice: Any) -> None:
    run_id = created_run(alice)
    response = signed_in(alice).post(f"/runs/{run_id}/again/")
    assert (response.status_code, error_code(response)) == (404, "PROFILE_NOT_FOUND")


def test_the_outsider_cannot_run_alices_run_again(
    alice: Any, bob: Any, research: RunProfile
) -> None:
    first = started(alice, research)
    response = signed_in(bob).post(f"/runs/{first}/again/")
    assert (response.status_code, error_code(response)) == (404, "NOT_FOUND")
    assert Run.objects.count() == 1


def test_run_again_needs_the_csrf_token_and_a_post(alice: Any, research: RunProfile) -> None:
    first = started(alice, research)
    assert signed_in(alice, csrf=True).post(f"/runs/{first}/again/").status_code == 403
    assert signed_in(alice).get(f"/runs/{first}/again/").status_code == 405
    assert Run.objects.count() == 1


# -- what to do next -------------------------------------------------------------------------


def test_a_failed_run_says_why_and_what_to_do(
    operator: Any, alice: Any, research: RunProfile
) -> None:
    run_id = started(alice, research)
    Run.objects.filter(pk=run_id).update(status="failed", stop_reason="MAX_STEPS_REACHED")
    page = signed_in(alice).get(f"/runs/{run_id}/").content.decode()
    assert "data-next-steps" in page
    assert "This run failed" in page
    assert "The run used all its steps before it had an answer." in page
    assert "larger step budget" in page
    assert f'action="/runs/{run_id}/again/"' in page
    assert "data-edit-profile" not in page  # alice does not edit profiles
    as_operator = signed_in(operator).get(f"/runs/{run_id}/").content.decode()
    assert f'href="/profiles/{research.pk}/" data-edit-profile' in as_operator


def test_a_cancelled_run_and_a_completed_one_with_a_declined_write(
    alice: Any, research: RunProfile
) -> None:
    cancelled, declined, fine = (started(alice, research, f"goal {i}") for i in range(3))
    Run.objects.filter(pk=cancelled).update(status="cancelled", stop_reason="CANCELLED")
    Run.objects.filter(pk=declined).update(
        status="completed", stop_reason="FINAL_ANSWER_VALIDATED", writes_rejected=1
    )
    Run.objects.filter(pk=fine).update(status="completed", stop_reason="FINAL_ANSWER_VALIDATED")
    page = signed_in(alice).get(f"/runs/{cancelled}/").content.decode()
    assert "This run was cancelled" in page
    assert "Someone cancelled the run." in page
    page = signed_in(alice).get(f"/runs/{declined}/").content.decode()
    assert "This run completed, but a write did not take effect" in page
    page = signed_in(alice).get(f"/runs/{fine}/").content.decode()
    assert "data-next-steps" not in page
    assert "data-run-again" in page  # finished well: run again, without the box


def test_a_handed_off_run_links_its_handoff_for_those_who_hold_it(alice: Any) -> None:
    handed = handoff_run(alice)
    reviewer = make_user("reviewer", "reviewer")
    page = signed_in(reviewer).get(f"/runs/{handed.run_id}/").content.decode()
    assert "This run failed" in page
    assert "A reviewer has the handoff bundle" in page
    assert f'href="/handoffs/{handed.handoff_id}/" data-open-handoff' in page
    own = signed_in(alice).get(f"/runs/{handed.run_id}/").content.decode()
    assert "data-open-handoff" not in own
    assert "A reviewer has its handoff." in own
    assert "data-run-again" not in own  # a scenario run: no profile to start again


def test_a_running_run_has_no_box_and_no_run_again(alice: Any, research: RunProfile) -> None:
    run_id = started(alice, research)
    page = signed_in(alice).get(f"/runs/{run_id}/").content.decode()
    assert "data-next-steps" not in page
    assert "data-run-again" not in page
