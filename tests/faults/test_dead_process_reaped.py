"""A pool process that dies is found by its worker's main process, not by its lease's expiry (issue
22 item 7; agentconsole/ops/worker_lifecycle.py ``Reaper``, runs.engine.sweeper.recover_dead_local).

One real Celery worker whose leases last 120 s, and nobody sweeping: the only way its killed
pool process's run can move on within the bound below is the main process noticing that the
process is gone and sending the run on at once. The kill is the crash fault (the pool process
SIGKILLs itself mid-tool, after recording the firing), so it lands exactly while the ledger row
is ``started``; the run must then be recovered as after any crash: the same command under the
same token, one effect, never re-planned.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from runs import models as m
from tests.faults import fault_kit as fk
from tests.faults.fault_kit import TERMINAL_VALUES, Cluster

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LEASE_TTL_S = 120
# Far below the lease's TTL: a recovery by expiry (or by any sweep: none runs) cannot meet it.
RECOVERED_WITHIN_S = 40


@pytest.fixture(scope="module")
def workers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {"AGENTCONSOLE_ALLOW_CRASH_FAULTS": "1", "AGENTCONSOLE_LEASE_TTL_S": str(LEASE_TTL_S)}
    # Two pool processes: the killed one's slot stays taken until Celery declares the job lost
    # (worker_lost_wait, 10 s); the other takes the recovered run.
    with fk.cluster(tmp_path_factory, workers=1, concurrency=2, extra_env=env) as c:
        yield c


def test_a_killed_pool_process_run_moves_on_long_before_its_lease_lapses(stack: Cluster) -> None:
    entry = f"reaped-{uuid.uuid4().hex[:8]}"
    faults = {"crash_worker_at": {"point": "during_tool", "tool": "append_entry"}}
    run_id = fk.create(fk.effect_scenario("append_entry", {"entry": entry}, faults=faults), stack)
    fk.wait_for(
        lambda: m.FaultFiring.objects.filter(run_id=run_id, fault="crash").exists(),
        timeout_s=30,
        what="the crash fault fired",
        c=stack,
    )
    killed_at = time.monotonic()

    # Not fk.wait_rest: it sweeps, and this test is about recovery without a sweep.
    run = fk.wait_for(
        lambda: m.Run.objects.filter(pk=run_id, status__in=TERMINAL_VALUES).first(),
        timeout_s=RECOVERED_WITHIN_S,
        what=f"the run recovered without a sweep, its lease ({LEASE_TTL_S} s) still unexpired",
        c=stack,
    )

    assert time.monotonic() - killed_at < LEASE_TTL_S
    assert run.status == "completed", (run.status, run.stop_reason)
    fk.assert_consistent(run)
    ledger = list(run.ledger.all())
    assert [row.status for row in ledger] == ["succeeded"]
    token = ledger[0].idempotency_token
    assert [line["token"] for line in fk.effects_of(stack, run_id)] == [token]
    recovered = [d for _, name, d in fk.events(run_id) if name == "tool.recovered"]
    assert [(d["how"], d["idempotency_token"]) for d in recovered] == [("re-executed", token)]
    assert fk.names(run_id).count("planner.output") == 2 == run.planner_cursor
