"""Per-subject limits through the API (issue 9 item 10): each refusal is a 4xx/429 in the
API's error shape with a stable code; a refusal that waiting lifts says how long (Retry-After).

Personas: alice and bob (group ``user``) start runs for themselves only.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from runs import models as m
from runs.start import limits as run_limits
from runs.start.limits import utc_day
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}


def body(**budgets: int) -> dict[str, Any]:
    return {"goal": "g", "planner": PLANNER, **({"budgets": budgets} if budgets else {})}


class Clock:
    """The throttle's timer, injected (a callable instance: never bound as a method)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 2
    settings.AGENTCONSOLE_MAX_STEPS_PER_RUN = 50
    settings.AGENTCONSOLE_MAX_DEADLINE_MS = 600_000
    settings.AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT = 100
    return settings


def test_run_creation_is_throttled_per_user_with_retry_after(
    people: kit.People, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 9 item 10: a request-rate limit on run creation: 429 RUN_CREATE_THROTTLED with
    Retry-After; another user and reading are not affected; the window passes.

    The count is a sliding window (agentconsole/kernel/ratelimit.py): three runs at the start of a
    minute weigh 3 until that minute ends and less only after it, so the fourth fits 61 s later."""
    settings.AGENTCONSOLE_RUN_CREATE_RATE = "3/min"
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 0
    clock = Clock()
    real = run_limits.create_rate_window
    monkeypatch.setattr(run_limits, "create_rate_window", lambda s: real(s, clock=clock))
    for _ in range(3):
        kit.assert_ok(people.alice.post("/api/runs/", body()), 201)

    response = people.alice.post("/api/runs/", body())

    error = kit.assert_error(response, 429, "RUN_CREATE_THROTTLED")
    assert response["Retry-After"] == "61"
    assert error["extra"] == {"wait": 61}
    assert m.Run.objects.filter(subject="alice").count() == 3
    kit.assert_ok(people.bob.post("/api/runs/", body()), 201)
    kit.assert_ok(people.alice.get("/api/runs/"))
    clock.now += 60
    kit.assert_error(people.alice.post("/api/runs/", body()), 429, "RUN_CREATE_THROTTLED")
    clock.now += 1
    kit.assert_ok(people.alice.post("/api/runs/", body()), 201)


def test_a_step_budget_above_the_ceiling_is_a_400(people: kit.People, limits: Any) -> None:
    """issue 9 item 10: refused, not clamped; the ceiling is in the error."""
    kit.assert_ok(people.alice.post("/api/runs/", body(max_steps=50)), 201)
    error = kit.assert_error(
        people.alice.post("/api/runs/", body(max_steps=51)), 400, "STEP_BUDGET_TOO_LARGE"
    )
    assert error["extra"] == {"max_steps": 51, "ceiling": 50}


def test_a_deadline_above_the_ceiling_is_a_400(people: kit.People, limits: Any) -> None:
    """issue 9 item 10: a deadline ceiling."""
    error = kit.assert_error(
        people.alice.post("/api/runs/", body(deadline_ms=600_001)), 400, "DEADLINE_TOO_FAR"
    )
    assert error["extra"]["ceiling"] == 600_000


def test_the_active_runs_limit_is_a_429(people: kit.People, limits: Any) -> None:
    """issue 9 item 10: at most N non-terminal runs per subject."""
    for _ in range(2):
        kit.assert_ok(people.alice.post("/api/runs/", body()), 201)
    error = kit.assert_error(people.alice.post("/api/runs/", body()), 429, "ACTIVE_RUNS_LIMIT")
    assert error["extra"] == {"active": 2, "limit": 2}
    kit.assert_ok(people.bob.post("/api/runs/", body()), 201)


def test_a_spent_daily_quota_is_a_429_with_retry_after(people: kit.People, limits: Any) -> None:
    """issue 9 item 10: today's steps spent: 429 until the next UTC day, and when that is."""
    m.SubjectUsage.objects.create(subject="alice", day=utc_day(int(time.time() * 1000)), steps=100)
    response = people.alice.post("/api/runs/", body())
    error = kit.assert_error(response, 429, "DAILY_STEP_QUOTA_EXHAUSTED")
    assert 1 <= int(response["Retry-After"]) <= 24 * 3600
    assert error["extra"]["wait"] == int(response["Retry-After"])
    kit.assert_ok(people.bob.post("/api/runs/", body()), 201)
