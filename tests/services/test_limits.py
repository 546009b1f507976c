"""Per-subject limits in ``run_create`` and the daily step quota (issue 9 item 10).

Each refusal is a stable code and leaves nothing behind; the clock is the ``now_ms`` the
caller injects, never the wall clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import pytest

from policy.domain.errors import DomainError
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.start.limits import DAY_MS, OrmStepQuota, RunCreateThrottled, RunLimits
from runs.start.scenarios import parse_scenario, run_scenario
from tests.services.services_kit import SEARCH_GRANT
from tests.support.personas import make_user
from tests.support.races import THREADS, race

pytestmark = pytest.mark.django_db(transaction=True)

# 2026-12-02 18:00:00 UTC: six hours before the day ends.
NOW = int(dt.datetime(2026, 12, 2, 18, tzinfo=dt.UTC).timestamp() * 1000)
LIMITS = RunLimits(max_active_runs=2, max_steps_per_run=50, max_deadline_ms=60_000, daily_steps=5)


def create(
    subject: str = "alice",
    *,
    max_steps: int = 8,
    deadline_ms: int = 60_000,
    limits: RunLimits = LIMITS,
    now_ms: int = NOW,
) -> str:
    return services.run_create(
        subject=subject,
        goal="g",
        budgets=RunBudgets(max_steps=max_steps, max_tool_calls=4, deadline_ms=deadline_ms),
        grants=[SEARCH_GRANT],
        planner={"kind": "fixture", "outputs": []},
        limits=limits,
        now_ms=now_ms,
    ).run_id


def refused(code: str, **kwargs) -> DomainError:
    before = m.Run.objects.count()
    with pytest.raises(DomainError) as info:
        create(**kwargs)
    assert info.value.code == code, info.value
    assert m.Run.objects.count() == before, "a refused create left a run behind"
    return info.value


def test_a_step_budget_above_the_ceiling_is_refused_not_clamped() -> None:
    """issue 9 item 10: a caller asking for more steps than the ceiling gets a clear refusal."""
    assert m.Run.objects.get(pk=create(max_steps=50)).max_steps == 50
    error = refused("STEP_BUDGET_TOO_LARGE", max_steps=51)
    assert error.http_status == 400
    assert error.extra == {"max_steps": 51, "ceiling": 50}


def test_a_deadline_above_the_ceiling_is_refused() -> None:
    """issue 9 item 10: the deadline a caller may ask for has a ceiling."""
    create(deadline_ms=60_000)
    error = refused("DEADLINE_TOO_FAR", deadline_ms=60_001)
    assert (error.http_status, error.extra["ceiling"]) == (400, 60_000)


def test_a_subject_at_its_active_runs_limit_is_refused_until_one_ends() -> None:
    """issue 9 item 10: at most ``max_active_runs`` non-terminal runs per subject."""
    first, _ = create(), create()
    error = refused("ACTIVE_RUNS_LIMIT")
    assert (error.http_status, error.extra) == (429, {"active": 2, "limit": 2})
    create("bob")  # another subject is not affected
    services.run_cancel(run_id=first)  # created -> cancelled: terminal
    create()


def test_a_create_with_todays_steps_spent_is_refused_until_the_next_day() -> None:
    """issue 9 item 10: a subject whose daily quota is spent cannot start runs today."""
    quota = OrmStepQuota(5)
    create()
    for _ in range(5):
        assert quota.take("alice", NOW)
    error = refused("DAILY_STEP_QUOTA_EXHAUSTED")
    assert error.http_status == 429
    assert error.retry_after_s == 6 * 3600  # until 00:00 UTC
    create("bob")
    create(now_ms=NOW + 6 * 3600 * 1000)  # midnight: a new day


def test_the_step_quota_counts_per_subject_and_day() -> None:
    """issue 9 item 10: ``take`` spends one step by compare-and-set; a new day starts at 0."""
    quota = OrmStepQuota(3)
    assert [quota.take("alice", NOW) for _ in range(4)] == [True, True, True, False]
    assert quota.take("bob", NOW)
    quota.give_back("alice", NOW)
    assert [quota.take("alice", NOW) for _ in range(2)] == [True, False]
    tomorrow = NOW + DAY_MS
    assert [quota.take("alice", tomorrow) for _ in range(4)] == [True, True, True, False]
    # A worker whose clock is a day behind neither resets nor moves the day back.
    assert not quota.take("alice", NOW)
    row = m.SubjectUsage.objects.get(subject="alice")
    assert (row.day, row.steps) == (dt.date(2026, 12, 3), 3)
    assert OrmStepQuota(0).take("alice", NOW)  # 0: no quota


def test_limits_of_zero_are_off() -> None:
    for _ in range(3):
        create(max_steps=10_000, deadline_ms=7 * DAY_MS, limits=RunLimits.off())
    assert not m.SubjectUsage.objects.exists()


@pytest.mark.postgres
def test_twenty_concurrent_creates_never_pass_the_active_runs_limit(postgres_only: None) -> None:
    """issue 9 item 10: two creates at once must not both pass the active-runs limit (the
    subject's usage row is locked while the active runs are counted)."""
    limits = RunLimits(max_active_runs=3, max_steps_per_run=0, max_deadline_ms=0, daily_steps=0)
    results = race(lambda i: create(limits=limits))
    created = [r for r in results if isinstance(r, str)]
    refusals = [r for r in results if isinstance(r, DomainError)]
    assert len(created) == 3, results
    assert {e.code for e in refusals} == {"ACTIVE_RUNS_LIMIT"}, results
    assert len(refusals) == THREADS - 3
    assert m.Run.objects.filter(subject="alice").count() == 3


@pytest.mark.postgres
def test_twenty_workers_spending_the_last_steps_at_once_spend_exactly_the_quota(
    postgres_only: None,
) -> None:
    """issue 9 item 10: the quota is a compare-and-set; racing workers never overspend it."""
    quota = OrmStepQuota(5)
    results = race(lambda i: quota.take("alice", NOW))
    assert results.count(True) == 5, results
    assert results.count(False) == THREADS - 5, results
    assert m.SubjectUsage.objects.get(subject="alice").steps == 5


def test_the_scenario_runner_meets_the_same_limits(settings: Any) -> None:
    """issue 9 item 10: the limits live in run_create, so a scenario file (run_fixture, the
    fault lab) is held to them like the API."""
    settings.AGENTCONSOLE_MAX_STEPS_PER_RUN = 100
    text = json.dumps(
        {
            "subject": "alice",
            "goal": "g",
            "budgets": {"max_steps": 101},
            "planner": [{"kind": "final", "answer": "done"}],
        }
    )
    with pytest.raises(DomainError) as refused:
        run_scenario(parse_scenario(text))
    assert refused.value.code == "STEP_BUDGET_TOO_LARGE"
    assert not m.Run.objects.exists()


def test_the_creation_rate_holds_for_simultaneous_creates(
    postgres_only: None, settings: Any
) -> None:
    """issue 21 item 7: the creation rate is counted in ``run_create`` (every door that starts a
    run for a person, the console's page included), with a place reserved before the run is
    written: 20 simultaneous creates by one owner at 5 an hour make 5 runs, each other one is
    RUN_CREATE_THROTTLED with a wait. A create on nobody's request (no owner; a scenario file,
    as the demo loader runs them, even one naming an owner) is not counted."""
    settings.AGENTCONSOLE_RUN_CREATE_RATE = "5/hour"
    owner = make_user("alice", "user")
    limits = dataclasses.replace(RunLimits.off(), create_rate="5/hour")

    def start(i: int) -> str:
        return services.run_create(
            subject="alice",
            goal=f"g{i}",
            budgets=RunBudgets(max_steps=8, max_tool_calls=4),
            grants=[],
            planner={"kind": "fixture", "outputs": []},
            owner=owner,
            limits=limits,
        ).run_id

    answers = race(start, THREADS)
    made = [a for a in answers if isinstance(a, str)]
    throttled = [a for a in answers if isinstance(a, RunCreateThrottled)]
    assert (len(made), len(throttled)) == (5, THREADS - 5), answers
    assert all(0 < (t.retry_after_s or 0) <= 3600 for t in throttled)
    assert m.Run.objects.filter(owner=owner).count() == 5
    create(limits=limits)  # no owner: not counted
    scenario = {"subject": "alice", "goal": "g", "planner": [{"kind": "final", "answer": "ok"}]}
    run_scenario(parse_scenario(json.dumps(scenario)), owner=owner)
    assert m.Run.objects.filter(owner=owner).count() == 6
