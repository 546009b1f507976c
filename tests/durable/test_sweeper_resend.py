"""The sweeper re-sends a stranded run with a back-off (again only after as long as the run has
already waited), not on every sweep (found by the soak, ``make soak``: with 200 runs queued
behind 3 workers killed at random, every run that waited longer than ``STALE_AFTER`` was
re-sent on each sweep and the queue grew without bound).

The mark it leaves holds the run for no worker: the messages already queued for it still take
it, so a run queued longer than the mark lasts is never starved by its own re-sends.
"""

from __future__ import annotations

from typing import Any

import pytest

from runs import models as m
from runs import services
from runs.engine.leases import (
    HANDED_BACK,
    lease_acquire,
    lease_hand_back,
    lease_ttl,
    release_dead_local,
)
from runs.engine.sweeper import STALE_AFTER, sweep
from tests.durable.durable_kit import create, final
from tests.support.clock import FakeClock

pytestmark = pytest.mark.django_db

STALE_MS = int(STALE_AFTER.total_seconds() * 1000)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What the sweeper would send to a worker (run id, hand-back name)."""
    calls: list[tuple[str, Any]] = []

    def record(run_id: str, **kw: Any) -> None:
        calls.append((run_id, kw.get("handed_back")))

    monkeypatch.setattr(services, "enqueue_advance", record)
    return calls


def _updated_ms(run_id: str) -> int:
    return int(m.Run.objects.get(pk=run_id).updated_at.timestamp() * 1000)


def _stale_run(clock: FakeClock) -> str:
    """A created run whose message is still queued (no lease), last written long ago."""
    run = create([final("user-1")], deadline_ms=3_600_000)
    clock.set(_updated_ms(run.run_id) + STALE_MS + 1000)
    return run.run_id


def test_a_stranded_run_is_re_sent_with_a_back_off_not_on_every_sweep(sent):
    clock = FakeClock()
    run_id = _stale_run(clock)
    waited_ms = clock.now_ms() - _updated_ms(run_id)  # STALE_AFTER + 1 s

    # (Margins of a few ms: updated_at has microseconds, the clock whole milliseconds.)
    assert sweep(clock=clock).requeued == [run_id]
    clock.advance(1_000)
    assert sweep(clock=clock).requeued == []  # the re-sent message is on its way
    clock.advance(waited_ms - 1_000 - 5)
    assert sweep(clock=clock).requeued == []  # the mark lasts as long as the run had waited
    clock.advance(10)
    # That message was lost too, or is still slow behind a backlog: send another, and wait
    # twice as long before the next.
    assert sweep(clock=clock).requeued == [run_id]
    clock.advance(2 * waited_ms - 10)
    assert sweep(clock=clock).requeued == []
    clock.advance(20)
    assert sweep(clock=clock).requeued == [run_id]
    assert sent == [(run_id, None)] * 3


def test_a_hundred_sweeps_over_ten_minutes_re_send_a_waiting_run_a_few_times(sent):
    clock = FakeClock()
    run_id = _stale_run(clock)
    for _ in range(100):
        sweep(clock=clock)
        clock.advance(6_000)
    # About 31 s, 62 s, 124 s, 248 s, 496 s after its last write: five re-sends, not a hundred.
    assert sent == [(run_id, None)] * 5


def test_a_message_already_queued_still_takes_a_re_sent_run(sent):
    clock = FakeClock()
    run_id = _stale_run(clock)
    sweep(clock=clock)
    # The original message reaches a worker first: the mark does not keep it out.
    assert lease_acquire(run_id=run_id, owner="worker-a", clock=clock)
    assert m.Run.objects.get(pk=run_id).lease_owner == "worker-a"


def test_a_re_sent_hand_back_keeps_its_name_so_its_message_still_takes_the_run(sent):
    clock = FakeClock()
    run_id = _stale_run(clock)
    assert lease_acquire(run_id=run_id, owner="worker-a", clock=clock)
    name = lease_hand_back(run_id=run_id, owner="worker-a", clock=clock)
    assert name is not None
    assert name.startswith(HANDED_BACK)

    assert sweep(clock=clock).requeued == [run_id]
    assert m.Run.objects.get(pk=run_id).lease_owner == name
    assert lease_acquire(run_id=run_id, owner="worker-b", handed_back=name, clock=clock)


def test_the_mark_does_not_outlive_a_worker_that_takes_the_run(sent):
    """A worker's live lease is never overwritten by the sweeper's mark."""
    clock = FakeClock()
    run_id = _stale_run(clock)
    assert lease_acquire(run_id=run_id, owner="worker-a", clock=clock)
    assert sweep(clock=clock).requeued == []
    assert m.Run.objects.get(pk=run_id).lease_owner == "worker-a"


def test_only_a_run_whose_worker_died_goes_to_the_recovery_queue(monkeypatch):
    """The sweep task passes the control queue it came on as ``recovery_queue``: a run whose
    worker's lease lapsed goes there, ahead of the backlog (the soak: recoveries waited behind
    hundreds of queued runs); a run that is merely queued, or was handed back, goes back to
    the runs' queue, so the control queue never becomes a second line for the backlog."""
    queues: dict[str, Any] = {}
    monkeypatch.setattr(
        services, "enqueue_advance", lambda run_id, **kw: queues.setdefault(run_id, kw["queue"])
    )
    clock = FakeClock()
    waiting, died, handed = _stale_run(clock), _stale_run(clock), _stale_run(clock)
    assert lease_acquire(run_id=died, owner="host:4242:abc", clock=clock)
    assert lease_acquire(run_id=handed, owner="host:4343:def", clock=clock)
    assert lease_hand_back(run_id=handed, owner="host:4343:def", clock=clock)
    clock.advance(STALE_MS * 4)  # every lease has lapsed, every run is stale

    report = sweep(clock=clock, recovery_queue="runs-control")
    assert sorted(report.requeued) == sorted([waiting, died, handed])
    assert queues == {waiting: None, died: "runs-control", handed: None}


def test_a_run_whose_worker_died_is_re_sent_as_soon_as_its_lease_lapses(sent):
    """Staleness (STALE_AFTER) guards a run whose message may only be slow; a worker's own
    lease that lapsed means that worker stopped (the lease TTL bounds noticing it), so its run
    is sent on at the next sweep, not STALE_AFTER after its last write (the soak: recoveries
    took a minute)."""
    clock = FakeClock()
    run = create([final("user-1")], deadline_ms=3_600_000)
    clock.set(_updated_ms(run.run_id))
    assert lease_acquire(run_id=run.run_id, owner="host:4242:abc", clock=clock)
    assert sweep(clock=clock).requeued == []  # its worker holds it
    clock.advance(int(lease_ttl().total_seconds() * 1000) + 1_000)  # the worker died
    assert sweep(clock=clock).requeued == [run.run_id]
    assert sweep(clock=clock).requeued == []  # then the usual back-off
    assert sent == [(run.run_id, None)]


def test_a_run_whose_dead_worker_a_restart_released_goes_to_the_recovery_queue_at_once(
    monkeypatch,
):
    """A worker restarted on the same host releases its dead predecessor's leases
    (``release_dead_local``) before they lapse. The run must still read as "its worker died":
    sent on at the next sweep, on the recovery queue. (Cleared, the lease made the run look
    merely idle: re-sent only once stale, 30 s after its last write, behind the whole backlog;
    the soak saw such recoveries take 1-3 minutes.)"""
    queues: dict[str, Any] = {}
    monkeypatch.setattr(
        services, "enqueue_advance", lambda run_id, **kw: queues.setdefault(run_id, kw["queue"])
    )
    clock = FakeClock()
    run = create([final("user-1")], deadline_ms=3_600_000)
    clock.set(_updated_ms(run.run_id))
    dead = "host-a:4242:abc"
    assert lease_acquire(run_id=run.run_id, owner=dead, clock=clock)
    clock.advance(500)  # killed; its successor listens before the lease's TTL is up

    assert release_dead_local(host="host-a", pid_alive=lambda pid: False, clock=clock) == [
        run.run_id
    ]
    assert sweep(clock=clock, recovery_queue="runs-control").requeued == [run.run_id]
    assert queues == {run.run_id: "runs-control"}
    # Released once: a second start (or the stop) does not count it again.
    assert release_dead_local(host="host-a", pid_alive=lambda pid: False, clock=clock) == []
