"""Shared pieces of the durable-execution tests: planner outputs, run creation, a reader of the
exported run, and the state a dead worker leaves behind."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.db import connections

from agentconsole import wiring
from policy.domain.decisions import ExecutableCommand
from runs import models as m
from runs import selectors, services
from runs.domain import lifecycle
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from runs.domain.state import RunState
from runs.domain.step.decide import decide
from tests.support.planner import tool_call
from tests.support.runs import ExportedRun, run_fixture_json

SUBJECT = "alice"
GOAL = "Write the retry summary to run-output/summary.md"
DURABLE_GRANT = {"capability": "durable:use", "resource_scope": "*", "expires_at_step": 100}
ARTIFACT_GRANT = {
    "capability": "artifact:write",
    "resource_scope": "run-output",
    "expires_at_step": 100,
}
SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 100}
ALL_GRANTS = (DURABLE_GRANT, ARTIFACT_GRANT, SEARCH_GRANT)
CONTENT = "Three retries, then quarantine."


def now_ms() -> int:
    return int(time.time() * 1000)


# --- planner outputs --------------------------------------------------------------------------


def use(pid: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """A proposal for one of the plugin tools of tests.plugins.durable_tools."""
    return tool_call(pid, tool, arguments or {"text": pid})


def write(pid: str, path: str = "run-output/summary.md", content: str = CONTENT) -> dict[str, Any]:
    return tool_call(pid, "write_artifact", {"path": path, "content": content})


def search(pid: str, query: str = "retry policy quarantine") -> dict[str, Any]:
    return tool_call(pid, "search_public", {"query": query})


def final(*cites: str, answer: str = "Done.") -> dict[str, Any]:
    return {"kind": "final", "answer": answer, "citation_observation_ids": list(cites)}


# --- runs -------------------------------------------------------------------------------------


def create(
    outputs: Sequence[Any],
    *,
    grants: Sequence[dict[str, Any]] = ALL_GRANTS,
    faults: dict[str, Any] | None = None,
    deadline_ms: int = 120_000,
    created_ms: int | None = None,
    max_steps: int = 8,
    max_tool_calls: int = 4,
    owner: Any = None,
) -> RunState:
    return services.run_create(
        subject=SUBJECT,
        goal=GOAL,
        budgets=RunBudgets(
            max_steps=max_steps,
            max_tool_calls=max_tool_calls,
            max_repeated_proposal=2,
            deadline_ms=deadline_ms,
        ),
        grants=list(grants),
        planner={"kind": "fixture", "outputs": list(outputs)},
        faults=faults,
        now_ms=created_ms,
        owner=owner,
    )


def load(run_id: str) -> RunState:
    return wiring.store().load(run_id)


def start(run_id: str) -> RunState:
    """created → running, as the first worker step does, and nothing more."""
    store = wiring.store()
    state = store.load(run_id)
    assert state.status is Status.CREATED
    return store.apply(lifecycle.start(state))


def plan_and_record_intent(run_id: str) -> ExecutableCommand:
    """What a worker does up to its death mid-tool: plan one step with the real step functions
    and commit the ledger intent (``started``); the tool never answers, nothing settles."""
    store = wiring.store()
    state = store.load(run_id)
    if state.status is Status.CREATED:
        state = store.apply(lifecycle.start(state))
    planner = wiring.planner_for(store.planner_config(run_id))
    raw = planner.next(state, None)  # the fixture planner reads only the cursor in the state
    commit = decide(
        state,
        raw,
        source=planner.source,
        grants=store.grants(run_id),
        confirmations=store.confirmations(run_id),
        registry=wiring.registry(),
        lookups=store.lookups(run_id),
        now_ms=now_ms(),
    )
    assert commit.ledger_intent is not None, [d.event for d in commit.events]
    store.apply(commit)
    return commit.ledger_intent


def advance_in_thread(run_id: str) -> tuple[threading.Thread, list[RunState | None]]:
    """``run_advance`` in a started thread of its own (another worker, in effect); the list
    gets its result. The thread closes its database connections when done."""
    results: list[RunState | None] = []

    def target() -> None:
        try:
            results.append(services.run_advance(run_id=run_id))
        finally:
            connections.close_all()

    worker = threading.Thread(target=target)
    worker.start()
    return worker, results


class WorkerDied(BaseException):
    """Stands for the death of the worker process: nothing after it runs."""


def advance_until_worker_dies(run_id: str, *, tool: str, after_effect: bool = False) -> None:
    """Advance the run with a real worker (lease, runner, executor) that dies when it reaches a
    call of ``tool``: before the call, or just after it (the effect done, the outcome lost).
    The intent is committed, the row stays ``started``, the lease is left to expire."""
    from runs.engine.leases import lease_acquire, new_owner

    owner = new_owner()
    assert lease_acquire(run_id=run_id, owner=owner)
    runner = wiring.runner(owner)
    real = runner.executor

    class Dying:
        def run(self, command, contract, state, cancel):  # type: ignore[no-untyped-def]
            if command.tool_name == tool:
                if after_effect:
                    real.run(command, contract, state, cancel)
                raise WorkerDied(tool)
            return real.run(command, contract, state, cancel)

        def recover(self, command, contract, state, cancel):  # type: ignore[no-untyped-def]
            return real.recover(command, contract, state, cancel)

    runner.executor = Dying()
    try:
        runner.advance(run_id)
    except WorkerDied:
        pass
    else:
        raise AssertionError(f"the run never called {tool}")
    # Time passes: the dead worker renews nothing, its lease expires.
    expire_lease(run_id)


def expire_lease(run_id: str) -> None:
    from datetime import timedelta

    from django.utils import timezone

    m.Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


# --- reading a run back -----------------------------------------------------------------------


class Run(ExportedRun):
    """``runs.selectors.run_export`` of one run, with small lookups."""

    def __init__(self, run_id: str) -> None:
        super().__init__(selectors.run_export(run_id=run_id))

    def transitions(self) -> list[tuple[str, str]]:
        moves = self.events("state.transitioned")
        return [(e["details"]["from"], e["details"]["to"]) for e in moves]

    def handoffs(self) -> list[m.Handoff]:
        return list(m.Handoff.objects.filter(run_id=self.run_id).order_by("id"))

    def open_handoff(self) -> m.Handoff:
        rows = [h for h in self.handoffs() if h.status == "open"]
        assert len(rows) == 1, [(h.reason, h.status) for h in self.handoffs()]
        return rows[0]

    def check(self) -> None:
        """Invariants of every run, whatever happened to it."""
        assert [e["sequence"] for e in self.trace] == list(range(1, len(self.trace) + 1))
        assert len(self.ledger) == self.state["tool_calls"]
        if self.status in ("completed", "failed", "cancelled"):
            assert all(r["status"] != "started" for r in self.ledger), self.ledger
            stops = self.events("run.stopped")
            assert stops
            assert stops[-1]["details"]["reason"] == self.stop_reason
        if self.status != "completed":
            assert self.state["answer"] is None


# --- management commands ----------------------------------------------------------------------


def run_fixture(path: Path | str) -> dict[str, Any]:
    return run_fixture_json(path)


# --- processes --------------------------------------------------------------------------------


def isolated_children() -> set[int]:
    """Pids of live ``runs.engine.isolated_child`` processes started by this process."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # stat: "pid (comm) state ppid ..." — comm may hold spaces; split after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if b"runs.engine.isolated_child" in cmdline and ppid == me and state != "Z":
            found.add(int(entry))
    return found
