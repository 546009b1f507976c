"""Run profiles on the ORM (runs.start.profiles): writes checked by the domain first (nothing saved
on a refusal), who may use what, the edit's compare-and-set, and runs started from a profile — with
exactly its grants, bound — reaching a sensible end for each demo profile.

Personas: ``operator`` defines profiles; ``alice`` and ``bob`` are users (``bob`` also in the
``team`` group); nobody else is needed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import PreferenceRecord
from policy.domain.errors import DomainError
from policy.models import Confirmation, Grant
from runs import models as m
from runs import services
from runs.demo.demo_profiles import DEMO_PROFILES, load_demo_profiles
from runs.domain.machine import Status
from runs.domain.profiles import ProfileInvalid
from runs.models import RunProfile
from runs.start import profiles
from tests.support.personas import make_user, user_fixture

pytestmark = pytest.mark.django_db(transaction=True)


operator = user_fixture("operator", "operator")
alice = user_fixture("alice", "user")


@pytest.fixture
def bob() -> Any:
    user = make_user("bob", "user")
    user.groups.add(Group.objects.get_or_create(name="team")[0])
    return user


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def no_worker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tests advance runs themselves; nothing goes to a broker."""
    sent: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: sent.append(run_id))
    return sent


def research(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(DEMO_PROFILES[0]), **changes}


def test_a_profile_is_created_through_the_domain(operator: Any, alice: Any) -> None:
    row = profiles.profile_create(data=research(audience="users", users=["alice"]), by=operator)
    assert (row.name, row.version, row.created_by, row.audience) == (
        "research", 1, operator, "users",
    )  # fmt: skip
    assert list(row.users.all()) == [alice]
    assert row.budgets == {
        "max_steps": 4, "max_tool_calls": 2, "max_repeated_proposal": 2, "deadline_s": 120,
        "max_tokens": 200_000,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"grant_templates": [{"capability": "search:public", "resource_scope": "pub/*",
                               "expires_at_step": 3}]}, "PROFILE_TEMPLATE_INVALID"),
        ({"tools": ["no_such_tool"]}, "PROFILE_TOOL_UNKNOWN"),
        ({"audience": "users", "users": ["nobody"]}, "PROFILE_AUDIENCE_UNKNOWN"),
        ({"audience": "groups", "groups": ["no-such-group"]}, "PROFILE_AUDIENCE_UNKNOWN"),
    ],
)  # fmt: skip
def test_a_refused_profile_writes_nothing(
    operator: Any, changes: dict[str, Any], code: str
) -> None:
    with pytest.raises(ProfileInvalid) as caught:
        profiles.profile_create(data=research(**changes), by=operator)
    assert caught.value.code == code
    assert not RunProfile.objects.exists()


def test_a_name_is_taken_once(operator: Any) -> None:
    profiles.profile_create(data=research(), by=operator)
    with pytest.raises(DomainError) as caught:
        profiles.profile_create(data=research(), by=operator)
    assert caught.value.code == "PROFILE_NAME_TAKEN"
    assert RunProfile.objects.count() == 1


def test_profiles_usable_by_follow_the_audience(operator: Any, alice: Any, bob: Any) -> None:
    profiles.profile_create(data=research(name="everyone"), by=operator)
    profiles.profile_create(data=research(name="alice-only", audience="users", users=["alice"]),
                            by=operator)  # fmt: skip
    profiles.profile_create(
        data=research(name="team-only", audience="groups", groups=["team", "user"]), by=operator
    )
    gone = profiles.profile_create(data=research(name="archived"), by=operator)
    profiles.profile_archive(profile_id=gone.pk, by=operator)

    def names(user: Any) -> list[str]:
        return sorted(p.name for p in profiles.profiles_usable_by(user=user))

    assert names(alice) == ["alice-only", "everyone", "team-only"]  # in group "user"
    # bob is in "team" and "user", both named: the profile is listed once.
    assert names(bob) == ["everyone", "team-only"]
    assert names(operator) == ["everyone"]
    with CaptureQueriesContext(connection) as queries:
        names(bob)
    assert len(queries) == 1


def test_an_unusable_profile_is_not_found(operator: Any, alice: Any, bob: Any) -> None:
    row = profiles.profile_create(
        data=research(name="alice-only", audience="users", users=["alice"]), by=operator
    )
    assert profiles.profile_usable(user=alice, ref="alice-only") == row
    assert profiles.profile_usable(user=alice, ref=row.pk) == row
    for ref in ("alice-only", row.pk, "nope", 99999):
        with pytest.raises(profiles.ProfileNotFound):
            profiles.profile_usable(user=bob, ref=ref)


def test_an_edit_is_a_compare_and_set_on_the_version(operator: Any) -> None:
    row = profiles.profile_create(data=research(), by=operator)
    same = profiles.profile_update(profile_id=row.pk, data=research(), expected_version=1,
                                   by=operator)  # fmt: skip
    assert same.version == 1  # nothing changed: no new version
    edited = profiles.profile_update(
        profile_id=row.pk, data=research(description="v2"), expected_version=1, by=operator
    )
    assert (edited.version, edited.description) == (2, "v2")
    with pytest.raises(DomainError) as caught:  # a second editor who loaded version 1
        profiles.profile_update(
            profile_id=row.pk, data=research(description="v2b"), expected_version=1, by=operator
        )
    assert caught.value.code == "PROFILE_VERSION_CONFLICT"
    assert RunProfile.objects.get(pk=row.pk).description == "v2"


def test_a_bad_edit_leaves_the_profile_as_it_was(operator: Any) -> None:
    row = profiles.profile_create(data=research(), by=operator)
    bad = research(grant_templates=[{"capability": "search:public", "resource_scope": "a/../b",
                                     "expires_at_step": 3}])  # fmt: skip
    with pytest.raises(ProfileInvalid):
        profiles.profile_update(profile_id=row.pk, data=bad, expected_version=1, by=operator)
    assert RunProfile.objects.get(pk=row.pk).grant_templates == row.grant_templates


def test_a_run_from_a_profile_gets_exactly_its_grants_bound(operator: Any, alice: Any) -> None:
    load_demo_profiles(by=operator)
    state = profiles.run_from_profile(user=alice, ref="research-save-preference", goal="g")
    grants = list(
        Grant.objects.filter(run_id=state.run_id)
        .order_by("id")
        .values_list("id", "capability", "resource_scope", "max_calls", "granted_by")
    )
    assert grants == [
        (f"{state.run_id}:g1", "search:public", "public", None, operator.pk),
        (f"{state.run_id}:g2", "memory:write", "alice", 1, operator.pk),  # {subject} → alice
    ]
    run = m.Run.objects.get(pk=state.run_id)
    assert (run.subject, run.owner, run.max_steps, run.planner["kind"]) == (
        "alice", alice, 6, "fixture",
    )  # fmt: skip


def test_a_subject_name_that_would_widen_a_scope_starts_nothing(operator: Any) -> None:
    load_demo_profiles(by=operator)
    sneaky = make_user("a..b", "user")
    with pytest.raises(ProfileInvalid) as caught:
        profiles.run_from_profile(user=sneaky, ref="research-save-preference", goal="g")
    assert caught.value.code == "PROFILE_SUBJECT_UNSAFE"
    assert not m.Run.objects.exists()


def _advance(run_id: str) -> m.Run:
    services.run_advance(run_id=run_id)
    return m.Run.objects.get(pk=run_id)


def test_each_demo_profile_reaches_a_sensible_end(operator: Any, alice: Any) -> None:
    from runs.tools.corpus import demo_corpus_dir, document_load

    for path in sorted(demo_corpus_dir().iterdir()):
        document_load(path=path)
    assert load_demo_profiles(by=operator) == [p["name"] for p in DEMO_PROFILES]
    assert load_demo_profiles(by=operator) == []  # idempotent: existing ones are kept

    done = _advance(profiles.run_from_profile(user=alice, ref="research", goal="g").run_id)
    assert (done.status, done.stop_reason, done.citations) == (
        "completed", "FINAL_ANSWER_VALIDATED", ["tool-1"],
    )  # fmt: skip

    report = _advance(profiles.run_from_profile(user=alice, ref="write-report", goal="g").run_id)
    assert (report.status, report.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert list(m.Artifact.objects.filter(run=report).values_list("path", flat=True)) == [
        "run-output/reports/retry-policy.md"
    ]

    ref = "research-save-preference"
    waiting = _advance(profiles.run_from_profile(user=alice, ref=ref, goal="g").run_id)
    assert waiting.status == Status.WAITING_CONFIRMATION.value
    pending = Confirmation.objects.get(pk=waiting.pending_confirmation_id)
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash, by=alice
    )
    saved = _advance(waiting.pk)
    assert (saved.status, saved.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    record = PreferenceRecord.objects.get(subject="alice", key="citation_style")
    assert (record.value, record.version) == ("footnote", 1)
