"""A worker killed with SIGKILL mid-run (issue 3, SPEC §4 "Execution").

One real Celery worker (prefork, see CONCURRENCY) on a queue of its own, allowed to crash
(``AGENTCONSOLE_ALLOW_CRASH_FAULTS=1``) and holding leases of 2 s. A crash fault kills the pool
process that runs the tool at one of three points (``before_tool``, ``during_tool``,
``after_effect``); other tests kill it from here, by pid, while the tool is in flight. The
master forks a new pool process; the sweeper (run from this process, as its periodic task
would) finds the ``started`` ledger row under the lapsed lease and enqueues the run again. The
worker's own reaper is off (``AGENTCONSOLE_REAP_INTERVAL_S=0``): these tests recover as from a
worker that died on another host, and a cancel can land while nobody has taken the run yet.
tests/faults/test_dead_process_reaped.py recovers through the reaper.

What must hold afterwards, read only from what the system and the "external system" recorded:

* the run rests in a terminal state, consistent with its ledger (no row left ``started``;
  completed => succeeded/reconciled; an effect nobody can check => failed + open handoff);
* the effect happened at most once: one ``Artifact`` row and one file for ``write_artifact``;
  at most one line per run in the effect log, which never deduplicates;
* the next worker recovered the same command (``tool.recovered`` with the ledger's token) and
  never re-planned: ``planner.output`` appears once per planner output consumed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import uuid
from collections.abc import Iterator

import pytest

from runs import models as m
from runs import services
from tests.faults import fault_kit as fk
from tests.faults.fault_kit import Cluster
from tests.support.procs import children, proc

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

POINTS = ["before_tool", "during_tool", "after_effect"]
# How the next worker settles the orphaned command, per crash point: before the effect the
# world says "absent" and the same command runs now (its first effect); after it, "present".
RECOVERED_HOW = {"before_tool": "re-executed", "during_tool": "re-executed",
                 "after_effect": "reconciled"}  # fmt: skip
LEDGER_AFTER = {"before_tool": "succeeded", "during_tool": "succeeded",
                "after_effect": "reconciled"}  # fmt: skip
REST_S = 45


# A pool process killed mid-task keeps its prefetch slot until Celery declares the job lost
# (``worker_lost_wait``, 10 s, counted again from every new loss): with fewer pool processes than
# crashes in this module, the worker would stop taking messages for ~10 s. One more pool process
# than crashes (12 fault crashes + 2 kills) keeps every recovery at lease expiry + one sweep.
CONCURRENCY = 15


@pytest.fixture(scope="module")
def workers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {
        "AGENTCONSOLE_ALLOW_CRASH_FAULTS": "1",
        "AGENTCONSOLE_LEASE_TTL_S": "2",
        "AGENTCONSOLE_REAP_INTERVAL_S": "0",
    }
    with fk.cluster(tmp_path_factory, workers=1, concurrency=CONCURRENCY, extra_env=env) as c:
        yield c


def recovered(run_id: str) -> list[dict]:
    return [d for _, name, d in fk.events(run_id) if name == "tool.recovered"]


def assert_crashed(c: Cluster, run_id: str, kills_before: int) -> None:
    """The crash fault fired (recorded before it fires) and a pool process died of SIGKILL."""
    fk.wait_for(
        lambda: m.FaultFiring.objects.filter(run_id=run_id, fault="crash").exists(),
        timeout_s=20,
        what="the crash fault fired",
        c=c,
    )
    fk.wait_for(
        lambda: len(c.sigkill_lines()) > kills_before,
        timeout_s=10,
        what="the worker log reports a pool process killed by SIGKILL",
        c=c,
    )


@pytest.mark.parametrize("point", POINTS)
def test_write_artifact_crash_is_written_exactly_once(stack: Cluster, point: str) -> None:
    scenario = fk.fixture_scenario(f"faultlab/crash-{point}.json")
    args = scenario.planner[0]["arguments"]
    kills_before = len(stack.sigkill_lines())

    run_id = fk.create(scenario, stack)
    run = fk.wait_rest([run_id], stack, timeout_s=REST_S)[run_id]

    assert_crashed(stack, run_id, kills_before)
    assert run.status == "completed", (point, run.status, run.stop_reason)
    assert run.answer == "The summary was written."
    fk.assert_consistent(run)
    ledger = list(run.ledger.all())
    assert [row.status for row in ledger] == [LEDGER_AFTER[point]]
    token = ledger[0].idempotency_token
    # The effect, counted twice: the table (a new token would add a second row) and the disk.
    data = args["content"].encode()
    artifacts = list(m.Artifact.objects.filter(run_id=run_id))
    assert [(a.path, a.sha256, a.size, a.idempotency_token) for a in artifacts] == [
        (args["path"], hashlib.sha256(data).hexdigest(), len(data), token)
    ]
    run_dir = stack.output_root / run_id
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")) == ["summary.md"]
    assert (run_dir / "summary.md").read_bytes() == data
    # Recovered by the next worker, same token; never re-planned.
    assert [(d["how"], d["idempotency_token"]) for d in recovered(run_id)] == [
        (RECOVERED_HOW[point], token)
    ]
    assert fk.names(run_id).count("planner.output") == 2 == run.planner_cursor


@pytest.mark.parametrize("reconcile", ["real", "unknown"])
@pytest.mark.parametrize("point", POINTS)
def test_external_effect_crash_never_happens_twice(
    stack: Cluster, point: str, reconcile: str
) -> None:
    """``append_entry`` is irreversible and its store never deduplicates. With a working
    reconcile the run completes with exactly one line; when reconcile cannot tell, the command
    is never replayed blind: failed + handoff, the line there only if the crash came after it."""
    entry = f"crash-{point}-{uuid.uuid4().hex[:8]}"
    faults = {"crash_worker_at": {"point": point, "tool": "append_entry"}}
    if reconcile == "unknown":
        faults["tools"] = {"append_entry": {"reconcile": "unknown"}}
    kills_before = len(stack.sigkill_lines())

    run_id = fk.create(fk.effect_scenario("append_entry", {"entry": entry}, faults=faults), stack)
    run = fk.wait_rest([run_id], stack, timeout_s=REST_S)[run_id]

    assert_crashed(stack, run_id, kills_before)
    fk.assert_consistent(run)
    ledger = list(run.ledger.all())
    assert len(ledger) == 1
    token = ledger[0].idempotency_token
    lines = fk.effects_of(stack, run_id)
    assert all(line["token"] == token for line in lines), lines
    if reconcile == "real":
        assert run.status == "completed", (run.status, run.stop_reason)
        assert ledger[0].status == LEDGER_AFTER[point]
        assert [line["entry"] for line in lines] == [entry]
        assert [d["how"] for d in recovered(run_id)] == [RECOVERED_HOW[point]]
        assert fk.names(run_id).count("planner.output") == 2 == run.planner_cursor
    else:
        assert (run.status, run.stop_reason) == ("failed", "TOOL_OUTCOME_UNKNOWN")
        assert ledger[0].status == "unknown"
        handoff = run.handoffs.get()
        assert (handoff.reason, handoff.status) == ("TOOL_OUTCOME_UNKNOWN", "open")
        assert [e["idempotency_token"] for e in handoff.bundle["unknown_effects"]] == [token]
        assert len(lines) == (1 if point == "after_effect" else 0), lines
        assert [d["how"] for d in recovered(run_id)] == ["unknown"]
        assert fk.names(run_id).count("planner.output") == 1 == run.planner_cursor


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        # Known absent: nothing starts again in a cancelling run; the run is cancelled.
        ("before_tool", ("failed", "not-rerun-cancelled", 0)),
        # Known present (reconciled with the same token): the effect is checked; cancelled.
        ("after_effect", ("reconciled", "reconciled", 1)),
    ],
)
def test_cancel_while_the_worker_is_dead_settles_the_effect_then_cancels(
    stack: Cluster, point: str, expected: tuple[str, str, int]
) -> None:
    """A cancel lands while the worker that ran the tool is dead (intent committed, outcome
    never). The next worker checks the effect and only then cancels; it never runs the tool
    again for a run that is cancelling."""
    entry = f"dead-cancel-{point}-{uuid.uuid4().hex[:8]}"
    faults = {"crash_worker_at": {"point": point, "tool": "append_entry"}}
    kills_before = len(stack.sigkill_lines())
    run_id = fk.create(fk.effect_scenario("append_entry", {"entry": entry}, faults=faults), stack)
    assert_crashed(stack, run_id, kills_before)

    cancelled = services.run_cancel(run_id=run_id, by="test", reason="cancel while dead")
    assert cancelled.status.value == "cancelling"  # a tool is (as far as anyone knows) active
    run = fk.wait_rest([run_id], stack, timeout_s=REST_S)[run_id]

    ledger_status, how, lines = expected
    assert (run.status, run.stop_reason) == ("cancelled", "CANCELLED")
    fk.assert_consistent(run)
    assert list(run.ledger.values_list("status", flat=True)) == [ledger_status]
    assert [d["how"] for d in recovered(run_id)] == [how]
    assert len(fk.effects_of(stack, run_id)) == lines
    assert fk.names(run_id).count("planner.output") == 1


def lease_holder(run_id: str) -> int | None:
    owner = m.Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).first()
    return int(owner.split(":")[1]) if owner else None


@pytest.mark.parametrize("moment", ["before_effect", "after_effect"])
def test_worker_killed_from_outside_while_the_tool_runs(stack: Cluster, moment: str) -> None:
    """This test sends the SIGKILL: to the pool process holding the run's lease, while the
    ledger row is ``started`` -- before the effect (the tool is in a 1.5 s ``delay_ms``) or after
    it (the line is in the store, the tool holds its answer for 5 s)."""
    entry = f"kill-{moment}-{uuid.uuid4().hex[:8]}"
    if moment == "before_effect":
        scenario = fk.effect_scenario("append_entry", {"entry": entry}, faults={"delay_ms": 1500})
    else:
        scenario = fk.effect_scenario("append_entry", {"entry": entry, "hold_ms": 5000})
    master = stack.workers[0].process.pid

    run_id = fk.create(scenario, stack)

    def in_flight() -> bool:
        started = m.LedgerEntry.objects.filter(run_id=run_id, status="started").exists()
        if moment == "after_effect":
            return started and bool(fk.effects_of(stack, run_id))
        return started

    fk.wait_for(in_flight, timeout_s=20, what=f"append_entry in flight ({moment})", c=stack)
    victim = lease_holder(run_id)
    assert victim is not None
    victim_proc = proc(victim)
    assert victim_proc is not None
    assert victim_proc.ppid == master, "a pool process of our worker holds the lease"
    lines_at_kill = len(fk.effects_of(stack, run_id))
    os.kill(victim, signal.SIGKILL)
    fk.wait_for(lambda: proc(victim) is None, timeout_s=10, what="the pool process is reaped")

    run = fk.wait_rest([run_id], stack, timeout_s=REST_S)[run_id]

    assert lines_at_kill == (0 if moment == "before_effect" else 1)
    assert run.status == "completed", (run.status, run.stop_reason)
    fk.assert_consistent(run)
    ledger = list(run.ledger.all())
    assert [row.status for row in ledger] == [
        "succeeded" if moment == "before_effect" else "reconciled"
    ]
    lines = fk.effects_of(stack, run_id)
    assert [(line["entry"], line["token"]) for line in lines] == [
        (entry, ledger[0].idempotency_token)
    ]
    how = recovered(run_id)
    assert [d["how"] for d in how] == ["re-executed" if moment == "before_effect" else "reconciled"]
    if moment == "before_effect":
        assert lines[0]["pid"] != victim, "the effect came from the next pool process"
    assert fk.names(run_id).count("planner.output") == 2 == run.planner_cursor
    # The worker survived its pool process and forked a new one.
    pool = [p.pid for p in children(master)]
    assert pool, "a new pool process"
    assert victim not in pool, pool


def test_a_recovered_call_runs_under_the_fault_plan_once(stack: Cluster) -> None:
    """The re-execution after a crash is one tool call, under the plan's ``delay_ms``.
    (Fault plans are what the fault lab and these tests measure recovery with; a recovery
    that wraps the tool in the plan twice doubles every injected delay and evaluates every
    injected fault twice.)"""
    delay_ms = 400
    faults = {"crash_worker_at": {"point": "before_tool", "tool": "append_entry"},
              "delay_ms": delay_ms}  # fmt: skip
    entry = f"once-{uuid.uuid4().hex[:8]}"
    run_id = fk.create(fk.effect_scenario("append_entry", {"entry": entry}, faults=faults), stack)
    run = fk.wait_rest([run_id], stack, timeout_s=REST_S)[run_id]

    assert run.status == "completed", (run.status, run.stop_reason)
    assert [d["how"] for d in recovered(run_id)] == ["re-executed"]
    assert len(fk.effects_of(stack, run_id)) == 1
    completed = [d for _, name, d in fk.events(run_id) if name == "tool.completed"]
    assert len(completed) == 1
    # The delay was applied (at least once). That it was applied once is counted in-process by
    # tests/durable/test_recovery.py: an upper bound on elapsed time here would fail on a
    # loaded machine, not on a double wrap.
    assert completed[0]["duration_ms"] >= delay_ms, completed[0]
