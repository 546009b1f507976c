"""Real worker processes for the fault tests, and the evidence they are judged by.

Builds on ``tests.support.workers`` (the one worker launcher: database URL, broker, producer
routing, teardown that leaves no process behind) and ``tests.support.procs`` (``/proc``), and
adds what crash and cancel tests need:

* ``cluster()`` -- the launcher with the fault tests' environment: crash faults allowed, a
  run-output root shared with this process, the effect-log plugin tools.
* ``wait_rest()`` -- poll until runs are terminal, running the sweeper (as its periodic task
  would) while a run holds a ``started`` ledger row under a lapsed lease; bounded.
* ``assert_consistent()`` -- a terminal run agrees with its ledger, handoff and trace.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from django.db.models import Q
from django.utils import timezone

from runs import models as m
from runs import services
from runs.domain.machine import TERMINAL
from runs.engine.sweeper import sweep
from runs.start.scenarios import Scenario, parse_scenario
from runs.trace.trace_checks import trace_verify
from tests.plugins.effect_log import read_store
from tests.support.workers import BASE_DIR, Cluster
from tests.support.workers import cluster as worker_cluster
from tests.support.workers import wait_for as poll

PLUGIN = "tests.plugins.effect_log"
TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)


# --- runs --------------------------------------------------------------------------------------


def describe(run_id: str) -> str:
    run = m.Run.objects.filter(pk=run_id).first()
    if run is None:
        return f"{run_id}: missing"
    ledger = list(run.ledger.values_list("tool_name", "status", "attempt"))
    handoffs = list(run.handoffs.values_list("reason", "status"))
    events = list(
        m.TraceEvent.objects.filter(run=run).order_by("sequence").values_list("event", flat=True)
    )
    return (
        f"{run_id}: {run.status} ({run.stop_reason}) lease={run.lease_owner}@"
        f"{run.lease_expires_at} ledger={ledger} handoffs={handoffs}\n  trace={events}"
    )


def wait_rest(
    run_ids: Iterable[str],
    c: Cluster,
    *,
    timeout_s: float = 30,
    sweep_every_s: float = 1.0,
) -> dict[str, m.Run]:
    """Poll until every run is terminal. While a run holds a ``started`` ledger row and its
    lease has lapsed (its worker died), sweep into the cluster's queue at most every
    ``sweep_every_s`` -- what the periodic sweep task does in production. It sleeps between
    polls because real worker processes do the work; ``timeout_s`` is a generous bound that
    fails the test with the workers' log, never a claim about speed."""
    run_ids = list(run_ids)
    poll_s = 0.05 if len(run_ids) < 10 else 0.25  # light on a small machine's database
    deadline = time.monotonic() + timeout_s
    last_sweep = 0.0
    while True:
        statuses = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
        waiting = [r for r in run_ids if statuses.get(r) not in TERMINAL_VALUES]
        if not waiting:
            return {r.pk: r for r in m.Run.objects.filter(pk__in=run_ids)}
        if time.monotonic() > deadline:
            pytest.fail(
                f"{len(waiting)} run(s) not terminal after {timeout_s}s:\n"
                + "\n".join(describe(r) for r in waiting[:5])
                + f"\n{c.log()}"
            )
        c.check_alive()
        if time.monotonic() - last_sweep >= sweep_every_s:
            lapsed = Q(lease_expires_at__lt=timezone.now()) | Q(lease_owner__isnull=True)
            stranded = (
                m.Run.objects.filter(pk__in=waiting, ledger__status="started")
                .filter(lapsed)
                .exists()
            )
            if stranded:
                last_sweep = time.monotonic()
                sweep(queue=c.queue)
        time.sleep(poll_s)


def wait_for(predicate: Any, *, timeout_s: float, what: str, c: Cluster | None = None) -> Any:
    """``tests.support.workers.wait_for`` with the cluster's log and liveness check."""
    if c is None:
        return poll(predicate, timeout_s=timeout_s, what=what)
    return poll(predicate, timeout_s=timeout_s, what=what, log=c.log, check=c.check_alive)


def events(run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    return list(
        m.TraceEvent.objects.filter(run_id=run_id)
        .order_by("sequence")
        .values_list("sequence", "event", "details")
    )


def assert_consistent(run: m.Run) -> None:
    """A resting run agrees with its ledger, its handoffs and its trace."""
    run.refresh_from_db()
    where = describe(run.pk)
    assert run.status in TERMINAL_VALUES, where
    ledger = list(run.ledger.all())
    statuses = [row.status for row in ledger]
    assert "started" not in statuses, f"a ledger row was left started: {where}"
    open_handoffs = list(run.handoffs.exclude(status="resolved"))
    assert len(open_handoffs) <= 1, where
    if run.status == "completed":
        assert set(statuses) <= {"succeeded", "reconciled"}, where
        assert not open_handoffs, where
        assert run.answer, where
    if run.status == "cancelled":
        # cancelled only once the effect was checked: nothing unknown remains.
        assert not set(statuses) & {"unknown", "compensation-required"}, where
        assert not open_handoffs, where
    unresolved = [row for row in ledger if row.status in ("unknown", "compensation-required")]
    if unresolved:
        # An effect nobody could check never ends silently: failed, with a handoff naming it.
        assert run.status == "failed", where
        assert open_handoffs, where
        named = {e["idempotency_token"] for e in open_handoffs[0].bundle["unknown_effects"]}
        assert {row.idempotency_token for row in unresolved} <= named, where
        for e in open_handoffs[0].bundle["unknown_effects"]:
            assert e["status"] in ("unknown", "compensation-required"), where
    if open_handoffs:
        assert run.status == "failed", where
    trace = events(run.pk)
    assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1)), where
    assert run.trace_seq == len(trace), where
    # issue 23 item 5: crashes, restarts, a second worker and the sweeper leave one chain.
    assert trace_verify(run=run).status == "verified", f"{trace_verify(run=run).text}: {where}"
    started = [d for _, name, d in trace if name == "tool.started"]
    assert len(started) == len(ledger), f"one tool.started per ledger row: {where}"
    assert len({row.idempotency_token for row in ledger}) == len(ledger), where


# --- scenarios ---------------------------------------------------------------------------------

FIXTURES = BASE_DIR / "runs" / "fixtures"


def fixture_scenario(name: str) -> Scenario:
    """A scenario file from runs/fixtures, with a subject of its own (evidence never mixes)."""
    scenario = parse_scenario((FIXTURES / name).read_bytes())
    return scenario.model_copy(update={"subject": f"faults-{uuid.uuid4().hex[:8]}"})


def effect_scenario(
    tool: str,
    arguments: dict[str, Any],
    *,
    faults: dict[str, Any] | None = None,
    deadline_ms: int = 120_000,
) -> Scenario:
    """One effect-log tool call, then a final answer citing its result."""
    return Scenario.model_validate(
        {
            "subject": f"faults-{uuid.uuid4().hex[:8]}",
            "goal": f"Call {tool} once, then answer.",
            "budgets": {"max_steps": 4, "max_tool_calls": 2, "max_repeated_proposal": 2,
                        "deadline_ms": deadline_ms},
            "grants": [{"capability": "effectlog:write", "resource_scope": "*",
                        "expires_at_step": 4}],
            "planner": [
                {"kind": "tool", "proposal_id": "p1", "tool_name": tool, "tool_version": "1",
                 "arguments": arguments},
                {"kind": "final", "answer": "Done.", "citation_observation_ids": ["tool-1"]},
            ],
            "faults": faults,
        }
    )  # fmt: skip


def create(scenario: Scenario, c: Cluster, *, enqueue: bool = True) -> str:
    """Create the run and enqueue it on the cluster's queue (what faultlab does); with
    ``enqueue=False`` only create it."""
    state = services.run_create(
        subject=scenario.subject,
        goal=scenario.goal,
        budgets=scenario.budgets,
        grants=[g.model_dump(exclude_unset=True) for g in scenario.grants],
        planner={"kind": "fixture", "outputs": scenario.planner},
        faults=scenario.faults.model_dump() if scenario.faults else None,
        enqueue=enqueue,
        queue=c.queue,
    )
    return state.run_id


def effects_of(c: Cluster, run_id: str) -> list[dict[str, Any]]:
    """The effect-log lines one run caused (the external system's own count)."""
    return [line for line in read_store(c.output_root) if line["run_id"] == run_id]


def names(run_id: str) -> list[str]:
    return [name for _, name, _ in events(run_id)]


@contextlib.contextmanager
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    workers: int = 1,
    concurrency: int = 1,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """Workers for fault tests: crash faults allowed, the effect-log plugin tools, a run-output
    root shared with this process (``tests.support.workers.cluster`` does the rest)."""
    env = {
        "AGENTCONSOLE_TOOLS": PLUGIN,
        "AGENTCONSOLE_FAULTS_ENABLED": "1",  # off by default: the workers inject faults here
        **(extra_env or {}),
    }
    with worker_cluster(
        tmp_path_factory,
        name="faults",
        workers=workers,
        concurrency=concurrency,
        extra_env=env,
        output_root=tmp_path_factory.mktemp("run-output"),
    ) as c:
        yield c
