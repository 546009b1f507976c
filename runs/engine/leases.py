"""One worker at a time per run, across processes and hosts: a lease row-field with expiry.

Not a process-local lock: two workers on two hosts racing for one run both issue the same
conditional UPDATE; the database lets exactly one match (STYLE habit 3). A worker that dies
stops renewing; once the lease expires the sweeper hands the run to another worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.db.models import Case, F, Q, Value, When
from django.dispatch import Signal

from policy.domain.contracts import CancelSignal
from runs.domain.clock import SYSTEM_CLOCK, Clock, as_datetime
from runs.domain.machine import Status
from runs.models import Run

log = logging.getLogger(__name__)

# Sent with ``run_ids`` when runs are taken from a worker that stopped renewing their leases:
# a worker took an expired lease, or ``release_dead_local`` freed the leases of dead processes.
# The metrics count takeovers from it (agentconsole/ops/metrics.py).
lease_taken_over = Signal()


def lease_ttl() -> timedelta:
    return timedelta(seconds=settings.AGENTCONSOLE_LEASE_TTL_S)


# How often a worker renews its lease and looks for a cancel while a tool runs.
WATCH_INTERVAL_S = 0.2


def local_host() -> str:
    """The host part of this process's lease owners: the hostname and, on Linux, the pid
    namespace (``/proc/self/ns/pid``'s inode).

    ``release_dead_local`` judges a lease dead when its owner's pid does not exist here, so
    it must only judge pids of its own namespace. Containers sharing their node's hostname
    (Kubernetes ``hostNetwork``, Docker ``--uts=host``) each have a pid namespace of their own:
    by hostname alone, one container's workers would take every other one's live runs."""
    host = socket.gethostname()
    try:
        return f"{host}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:  # not Linux (or no /proc): the hostname alone
        return host


def new_owner() -> str:
    return f"{local_host()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# A run handed back to the queue (a fairness slice ended) names the one message that carries it.
HANDED_BACK = "queued:"
# The lease names a worker (``new_owner``), not a message: a hand-back's or a re-send's name.
HELD_BY_WORKER = Q(lease_owner__isnull=False) & ~Q(lease_owner__startswith=HANDED_BACK)


def lease_acquire(
    *, run_id: str, owner: str, handed_back: str | None = None, clock: Clock = SYSTEM_CLOCK
) -> bool:
    """Take the lease if it is free, expired or already ours. True iff we hold it now.

    ``handed_back``: the message a hand-back sent takes the run only while the run still
    names it. A duplicate of an earlier turn (the sweeper re-sends a run that waited long in
    the queue) then finds another name and drops out, so duplicates never multiply into extra
    turns; the run is never left without a message, since a newer name means a newer message.
    """
    now = as_datetime(clock.now_ms())
    if handed_back is not None:
        claimable = Q(lease_owner=handed_back)
    else:
        # Free, ours, or a name that holds the run for no worker (a hand-back's, already
        # expired; a sweeper's reservation, not yet): any message may take it, as when it is free.
        # An expired lease of another worker is a takeover, taken below and counted apart.
        claimable = (
            Q(lease_owner__isnull=True)
            | Q(lease_owner=owner)
            | Q(lease_owner__startswith=HANDED_BACK)
        )
    # The race: two workers read "free" at once; the WHERE clause makes one UPDATE match.
    taken = (
        Run.objects.filter(pk=run_id)
        .filter(claimable)
        .update(lease_owner=owner, lease_expires_at=now + lease_ttl())
    )
    if taken or handed_back is not None:
        return taken == 1
    # Held by another worker: take it only if that worker stopped renewing (it died or hung).
    # A second UPDATE, only on this path, so that a takeover is counted apart (metrics).
    taken = Run.objects.filter(pk=run_id, lease_expires_at__lt=now).update(
        lease_owner=owner, lease_expires_at=now + lease_ttl()
    )
    if taken:
        lease_taken_over.send(sender=Run, run_ids=[run_id])
    return taken == 1


def lease_hand_back(*, run_id: str, owner: str, clock: Clock = SYSTEM_CLOCK) -> str | None:
    """Release our lease naming the message that will carry the run next; None if we no longer
    held it. The lease is expired at once: any other message (a decision, a cancel, the
    sweeper) may take the run too, exactly as after ``lease_release``."""
    name = f"{HANDED_BACK}{uuid.uuid4().hex}"
    # One millisecond in the past: the clock reads whole milliseconds, and a lease that
    # expires "now" would still be held by ``lease_acquire``'s strict comparison.
    released = Run.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_owner=name, lease_expires_at=as_datetime(clock.now_ms() - 1)
    )
    return name if released == 1 else None


def lease_reserve_for_resend(*, run_id: str, hold: timedelta, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Mark a run whose lease is free or lapsed as re-sent (the sweeper's next message for it is
    on its way) for ``hold``; False if a worker took it meanwhile.

    Until ``hold`` passes the sweeper sees a live lease and sends nothing more for the run. The
    mark holds the run for no worker: any message may take it (``lease_acquire``), and a
    hand-back's name is kept, so the message it sent still takes the run too. Were the mark
    to block the messages already queued, a run queued longer than ``hold`` would be re-sent
    forever and never run. Should every message be lost, the mark lapses and the next sweep
    sends another.
    """
    now = as_datetime(clock.now_ms())
    # The race: a worker's lease_acquire between the sweeper's scan and this UPDATE; the same
    # WHERE clause lets exactly one of the two match.
    reserved = (
        Run.objects.filter(pk=run_id)
        .filter(Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now))
        .update(
            lease_owner=Case(
                When(lease_owner__startswith=HANDED_BACK, then=F("lease_owner")),
                default=Value(f"{HANDED_BACK}resent-{uuid.uuid4().hex}"),
            ),
            lease_expires_at=now + hold,
        )
    )
    return reserved == 1


def lease_renew(*, run_id: str, owner: str, clock: Clock = SYSTEM_CLOCK) -> bool:
    renewed = Run.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_expires_at=as_datetime(clock.now_ms()) + lease_ttl()
    )
    return renewed == 1


def lease_release(*, run_id: str, owner: str) -> None:
    Run.objects.filter(pk=run_id, lease_owner=owner).update(lease_owner=None, lease_expires_at=None)


@contextlib.contextmanager
def watch_tool(
    run_id: str, cancel: CancelSignal, *, owner: str | None, clock: Clock = SYSTEM_CLOCK
) -> Iterator[None]:
    """While a tool runs: renew the lease and turn a ``cancelling`` run into a cancel signal.

    The cancel request is a database write by whoever cancels (API, console, command, the
    deadline sweeper); this watcher is how it reaches the tool in this worker, within
    ``WATCH_INTERVAL_S``.
    """
    done = threading.Event()

    def loop() -> None:
        try:
            while not done.wait(WATCH_INTERVAL_S):
                status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
                if status == Status.CANCELLING.value and not cancel.cancelled:
                    cancel.cancel("CANCEL_REQUESTED")
                if owner is not None and not lease_renew(run_id=run_id, owner=owner, clock=clock):
                    # Someone else holds the run now; stop our tool as soon as it allows.
                    log.warning("lease of run %s lost while a tool ran", run_id)
                    cancel.cancel("LEASE_LOST")
        finally:
            connections.close_all()

    thread = threading.Thread(target=loop, name=f"watch-{run_id[-8:]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(2)


def local_pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs. A zombie does not: it has exited and
    waits to be reaped, by its parent or, orphaned (its worker's whole group killed), by the
    host's init, which here took 1-2 s, all that time answering ``kill(pid, 0)`` (the soak)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, belongs to someone else
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:  # reaped meanwhile
        return False
    except OSError:  # no /proc (not Linux): what kill said
        return True
    # "pid (comm) state ...": comm may hold spaces and parentheses, the last ")" ends it.
    return stat.rsplit(b")", 1)[-1].split()[:1] not in ([b"Z"], [b"X"])


# A run a worker may still advance; a settled run's leftover lease holds nothing.
ACTIVE_STATUSES = (Status.CREATED.value, Status.RUNNING.value, Status.CANCELLING.value)

# Leases looked at per call: a host holds at most a few (one per pool process); bounded anyway.
RELEASE_BATCH = 1000


def release_dead_local(
    *,
    host: str | None = None,
    pid_alive: Callable[[int], bool] = local_pid_alive,
    clock: Clock = SYSTEM_CLOCK,
    active_only: bool = False,
) -> list[str]:
    """Lapse the leases held by processes of this host that no longer exist; their run ids.

    A worker's main process calls it when it starts (a predecessor on this host was killed), every
    ``AGENTCONSOLE_REAP_INTERVAL_S`` while it runs (``runs.engine.sweeper.recover_dead_local``: a
    pool process or another worker on this host died) and when it stops (after its pool processes
    ended, including one stopped mid-step at the end of the shutdown bound). The lease then reads as
    lapsed at once, instead of after its expiry. The owner stays on the row: that is how the sweeper
    knows a worker died there. (Clearing it, as this did once, made the run look merely idle: the
    sweeper waited until it was stale, 30 s, and sent it behind the whole backlog; the soak saw such
    recoveries take minutes.) Owners are ``host:pid:nonce`` (``new_owner``), the host part
    ``local_host()``: a pid is only judged by a process of its own host and pid namespace.

    ``active_only``: only runs a worker may still advance (created, running, cancelling), which
    the ``run_status_lease`` index finds without reading settled runs: the periodic call.

    The race: a process that is alive is never touched (a slow step keeps its lease); a dead
    one cannot renew, and the conditional UPDATE on the exact owner changes nothing if another
    worker took the run meanwhile. A lease already lapsed is left as it is (and not counted
    again). A pid reused by a new process reads as alive: the lease then lapses by its expiry.
    """
    host = host or local_host()
    now = as_datetime(clock.now_ms())
    held = Run.objects.filter(lease_owner__startswith=f"{host}:", lease_expires_at__gte=now)
    if active_only:
        held = held.filter(status__in=ACTIVE_STATUSES)
    released = []
    for run_id, owner in held.values_list("id", "lease_owner")[:RELEASE_BATCH]:
        parts = (owner or "").split(":")
        pid = parts[1] if len(parts) >= 3 else ""
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        # One millisecond in the past: ``lease_acquire`` takes an expired lease strictly.
        if Run.objects.filter(pk=run_id, lease_owner=owner).update(
            lease_expires_at=as_datetime(clock.now_ms() - 1)
        ):
            released.append(run_id)
    if released:
        log.warning("lapsed the leases of dead processes on %s: %s", host, released)
        lease_taken_over.send(sender=Run, run_ids=released)
    return released
