"""The worker's fairness slice and the daily quota on the ORM (issue 9 item 10).

``run_advance`` with ``slice_steps`` stops after that many steps and hands the run back to the
queue after the lease is released; the broker is replaced by a recorder (the real worker test
is tests/workers/test_fairness.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain.errors import DomainError
from runs import models as m
from runs import services
from runs.domain import trace as ev
from runs.domain.machine import Status
from tests.services.services_kit import create_run, search, trace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each hand-back, with the run's lease owner at the moment the message is sent."""
    calls: list[dict[str, Any]] = []

    def record(run_id: str, *, queue: str | None = None, handed_back: str | None = None) -> None:
        lease = m.Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).get()
        calls.append(
            {"run_id": run_id, "queue": queue, "lease_owner": lease, "handed_back": handed_back}
        )

    monkeypatch.setattr(services, "enqueue_advance", record)
    return calls


def long_run(n: int) -> str:
    outputs = [search(f"p{i}", f"retry rule {i}") for i in range(1, n + 1)]
    return create_run(outputs, max_steps=n + 1, max_tool_calls=n + 1).run_id


def test_a_slice_returns_the_run_running_and_hands_it_back_after_releasing_the_lease(
    enqueued: list[dict[str, Any]],
) -> None:
    """issue 9 item 10: one advance_run does a bounded slice; the run goes back to the queue
    (on commit, lease released first) instead of holding a worker for all its steps."""
    run_id = long_run(12)

    state = services.run_advance(run_id=run_id, slice_steps=5, queue="q-test")

    assert state is not None
    assert (state.status, state.step) == (Status.RUNNING, 5)
    [sent] = enqueued
    assert (sent["run_id"], sent["queue"]) == (run_id, "q-test")
    # The worker's lease is gone when the message leaves; the run names that message instead.
    assert sent["lease_owner"] == sent["handed_back"]
    assert sent["handed_back"].startswith("queued:")
    assert not m.LedgerEntry.objects.filter(run_id=run_id, status="started").exists()
    services.run_advance(
        run_id=run_id, slice_steps=5, queue="q-test", handed_back=sent["handed_back"]
    )
    assert m.Run.objects.get(pk=run_id).step == 10
    assert len(enqueued) == 2


def test_a_duplicate_of_an_older_turn_drops_out_and_the_current_one_goes_on(
    enqueued: list[dict[str, Any]],
) -> None:
    """issue 9 item 10: hand-backs cannot multiply. A run that waited long in the queue is sent
    again by the sweeper (a message with no name); whichever message advances it next hands it
    back under a new name, and the older hand-back message then finds nothing to do."""
    run_id = long_run(30)
    services.run_advance(run_id=run_id, slice_steps=5)
    first = enqueued[-1]["handed_back"]

    swept = services.run_advance(run_id=run_id, slice_steps=5)  # the sweeper's message
    assert swept is not None
    assert swept.step == 10
    second = enqueued[-1]["handed_back"]
    assert second != first

    assert services.run_advance(run_id=run_id, slice_steps=5, handed_back=first) is None
    assert m.Run.objects.get(pk=run_id).step == 10  # the duplicate did not advance it
    assert len(enqueued) == 2  # nor send another message
    state = services.run_advance(run_id=run_id, slice_steps=5, handed_back=second)
    assert state is not None
    assert state.step == 15
    assert len(enqueued) == 3


def test_a_run_that_waits_or_ends_within_its_slice_is_not_handed_back(
    enqueued: list[dict[str, Any]],
) -> None:
    run_id = long_run(3)
    state = services.run_advance(run_id=run_id, slice_steps=5)
    assert state is not None
    assert state.status is Status.FAILED
    assert enqueued == []


def test_without_a_slice_the_run_is_advanced_to_the_end(enqueued: list[dict[str, Any]]) -> None:
    run_id = long_run(30)
    state = services.run_advance(run_id=run_id)
    assert state is not None
    assert (state.status, state.step) == (Status.FAILED, 30)
    assert enqueued == []


def test_the_worker_stops_a_run_when_its_subject_spends_todays_quota(settings: Any) -> None:
    """issue 9 item 10: the daily quota is counted where steps are spent (the ORM quota the
    wiring gives the runner); the run stops with the reason and a handoff."""
    settings.AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT = 3
    run_id = long_run(6)

    state = services.run_advance(run_id=run_id)

    assert state is not None
    assert (state.status, state.stop_reason, state.step) == (
        Status.FAILED,
        "DAILY_STEP_QUOTA_EXHAUSTED",
        3,
    )
    assert m.Handoff.objects.get(run_id=run_id).reason == "DAILY_STEP_QUOTA_EXHAUSTED"
    assert ev.HANDOFF_OPENED in [name for _, name in trace(run_id)]
    assert m.SubjectUsage.objects.get(subject="alice").steps == 3
    # Today the subject starts nothing more.
    with pytest.raises(DomainError) as refused:
        long_run(1)
    assert refused.value.code == "DAILY_STEP_QUOTA_EXHAUSTED"
