"""The soak's kills: SIGKILL a random listening worker's process group, note the runs it held,
restart it under the same Celery hostname; afterwards, how long each of those runs took to move
on (its next committed trace event, written by another worker that took the lapsed lease)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from soak import stack as procs


@dataclass
class Kill:
    at: float  # wall clock (time.time()), comparable with the database's timestamps
    worker: str
    generation: int
    # run id → the run's last trace sequence once the worker was dead
    held: dict[str, int] = field(default_factory=dict)


def held_runs(pids: set[int]) -> list[str]:
    """Active runs whose lease names one of ``pids`` (``host:pid:nonce``)."""
    from runs import models as m
    from soak.checks import ACTIVE_VALUES, owner_pid

    rows = m.Run.objects.filter(lease_owner__isnull=False, status__in=ACTIVE_VALUES).values_list(
        "id", "lease_owner"
    )
    return [
        run_id for run_id, owner in rows if (pid := owner_pid(owner)) is not None and pid in pids
    ]


def last_sequences(run_ids: list[str]) -> dict[str, int]:
    from django.db.models import Max

    from runs import models as m

    rows = (
        m.TraceEvent.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(hi=Max("sequence"))
        .values_list("run_id", "hi")
    )
    return dict(rows)


def kill_one(
    stack: procs.Stack,
    rng: random.Random,
    min_up_s: float,
    watch: Callable[[Kill], None] | None = None,
) -> Kill | None:
    """SIGKILL one random listening worker (its process group) and restart it; None when no
    worker listens (all are restarting). ``watch`` sees the kill before the restart (the dead
    worker's leases still on the rows)."""
    # Only a worker that has listened for ``min_up_s``: one killed as soon as it listens
    # takes nothing from the queue, and on a slow machine the workers would spend the whole
    # soak starting up.
    ready = [w for w in stack.workers if w.up_for() >= min_up_s]
    if not ready:
        return None
    victim = rng.choice(ready)
    pids = victim.pids()
    held_before = held_runs(pids)
    kill = Kill(at=time.time(), worker=victim.name, generation=victim.generation)
    procs.kill(victim)
    # Sequences read once the worker is dead: nothing it committed can count as a recovery.
    # A run it held that is already settled (it committed the last step, then died before
    # releasing the lease) needs no recovery.
    kill.held = {r: s for r, s in last_sequences(held_before).items() if _active(r)}
    if watch is not None:
        watch(kill)
    procs.restart(stack, victim)
    return kill


def _active(run_id: str) -> bool:
    from runs import models as m
    from soak.checks import ACTIVE_VALUES

    return m.Run.objects.filter(pk=run_id, status__in=ACTIVE_VALUES).exists()


def recoveries(kills: list[Kill]) -> tuple[dict[str, float], list[str]]:
    """For each run a killed worker held (``<run id>@<kill time>``): seconds from the kill to
    the run's next committed trace event (another worker took it over and moved it on). Runs
    that never moved: lost."""
    from runs import models as m

    times: dict[str, float] = {}
    lost: list[str] = []
    for kill in kills:
        for run_id, seq in kill.held.items():
            nxt = (
                m.TraceEvent.objects.filter(run_id=run_id, sequence__gt=seq)
                .order_by("sequence")
                .values_list("created_at", flat=True)
                .first()
            )
            if nxt is None:
                lost.append(f"{run_id} (held by {kill.worker} killed at {kill.at:.1f})")
            else:
                times[f"{run_id}@{kill.at}"] = max(0.0, nxt.timestamp() - kill.at)
    return times, lost


def kill_phase(
    stack: procs.Stack,
    rng: random.Random,
    *,
    count: int,
    seconds: float,
    min_up_s: float,
    say: Callable[[str], None],
    status: Callable[[], str],
    watch: Callable[[Kill], None] | None = None,
) -> list[Kill]:
    """``count`` kills at random intervals (uniform, mean ``seconds / count``)."""
    kills: list[Kill] = []
    mean = seconds / max(1, count)
    # Bounded: at worst twice the planned phase (kills wait while every worker restarts).
    deadline = time.monotonic() + 2 * seconds + 60
    next_report = time.monotonic() + 15
    while len(kills) < count and time.monotonic() < deadline:
        time.sleep(rng.uniform(0, 2 * mean))
        kill = kill_one(stack, rng, min_up_s, watch)
        if kill is not None:
            kills.append(kill)
        else:
            time.sleep(0.2)
        if time.monotonic() > next_report:
            say(f"  {len(kills)}/{count} kills, {status()}")
            next_report = time.monotonic() + 15
    return kills
