"""Per-subject limits (issue 9 item 10): what one subject may ask of the runtime.

A run is owned by the subject it acts for (the API lets a non-admin start runs only for their
own name), so every limit counts per subject:

- ``max_active_runs``: non-terminal runs (created, running, waiting, cancelling) at once;
- ``max_steps_per_run``: a ceiling on the step budget a caller may ask for. Above it the
  request is *refused*, not clamped: a clamped run would stop later with MAX_STEPS_REACHED
  and open a handoff for a budget the caller never knew was cut; a refusal costs nothing and
  names the ceiling, so the caller can ask again;
- ``max_deadline_ms``: a ceiling on the deadline a caller may ask for (refused the same way);
- ``daily_steps``: planner steps per subject per UTC day, counted where a step is spent (the
  runner, before it asks the planner); a run that meets the quota mid-flight stops with
  DAILY_STEP_QUOTA_EXHAUSTED and a handoff, like MAX_STEPS_REACHED; a create while the quota is
  spent is refused with the time until the next day;
- ``create_rate``: runs a person may start per period (``"30/min"``), counted per user who asks
  (the run's owner) in ``run_create`` itself, so the API and the console's ``/runs/new/`` share
  one count and no door can skip it (issue 21 item 7: the console's page did). The count is
  ``agentconsole.kernel.ratelimit``'s, a place reserved atomically before the run is created, so
  simultaneous requests do not pass it either. Callers that act on nobody's request are not counted:
  they pass no owner, or (the scenario runner, which the demo loader uses) limits without the rate.

A limit of 0 switches that limit off. Values come from settings (env-driven, see the
"Per-subject limits" block in agentconsole/settings.py); callers that need other values (a
benchmark) pass their own ``RunLimits``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db.models import Case, F, Q, Value, When

from agentconsole.kernel.ratelimit import SlidingWindow, WindowFull, parse_rate
from policy.domain.errors import DomainError
from runs.domain.budgets import RunBudgets, StepsOwed
from runs.domain.machine import TERMINAL
from runs.models import Run, SubjectUsage

DAY_MS = 24 * 3600 * 1000


class LimitError(DomainError):
    """A refusal because of a per-subject limit; ``retry_after_s`` when waiting helps."""

    retry_after_s: int | None = None


class ActiveRunsLimit(LimitError):
    code = "ACTIVE_RUNS_LIMIT"
    http_status = 429


class StepBudgetTooLarge(LimitError):
    code = "STEP_BUDGET_TOO_LARGE"
    http_status = 400


class DeadlineTooFar(LimitError):
    code = "DEADLINE_TOO_FAR"
    http_status = 400


class WaitingLifts(LimitError):
    """A refusal that waiting lifts: 429 with Retry-After at every door."""

    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int, **extra: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **extra)
        self.retry_after_s = retry_after_s


class DailyStepQuotaExhausted(WaitingLifts):
    code = "DAILY_STEP_QUOTA_EXHAUSTED"


class RunCreateThrottled(WaitingLifts):
    code = "RUN_CREATE_THROTTLED"


@dataclass(frozen=True)
class RunLimits:
    max_active_runs: int
    max_steps_per_run: int
    max_deadline_ms: int
    daily_steps: int
    create_rate: str = ""  # "<n>/<sec|min|hour|day>"; "" = off

    @classmethod
    def from_settings(cls) -> RunLimits:
        return cls(
            max_active_runs=settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT,
            max_steps_per_run=settings.AGENTCONSOLE_MAX_STEPS_PER_RUN,
            max_deadline_ms=settings.AGENTCONSOLE_MAX_DEADLINE_MS,
            daily_steps=settings.AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT,
            create_rate=settings.AGENTCONSOLE_RUN_CREATE_RATE,
        )

    @classmethod
    def off(cls) -> RunLimits:
        return cls(max_active_runs=0, max_steps_per_run=0, max_deadline_ms=0, daily_steps=0)


def utc_day(now_ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC).date()


def seconds_to_next_day(now_ms: int) -> int:
    return max(1, -(-(DAY_MS - now_ms % DAY_MS) // 1000))


def check_budgets(budgets: RunBudgets, limits: RunLimits) -> None:
    """The ceilings on what a caller may ask for; no database needed."""
    if limits.max_steps_per_run and budgets.max_steps > limits.max_steps_per_run:
        raise StepBudgetTooLarge(
            f"max_steps {budgets.max_steps} is above the ceiling of {limits.max_steps_per_run}",
            max_steps=budgets.max_steps,
            ceiling=limits.max_steps_per_run,
        )
    if limits.max_deadline_ms and budgets.deadline_ms > limits.max_deadline_ms:
        raise DeadlineTooFar(
            f"deadline_ms {budgets.deadline_ms} is above the ceiling of {limits.max_deadline_ms}",
            deadline_ms=budgets.deadline_ms,
            ceiling=limits.max_deadline_ms,
        )


_PER = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}


def create_rate_window(window_s: float, *, clock: Callable[[], float] = time.time) -> SlidingWindow:
    """The run-creation counts: the default cache (Redis when REDIS_URL is set, so every web
    process counts together). ``clock`` returns seconds; tests pass their own."""
    return SlidingWindow(cache=caches["default"], clock=clock, window_s=window_s)


def check_create_rate(*, owner: Any, limits: RunLimits) -> None:
    """Take a place in ``owner``'s run-creation rate, or refuse with RUN_CREATE_THROTTLED and
    the seconds until one is free. A refused create holds no place; one refused later (an
    active-runs limit) keeps it: the rate counts requests to start, as the API's did."""
    if owner is None or not limits.create_rate:
        return
    count, period_s = parse_rate(limits.create_rate)
    try:
        create_rate_window(period_s).take(f"run-create:{owner.pk}", count)
    except WindowFull as full:
        raise RunCreateThrottled(
            f"Too many runs started: at most {count} {_PER.get(period_s, f'per {period_s} s')}. "
            f"Try again in {full.wait} seconds.",
            retry_after_s=full.wait,
            limit=count,
            period_s=period_s,
        ) from None


def admit_subject(
    *, subject: str, limits: RunLimits, now_ms: int, run_id: str, owed: StepsOwed
) -> None:
    """Last in the transaction that creates ``run_id``: lock the subject's usage row, refuse
    the run over the subject's limits counted under that lock, and pay the steps the
    transaction took (``owed``: the run's first step, when the create takes it).

    The race: two requests each count 9 active runs of 10 allowed, both commit, the subject
    has 11. With the lock the second waits for the first to commit; its count, a statement
    after the wait, sees that run (READ COMMITTED). Taken last, the lock is held from here to
    the commit, not through the create: one subject's burst of creates runs side by side up to
    this point. (PostgreSQL: ``SELECT … FOR UPDATE`` on the row; SQLite: transactions take the
    write lock at BEGIN, see settings, so writers are serialized anyway.) A refusal raises, and
    the caller's transaction undoes the run and its step: a refused create writes nothing, but
    does its work first (the creation rate, checked before, bounds how often).
    """
    if limits.max_active_runs or limits.daily_steps:
        SubjectUsage.objects.bulk_create(
            [SubjectUsage(subject=subject, day=utc_day(now_ms), steps=0)], ignore_conflicts=True
        )
        usage = SubjectUsage.objects.select_for_update().get(subject=subject)
        spent = usage.day >= utc_day(now_ms) and usage.steps >= limits.daily_steps
        if limits.daily_steps and spent:
            raise _quota_spent(subject, limits.daily_steps, now_ms)
        if limits.max_active_runs:
            _refuse_active(subject, limits.max_active_runs, other_than=run_id)
    quota = step_quota()  # the runners' (when ``limits`` came without it: their quota holds)
    if not all(quota.take(subject, now_ms) for _ in range(owed.steps)):
        raise _quota_spent(subject, quota.daily_steps, now_ms)


def _refuse_active(subject: str, limit: int, *, other_than: str) -> None:
    active = (
        Run.objects.filter(subject=subject)
        .exclude(status__in=[s.value for s in TERMINAL])
        .exclude(pk=other_than)
        .count()
    )
    if active >= limit:
        raise ActiveRunsLimit(
            f"subject {subject!r} has {active} active runs; the limit is {limit}",
            active=active,
            limit=limit,
        )


def _quota_spent(subject: str, quota: int, now_ms: int) -> DailyStepQuotaExhausted:
    return DailyStepQuotaExhausted(
        f"subject {subject!r} spent today's {quota} steps",
        retry_after_s=seconds_to_next_day(now_ms),
        quota=quota,
    )


class OrmStepQuota:
    """The runner's daily step quota (``runs.domain.runner.StepQuota``) on ``SubjectUsage``.

    One row per subject holds the current day and the steps spent on it. ``take`` is one
    conditional UPDATE: the race is two workers spending the subject's last step at once; the
    WHERE clause lets exactly one of them match. A new day resets the count in the same UPDATE.
    """

    def __init__(self, daily_steps: int) -> None:
        self.daily_steps = daily_steps

    def take(self, subject: str, now_ms: int) -> bool:
        if not self.daily_steps:
            return True
        today = utc_day(now_ms)
        if self._spend(subject, today):
            return True
        # No row yet (a subject whose runs predate this table), or the quota is spent: make
        # sure the row exists (racing inserts: one wins, the rest do nothing), then ask again.
        SubjectUsage.objects.bulk_create(
            [SubjectUsage(subject=subject, day=today, steps=0)], ignore_conflicts=True
        )
        return self._spend(subject, today)

    def _spend(self, subject: str, today: dt.date) -> bool:
        spent = (
            SubjectUsage.objects.filter(subject=subject)
            .filter(Q(day__lt=today) | Q(steps__lt=self.daily_steps))
            .update(
                steps=Case(When(day__lt=today, then=Value(1)), default=F("steps") + 1),
                # A worker whose clock is behind never moves the day back.
                day=Case(When(day__lt=today, then=Value(today)), default=F("day")),
            )
        )
        return spent == 1

    def give_back(self, subject: str, now_ms: int) -> None:
        """A step taken but never spent (the commit lost a race): return it, same day only."""
        if not self.daily_steps:
            return
        SubjectUsage.objects.filter(subject=subject, day=utc_day(now_ms), steps__gt=0).update(
            steps=F("steps") - 1
        )


def step_quota() -> OrmStepQuota:
    return OrmStepQuota(settings.AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT)
