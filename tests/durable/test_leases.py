"""One worker at a time per run (SPEC §4): the lease is a conditional UPDATE, not a local lock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs import models as m
from runs import services
from runs.domain import lifecycle
from runs.domain.errors import LeaseLost
from runs.domain.machine import Status
from runs.engine.leases import lease_acquire, lease_release, lease_renew
from runs.orm.store import OrmRunStore
from tests.durable.durable_kit import Run, advance_in_thread, create, final, load, use
from tests.support.clock import FakeClock
from tests.support.races import race

pytestmark = pytest.mark.django_db(transaction=True)
# No tool runs in these: no other connection needs to see the rows, a rollback is enough.
ROLLBACK = pytest.mark.django_db


def _expire(run_id: str) -> None:
    """The holder stopped renewing (it died): its lease is now in the past."""
    m.Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def _lease(run_id: str) -> tuple[str | None, object]:
    return m.Run.objects.values_list("lease_owner", "lease_expires_at").get(pk=run_id)


@ROLLBACK
def test_of_two_owners_exactly_one_gets_the_lease():
    run = create([final("user-1")])
    first = lease_acquire(run_id=run.run_id, owner="worker-a")
    second = lease_acquire(run_id=run.run_id, owner="worker-b")
    assert (first, second) == (True, False)
    assert _lease(run.run_id)[0] == "worker-a"
    # Taking it again as its holder is fine (and renews it).
    assert lease_acquire(run_id=run.run_id, owner="worker-a") is True


@ROLLBACK
def test_an_expired_lease_can_be_taken_over():
    run = create([final("user-1")])
    assert lease_acquire(run_id=run.run_id, owner="worker-a")
    _expire(run.run_id)
    assert lease_acquire(run_id=run.run_id, owner="worker-b") is True
    owner, expires = _lease(run.run_id)
    assert owner == "worker-b"
    assert expires > timezone.now()
    # The old holder cannot renew what it lost.
    assert lease_renew(run_id=run.run_id, owner="worker-a") is False


@ROLLBACK
def test_a_lease_lapses_when_the_clock_passes_its_expiry(settings):
    """The lease decision reads the clock it is given: no sleeping for a real expiry."""
    settings.AGENTCONSOLE_LEASE_TTL_S = 15
    clock = FakeClock()
    run = create([final("user-1")])
    assert lease_acquire(run_id=run.run_id, owner="worker-a", clock=clock)
    clock.advance(15_000)  # at the expiry: still held
    assert lease_acquire(run_id=run.run_id, owner="worker-b", clock=clock) is False
    clock.advance(1)
    assert lease_acquire(run_id=run.run_id, owner="worker-b", clock=clock) is True
    assert _lease(run.run_id)[0] == "worker-b"


@ROLLBACK
def test_only_the_owner_renews_and_releases():
    run = create([final("user-1")])
    assert lease_acquire(run_id=run.run_id, owner="worker-a")
    before = _lease(run.run_id)
    assert lease_renew(run_id=run.run_id, owner="worker-b") is False
    assert _lease(run.run_id) == before
    lease_release(run_id=run.run_id, owner="worker-b")
    assert _lease(run.run_id) == before
    assert lease_renew(run_id=run.run_id, owner="worker-a") is True
    lease_release(run_id=run.run_id, owner="worker-a")
    assert _lease(run.run_id) == (None, None)


def test_run_advance_leaves_a_run_leased_by_another_worker_alone():
    run = create([use("p1", "durable_steady"), final("tool-1")])
    assert lease_acquire(run_id=run.run_id, owner="other-host:1:live")
    before = Run(run.run_id)
    assert services.run_advance(run_id=run.run_id) is None
    after = Run(run.run_id)
    assert after.state == before.state
    assert after.trace == before.trace
    assert after.ledger == []
    assert _lease(run.run_id)[0] == "other-host:1:live"  # not released by the loser either
    # Once the holder lets go, the same call advances it.
    lease_release(run_id=run.run_id, owner="other-host:1:live")
    assert services.run_advance(run_id=run.run_id).status is Status.COMPLETED
    assert _lease(run.run_id) == (None, None)


@ROLLBACK
def test_a_write_after_the_lease_passed_on_raises_lease_lost_and_writes_nothing():
    run = create([final("user-1")])
    assert lease_acquire(run_id=run.run_id, owner="worker-x")
    _expire(run.run_id)
    assert lease_acquire(run_id=run.run_id, owner="worker-y")
    state = load(run.run_id)
    before = Run(run.run_id)
    with pytest.raises(LeaseLost) as caught:
        OrmRunStore(lease_owner="worker-x").apply(lifecycle.start(state))
    assert caught.value.code == "LEASE_LOST"
    after = Run(run.run_id)
    assert after.state == before.state
    assert after.trace == before.trace
    assert after.observations == before.observations == []
    assert load(run.run_id).status is Status.CREATED
    # The holder's store writes the same commit.
    assert (
        OrmRunStore(lease_owner="worker-y").apply(lifecycle.start(state)).status is Status.RUNNING
    )


def test_a_worker_that_loses_its_lease_mid_tool_stops_and_leaves_the_row_for_recovery(
    plugin_tools,
):
    """The watcher renews the lease while a tool runs; when renewal fails it cancels the tool,
    and the worker's next write raises LeaseLost: run_advance returns None, the ledger row stays
    ``started`` for the new holder, who recovers it with the same token."""
    run = create([use("p1", "durable_wait", seconds=1.5), final("tool-1")])
    worker, results = advance_in_thread(run.run_id)
    try:
        assert plugin_tools.WAIT_STARTED.wait(10), "the tool never started"
        _expire(run.run_id)
        assert lease_acquire(run_id=run.run_id, owner="thief")
        worker.join(10)
        assert not worker.is_alive(), "the worker did not stop after losing its lease"
    finally:
        worker.join(15)
    assert results == [None]
    lost = Run(run.run_id)
    assert [r["status"] for r in lost.ledger] == ["started"]
    assert lost.events("tool.completed") == []
    assert _lease(run.run_id)[0] == "thief"
    # The next worker (here: run_advance once the thief let go) recovers that row, same token.
    lease_release(run_id=run.run_id, owner="thief")
    state = services.run_advance(run_id=run.run_id)
    assert state is not None
    assert state.status is Status.COMPLETED
    done = Run(run.run_id)
    assert [r["idempotency_token"] for r in done.ledger] == [lost.ledger[0]["idempotency_token"]]
    assert [r["status"] for r in done.ledger] == ["succeeded"]
    assert [e["details"]["how"] for e in done.events("tool.recovered")] == ["re-executed"]
    tokens = plugin_tools.calls("durable_wait")
    assert len(tokens) == 2
    assert set(tokens) == {lost.ledger[0]["idempotency_token"]}


def test_workers_advancing_one_run_at_once_execute_its_tool_once(plugin_tools):
    """Eight workers get the same run at once (a redelivered task, a sweep): one advances it,
    the others return None; the tool runs once, one ledger row, one completion."""
    run = create([use("p1", "durable_wait", seconds=0.3), final("tool-1")])
    results = race(lambda i: services.run_advance(run_id=run.run_id), 8)
    assert not any(isinstance(r, Exception) for r in results), results
    advanced = [r for r in results if r is not None]
    assert len(advanced) >= 1
    assert all(r.status is Status.COMPLETED for r in advanced)
    assert len(plugin_tools.calls("durable_wait")) == 1
    done = Run(run.run_id)
    done.check()
    assert done.status == "completed"
    assert [r["status"] for r in done.ledger] == ["succeeded"]
    assert len(done.events("tool.started")) == len(done.events("planner.output")) - 1 == 1


@pytest.mark.postgres
def test_twenty_workers_racing_for_one_free_run_exactly_one_wins(postgres_only):
    run = create([final("user-1")])
    results = race(lambda i: lease_acquire(run_id=run.run_id, owner=f"worker-{i}"))
    assert all(isinstance(r, bool) for r in results), results
    assert results.count(True) == 1, results
    winner = results.index(True)
    assert _lease(run.run_id)[0] == f"worker-{winner}"
