"""SIGTERM to a worker started by scripts/worker.sh, sent to its whole process group as a
supervisor does, while a tool call is in flight (issue 14 item 3):

- within the bound (AGENTCONSOLE_WORKER_SHUTDOWN_S) the step finishes: the ledger row is
  settled, the effect happened once, and the worker leaves;
- past the bound the step is cut off: the worker still leaves within the bound (the isolated
  tool child too: it lives in a session of its own), releases the run's lease at once (long
  before it would expire), and the next sweep hands the run to another worker.

Either way no process of the worker (pool and tool children included) remains.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from runs import models as m
from runs.engine.leases import HANDED_BACK
from runs.engine.sweeper import sweep
from tests.faults import fault_kit as fk
from tests.support.procs import cmdline, group, tagged
from tests.support.workers import cluster

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STOP_BOUND_S = 40


def _wait(predicate: Any, timeout_s: float, what: str, c: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}\n{c.log()}")


def _in_flight(run_id: str) -> bool:
    return m.LedgerEntry.objects.filter(run_id=run_id, status="started").exists()


def _stop_group_and_wait(c: Any) -> float:
    [worker] = c.workers
    members = group(worker.process.pid)
    assert len(members) >= 2, "a main process and its pool"
    started = time.monotonic()
    os.killpg(worker.process.pid, signal.SIGTERM)
    _wait(lambda: not group(worker.process.pid), STOP_BOUND_S, "the worker group remained", c)
    _wait(
        lambda: not tagged(c.tag),
        10,
        f"a tool process of the worker remained: {[cmdline(p.pid) for p in tagged(c.tag)]}",
        c,
    )
    return time.monotonic() - started


def _lease(run_id: str) -> str | None:
    owner = m.Run.objects.get(pk=run_id).lease_owner
    return None if owner is None or owner.startswith(HANDED_BACK) else owner


def test_sigterm_lets_the_running_step_finish(tmp_path_factory: pytest.TempPathFactory) -> None:
    output = tmp_path_factory.mktemp("run-output")
    env = {"AGENTCONSOLE_TOOLS": fk.PLUGIN, "AGENTCONSOLE_WORKER_SHUTDOWN_S": "20"}
    with cluster(
        tmp_path_factory, name="drain", extra_env=env, output_root=output, via_script=True
    ) as c:
        # The effect, then 3 s in flight before the answer is back.
        run_id = fk.create(fk.effect_scenario("append_entry", {"entry": "x", "hold_ms": 3000}), c)
        _wait(lambda: _in_flight(run_id), 30, "the tool never started", c)
        _stop_group_and_wait(c)
        log = c.log(200)
    assert "exited with 'signal 15" not in log, log
    statuses = list(m.LedgerEntry.objects.filter(run_id=run_id).values_list("status", flat=True))
    assert statuses == ["succeeded"], log
    assert len(fk.effects_of(c, run_id)) == 1
    assert _lease(run_id) is None


def test_sigterm_past_the_bound_hands_the_step_back(
    tmp_path_factory: pytest.TempPathFactory, settings: Any
) -> None:
    output = tmp_path_factory.mktemp("run-output")
    env = {
        "AGENTCONSOLE_TOOLS": fk.PLUGIN,
        "AGENTCONSOLE_WORKER_SHUTDOWN_S": "1",
        # A lease that would outlive the test: released only if the worker releases it.
        "AGENTCONSOLE_LEASE_TTL_S": "600",
    }
    with cluster(
        tmp_path_factory, name="cutoff", extra_env=env, output_root=output, via_script=True
    ) as c:
        # An isolated read that ignores catchable signals, with a grandchild in its group.
        run_id = fk.create(fk.effect_scenario("hang_read", {"seconds": 30, "grandchild": True}), c)
        _wait(lambda: _in_flight(run_id), 30, "the tool never started", c)
        _wait(lambda: tagged(c.tag) and len(tagged(c.tag)) >= 4, 10, "no tool child", c)
        took = _stop_group_and_wait(c)
        log = c.log(200)
        assert took < STOP_BOUND_S, log
        # Released by the stopping worker, not expired: the TTL is ten minutes.
        assert _lease(run_id) is None, log
        assert _in_flight(run_id)  # cut off: the next worker settles it
        settings.AGENTCONSOLE_TOOLS = [fk.PLUGIN]
        settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = Path(output)
        report = sweep(enqueue=True, queue=c.queue)
        assert run_id in report.requeued
