"""Cancellation while a tool runs on a real worker (issue 3, SPEC §4 "Cancellation", seed §13).

A cancel is a database write by whoever cancels (here: ``runs.services.run_cancel`` from this
process, as the API or console would call it). The worker that runs the tool turns it into a
cancel signal; a tool in an isolated child process is stopped hard (SIGKILL of its process
group). The run reaches ``cancelled`` only once the effect is known; an effect nobody can
check ends ``failed`` with a handoff.

The child is found from outside: a process whose parent is a pool process of this test's worker
and whose command line runs ``runs.engine.isolated_child``; its process group is every process with
that pid as group id (the hanging tool adds a grandchild to it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from runs import models as m
from runs import services
from tests.faults import fault_kit as fk
from tests.faults.fault_kit import Cluster
from tests.support.procs import Proc, alive, all_procs, cmdline, group, kill_all

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def workers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with fk.cluster(tmp_path_factory, workers=1, concurrency=2) as c:
        yield c


def isolated_children(c: Cluster) -> list[Proc]:
    pool = set(c.pool_children())
    return [
        p
        for p in all_procs()
        if p.ppid in pool and p.state != "Z" and "runs.engine.isolated_child" in cmdline(p.pid)
    ]


def tool_in_child(c: Cluster, run_id: str, *, members: int, effect: bool = False) -> list[Proc]:
    """Wait until the run's tool runs in its child (ledger row ``started``) with ``members``
    processes in the child's group (and, with ``effect``, its line in the store)."""

    def ready() -> list[Proc] | None:
        if not m.LedgerEntry.objects.filter(run_id=run_id, status="started").exists():
            return None
        if effect and not fk.effects_of(c, run_id):
            return None
        kids = isolated_children(c)
        if len(kids) != 1:
            return None
        procs = group(kids[0].pid)
        return procs if len(procs) >= members else None

    return fk.wait_for(ready, timeout_s=30, what="the isolated tool running in its child", c=c)


def cancel_and_time(run_id: str, procs: list[Proc]) -> float:
    """Cancel the run; return the seconds until no process of the child's group is alive.

    Printed, not asserted: a loaded CI machine may take longer than a second; the child group
    being gone at all (a hanging tool that ignores every catchable signal) is the claim, and
    the poll below waits for those real processes with a generous timeout."""
    started = time.monotonic()
    services.run_cancel(run_id=run_id, by="test", reason="operator stop")
    fk.wait_for(
        lambda: not any(alive(p.pid, p.starttime) for p in procs),
        timeout_s=10,
        what=f"the isolated child's process group {[p.pid for p in procs]} is gone",
    )
    return time.monotonic() - started


def test_cancel_stops_a_hanging_isolated_read(stack: Cluster) -> None:
    """``hang_read`` ignores the cooperative signal and every catchable signal, and has a
    grandchild in its group. Only the hard stop ends it; a read stopped hard has no effect, so
    the run is ``cancelled``."""
    run_id = fk.create(fk.effect_scenario("hang_read", {"seconds": 30, "grandchild": True}), stack)
    procs = tool_in_child(stack, run_id, members=2)
    try:
        assert all(p.pgrp == procs[0].pgrp for p in procs)
        latency = cancel_and_time(run_id, procs)
        print(f"\nisolated child group gone {latency * 1000:.0f} ms after run_cancel")

        run = fk.wait_rest([run_id], stack, timeout_s=15)[run_id]
    finally:
        kill_all(procs)

    assert (run.status, run.stop_reason) == ("cancelled", "CANCELLED")
    fk.assert_consistent(run)
    ledger = list(run.ledger.values_list("tool_name", "status", "outcome__code"))
    assert ledger == [("hang_read", "failed", "TOOL_STOPPED")]
    assert not run.handoffs.exists()
    requested = [d for _, name, d in fk.events(run_id) if name == "run.cancel-requested"]
    assert [(d["by"], d["reason"]) for d in requested] == [("test", "operator stop")]
    # No new tool and no new planning after the cancel.
    assert fk.names(run_id).count("tool.started") == 1
    assert fk.names(run_id).count("planner.output") == 1
    assert isolated_children(stack) == []


@pytest.mark.parametrize(
    ("reconcile", "expected"),
    [
        # The child was killed mid-write; reconcile cannot tell: never "cancelled".
        ("unknown", ("failed", "TOOL_OUTCOME_UNKNOWN", "unknown")),
        # Reconcile finds the token: the effect is known, so the run may be cancelled.
        ("real", ("cancelled", "CANCELLED", "reconciled")),
    ],
)
def test_cancel_during_an_isolated_write_checks_its_effect(
    stack: Cluster, reconcile: str, expected: tuple[str, str, str]
) -> None:
    entry = f"cancel-{uuid.uuid4().hex[:8]}"
    faults = {"tools": {"append_then_hang": {"reconcile": "unknown"}}} if reconcile == "unknown"\
        else None  # fmt: skip
    scenario = fk.effect_scenario(
        "append_then_hang", {"entry": entry, "seconds": 30}, faults=faults
    )
    run_id = fk.create(scenario, stack)
    procs = tool_in_child(stack, run_id, members=1, effect=True)
    try:
        latency = cancel_and_time(run_id, procs)
        print(f"\nisolated writer gone {latency * 1000:.0f} ms after run_cancel")

        run = fk.wait_rest([run_id], stack, timeout_s=15)[run_id]
    finally:
        kill_all(procs)

    status, reason, ledger_status = expected
    assert (run.status, run.stop_reason) == (status, reason)
    fk.assert_consistent(run)
    ledger = list(run.ledger.all())
    assert [(row.status, row.outcome["code"]) for row in ledger] == [
        (ledger_status, None if ledger_status == "reconciled" else "TOOL_STOPPED")
    ]
    lines = fk.effects_of(stack, run_id)
    assert [(line["entry"], line["token"]) for line in lines] == [
        (entry, ledger[0].idempotency_token)
    ]
    transitions = [
        (d["from"], d["to"]) for _, name, d in fk.events(run_id) if name == "state.transitioned"
    ]
    assert transitions[-2:] == [("running", "cancelling"), ("cancelling", status)]
    if status == "failed":
        handoff = run.handoffs.get()
        assert (handoff.reason, handoff.status) == ("TOOL_OUTCOME_UNKNOWN", "open")
        effects = handoff.bundle["unknown_effects"]
        assert [(e["idempotency_token"], e["status"]) for e in effects] == [
            (ledger[0].idempotency_token, "unknown")
        ]
    else:
        assert not run.handoffs.exists()
    assert fk.names(run_id).count("tool.started") == 1


# The fault-lab cancel scenarios and their (status, stop reason, ledger status).
CANCEL_FIXTURES = {
    "faultlab/cancel-unknown-effect.json": ("failed", "TOOL_OUTCOME_UNKNOWN", "unknown"),
    "faultlab/cancel-no-effect.json": ("cancelled", "CANCELLED", "failed"),
}


@pytest.mark.parametrize("fixture", list(CANCEL_FIXTURES))
def test_cancel_fixture_on_the_worker(stack: Cluster, fixture: str) -> None:
    """The fault-lab scenario files: the cancel arrives while ``write_artifact`` runs (the
    fault calls ``run_cancel`` from inside the tool and waits for the worker's signal)."""
    run_id = fk.create(fk.fixture_scenario(fixture), stack)
    run = fk.wait_rest([run_id], stack, timeout_s=20)[run_id]

    status, reason, ledger_status = CANCEL_FIXTURES[fixture]
    assert (run.status, run.stop_reason) == (status, reason)
    fk.assert_consistent(run)
    assert list(run.ledger.values_list("tool_name", "status")) == [
        ("write_artifact", ledger_status)
    ]
    assert not run.artifacts.filter(path="run-output/second.md").exists()
    assert not (stack.output_root / run_id / "second.md").exists()
    if status == "failed":
        handoff = run.handoffs.get()
        assert (handoff.reason, handoff.status) == ("TOOL_OUTCOME_UNKNOWN", "open")
    else:
        assert not run.handoffs.exists()
        assert not run.artifacts.exists()
