"""The sweeper: finds runs no worker is advancing and hands them back (SPEC §4).

1. Runs waiting for a confirmation past their deadline → cancelled (nothing runs while
   waiting), and their pending confirmation → expired.
2. Active runs (created, running, cancelling) with no live lease that are stale (and not
   waiting on an open model or tool call), overdue, hold a ``started`` ledger row no open
   call explains (a worker died mid-tool), hold a call answered but never taken, or whose
   worker's own lease lapsed → marked as re-sent (for as long as the run has waited, at least
   ``STALE_AFTER``: ``lease_reserve_for_resend``) and enqueued again; a run whose worker's
   lease lapsed goes to the sweep's control queue, ahead of the backlog (``recovery_queue``).
   The worker that takes the lease recovers the ledger row first (reconcile, or re-execute
   under the same token, or handoff) and continues from the authoritative state.

Every step is a compare-and-set; a run that moved meanwhile is simply left for the next sweep.

``recover_dead_local`` does the second part at once for a run whose worker process is known dead
(a worker's main process calls it every ``AGENTCONSOLE_REAP_INTERVAL_S``), without waiting for
the lease to expire or for a sweep to find a free pool process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q

from policy.domain.errors import DomainError
from runs import models as m
from runs import services
from runs.context import RunsContext, resolve
from runs.domain import lifecycle
from runs.domain.clock import SYSTEM_CLOCK, Clock, as_datetime
from runs.domain.gateway.calls import OPEN, SETTLED
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import Status
from runs.engine.leases import (
    HELD_BY_WORKER,
    lease_reserve_for_resend,
    local_pid_alive,
    release_dead_local,
)

STALE_AFTER = timedelta(seconds=30)
# How long an answered model call may wait for the gateway's message before the sweeper sends
# its run on (a message behind a backlog is slower; a duplicate is harmless: the lease).
ANSWER_GRACE = timedelta(seconds=5)
BATCH = 500


@dataclass
class SweepReport:
    expired_waiting: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)


def sweep(
    *,
    now_ms: int | None = None,
    enqueue: bool = True,
    queue: str | None = None,
    recovery_queue: str | None = None,
    ctx: RunsContext | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> SweepReport:
    """One sweep. ``enqueue=False`` advances stranded runs in this process instead (on
    ``clock``, which also decides which leases have lapsed). ``now_ms`` overrides only the
    reading the deadlines are compared with. Stranded runs are sent to ``queue``; with
    ``recovery_queue``, a run whose worker's lease lapsed (a worker that died or hung) goes
    there instead, ahead of the runs merely waiting in the backlog."""
    now = as_datetime(clock.now_ms())
    now_ms = clock.now_ms() if now_ms is None else now_ms
    report = SweepReport()
    store = resolve(ctx).store()

    overdue_waiting = m.Run.objects.filter(
        status=Status.WAITING_CONFIRMATION.value, deadline_ms__lte=now_ms
    ).values_list("id", flat=True)[:BATCH]
    for run_id in overdue_waiting:
        try:
            # The commit also expires the run's pending confirmation.
            state = store.apply(lifecycle.deadline_while_waiting(store.load(run_id)))
            report.expired_waiting.append(state.run_id)
        except DomainError:
            continue  # decided or cancelled meanwhile

    orphan = m.LedgerEntry.objects.filter(run_id=OuterRef("pk"), status=LedgerStatus.STARTED)
    calls = m.ModelCall.objects.filter(run_id=OuterRef("pk"))
    stranded = (
        m.Run.objects.filter(
            status__in=[Status.CREATED.value, Status.RUNNING.value, Status.CANCELLING.value]
        )
        .filter(Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(
            # A run waiting on its model is not stale: the gateway owes it the reply, and
            # re-sending it would only wake a worker to find nothing to do.
            (Q(updated_at__lt=now - STALE_AFTER) & ~Exists(calls.filter(status__in=OPEN)))
            | Q(deadline_ms__lte=now_ms)
            # A started ledger row whose call is not the gateway's to make: its worker died.
            | (Exists(orphan) & ~Exists(calls.filter(status__in=OPEN)))
            # Its model call was answered a while ago and no step took the reply: the
            # gateway's message was lost, or the worker died before its commit.
            | Exists(calls.filter(status__in=SETTLED, answered_at__lt=now - ANSWER_GRACE))
            # A worker's own lease lapsed: it died or hangs (the lease TTL is the bound on
            # noticing), so its run is sent on now. Staleness only guards runs whose message
            # may merely be slow behind a backlog.
            | HELD_BY_WORKER
        )
        .annotate(worker_lapsed=ExpressionWrapper(HELD_BY_WORKER, output_field=BooleanField()))
        .values_list("id", "updated_at", "worker_lapsed")[:BATCH]
    )
    for run_id, updated_at, worker_lapsed in stranded:
        # Not again for as long as the run has already waited (at least STALE_AFTER): its
        # messages may only be slow, behind a backlog. Re-sent on every sweep, a run waiting
        # longer than STALE_AFTER fed the backlog it waited behind, without bound (found by the
        # soak, ``make soak``: 200 runs, 3 workers killed at random); backing off, a run waiting
        # W is re-sent about log2(W / STALE_AFTER) times.
        hold = max(STALE_AFTER, now - updated_at)
        if not lease_reserve_for_resend(run_id=run_id, hold=hold, clock=clock):
            continue  # a worker took the run meanwhile
        report.requeued.append(run_id)
        if enqueue:
            services.enqueue_advance(run_id, queue=(worker_lapsed and recovery_queue) or queue)
        else:
            services.run_advance(run_id=run_id, ctx=ctx, clock=clock)
    return report


def recover_dead_local(
    *,
    queue: str | None,
    host: str | None = None,
    pid_alive: Callable[[int], bool] = local_pid_alive,
    clock: Clock = SYSTEM_CLOCK,
) -> list[str]:
    """Send on at once the runs whose worker process on this host no longer exists; their ids.

    1. Lapse the dead processes' leases (``release_dead_local``, active runs only; ``host``
       and ``pid_alive`` as there). A live process, however slow its step, is never touched:
       its pid exists.
    2. Reserve each run for a re-send, as the sweep does, and send it to ``queue`` (the worker's
       control queue: ahead of the backlog). The reservation is the compare-and-set between
       this and a sweep, or another worker's reaper, seeing the same lapsed lease: one sends.

    Why not leave it to the sweep: the lease's TTL was most of a recovery (the soak: 2.9 s of
    a p50 of 3.8 s, at a 3 s TTL; the default is 15 s), and the sweep itself waits for a free
    pool process, behind steps of the runs. Should the message be lost, the reservation lapses
    after ``STALE_AFTER`` and the next sweep sends another.
    """
    released = release_dead_local(host=host, pid_alive=pid_alive, clock=clock, active_only=True)
    sent = []
    for run_id in released:
        if lease_reserve_for_resend(run_id=run_id, hold=STALE_AFTER, clock=clock):
            services.enqueue_advance(run_id, queue=queue)
            sent.append(run_id)
    return sent
